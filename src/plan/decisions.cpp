// A plan's decisions, each priced by simulating the plan without it (see decisions.h).
#include "plan/decisions.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "ops/op.h"
#include "support/units.h"

namespace mutwo::plan {

namespace {

// The loss's nodes at fewer rows than their default, as one decision.
void chunk_decision(const PlanInput& in, const Plan& p, std::vector<Decision>& out) {
  std::string where;
  int32_t count = 0;
  for (const ChunkChoice& c : p.chunks) {
    const ir::Node& n = in.graph.nodes()[static_cast<size_t>(c.node)];
    const int64_t unchunked = rows_of(in.graph, n);
    if (c.rows >= unchunked) continue;
    ++count;
    if (where.empty())
      where = fmt::format("{} rows instead of {} ({})", c.rows, unchunked, ops::node_label(n));
  }
  if (count == 0) return;
  Decision d;
  d.kind = "chunks";
  d.count = count;
  d.text = fmt::format("the vocabulary loss computed in smaller chunks: {}{}", where,
                       count > 1 ? fmt::format(", and its backward likewise ({} nodes)", count) : "");
  d.peak_without_bytes = simulate(in, p.drop, p.swap, p.update_early).peak_bytes;
  out.push_back(std::move(d));
}

}  // namespace

std::vector<Decision> decisions(const PlanInput& in, const Plan& p) {
  PlanInput chunked = in;
  apply_chunks(chunked, p.chunks);
  std::vector<Decision> out;
  chunk_decision(in, p, out);
  if (!p.drop.empty()) {
    Decision d;
    d.kind = "recompute";
    d.count = static_cast<int32_t>(p.drop.size());
    d.bytes = dropped_bytes(in.graph, p);
    d.text = fmt::format("{} activation{} ({}) dropped and recomputed in the backward pass ({} recompute node{}, "
                         "{:.3f} ms predicted)", d.count, d.count == 1 ? "" : "s", format_bytes(d.bytes),
                         p.predicted.recompute_nodes, p.predicted.recompute_nodes == 1 ? "" : "s",
                         p.predicted.extra_ms);
    d.peak_without_bytes = simulate(chunked, {}, p.swap, p.update_early).peak_bytes;
    out.push_back(std::move(d));
  }
  if (const std::vector<ReplayedNode> replayed = replayed_random(in, p); !replayed.empty()) {
    Decision d;
    d.kind = "replay";
    d.count = static_cast<int32_t>(replayed.size());
    std::set<ir::ValueId> random_outputs;
    for (const ReplayedNode& r : replayed) {
      d.bytes += r.state_bytes;
      const ir::Node& n = in.graph.nodes()[static_cast<size_t>(r.origin)];
      random_outputs.insert(n.outputs.begin(), n.outputs.end());
    }
    d.text = fmt::format("{} random node{} ({}{}) replayed from {} generator state{} ({}), so that {} outputs "
                         "could be dropped", d.count, d.count == 1 ? "" : "s", ops::node_label(in.graph.nodes()[
                         static_cast<size_t>(replayed.front().origin)]), d.count > 1 ? ", ..." : "", d.count == 1 ? "its" : "their",
                         d.count == 1 ? "" : "s", format_bytes(d.bytes), d.count == 1 ? "its" : "their");
    std::vector<ir::ValueId> kept_random;
    for (ir::ValueId v : p.drop)
      if (!random_outputs.count(v)) kept_random.push_back(v);
    d.peak_without_bytes = simulate(chunked, kept_random, p.swap, p.update_early).peak_bytes;
    out.push_back(std::move(d));
  }
  if (!p.swap.empty()) {
    Decision d;
    d.kind = "swap";
    d.count = static_cast<int32_t>(p.swap.size());
    d.bytes = swapped_bytes(in.graph, p);
    d.text = fmt::format("{} storage{} ({}) swapped to host memory, {} there at once; the copies add {:.3f} ms",
                         d.count, d.count == 1 ? "" : "s", format_bytes(d.bytes),
                         format_bytes(p.predicted.host_peak_bytes), p.predicted.swap_ms);
    d.peak_without_bytes = simulate(chunked, p.drop, {}, p.update_early).peak_bytes;
    out.push_back(std::move(d));
  }
  if (p.update_early) {  // a step without optimizer nodes (mutwo.torch's) has nothing to move: no decision
    Decision d;
    d.kind = "update_early";
    d.text = "each parameter updated in the backward pass as soon as its gradient is ready, its gradient freed there";
    d.peak_without_bytes = simulate(chunked, p.drop, p.swap, false).peak_bytes;
    if (d.peak_without_bytes > p.predicted.peak_bytes) out.push_back(std::move(d));
  }
  for (Decision& d : out) d.lowered_bytes = d.peak_without_bytes - p.predicted.peak_bytes;
  return out;
}

std::string decision_line(const Decision& d) {
  if (d.lowered_bytes > 0)
    return fmt::format("{}: peak {} lower ({} without it)", d.text, format_bytes(d.lowered_bytes),
                       format_bytes(d.peak_without_bytes));
  return fmt::format("{}: the peak is no lower for it alone (the other decisions cover it)", d.text);
}

}  // namespace mutwo::plan
