// The step a plan runs (see plan.h): the plan's rewrite passes, which the
// simulator runs too (unverified, on every candidate plan), and what the
// rewritten step replays.
#include "ops/op.h"
#include "plan/plan.h"
#include "rewrite/recompute.h"
#include "rewrite/swap.h"
#include "rewrite/update_early.h"

namespace mutwo::plan {

rewrite::Rewritten rewrite_step(const PlanInput& in, const ir::Graph& g, const std::vector<ir::ValueId>& drop,
                                 const std::vector<ir::ValueId>& swap, bool update_early,
                                 const rewrite::PassOptions& o) {
  std::vector<rewrite::Pass> passes;
  passes.push_back({"recompute", [&](const rewrite::Rewritten&) { return rewrite::insert_recomputation(g, drop); }});
  if (update_early) passes.push_back({"update-early", [](const rewrite::Rewritten& r) { return rewrite::update_early(r); }});
  if (!swap.empty())
    passes.push_back({"swap", [&](const rewrite::Rewritten& r) {
                        rewrite::SwapTiming t;
                        t.node_ms.reserve(r.origin.size());
                        for (size_t n = 0; n < r.origin.size(); ++n)  // rng_save (origin -1) takes no measured time
                          t.node_ms.push_back(r.origin[n] < 0 ? 0.0
                                                              : in.node_ms[static_cast<size_t>(r.origin[n])] * r.share_of(n));
                        t.h2d_bytes_per_ms = in.copies_overlap ? in.h2d_bytes_per_ms : 0;  // in line, a copy cannot start early
                        return rewrite::insert_swaps(r, swap, t);
                      }});
  return rewrite::run_passes({}, passes, o);
}

rewrite::Rewritten rewrite_plan(const PlanInput& in, const Plan& p, const rewrite::PassOptions& o) {
  return rewrite_step(in, chunked_graph(in.graph, p), p.drop, p.swap, p.update_early, o);
}

std::vector<ReplayedNode> replayed_random(const PlanInput& in, const Plan& p) {
  const rewrite::Rewritten r = rewrite_plan(in, p);
  std::vector<ReplayedNode> out;
  for (size_t k = 0; k < r.graph.nodes().size(); ++k) {
    const ir::Node& n = r.graph.nodes()[k];
    if (!ops::replays_rng(n)) continue;
    const ir::Node& random = in.graph.nodes()[static_cast<size_t>(r.origin[k])];
    const ir::Value& state = r.graph.value(n.inputs.back());
    out.push_back({in.graph.value(random.outputs.at(0)).name, ops::display_name(random), state.name, state.type.bytes(),
                   r.origin[k]});
  }
  return out;
}

}  // namespace mutwo::plan
