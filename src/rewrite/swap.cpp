// The swap rewrite (see swap.h).
#include "rewrite/swap.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "ops/attrs.h"
#include "ops/op.h"
#include "support/error.h"

namespace mutwo::rewrite {

namespace {

int part_of(ir::Phase p) { return ir::is_forward(p) ? 0 : ir::is_backward(p) ? 1 : 2; }

// The multi-tensor optimizer nodes of `r` that read swapped gradients or
// state, split (see swap.h); `from` gets, per node of the result, its node in `r`.
Rewritten split_optimizer(const Rewritten& r, const std::vector<ir::ValueId>& swap, const analysis::Liveness& L,
                           std::vector<size_t>& from) {
  const ir::Graph& g = r.graph;
  std::vector<bool> swapped(g.num_values(), false);
  for (ir::ValueId v : swap) swapped[static_cast<size_t>(v)] = true;
  Rewritten out;
  out.graph.name = g.name;
  out.graph.copy_values_from(g);
  out.graph.outputs = g.outputs;
  out.clones = r.clones;
  auto keep = [&](size_t n, ir::Node node, double share) {
    out.graph.append(std::move(node));
    out.origin.push_back(r.origin[n]);
    out.share.push_back(r.share_of(n) * share);
    from.push_back(n);
  };
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    const ir::Node& node = g.nodes()[n];
    const size_t lists = ops::optimizer_lists(node).size();
    const size_t count = lists ? node.inputs.size() / lists : 0;
    // Per parameter: the bytes of its gradient and state that are swapped.
    std::vector<int64_t> swapped_bytes(count, 0);
    std::vector<size_t> stay, moved;  // parameter positions
    for (size_t i = 0; i < count; ++i) {
      for (size_t l = 1; l < lists; ++l) {
        const ir::ValueId v = node.inputs[l * count + i];
        if (swapped[static_cast<size_t>(L.storage[static_cast<size_t>(v)])]) swapped_bytes[i] += g.type(v).bytes();
      }
      (swapped_bytes[i] > 0 ? moved : stay).push_back(i);
    }
    if (moved.empty()) {
      keep(n, node, 1.0);
      continue;
    }
    auto part = [&](const std::vector<size_t>& params) {
      keep(n, ops::optimizer_part(node, params), ops::optimizer_share(g, node, params));
    };
    if (!stay.empty()) part(stay);
    // Buckets in the order the gradients were made, of kOptimizerBucket, or an
    // eighth of what is swapped where that is less.
    std::stable_sort(moved.begin(), moved.end(), [&](size_t a, size_t b) {
      return L.def[static_cast<size_t>(node.inputs[count + a])] < L.def[static_cast<size_t>(node.inputs[count + b])];
    });
    int64_t moved_bytes = 0;
    for (size_t i : moved) moved_bytes += swapped_bytes[i];
    const int64_t bucket_limit = std::min(kOptimizerBucket, (moved_bytes + 7) / 8);
    std::vector<size_t> bucket;
    int64_t bucket_bytes = 0;
    for (size_t i : moved) {
      bucket.push_back(i);
      bucket_bytes += swapped_bytes[i];
      if (bucket_bytes >= bucket_limit) {
        part(bucket);
        bucket.clear();
        bucket_bytes = 0;
      }
    }
    if (!bucket.empty()) part(bucket);
  }
  return out;
}

}  // namespace

std::vector<Gap> swap_gaps(const ir::Graph& g, const analysis::Liveness& L) {
  const auto& nodes = g.nodes();
  std::vector<Gap> gaps(g.num_values());
  std::vector<int8_t> made_in(g.num_values(), -1);
  for (size_t v = 0; v < g.num_values(); ++v) {
    const int32_t def = L.def[v];
    if (!L.owns_storage(static_cast<ir::ValueId>(v)) || def < 0) continue;
    gaps[v].before = def;
    made_in[v] = static_cast<int8_t>(part_of(nodes[static_cast<size_t>(def)].phase));
  }
  for (size_t n = 0; n < nodes.size(); ++n) {
    const int part = part_of(nodes[n].phase);
    if (ops::has(nodes[n], ops::kOverwrite)) gaps[static_cast<size_t>(L.storage[static_cast<size_t>(nodes[n].inputs[0])])].overwritten = true;
    for (ir::ValueId v : nodes[n].inputs) {
      if (v == ir::kNoValue) continue;
      auto o = static_cast<size_t>(L.storage[static_cast<size_t>(v)]);
      if (made_in[o] < 0 || gaps[o].after >= 0 || L.def[o] >= static_cast<int32_t>(n)) continue;
      if (part == made_in[o]) gaps[o].before = static_cast<int32_t>(n);
      else gaps[o].after = static_cast<int32_t>(n);
    }
  }
  // Optimizer state: idle from one step's update to the next's, across the
  // step's end; its gap runs from the step's start to its first read.
  for (size_t n = nodes.size(); n-- > 0;)
    for (ir::ValueId v : nodes[n].inputs)
      if (v != ir::kNoValue && L.def[static_cast<size_t>(v)] < 0 && g.value(v).role == ir::Role::optimizer_state)
        gaps[static_cast<size_t>(v)] = {-1, static_cast<int32_t>(n), false};
  return gaps;
}

