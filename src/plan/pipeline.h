// One pipeline: profile -> plan, the same for optimize, sweep, max-batch,
// train and plan on the command line, mutwo.torch's sessions and its
// compiled steps (each then rewrites, runs or hands the plan on its own way).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "plan/plan.h"

namespace mutwo::plan {

struct PlanOptions {
  std::string planner = "mutwo";  // planner_names()
  std::string budget = "100%";     // bytes ("2GiB") or a percentage of the unplanned peak
  int64_t exempt_bytes = 0;        // bytes of the step the budget leaves out (a compiled step's given
                                   // tensors), and its percentage too
  bool progress = false;           // the optimal planner's progress on stderr (support/progress.h)
};
struct Planned {
  PlanInput input;             // the profiled step (its graph is the baseline)
  int64_t unplanned_peak = 0;  // simulated, without recomputation
  Plan plan;
};
// The planners' input from `prof` (then `adjust`ed: swap flags, no swapping)
// and the unplanned step simulated.
Planned prepare(const profile::Profile& prof, const std::function<void(PlanInput&)>& adjust = {});
// The same from a profile.json (`mutwo plan --profile PATH`): UserError naming the file.
Planned prepare_file(const std::string& profile_path, const std::function<void(PlanInput&)>& adjust = {});
// p.plan: o.planner under o.budget.
void run(Planned& p, const PlanOptions& o);
// Why p.plan does not fit: the lowest peak o.planner reaches and what it holds.
std::string infeasible_text(const Planned& p, const PlanOptions& o);

}  // namespace mutwo::plan
