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

namespace mutwo::plan {

struct Simulation {
  int64_t peak_bytes = 0;
  int32_t peak_node = -1;  // rank in the rewritten schedule
  std::array<int64_t, ir::kNumRoles> peak_by_role{};
  int64_t peak_working_bytes = 0;  // the peak node's inputs, outputs and workspace (within the above)
  std::string peak_op;             // that node's op
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

}  // namespace mutwo::plan