bool swappable(const ir::Graph& g, const analysis::Liveness& L, const std::vector<Gap>& gaps, ir::ValueId owner) {
  auto o = static_cast<size_t>(owner);
  if (!L.owns_storage(owner) || L.on_host[o]) return false;
  if (L.def[o] < 0) {  // persistent: optimizer state that only optimizer nodes read
    if (g.value(owner).role != ir::Role::optimizer_state || gaps[o].after < 0) return false;
    for (const ir::Node& n : g.nodes())
      if (ops::optimizer_lists(n).empty() && std::find(n.inputs.begin(), n.inputs.end(), owner) != n.inputs.end()) return false;
    return true;
  }
  if (ir::is_persistent(g.value(owner).role)) return false;
  if (L.storage_end[o] == analysis::kForever) return false;  // a graph output, held to the end
  return gaps[o].after >= 0 && !gaps[o].overwritten;
}

int32_t prefetch_point(const std::vector<double>& start, double land_by, double copy_ms, int32_t before, int32_t read) {
  // The last node starting at or before land_by - copy_ms, but after the swap_out.
  const double begin = land_by - copy_ms;
  auto p = static_cast<int32_t>(std::upper_bound(start.begin(), start.begin() + read + 1, begin) - start.begin()) - 1;
  return std::clamp(p, before + 1, read);
}

namespace {

struct Swap {
  ir::ValueId owner;
  Gap gap;
  int32_t prefetch = -1;  // swap_in right before this node
  ir::ValueId host = ir::kNoValue, back = ir::kNoValue, ready = ir::kNoValue;
};

// Prefetch points, latest first: each copy back ends before its first read
// and before the next copy on the stream starts.
void place_prefetches(std::vector<Swap>& swaps, const ir::Graph& g, const std::vector<double>& node_ms,
                      double h2d_bytes_per_ms) {
  const size_t nn = g.nodes().size();
  std::vector<double> start(nn + 1, 0);  // start[n]: when node n starts, nodes back to back
  for (size_t n = 0; n < nn; ++n)
    start[n + 1] = start[n] + node_ms[n];
  std::vector<size_t> by_need(swaps.size());
  for (size_t i = 0; i < swaps.size(); ++i) by_need[i] = i;
  std::sort(by_need.begin(), by_need.end(), [&](size_t a, size_t b) { return swaps[a].gap.after > swaps[b].gap.after; });
  double stream_free = std::numeric_limits<double>::infinity();
  for (size_t i : by_need) {
    Swap& s = swaps[i];
    s.prefetch = s.gap.after;
    if (h2d_bytes_per_ms <= 0) continue;
    const double copy_ms = static_cast<double>(g.type(s.owner).bytes()) / h2d_bytes_per_ms;
    const double land_by = std::min(start[static_cast<size_t>(s.gap.after)], stream_free);
    stream_free = land_by - copy_ms;
    s.prefetch = prefetch_point(start, land_by, copy_ms, s.gap.before, s.gap.after);
  }
}

// The rewritten step's start: r's values, where a swapped activation is no
// longer read by the backward pass (its copy is), so a forward temporary.
Rewritten swapped_values(const Rewritten& r, const analysis::Liveness& L, const std::vector<ir::ValueId>& swap) {
  const ir::Graph& g = r.graph;
  Rewritten out;
  out.graph.name = g.name;
  out.graph.copy_values_from(g);
  out.graph.outputs = g.outputs;
  std::vector<bool> swapped_storage(g.num_values(), false);
  for (ir::ValueId v : swap) swapped_storage[static_cast<size_t>(v)] = true;
  for (const ir::Value& v : g.values())
    if (v.role == ir::Role::activation && swapped_storage[static_cast<size_t>(L.storage[static_cast<size_t>(v.id)])])
      out.graph.value(v.id).role = ir::Role::other;
  out.clones = r.clones;
  return out;
}

}  // namespace

