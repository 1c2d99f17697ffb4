// The planner registry, the layer-wise planners (per-layer, sqrt-n: by module
// blocks, blocks.h), none, and what the planners share for their messages.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <set>

#include "ops/op.h"
#include "plan/plan.h"
#include "plan/blocks.h"
#include "plan/optimal.h"
#include "support/progress.h"
#include "support/units.h"
#include "support/error.h"

namespace mutwo::plan {

const std::vector<std::string>& planner_names() {
  static const std::vector<std::string> names = {"none", "per-layer", "sqrt-n", "mutwo", "optimal"};
  return names;
}

namespace {

// Runs a planner, timing it, on the step with its vocabulary loss chunked where that lowers the peak.
Plan run(const std::string& name, PlannerFn fn, const PlanInput& in, int64_t budget, bool progress) {
  auto t0 = std::chrono::steady_clock::now();
  std::vector<ChunkChoice> chunks = choose_chunks(in, budget);
  Progress shown("optimal", {progress && name == "optimal"});
  OptimalOptions optimal;
  optimal.progress = &shown;
  auto plan = [&](const PlanInput& x) { return name == "optimal" ? plan_optimal(x, budget, optimal) : fn(x, budget); };
  Plan p;
  if (chunks.empty()) {
    p = plan(in);
  } else {
    PlanInput chunked = in;
    apply_chunks(chunked, chunks);
    p = plan(chunked);
  }
  shown.done();
  p.chunks = std::move(chunks);
  grow_chunks(in, p);
  p.planning_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return p;
}

}  // namespace

Plan run_planner(const std::string& name, const PlanInput& in, int64_t budget, bool progress) {
  PlannerFn fn = name == "none"        ? plan_none
                 : name == "per-layer" ? plan_per_layer
                 : name == "sqrt-n"    ? plan_sqrt_n
                 : name == "mutwo"     ? plan_mutwo
                 : name == "optimal"   ? static_cast<PlannerFn>(plan_optimal)
                                       : nullptr;
  MUTWO_CHECK(fn != nullptr, "unknown planner '{}'; planners: {}", name, fmt::join(planner_names(), ", "));
  return run(name, fn, in, budget, progress);
}

Plan plan_none(const PlanInput& in, int64_t budget) { return finish(in, "none", budget, {}); }

namespace {

// Blocks in order of first appearance in the forward pass.
std::vector<std::string> forward_blocks(const PlanInput& in) {
  std::vector<std::string> order;
  std::set<std::string> seen;
  for (const ir::Node& n : in.graph.nodes()) {
    if (n.phase != ir::Phase::forward) continue;
    std::string b = block_of(n.scope);
    if (!b.empty() && seen.insert(b).second) order.push_back(b);
  }
  return order;
}

}  // namespace

// per-layer: what torch.utils.checkpoint around every block does: keep each
// block's input (the previous block's output), recompute everything inside.
Plan plan_per_layer(const PlanInput& in, int64_t budget) {
  std::vector<std::string> blocks = forward_blocks(in);
  Plan p = finish(in, "per-layer", budget, drop_inside_blocks(in, blocks, blocks));
  if (blocks.empty()) p.note = "the graph has no numbered module blocks (scopes such as layer1.0 or encoder.layer.3)";
  return p;
}

// sqrt-n (Chen et al. 2016): segments of about sqrt(n) blocks; keep only the
// outputs of each segment's last block, recompute the rest of the segment.
Plan plan_sqrt_n(const PlanInput& in, int64_t budget) {
  std::vector<std::string> blocks = forward_blocks(in);
  size_t n = blocks.size();
  auto k = static_cast<size_t>(std::max(1.0, std::round(std::sqrt(static_cast<double>(n)))));
  std::vector<std::string> segment_ends;
  for (size_t i = 0; i < n; ++i)
    if ((i + 1) % k == 0 || i + 1 == n) segment_ends.push_back(blocks[i]);
  Plan p = finish(in, "sqrt-n", budget, drop_inside_blocks(in, blocks, segment_ends));
  p.note = fmt::format("{} blocks in segments of {}", n, k);
  return p;
}

std::string floor_text(const Plan& lowest, const std::string& planner) {
  std::string parts;
  for (size_t r = 0; r < lowest.predicted.peak_by_role.size(); ++r)
    if (lowest.predicted.peak_by_role[r] > 0)
      parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", ir::to_string(static_cast<ir::Role>(r)),
                           format_bytes(lowest.predicted.peak_by_role[r]));
  // The exact bytes too: rounded, a floor just above the budget would read as equal to it.
  return fmt::format("the lowest peak the {} planner reaches is {} = {} B ({}; of it, the working set of the peak node "
                     "({}): its inputs, outputs and workspace, {})",
                     planner, format_bytes(lowest.predicted.peak_bytes), lowest.predicted.peak_bytes, parts, lowest.predicted.peak_label,
                     format_bytes(lowest.predicted.peak_working_bytes));
}

namespace {
int64_t bytes_of(const ir::Graph& g, const std::vector<ir::ValueId>& values) {
  int64_t b = 0;
  for (ir::ValueId v : values) b += g.type(v).bytes();
  return b;
}
}  // namespace

int64_t dropped_bytes(const ir::Graph& g, const Plan& p) { return bytes_of(g, p.drop); }
int64_t swapped_bytes(const ir::Graph& g, const Plan& p) { return bytes_of(g, p.swap); }

std::vector<ir::ValueId> lowest_drop(const ir::Graph& g, const std::string& device) {
  PlanInput in = make_input(profile::estimate_profile(g, device));
  in.swap = false;  // the step profiled with these drops runs without swaps
  return mutwo_floor(in, 0).drop;
}

Plan plan_floor(const std::string& planner, const PlanInput& in) {
  return planner == "mutwo" ? run(planner, mutwo_floor, in, 0, false) : run_planner(planner, in, 0);
}

}  // namespace mutwo::plan
