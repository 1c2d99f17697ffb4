// Planning without running (see plan_step.h).
#include "torchext/plan_step.h"

#include <nlohmann/json.hpp>

#include <set>

#include "plan/plan.h"
#include "plan/pipeline.h"
#include "plan/plan_file.h"
#include "profile/profile.h"
#include "stepfile/step_file.h"
#include "support/error.h"
#include "support/units.h"
#include "torchext/session.h"

namespace mutwo::torchext {

namespace {

using json = nlohmann::json;

constexpr double kFusedFraction = 0.05;

// The options' "budget": null (none), the user's text (parse_budget), or a
// count of bytes, as a number or a string of digits: the compiled route's
// own budget when it plans again (python/mutwo/_inductor.py).
Budget budget_option(const json& o) {
  const auto it = o.find("budget");
  if (it == o.end() || it->is_null()) return {};
  if (it->is_number_integer()) return Budget::of_bytes(it->get<int64_t>());
  const std::string text = it->get<std::string>();
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) return Budget::of_bytes(parse_bytes(text));
  return parse_budget(text);
}

}  // namespace

std::string plan_step(const std::string& step_json, const std::string& options_json) {
  const json o = json::parse(options_json);
  const std::string planner = o.value("planner", "mutwo");
  const Budget budget = budget_option(o);
  stepfile::ModuleStep step = stepfile::load_module_step(step_json, "the compiled step");
  // Temporaries the compiler keeps in registers (a pointwise chain fused into
  // one kernel) never take memory: modelled as empty.
  if (auto it = o.find("unmaterialized"); it != o.end())
    for (const json& name : *it) {
      const ir::ValueId v = step.graph.find(name.get<std::string>());
      MUTWO_ASSERT(v != ir::kNoValue, "unmaterialized: no value {}", name.dump());
      step.graph.value(v).type.shape = {0};
    }
  profile::Profile prof = profile::estimate_profile(step.graph, o.value("device", "cpu"));
  prof.model = o.value("label", "compiled");
  // Nodes the compiler fuses into the kernels around them (pointwise, views)
  // cost a fraction of their roofline: recomputed inside a consumer they add
  // arithmetic, not a round trip through memory.
  if (auto it = o.find("fused"); it != o.end()) {
    const std::set<std::string> fused(it->begin(), it->end());
    for (profile::NodeRecord& r : prof.nodes)
      if (fused.count(r.name)) r.ms *= kFusedFraction;
  }
  profile::summarize(prof);
  prof.step_ms = prof.node_ms_sum;
  // Inductor runs what it is given; copies to host memory are not its
  // partitioner's to place, and it recomputes a random node only from its own
  // seeds (inductor_random, which is not a random op here): mutwo's generator
  // replay is not its to run.
  plan::Planned planned = plan::prepare(prof, [](plan::PlanInput& in) {
    in.swap = false;
    in.replay_random = false;
  });
  // The step's parameters, buffers and inputs: what it is given, outside the budget.
  plan::PlanOptions po;
  po.planner = planner;
  po.budget = budget;
  po.exempt_bytes = planned.input.profile.persistent_bytes;
  po.python = true;
  plan::run(planned, po);
  if (!planned.plan.feasible) throw BudgetError(plan::infeasible_text(planned, po));
  const plan::PlanInput& in = planned.input;
  const plan::Plan& p = planned.plan;
  const int64_t given = po.exempt_bytes, unplanned = planned.unplanned_peak - given;
  json values = json::array();
  for (const plan::ActivationRecord& r : plan::activation_records(in, p))
    values.push_back({{"name", r.name}, {"bytes", r.bytes}, {"decision", r.decision}, {"reason", r.reason},
                      {"recompute_ms", r.recompute_ms}});
  json j{{"planner", planner},
         {"predicted_peak_by_role", peak_by_role_json(p.predicted)},
         {"predicted_peak_op", p.predicted.peak_op},
         {"budget_bytes", p.budget_bytes - given},
         {"given_bytes", given},
         {"unplanned_peak_bytes", unplanned},
         {"unplanned_activation_bytes", planned.unplanned_activation_bytes},  // of it: a percentage's 100%
         {"predicted_peak_bytes", p.predicted.peak_bytes - given},
         {"predicted_extra_ms", p.predicted.extra_ms},
         {"step_ms", prof.step_ms},
         {"from", p.from},
         {"note", p.note},
         {"activations", values}};
  return j.dump();
}

}  // namespace mutwo::torchext
