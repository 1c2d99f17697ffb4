// The optimal planner's options: Checkmate's MILP (Jain et al., MLSys 2020)
// restricted to mu-TWO's drop and swap decisions (optimal_model.h; optimal_model.cpp
// says what the model captures), solved with COIN-OR CBC (milp.h) by the
// search in optimal.cpp. plan.h declares the plain two-argument form.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/plan.h"
#include "support/progress.h"

namespace mutwo::plan {

struct OptimalOptions {
  double time_limit_s = 60;       // wall clock for the whole planner; CBC's gap is reported when it stops early
  int64_t max_columns = 400000;   // refuse larger models (UserError suggesting the mutwo planner)
  bool warm_start = true;         // start CBC from the greedy's plan when that one fits
  Progress* progress = nullptr;   // where it says how far it is (each solve, with the time left to its limit)
};

// plan_optimal(in, budget) is this with the default options.
Plan plan_optimal(const PlanInput& in, int64_t budget_bytes, const OptimalOptions& options);

// For tests: whether the MILP's memory model lets the plan (`drop`, `swap`,
// `update_early`) fit the budget. The model is a relaxation: it must accept
// every plan that fits in simulation (with swaps, up to the prefetch points'
// blindness to recomputation's time: optimal_model.cpp).
bool optimal_model_fits(const PlanInput& in, int64_t budget_bytes, const std::vector<ir::ValueId>& drop,
                        const std::vector<ir::ValueId>& swap = {}, bool update_early = false);

// False when mutwo was configured with -DMUTWO_WITH_CBC=OFF (plan_optimal then throws UserError).
bool optimal_planner_built();

}  // namespace mutwo::plan
