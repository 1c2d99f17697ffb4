// The compiled route's decisions (compiled.h).
#include "plan/compiled.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "plan/copy_streams.h"
#include "plan/plan.h"
#include "profile/rates.h"
#include "support/error.h"
#include "support/units.h"

namespace mutwo::plan::compiled {

Knapsack dp_knapsack(const std::vector<double>& memory, const std::vector<double>& runtime, double max_memory) {
  MUTWO_CHECK(memory.size() == runtime.size(), "dp_knapsack: {} memories for {} runtimes", memory.size(),
              runtime.size());
  constexpr double kScale = 10000;
  const auto quantised = [](double x) { return static_cast<int64_t>(std::nearbyint(x * kScale)); };
  const int64_t cap = quantised(max_memory);
  MUTWO_CHECK(cap >= 0, "dp_knapsack: a negative memory limit {}", max_memory);
  const size_t n = memory.size(), width = static_cast<size_t>(cap) + 1;
  std::vector<int64_t> q(n);
  for (size_t i = 0; i < n; ++i) {
    q[i] = quantised(memory[i]);
    MUTWO_CHECK(q[i] >= 0, "dp_knapsack: item {}'s memory {} is negative", i, memory[i]);
  }
  std::vector<float> dp((n + 1) * width, 0.0f);
  for (size_t i = 1; i <= n; ++i) {
    const float* prev = &dp[(i - 1) * width];
    float* row = &dp[i * width];
    const float rt = static_cast<float>(runtime[i - 1]);
    const auto m = static_cast<size_t>(std::min<int64_t>(q[i - 1], cap + 1));
    for (size_t j = 0; j < width; ++j)
      row[j] = q[i - 1] == 0 ? prev[j] + rt : j >= m ? std::max(prev[j], prev[j - m] + rt) : prev[j];
  }
  Knapsack out;
  out.max_runtime = dp[n * width + static_cast<size_t>(cap)];
  int64_t j = cap;
  for (size_t i = n; i >= 1; --i) {
    if (dp[i * width + static_cast<size_t>(j)] != dp[(i - 1) * width + static_cast<size_t>(j)]) {
      out.saved.push_back(static_cast<int32_t>(i - 1));
      j -= q[i - 1];
    } else {
      out.recomputed.push_back(static_cast<int32_t>(i - 1));
    }
  }
  std::reverse(out.saved.begin(), out.saved.end());
  return out;
}

std::vector<int32_t> recompute_order(const std::vector<double>& ms, const std::vector<int64_t>& bytes) {
  MUTWO_CHECK(ms.size() == bytes.size(), "recompute_order: {} times for {} sizes", ms.size(), bytes.size());
  // Ranked as time per byte, lowest first: the same order as recompute_ratio's
  // highest first, but two anchors of one shape and op (a matmul's 208896 bytes
  // at 0.0668 ms, an addmm's 69632 at 0.0223) then compare equal, as they are,
  // and keep the callers' order, where bytes / ms rounds them apart.
  std::vector<double> per_byte(ms.size());
  for (size_t i = 0; i < ms.size(); ++i) per_byte[i] = ms[i] / static_cast<double>(std::max<int64_t>(bytes[i], 1));
  std::vector<int32_t> order(ms.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return per_byte[a] < per_byte[b]; });
  return order;
}

namespace {

// The options no other beats: none frees as much or more for less time.
std::vector<LayerOption> useful(std::vector<LayerOption> options) {
  std::stable_sort(options.begin(), options.end(), [](const LayerOption& a, const LayerOption& b) {
    return a.extra_ms != b.extra_ms ? a.extra_ms < b.extra_ms : a.freed > b.freed;
  });
  std::vector<LayerOption> kept;
  for (const LayerOption& o : options)
    if (kept.empty() || o.freed > kept.back().freed) kept.push_back(o);
  return kept;
}

constexpr int64_t kBuckets = 4096;

}  // namespace

