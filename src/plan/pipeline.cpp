// The planning pipeline every caller shares (see plan.h, "One pipeline").
#include <functional>

#include "plan/plan.h"
#include "plan/pipeline.h"
#include "support/error.h"
#include "support/units.h"

namespace mutwo::plan {

Planned prepare(const profile::Profile& prof, const std::function<void(PlanInput&)>& adjust) {
  Planned p;
  p.input = make_input(prof);
  if (adjust) adjust(p.input);
  p.unplanned_peak = simulate(p.input, {}).peak_bytes;
  return p;
}

Planned prepare_file(const std::string& profile_path, const std::function<void(PlanInput&)>& adjust) {
  const profile::Profile prof = profile::read_profile(profile_path);
  try {
    return prepare(prof, adjust);
  } catch (const UserError& e) {
    MUTWO_FAIL("{}: {}", profile_path, e.what());
  }
}

void run(Planned& p, const PlanOptions& o) {
  MUTWO_ASSERT(o.exempt_bytes >= 0 && o.exempt_bytes <= p.unplanned_peak, "exempt {} of an unplanned peak of {}",
               o.exempt_bytes, p.unplanned_peak);
  const int64_t budget = parse_budget(o.budget, p.unplanned_peak - o.exempt_bytes) + o.exempt_bytes;
  p.plan = run_planner(o.planner, p.input, budget, o.progress);
}

std::string infeasible_text(const Planned& p, const PlanOptions& o) {
  const Plan low = run_planner(o.planner, p.input, 0);
  if (o.exempt_bytes == 0)
    return fmt::format("budget {} cannot be met: {} for this step, of an unplanned {}; raise the budget or lower the batch",
                       format_bytes(p.plan.budget_bytes), floor_text(low, o.planner), format_bytes(p.unplanned_peak));
  return fmt::format("budget {} cannot be met: the lowest the {} planner reaches is {} above the {} the step is given, of "
                     "an unplanned {}; raise the budget or lower the batch",
                     format_bytes(p.plan.budget_bytes - o.exempt_bytes), o.planner,
                     format_bytes(low.predicted.peak_bytes - o.exempt_bytes), format_bytes(o.exempt_bytes),
                     format_bytes(p.unplanned_peak - o.exempt_bytes));
}

}  // namespace mutwo::plan
