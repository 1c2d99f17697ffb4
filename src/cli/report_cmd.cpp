// mutwo report: writes a saved profile's tables, trace and plots again (and,
// given the plan made from it, the plan's report.md), running nothing.
#include <fmt/format.h>

#include <optional>

#include "cli/commands.h"
#include "plan/plan.h"
#include "plan/plan_file.h"
#include "profile/profile.h"
#include "report/report.h"
#include "support/error.h"
#include "support/files.h"

namespace mutwo::cli {

void ReportCommand::add_to(CLI::App& app) {
  app.add_option("--profile", profile_path, "profile.json written by mutwo profile (or optimize)")->required();
  app.add_option("--plan", plan_path, "plan.json made from that profile: also write report.md, the planner's reasoning");
  app.add_option("--out", out, "directory for the CSVs, trace, plots and report.md")->required();
}

int ReportCommand::run() const {
  const profile::Profile prof = profile::read_profile(profile_path);
  std::optional<plan::SavedPlan> pf;
  if (!plan_path.empty()) {
    pf = plan::read_plan(plan_path);
    MUTWO_CHECK(pf->model == prof.model && pf->batch == prof.batch && pf->device == prof.device,
                "{} is a plan for {} batch {} on {}, but {} profiles {}; pass the profile the plan was made from",
                plan_path, pf->model, pf->batch, pf->device, profile_path, prof.label());
    size_t activations = 0;
    for (const auto& v : prof.values) activations += v.role == ir::Role::activation;
    MUTWO_CHECK(pf->activations.size() == activations,
                "{} lists {} activations, but {} has {}; pass the profile the plan was made from", plan_path,
                pf->activations.size(), profile_path, activations);
  }
  report::write_profile_reports(prof, out);
  if (pf) report::write_plan_report(prof, *pf, out);
  fmt::print("wrote the reports of {}{} to {}\n", profile_path, pf ? " and " + plan_path : std::string(), out);
  return 0;
}

}  // namespace mutwo::cli