std::optional<std::vector<int32_t>> solve_layers(const std::vector<LayerOption>& options, int32_t count, int64_t need) {
  MUTWO_CHECK(count >= 0, "solve_layers: {} layers", count);
  const std::vector<LayerOption> opts = useful(options);
  if (need <= 0) return std::vector<int32_t>(static_cast<size_t>(count), 0);
  int64_t most = 0;
  for (const LayerOption& o : opts) most = std::max(most, o.freed);
  if (opts.empty() || most * count < need) return std::nullopt;
  const int64_t step = std::max<int64_t>(1, (need + kBuckets - 1) / kBuckets);
  const auto goal = static_cast<size_t>((need + step - 1) / step);
  std::vector<size_t> units(opts.size());
  for (size_t i = 0; i < opts.size(); ++i) units[i] = std::min(goal, static_cast<size_t>(std::max<int64_t>(0, opts[i].freed) / step));
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> best(goal + 1, inf);  // best[b]: least ms freeing at least b units over the layers so far
  best[0] = 0;
  std::vector<std::vector<uint32_t>> picks;  // per layer, per b: the option that reached it and from where
  std::vector<std::vector<uint32_t>> from;
  for (int32_t layer = 0; layer < count; ++layer) {
    std::vector<double> next(goal + 1, inf);
    std::vector<uint32_t> pick(goal + 1, 0), prev(goal + 1, 0);
    for (size_t b = 0; b <= goal; ++b) {
      if (best[b] == inf) continue;
      for (size_t i = 0; i < opts.size(); ++i) {
        const size_t t = std::min(goal, b + units[i]);
        if (best[b] + opts[i].extra_ms < next[t]) {
          next[t] = best[b] + opts[i].extra_ms;
          pick[t] = static_cast<uint32_t>(i);
          prev[t] = static_cast<uint32_t>(b);
        }
      }
    }
    best = std::move(next);
    picks.push_back(std::move(pick));
    from.push_back(std::move(prev));
  }
  if (best[goal] == inf) return std::nullopt;
  std::vector<int32_t> chosen;
  for (size_t layer = picks.size(), b = goal; layer-- > 0;) {
    chosen.push_back(opts[picks[layer][b]].k);
    b = from[layer][b];
  }
  // The most recomputed first: which layer takes which option does not move the peak.
  std::sort(chosen.rbegin(), chosen.rend());
  return chosen;
}

PhasePeak phase_peak(const Phase& p) {
  const size_t storages = p.bytes.size(), nodes = p.workspace.size();
  MUTWO_ASSERT(p.made.size() == storages && p.freed.size() == storages && p.saved.size() == storages,
              "phase_peak: lists of {} storages differ in length", storages);
  std::vector<std::vector<size_t>> made_at(nodes), freed_at(nodes);
  int64_t live = 0, saved = 0;
  for (size_t s = 0; s < storages; ++s) {
    MUTWO_ASSERT(p.made[s] >= -1 && p.made[s] < static_cast<int64_t>(nodes) && p.freed[s] >= p.made[s],
                "phase_peak: storage {} made at {}, freed after {}, of {} nodes", s, p.made[s], p.freed[s], nodes);
    if (p.made[s] < 0) {
      if (p.freed[s] < 0) continue;  // carried but never read: gone before the first node
      live += p.bytes[s];
      saved += p.saved[s] ? p.bytes[s] : 0;
    } else {
      made_at[static_cast<size_t>(p.made[s])].push_back(s);
    }
    if (p.freed[s] >= 0 && p.freed[s] < static_cast<int64_t>(nodes)) freed_at[static_cast<size_t>(p.freed[s])].push_back(s);
  }
  PhasePeak out{live, saved, 0};
  for (size_t i = 0; i < nodes; ++i) {
    for (size_t s : made_at[i]) {
      live += p.bytes[s];
      saved += p.saved[s] ? p.bytes[s] : 0;
    }
    if (live + p.workspace[i] > out.peak) out = {live + p.workspace[i], saved, 0};
    for (size_t s : freed_at[i]) {
      live -= p.bytes[s];
      saved -= p.saved[s] ? p.bytes[s] : 0;
    }
  }
  out.retained = live;
  return out;
}