Rewritten insert_swaps(const Rewritten& unsplit, const std::vector<ir::ValueId>& swap, const SwapTiming& timing) {
  if (swap.empty()) return unsplit;
  std::vector<size_t> from;
  const Rewritten r = split_optimizer(unsplit, swap, analysis::analyze_liveness(unsplit.graph), from);
  std::vector<double> node_ms(from.size(), 0);
  for (size_t n = 0; n < from.size(); ++n)
    if (from[n] < timing.node_ms.size()) node_ms[n] = unsplit.share_of(from[n]) > 0 ? timing.node_ms[from[n]] * r.share[n] / unsplit.share_of(from[n]) : 0;
  const ir::Graph& g = r.graph;
  const auto& nodes = g.nodes();
  const analysis::Liveness L = analysis::analyze_liveness(g);
  const ir::UseIndex uses(g);
  const std::vector<Gap> gaps = swap_gaps(g, L);

  std::vector<Swap> swaps;
  std::unordered_map<ir::ValueId, size_t> by_owner;
  for (ir::ValueId v : swap) {
    MUTWO_ASSERT(v >= 0 && static_cast<size_t>(v) < g.num_values() && swappable(g, L, gaps, v), "%{} cannot be swapped",
                 v >= 0 && static_cast<size_t>(v) < g.num_values() ? g.value(v).name : std::to_string(v));
    MUTWO_ASSERT(by_owner.emplace(v, swaps.size()).second, "%{} is swapped twice", g.value(v).name);
    swaps.push_back({v, gaps[static_cast<size_t>(v)]});
  }

  place_prefetches(swaps, g, node_ms, timing.h2d_bytes_per_ms);
  std::vector<std::vector<size_t>> out_after(nodes.size()), in_before(nodes.size()), into_after(nodes.size());
  for (size_t i = 0; i < swaps.size(); ++i) {
    if (swaps[i].gap.before < 0) {  // state kept in host memory: written back after its update
      swaps[i].host = swaps[i].owner;
      into_after[static_cast<size_t>(swaps[i].gap.after)].push_back(i);
    } else {
      out_after[static_cast<size_t>(swaps[i].gap.before)].push_back(i);
    }
    in_before[static_cast<size_t>(swaps[i].prefetch)].push_back(i);
  }

  Rewritten out = swapped_values(r, L, swap);
  out.swaps = static_cast<int32_t>(swaps.size());
  auto emit = [&](const char* op, ir::ValueId in, ir::ValueId result, ir::Phase phase, const std::string& scope) {
    out.graph.append(ir::Node{op, {in}, {result}, {}, phase, scope});
    out.origin.push_back(-1);
    out.share.push_back(0);
  };
  std::unordered_map<ir::ValueId, ir::ValueId> remade;  // a view read after its gap -> its view made again
  // The value to read for `v` (in a swapped storage) at node `n` after the gap.
  auto ready = [&](auto&& self, ir::ValueId v, const ir::Node& at) -> ir::ValueId {
    const auto owner = L.storage[static_cast<size_t>(v)];
    Swap& s = swaps[by_owner.at(owner)];
    if (v == owner) {
      if (s.ready == ir::kNoValue) {
        const ir::Value& ov = g.value(owner);
        s.ready = out.graph.add_value(out.graph.unique_name(ov.name + ".ready"), ov.type, ir::Role::other);
        emit("swap_wait", s.back, s.ready, at.phase, at.scope);
      }
      return s.ready;
    }
    if (auto it = remade.find(v); it != remade.end()) return it->second;
    const int32_t p = uses.producer[static_cast<size_t>(v)];
    ir::Node view = nodes[static_cast<size_t>(p)];
    MUTWO_ASSERT(ops::has(view, ops::kView) && !ops::has(view, ops::kOverwrite), "%{} is not a view", g.value(v).name);
    view.inputs[0] = self(self, view.inputs[0], at);
    view.phase = at.phase;
    view.outputs.clear();
    for (ir::ValueId o : nodes[static_cast<size_t>(p)].outputs) {
      const ir::Value& ov = g.value(o);
      ir::ValueId c = out.graph.add_value(out.graph.unique_name(ov.name + ".ready"), ov.type, ir::Role::other);
      remade.emplace(o, c);
      view.outputs.push_back(c);
    }
    out.graph.append(std::move(view));
    out.origin.push_back(r.origin[static_cast<size_t>(p)]);
    out.share.push_back(r.share_of(static_cast<size_t>(p)));
    return remade.at(v);
  };

  for (size_t n = 0; n < nodes.size(); ++n) {
    ir::Node node = nodes[n];
    for (size_t i : in_before[n]) {
      Swap& s = swaps[i];
      const ir::Value& ov = g.value(s.owner);
      s.back = out.graph.add_value(out.graph.unique_name(ov.name + ".back"), ov.type, ir::Role::other);
      emit("swap_in", s.host, s.back, node.phase, node.scope);
    }
    for (ir::ValueId& v : node.inputs) {
      if (v == ir::kNoValue) continue;
      auto it = by_owner.find(L.storage[static_cast<size_t>(v)]);
      if (it != by_owner.end() && static_cast<int32_t>(n) >= swaps[it->second].gap.after) v = ready(ready, v, node);
    }
    const ir::Phase phase = node.phase;
    const std::string scope = node.scope;
    out.graph.append(std::move(node));
    out.origin.push_back(r.origin[n]);
    out.share.push_back(r.share_of(n));
    for (size_t i : out_after[n]) {
      Swap& s = swaps[i];
      const ir::Value& ov = g.value(s.owner);
      s.host = out.graph.add_value(out.graph.unique_name(ov.name + ".host"), ov.type, ir::Role::other);
      emit("swap_out", s.owner, s.host, phase, scope);
    }
    for (size_t i : into_after[n]) {
      out.graph.append(ir::Node{"swap_into", {swaps[i].ready, swaps[i].owner}, {}, {}, phase, scope});
      out.origin.push_back(-1);
      out.share.push_back(0);
    }
  }
  return out;
}

}  // namespace mutwo::rewrite
