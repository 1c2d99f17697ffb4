// Planning (phase 2 of mu-TWO): which activations to drop after the forward
// pass and recompute in the backward pass, and which storages to swap to host
// memory, so the step fits a memory budget: the Plan, the planners, and the
// step a plan runs.
//
// Every planner has the same signature, takes plain data (a graph and its
// Profile; never tensors) and is scored by the same simulator, which runs the
// rewrite passes themselves and the executor's liveness analysis on their
// output: the prediction walks exactly the schedule that will be executed.
// The rest of planning, by concern: input.h (what planners read), simulator.h,
// chunks.h (the vocabulary loss's chunks), blocks.h (what a block is),
// plan_file.h (plan.json written and read back), pipeline.h (profile -> plan).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "plan/chunks.h"
#include "plan/input.h"
#include "plan/simulator.h"
#include "rewrite/passes.h"

namespace mutwo::plan {

// One candidate a planner chose, in the order it chose: the greedy's reasoning,
// written to plan.json and plan.csv (`rank`, `score`, `reason`).
struct Choice {
  enum class Outcome { dropped, raised_peak, taken_back };
  ir::ValueId owner = ir::kNoValue;  // the candidate's storage
  double score = 0;                  // bytes freed per ms of recomputation not already paid (or of copy
                                     // time not hidden, for a swap), when chosen
  Outcome outcome = Outcome::dropped;
  bool swap = false;                 // swapped to host memory, not recomputed
};
const char* to_string(Choice::Outcome o);

struct Plan {
  std::string planner;
  int64_t budget_bytes = 0;
  std::vector<ir::ValueId> drop;  // activations to recompute
  std::vector<ir::ValueId> swap;  // storages (owners) to swap to host memory
  bool update_early = false;      // parameters updated in the backward pass, as soon as ready (rewrite/update_early.h)
  std::vector<ChunkChoice> chunks;  // chunk_rows of the vocabulary loss's nodes, applied before `drop`
  Simulation predicted;
  bool feasible = false;
  double planning_ms = 0;
  std::string note;  // why infeasible, or what the planner chose to say
  std::string from;  // mutwo: the planner whose plan it took, better than the greedy's (per-layer, sqrt-n); else empty
  // Candidates in the order the planner considered them (the greedy's picks,
  // undone ones included); empty for planners without an order.
  std::vector<Choice> order;
};
// `g` (the plan's profiled graph) with the plan's chunks applied: what the
// recomputation rewrite takes with the plan's drops.
ir::Graph chunked_graph(const ir::Graph& g, const Plan& p);
// The step the plan runs: `in`'s graph chunked, recomputation inserted, then
// swaps (prefetch points placed from `in`'s node times and copy speed).
// Each pass verified, and shown to `o.after` (--dump-ir-after).
rewrite::Rewritten rewrite_plan(const PlanInput& in, const Plan& p, const rewrite::PassOptions& o = {});
// A random node the plan's step recomputes by replaying its generator state
// (plan.json's `replayed`): its first output, its op, the state's value.
struct ReplayedNode {
  std::string node, op, state;
  int64_t state_bytes = 0;
  int32_t origin = -1;  // the random node, in `in`'s graph
};
std::vector<ReplayedNode> replayed_random(const PlanInput& in, const Plan& p);

using PlannerFn = Plan (*)(const PlanInput& in, int64_t budget_bytes);

// none, per-layer, sqrt-n, mutwo, optimal.
const std::vector<std::string>& planner_names();
// Runs a planner by name, timing it. UserError for an unknown name.
// `progress`: the planners that take long (optimal) say on stderr how far they are.
Plan run_planner(const std::string& name, const PlanInput& in, int64_t budget_bytes, bool progress = false);

// μ-TWO's greedy score of dropping `bytes` for `ms` of recomputation: bytes per
// millisecond (1 fs at least: a fused random op's modelled time is below 1 ns,
// and such ops must still rank by their time). The one definition the
// executor's greedy (mutwo.cpp) and the compiled route's anchor order
// (compiled.h) both rank by.
inline double recompute_ratio(int64_t bytes, double ms) { return static_cast<double>(bytes) / (ms > 1e-12 ? ms : 1e-12); }

// The planners (one file each).
Plan plan_none(const PlanInput& in, int64_t budget_bytes);
Plan plan_per_layer(const PlanInput& in, int64_t budget_bytes);
Plan plan_sqrt_n(const PlanInput& in, int64_t budget_bytes);
Plan plan_mutwo(const PlanInput& in, int64_t budget_bytes);
Plan plan_optimal(const PlanInput& in, int64_t budget_bytes);

// The floor: the plan with the lowest peak `planner` reaches (its plan under a
// budget of 0 bytes). For mutwo it is searched on the graph's own times (the
// device rate table's roofline, not the profile's measured times) among the
// greedy, per-layer and sqrt-n, so the same step has the same floor whatever
// its timings; and every budget at or above it fits (plan_mutwo).
Plan plan_floor(const std::string& planner, const PlanInput& in);
Plan mutwo_floor(const PlanInput& in, int64_t budget_bytes);  // plan_floor's for mutwo (a PlannerFn: the budget is 0)

// "the lowest peak the mutwo planner reaches is 2.9 GiB (parameter 418 MiB,
// gradient 418 MiB, ...)": an infeasible plan's peak and what is live there by
// role (other: temporaries and the peak node's workspace), for the error that
// plan, optimize and mutwo.torch report.
std::string floor_text(const Plan& lowest, const std::string& planner);

// The greedy's lowest plan for `g` on an estimated profile (nothing runs):
// what to recompute to profile a step whose unplanned form does not fit the
// device. Its drops bring the peak as low as the greedy can by recomputation
// alone, whatever the times (dropping every candidate can be higher:
// recomputed chains are held at once).
std::vector<ir::ValueId> lowest_drop(const ir::Graph& g, const std::string& device);

// Bytes of the activations `p` drops and recomputes, and of the storages it
// swaps, in `g` (the plan's profiled graph): what every front end prints and
// writes as dropped_bytes and swapped_bytes (plan.json, the CLI, mutwo.torch).
int64_t dropped_bytes(const ir::Graph& g, const Plan& p);
int64_t swapped_bytes(const ir::Graph& g, const Plan& p);

// Fills a Plan from a drop list (and a swap list): simulates it and judges it against the budget.
Plan finish(const PlanInput& in, std::string planner, int64_t budget_bytes, std::vector<ir::ValueId> drop,
            std::vector<ir::ValueId> swap = {}, bool update_early = false);

}  // namespace mutwo::plan