std::vector<Offloaded> offload_order(const OffloadRequest& r) {
  const double table = profile::device_rates(r.device).copy_gbps;
  const double d2h = (r.d2h_gbps > 0 ? r.d2h_gbps : table) * 1e6, h2d = (r.h2d_gbps > 0 ? r.h2d_gbps : table) * 1e6;  // bytes/ms
  const auto nodes = static_cast<int32_t>(r.node_ms.size());
  for (const SavedTensor& t : r.saved)
    MUTWO_CHECK(0 <= t.last_forward_read && t.last_forward_read < t.first_backward_read && t.first_backward_read < nodes,
                "offload_order: a saved tensor read last at {} and first again at {}, of {} nodes",
                t.last_forward_read, t.first_backward_read, nodes);
  std::vector<Offloaded> order;
  if (d2h <= 0 || h2d <= 0 || r.host_limit <= 0) return order;
  CopyStreams copies(r.node_ms, d2h, h2d, r.overlap);
  std::vector<bool> taken(r.saved.size(), false);
  int64_t host = 0;
  while (true) {
    int32_t pick = -1;
    double best = -1, best_cost = 0;
    for (size_t i = 0; i < r.saved.size(); ++i) {
      const SavedTensor& t = r.saved[i];
      if (taken[i] || t.bytes <= 0 || host + t.bytes > r.host_limit) continue;
      const double cost = copies.cost(t.bytes, {t.last_forward_read, t.first_backward_read});
      if (const double ratio = swap_ratio(t.bytes, cost); ratio > best) best = ratio, best_cost = cost, pick = static_cast<int32_t>(i);
    }
    if (pick < 0) return order;
    const SavedTensor& t = r.saved[static_cast<size_t>(pick)];
    const CopyPlaced at = copies.take(t.bytes, {t.last_forward_read, t.first_backward_read});
    taken[static_cast<size_t>(pick)] = true;
    host += t.bytes;
    order.push_back({pick, at.out_done, at.in_start, best_cost});
  }
}

int32_t fastest_within(const std::vector<Priced>& candidates, int64_t budget) {
  int32_t best = -1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Priced& c = candidates[i];
    if (c.peak > budget) continue;
    if (best < 0 || c.extra_ms < candidates[best].extra_ms ||
        (c.extra_ms == candidates[best].extra_ms && c.peak < candidates[best].peak))
      best = static_cast<int32_t>(i);
  }
  return best;
}

int32_t lowest(const std::vector<Priced>& candidates) {
  int32_t best = -1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Priced& c = candidates[i];
    if (best < 0 || c.peak < candidates[best].peak ||
        (c.peak == candidates[best].peak && c.extra_ms < candidates[best].extra_ms))
      best = static_cast<int32_t>(i);
  }
  return best;
}

bool surely_below(int64_t budget, int64_t lowest) {
  return static_cast<double>(budget) < static_cast<double>(lowest) * (1 - kModelTolerance);
}

std::string refusal_text(const Refusal& r) {
  const auto [asked, floor] = format_bytes_apart(r.budget, r.lowest);
  std::string text = fmt::format("budget {} of added peak cannot be met by {}: its lowest {} added peak is {}", asked,
                                 r.what, r.compiles > 0 ? "measured" : "predicted", floor);
  if (r.host > 0) text += fmt::format(", offloading {} to host memory", format_bytes(r.host));
  if (r.compiles > 0) text += fmt::format(" after {} compiles of each graph", r.compiles);
  if (r.unplanned > 0) text += fmt::format(" (plain torch.compile's: {})", format_bytes_apart(r.unplanned, r.lowest).first);
  const std::string instead = r.activation > 0 ? percent_at_least(r.lowest, r.fixed, r.activation)
                                               : bytes_at_least(r.lowest);
  if (r.roomier_lowest > 0)
    text += fmt::format("; host_memory={} bounds it: with {} of host memory the lowest is {}",
                        format_bytes(r.host_limit), format_bytes(r.roomier_host),
                        format_bytes_apart(r.roomier_lowest, r.budget).first);
  text += fmt::format("; try budget=\"{}\"", instead);
  if (r.activation > 0)
    text += fmt::format(" (a percentage is of the {} of activations plain torch.compile saves)", format_bytes(r.activation));
  return text + ", budget=\"lowest\", or a smaller batch";
}

}  // namespace mutwo::plan::compiled
