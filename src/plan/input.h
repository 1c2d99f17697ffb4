// What every planner reads: the profiled step as plain data (PlanInput), the
// activations it may drop (Candidate: one storage with every activation in
// it), the storages it may swap, and what recomputing a value under a drop
// list walks (its sources and their time).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ir/graph.h"
#include "profile/profile.h"

namespace mutwo::plan {

// What planners read: the profiled graph and per-node measurements aligned to it.
struct PlanInput {
  ir::Graph graph;                // parsed from the profile
  profile::Profile profile;
  std::vector<double> node_ms;        // per node of `graph`
  std::vector<int64_t> workspace;     // per node: measured bytes beyond its outputs
  int64_t start_extra_bytes = 0;      // the most the device held beyond the graph's own tensors at any
                                      // node (CUDA libraries' workspaces); counted in every prediction
  // Swapping, below what recomputation alone reaches. Copy speeds from the profile (0: unknown, no swap);
  // on CUDA copies run on their own streams beside compute, on the CPU in line.
  double h2d_bytes_per_ms = 0, d2h_bytes_per_ms = 0;
  bool copies_overlap = false;
  bool swap = true;              // planners may swap (--no-swap: recomputation only)
  int64_t host_limit_bytes = 0;  // host memory the swapped copies may hold at once (--host-memory; by default
                                 // half the machine's on CUDA, none on the CPU)
  bool can_swap() const { return swap && h2d_bytes_per_ms > 0 && d2h_bytes_per_ms > 0 && host_limit_bytes > 0; }
  // Random nodes' outputs are candidates, recomputed by replaying the
  // generator's state (rewrite/recompute.h); false under --cuda-graph, whose
  // capture cannot replay it: they are then kept.
  bool replay_random = true;
};
PlanInput make_input(const profile::Profile& p);  // UserError if the profile's graph does not parse
// Half the machine's physical memory: --host-memory's default on CUDA.
int64_t default_host_limit();

// A set of activations to drop: one candidate is one storage, with every
// activation that shares it (a view and its base are dropped together).
struct Candidate {
  ir::ValueId owner = ir::kNoValue;  // the value owning the storage
  std::vector<ir::ValueId> members;  // activations in it
  int64_t bytes = 0;
  int32_t made_by = -1;  // the node making the storage (siblings share its recompute subgraph)
};
std::vector<Candidate> candidates(const PlanInput& in);

// Storage owners the planners may swap (rewrite::swappable in the unplanned step).
std::vector<ir::ValueId> swap_candidates(const PlanInput& in);

// What recomputing a value under a drop list crosses: the producers up to
// kept values (kept at backward time by the rewrite's own rule,
// rewrite::kept_at_backward) or values without a producer. One index for
// many walks (plan.json's sources and recompute times).
class RecomputeWalk {
 public:
  RecomputeWalk(const PlanInput& in, const std::vector<ir::ValueId>& drop);
  std::vector<ir::ValueId> sources(ir::ValueId v) const;  // the kept values reached from `v`
  double ms(ir::ValueId v) const;                         // the time of the producer nodes walked from `v`

 private:
  // Calls on_node for every producer node walked from `v` and on_source for every kept value reached.
  void walk(ir::ValueId v, const std::function<void(int32_t)>& on_node,
            const std::function<void(ir::ValueId)>& on_source) const;
  const PlanInput& in_;
  ir::UseIndex uses_;
  std::vector<bool> kept_;
};

// The kept values a dropped activation is recomputed from under `drop`.
std::vector<ir::ValueId> recompute_sources(const PlanInput& in, const std::vector<ir::ValueId>& drop, ir::ValueId v);

// The time of the nodes that recompute `v` from kept values under `drop`, as if
// `v` were dropped too (the nodes recompute_sources walks); 0 for a value
// without a producer.
double recompute_ms(const PlanInput& in, const std::vector<ir::ValueId>& drop, ir::ValueId v);

}  // namespace mutwo::plan
