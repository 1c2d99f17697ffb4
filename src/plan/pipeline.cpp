// The planning request and the pipeline every front end shares (see pipeline.h).
#include "plan/pipeline.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <utility>

#include "plan/plan.h"
#include "support/error.h"
#include "support/json_input.h"
#include "support/units.h"

namespace mutwo::plan {

PlanOptions read_plan_options(const nlohmann::json& j, const std::string& where) {
  MUTWO_CHECK(j.is_object(), "{}: expected an object, got {}", where, j.type_name());
  PlanOptions o;
  auto given = [&](const char* key) { return j.contains(key) && !j.at(key).is_null(); };
  if (given("planner")) o.planner = json_field<std::string>(j, "planner", where);
  if (given("budget")) {
    o.budget = parse_budget(json_field<std::string>(j, "budget", where));
  }
  if (given("at_least_bytes")) o.at_least_bytes = json_size(j, "at_least_bytes", where);
  if (given("exempt_bytes")) o.exempt_bytes = json_size(j, "exempt_bytes", where);
  if (given("swap")) o.swap = json_field<bool>(j, "swap", where);
  if (given("host_limit_bytes")) o.host_limit_bytes = json_size(j, "host_limit_bytes", where);
  if (given("replay_random")) o.replay_random = json_field<bool>(j, "replay_random", where);
  if (given("progress")) o.progress = json_field<bool>(j, "progress", where);
  return o;
}

PlannedStep prepare(const profile::Profile& prof, const PlanOptions& o) {
  PlanInput in = make_input(prof);
  in.swap = o.swap;
  if (o.host_limit_bytes) in.host_limit_bytes = *o.host_limit_bytes;
  in.replay_random = o.replay_random;
  return prepare(std::move(in));
}

PlannedStep prepare(PlanInput in) {
  PlannedStep p;
  p.input = std::move(in);
  const Simulation unplanned = simulate(p.input, {});
  p.unplanned_peak = unplanned.peak_bytes;
  p.unplanned_activation_bytes = unplanned.peak_by_role[static_cast<size_t>(ir::Role::activation)];
  return p;
}

PlannedStep prepare_file(const std::string& profile_path, const PlanOptions& o) {
  const profile::Profile prof = profile::read_profile(profile_path);
  try {
    return prepare(prof, o);
  } catch (const UserError& e) {
    MUTWO_FAIL("{}: {}", profile_path, e.what());
  }
}

int64_t budget_bytes(const PlannedStep& p, const PlanOptions& o) {
  const int64_t activation = p.unplanned_activation_bytes;
  switch (o.budget.kind) {
    case Budget::Kind::bytes: return o.budget.bytes + o.exempt_bytes;
    case Budget::Kind::fraction:
      return std::max(o.at_least_bytes, budget_of_fraction(o.budget.fraction, p.unplanned_peak - activation, activation));
    case Budget::Kind::none: return p.unplanned_peak;
    case Budget::Kind::lowest: break;
  }
  MUTWO_ASSERT(false, "no bytes for the budget 'lowest'");
  return 0;
}

namespace {

// The cheapest plan at the lowest peak `planner` reaches: its floor
// (plan_floor: for mutwo, whatever the profile's times), then planned again
// under that floor's peak (which drops no more than it needs to). Feasible,
// its budget its peak.
Plan lowest_plan(const std::string& planner, const PlanInput& in, bool progress) {
  Plan low = planner == "mutwo" ? plan_floor(planner, in) : run_planner(planner, in, 0, progress);
  Plan p = run_planner(planner, in, low.predicted.peak_bytes, progress);
  if (p.feasible) p.planning_ms += low.planning_ms;
  else p = std::move(low);
  p.budget_bytes = p.predicted.peak_bytes;
  p.feasible = true;
  return p;
}

}  // namespace

void choose_plan(PlannedStep& p, const PlanOptions& o) {
  MUTWO_ASSERT(o.exempt_bytes >= 0 && o.exempt_bytes <= p.unplanned_peak, "exempt {} of an unplanned peak of {}",
               o.exempt_bytes, p.unplanned_peak);
  if (o.budget.kind == Budget::Kind::lowest) {
    p.plan = lowest_plan(o.planner, p.input, o.progress);
    return;
  }
  p.plan = run_planner(o.planner, p.input, budget_bytes(p, o), o.progress);
  if (o.budget.kind == Budget::Kind::none) p.plan.feasible = true;  // no budget to miss
}

void plan_and_rewrite(PlannedStep& p, const PlanOptions& o, const rewrite::PassOptions& passes) {
  choose_plan(p, o);
  p.rewritten = rewrite_plan(p.input, p.plan, passes);
}

PlannedStep plan_and_rewrite(const profile::Profile& prof, const PlanOptions& o, const rewrite::PassOptions& passes) {
  PlannedStep p = prepare(prof, o);
  plan_and_rewrite(p, o, passes);
  return p;
}

std::string infeasible_text(const PlannedStep& p, const PlanOptions& o) {
  const Plan low = plan_floor(o.planner, p.input);
  const int64_t lowest = low.predicted.peak_bytes, activation = p.unplanned_activation_bytes;
  const int64_t fixed = p.unplanned_peak - activation;
  const bool bytes = o.budget.kind == Budget::Kind::bytes;
  const int64_t given = bytes ? o.exempt_bytes : 0;  // a compiled step's byte budget is above what it is given
  auto ask = [&](const std::string& b) { return o.python ? fmt::format("budget=\"{}\"", b) : "--budget " + b; };
  std::string asked = bytes ? format_bytes(p.plan.budget_bytes - given)
                            : fmt::format("{} ({})", budget_text(o.budget), format_bytes(p.plan.budget_bytes));
  if (given > 0) asked += fmt::format(" above the {} the step is given", format_bytes(given));
  std::string text = fmt::format("no plan fits the budget {}: {}", asked, floor_text(low, o.planner));
  if (given > 0) text += fmt::format(", {} above what it is given", format_bytes(lowest - given));
  std::string instead = bytes_at_least(lowest - given);
  if (activation > 0) {
    const double pct = 100 * fraction_of_budget(lowest, fixed, activation);
    text += fmt::format(", which is {:.1f}% as a budget (a percentage is of the {} of activations at the unplanned peak "
                        "of {}, on top of the {} planning cannot change)",
                        pct, format_bytes(activation), format_bytes(p.unplanned_peak), format_bytes(fixed));
    if (!bytes) instead = percent_at_least(lowest, fixed, activation);
  } else {
    text += fmt::format(" (the unplanned peak of {} holds no activations a plan can free)", format_bytes(p.unplanned_peak));
  }
  return fmt::format("{}; try {}, {}, or a smaller batch", text, ask(instead), ask("lowest"));
}

}  // namespace mutwo::plan
