// The one simulator every planner is scored by: the plan's schedule made by
// the rewrite passes themselves (recomputation, swaps, early updates), then
// the executor's liveness analysis and the nodes' measured times on it, so a
// prediction walks exactly the schedule that will run.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "plan/input.h"
#include "rewrite/passes.h"
#include "rewrite/recompute.h"

namespace mutwo::plan {

struct Simulation {
  int64_t peak_bytes = 0;
  int32_t peak_node = -1;  // rank in the rewritten schedule
  std::array<int64_t, ir::kNumRoles> peak_by_role{};
  int64_t peak_working_bytes = 0;  // the peak node's inputs, outputs and workspace (within the above)
  std::string peak_label;          // that node as ops::node_label names it ("layer4.1.conv2: convolution")
  double extra_ms = 0;  // measured time of the recomputed nodes
  int32_t recompute_nodes = 0;
  std::vector<int64_t> live_after;  // per rewritten node
  // Swapping: time the copies add (on CUDA, the compute stream's waits for a
  // copy back and the copy streams' tail after compute; on the CPU, every
  // copy), the predicted step (the nodes' times, recomputation and swapping),
  // the host memory the copies hold at once, and how many storages are swapped.
  double swap_ms = 0;
  double step_ms = 0;
  int64_t host_peak_bytes = 0;
  int32_t swapped = 0;
  // Per value (the input graph's ids): its storage is live at the peak node,
  // read last in the forward pass before it and next by the backward pass (or
  // a recomputation) after it, so dropping it frees its bytes at the peak.
  std::vector<bool> idle_at_peak;
  // Per storage owner (the input graph's ids): live at the peak node and
  // inside its swap gap there (rewrite::Gap: read last before the peak, next
  // in a later part of the step after it), so swapping it frees its bytes at the peak.
  std::vector<bool> swap_idle_at_peak;
};
// The plan's schedule: recomputation inserted for `drop`, then the storages in
// `swap` swapped (their prefetch points from the nodes' times), simulated.
// With `update_early`, each parameter's update moved into the backward pass
// first (rewrite/update_early.h), before the swaps.
Simulation simulate(const PlanInput& in, const std::vector<ir::ValueId>& drop, const std::vector<ir::ValueId>& swap = {},
                    bool update_early = false);

// The plan's rewrite passes on `g` (in's graph, or it chunked), run by the
// pass manager (rewrite/passes.h): recomputation for `drop`, then with
// `update_early` each parameter's update moved into the backward pass, then
// the storages in `swap` swapped (prefetch points from in's node times and
// copy speed). The one schedule the simulator scores and rewrite_plan
// (plan.h) makes (rewrite_plan.cpp).
rewrite::Rewritten rewrite_step(const PlanInput& in, const ir::Graph& g, const std::vector<ir::ValueId>& drop,
                                const std::vector<ir::ValueId>& swap, bool update_early, const rewrite::PassOptions& o);

// A storage copied to host memory is held on the device past its last use
// (`from`, the swap_out node) until its copy is done: it is freed before the
// node `until` (the first starting after the copy; the node count when the
// copy outlasts the step).
struct HeldCopy {
  ir::ValueId storage = ir::kNoValue;
  int32_t from = 0, until = 0;
};

struct Plan;
// The schedule a plan's prediction walks, for the reports that draw it
// (report/snapshot.h): the plan's step (the rewrite_plan's), and what the
// simulator adds to that step's liveness: each node's workspace, the bytes
// held beyond the graph's tensors all through the step, and the copies'
// held storages. A default Plan gives the unplanned step.
struct PredictedStep {
  rewrite::Rewritten rewritten;
  std::vector<int64_t> workspace;  // per node of rewritten.graph
  int64_t extra_bytes = 0;         // PlanInput::start_extra_bytes
  std::vector<HeldCopy> held;
};
PredictedStep predicted_step(const PlanInput& in, const Plan& p);

}  // namespace mutwo::plan
