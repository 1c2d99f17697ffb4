// The optimal planner's model: mu-TWO's keep, drop or swap decisions as a
// mixed-integer linear program (optimal_model.cpp says what it captures and
// what it leaves out), written for the solver wrapper (milp.h) and read back
// as a drop list and a swap list. Plain data in; no CBC here.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "plan/milp.h"
#include "plan/optimal.h"
#include "plan/plan.h"

namespace mutwo::plan {

// The objective counts microseconds: CBC's cutoff increment is absolute, so
// costs in milliseconds would make it stop at a coarse gap.
inline constexpr double kCostPerMs = 1e3;
// Same-stage clones counted behind a clone's inputs, at most (the model's
// second, larger form; the first counts none).
inline constexpr size_t kMaxClonesBehind = 8;
// Memory rows count bytes in units of budget / kMemoryUnitsPerBudget (at
// least one byte), so their coefficients stay near 1 for the solver.
inline constexpr double kMemoryUnitsPerBudget = 1e6;
inline double bytes_per_unit(int64_t budget) { return std::max(1.0, static_cast<double>(budget) / kMemoryUnitsPerBudget); }

// The program and what its columns mean.
struct OptimalModel {
  milp::Lp lp;
  std::vector<Candidate> cands;
  std::vector<int> drop_col;  // per candidate: its drop[c] column; these come first, so cuts carry over to a rebuilt model
  std::vector<ir::ValueId> swaps;  // storage owners the model may swap (PlanInput::can_swap; a saving window)
  std::vector<int> swap_col;       // per swap: its swap[k] column, right after the drop columns
  std::vector<int32_t> stage_node;  // per stage: the backward node (its rank)
  struct Window {  // stages first..last; A[s,q] is column col + s - first
    int first = -1, last = -1, col = -1;
    bool in(int s) const { return first >= 0 && s >= first && s <= last; }
  };
  std::vector<Window> window;  // per node: the stages where it may be recomputed, and A's columns
  int stages() const { return static_cast<int>(stage_node.size()); }
  milp::Lin A(int s, int q) const {
    const Window& w = window[static_cast<size_t>(q)];
    if (w.first < 0 || s < w.first) return milp::Lin(0);
    return milp::Lin::var(w.col + std::min(s, w.last) - w.first);
  }
  milp::Lin R(int s, int q) const { return A(s, q) - A(s - 1, q); }
};

// Builds the program for `budget`, memory rows in units of `bytes_per_unit`
// bytes, counting at most `max_clones_behind` same-stage clones behind each
// clone's inputs. UserError when it would exceed options.max_columns. `in` is
// the schedule the plan's drops and swaps apply to: for a plan that updates
// early, model_input(in, true).
OptimalModel build_optimal_model(const PlanInput& in, int64_t budget, double bytes_per_unit,
                                 const OptimalOptions& options, size_t max_clones_behind);

// What the model plans: `in` itself, or with `update_early` the step with
// each parameter's update moved into the backward pass (rewrite/update_early.h),
// node times and workspace carried over, value ids unchanged. The rewrite
// moves updates after recomputation, so a clone's read of a parameter can put
// one later than here: the model's gradients may be freed earlier than the
// simulator's (a relaxation still).
PlanInput model_input(const PlanInput& in, bool update_early);

// The drop list and the swap list an assignment of the program chose.
std::vector<ir::ValueId> drops_of(const OptimalModel& m, const std::vector<double>& x);
std::vector<ir::ValueId> swaps_of(const OptimalModel& m, const std::vector<double>& x);

// The program with drop[] and swap[] fixed to a plan's lists.
milp::Lp with_plan(const OptimalModel& m, const PlanInput& in, const std::vector<ir::ValueId>& drop,
                   const std::vector<ir::ValueId>& swap);

}  // namespace mutwo::plan
