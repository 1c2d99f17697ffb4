// One pipeline: profile -> plan, the same for optimize, sweep, max-batch,
// train and plan on the command line, mutwo.torch's sessions and its
// compiled steps (each then rewrites, runs or hands the plan on its own way).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "plan/plan.h"
#include "support/units.h"

namespace mutwo::plan {

struct PlanOptions {
  std::string planner = "mutwo";  // planner_names()
  // Bytes, a fraction of the activation memory, lowest, or none (support/units.h, Budget).
  Budget budget;
  int64_t exempt_bytes = 0;  // bytes of the step a byte budget leaves out (a compiled step's given tensors)
  // A fraction's bytes are at least these (mutwo.torch: the budget an earlier
  // input shape of the same module was planned under, so that a smaller
  // batch never fails where a larger one fitted).
  int64_t at_least_bytes = 0;
  bool python = false;  // refusals name budgets as Python writes them (budget="93%"), not as the CLI does
  bool progress = false;  // the optimal planner's progress on stderr (support/progress.h)
};
struct Planned {
  PlanInput input;             // the profiled step (its graph is the baseline)
  int64_t unplanned_peak = 0;  // simulated, without recomputation
  // Of it, activations: what a plan can free. The rest (parameters,
  // gradients, optimizer state, inputs, workspaces) is the budget's 0%.
  int64_t unplanned_activation_bytes = 0;
  Plan plan;
};
// The planners' input from `prof` (then `adjust`ed: swap flags, no swapping)
// and the unplanned step simulated.
Planned prepare(const profile::Profile& prof, const std::function<void(PlanInput&)>& adjust = {});
// The same from a profile.json (`mutwo plan --profile PATH`): UserError naming the file.
Planned prepare_file(const std::string& profile_path, const std::function<void(PlanInput&)>& adjust = {});
// The bytes o.budget stands for on p's step: a byte budget plus what it
// exempts, a fraction's budget_of_fraction over p's unplanned peak (at least
// o.at_least_bytes), no budget's the unplanned peak. Not for lowest.
int64_t budget_bytes(const Planned& p, const PlanOptions& o);
// p.plan: o.planner under o.budget. Under lowest, the cheapest plan at the
// lowest peak the planner reaches; under lowest and none, always feasible.
void run(Planned& p, const PlanOptions& o);
// Why p.plan does not fit, as one line: "no plan fits the budget ...: the
// lowest peak o.planner reaches" in bytes, what it holds, the same as a
// percentage of the activation memory, and the budget to ask for instead.
std::string infeasible_text(const Planned& p, const PlanOptions& o);

}  // namespace mutwo::plan
