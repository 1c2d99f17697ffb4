// mutwo plan: reads a profile, runs a planner under a memory budget (or a
// sweep of budgets), prints the prediction and writes plan.json / plan.csv.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "plan/plan.h"
#include "plan/plan_file.h"
#include "report/report.h"
#include "support/error.h"
#include "support/files.h"
#include "support/units.h"

namespace mutwo::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

void print_plan(const plan::PlanInput& in, const plan::Plan& p, int64_t unplanned) {
  double step = in.profile.step_ms;
  fmt::print("planner {}: budget {}, unplanned peak {}\n", p.planner, format_bytes(p.budget_bytes),
             format_bytes(unplanned));
  fmt::print("  predicted peak {} ({}), extra time {:.3f} ms ({:+.1f}% of the {:.2f} ms step)\n",
             format_bytes(p.predicted.peak_bytes), p.feasible ? "fits" : "OVER BUDGET", p.predicted.extra_ms,
             step > 0 ? 100.0 * p.predicted.extra_ms / step : 0.0, step);
  for (int r = 0; r < ir::kNumRoles; ++r)
    if (int64_t b = p.predicted.peak_by_role[static_cast<size_t>(r)])
      fmt::print("    {:<16} {:>12}\n", ir::to_string(static_cast<ir::Role>(r)), format_bytes(b));
  fmt::print("  dropped {} activations ({}), {} recompute nodes; planned in {:.1f} ms\n", p.drop.size(),
             format_bytes(plan::dropped_bytes(in.graph, p)), p.predicted.recompute_nodes, p.planning_ms);
  if (!p.swap.empty())
    fmt::print("  swapped {} storages ({}) to host memory, {} there at once; copies add {:.3f} ms\n", p.swap.size(),
               format_bytes(plan::swapped_bytes(in.graph, p)), format_bytes(p.predicted.host_peak_bytes), p.predicted.swap_ms);
  if (!p.drop.empty() || !p.swap.empty()) {
    std::vector<plan::ActivationRecord> moved;  // dropped or swapped, largest first
    for (plan::ActivationRecord& a : plan::activation_records(in, p))
      if (a.decision != "keep") moved.push_back(std::move(a));
    std::stable_sort(moved.begin(), moved.end(), [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
    std::string names;
    for (size_t i = 0; i < std::min<size_t>(5, moved.size()); ++i)
      names += fmt::format("{}{} ({}, {})", i ? "; " : "", moved[i].label(), moved[i].decision, format_bytes(moved[i].bytes));
    fmt::print("    largest: {}{}\n", names, moved.size() > 5 ? fmt::format("; {} more in plan.csv", moved.size() - 5) : "");
  }
  const std::vector<plan::Decision> ds = plan::decisions(in, p);
  if (!ds.empty()) fmt::print("  what lowered the peak:\n");
  for (const plan::Decision& d : ds) fmt::print("    - {}\n", plan::decision_line(d));
  if (!p.note.empty()) fmt::print("  note: {}\n", p.note);
}

json plan_json(const plan::PlanInput& in, const plan::Plan& p, int64_t unplanned) {
  return {{"planner", p.planner},
          {"budget_bytes", p.budget_bytes},
          {"unplanned_peak_bytes", unplanned},
          {"predicted_peak_bytes", p.predicted.peak_bytes},
          {"predicted_extra_ms", p.predicted.extra_ms},
          {"dropped", p.drop.size()},
          {"dropped_bytes", plan::dropped_bytes(in.graph, p)},
          {"swapped", p.swap.size()},
          {"swapped_bytes", plan::swapped_bytes(in.graph, p)},
          {"host_peak_bytes", p.predicted.host_peak_bytes},
          {"predicted_swap_ms", p.predicted.swap_ms},
          {"planning_ms", p.planning_ms},
          {"feasible", p.feasible}};
}

}  // namespace

void PlanCommand::add_to(CLI::App& app) {
  planning.swap.add_to(app);
  app.add_option("--profile", profile_path, "profile.json written by mutwo profile")->required();
  planning.add_to(app, "memory budget: 2GiB, 1500MiB, 60% (of the activation memory; docs/budgets.md) or lowest");
  app.add_option("--out", out, "plan.json to write (plan.csv beside it); with --sweep, no plan: the trade-off "
                 "(tradeoff.csv, tradeoff.svg) goes into its folder")->capture_default_str();
  app.add_option("--sweep", sweep, "plan every listed budget (percent of the activation memory, as --budget), e.g. "
                 "100,80,60,40")
      ->check(CLI::Validator([](std::string& s) -> std::string {
        try {
          parse_int_list(s);
        } catch (const UserError& e) {
          return e.what();
        }
        return {};
      }, "PCT[,PCT...]"));
  output.add_to(app, "end with one JSON line");
}

int PlanCommand::run() const {
  MUTWO_CHECK(!planning.budget.empty() || !sweep.empty(),
              "--budget is required (e.g. --budget 60%, 2GiB or lowest), or --sweep 100,80,60");
  const plan::PlanOptions options = planning.plan_options(!output.quiet);
  plan::PlannedStep planned = plan::prepare_file(profile_path, options);
  const plan::PlanInput& in = planned.input;
  const int64_t unplanned = planned.unplanned_peak;
  fs::path out_path(out);
  if (out_path.has_parent_path()) make_dirs(out_path.parent_path().string());
  std::string dir = out_path.has_parent_path() ? out_path.parent_path().string() : ".";

  if (!sweep.empty()) {
    std::vector<plan::Plan> plans;
    json rows = json::array();
    std::vector<std::string> planners = {"per-layer", "sqrt-n"};
    if (std::find(planners.begin(), planners.end(), planning.planner) == planners.end()) planners.push_back(planning.planner);
    for (const std::string& name : planners) {
      bool budgeted = name == planning.planner;
      std::vector<int64_t> pcts = budgeted ? parse_int_list(sweep) : std::vector<int64_t>{100};
      for (int64_t pct : pcts) {
        plan::PlanOptions o = options;
        o.budget = Budget::of_fraction(static_cast<double>(pct) / 100.0);
        plans.push_back(plan::run_planner(name, in, plan::budget_bytes(planned, o), !output.quiet));
        print_plan(in, plans.back(), unplanned);
        rows.push_back(plan_json(in, plans.back(), unplanned));
      }
    }
    report::write_tradeoff(plans, in.profile, dir);
    if (output.json) std::cout << json{{"sweep", rows}, {"out_dir", dir}}.dump() << std::endl;
    return 0;
  }
  plan::choose_plan(planned, options);
  const plan::Plan& p = planned.plan;
  print_plan(in, p, unplanned);
  plan::write_plan_json(in, p, unplanned, out);
  std::string csv = (out_path.parent_path() / out_path.stem()).string() + ".csv";
  plan::write_plan_csv(in, p, csv);
  fmt::print("wrote {} and {}\n", out, csv);
  if (output.json) std::cout << plan_json(in, p, unplanned).dump() << std::endl;
  if (!p.feasible) {
    fmt::print(stderr, "mutwo: {} (the plan was written to {} anyway)\n", plan::infeasible_text(planned, options), out);
    return kExitInfeasible;
  }
  return 0;
}

}  // namespace mutwo::cli
