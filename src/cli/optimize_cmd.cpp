// mutwo optimize: profile, plan, rewrite, then train with the rewritten step,
// measured against the baseline; optionally checks gradients bit for bit.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include "cli/arena_output.h"
#include "cli/check.h"
#include "cli/commands.h"
#include "cli/ranks.h"
#include "cli/pipeline.h"
#include "ir/text.h"
#include "profile/profiler.h"
#include "report/report.h"
#include "report/snapshot.h"
#include "runtime/memory.h"
#include "support/error.h"
#include "support/files.h"
#include "support/units.h"
#include "plan/plan_file.h"

namespace mutwo::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The plan (plan.json, plan.csv), the profile it was planned on and the
// rewritten step under `out`, and the before/after memory snapshot at
// `snapshot` (empty: in `out`).
void write_plan_files(const PlannedOnDevice& p, const std::string& out, const std::string& snapshot) {
  plan::write_plan_json(p.input, p.plan, p.unplanned_peak, out + "/plan.json");
  report::write_memory_snapshot(report::plan_memory(p.input, p.plan),
                                snapshot.empty() ? out + "/" + report::kPlanSnapshot : snapshot);
  plan::write_plan_csv(p.input, p.plan, out + "/plan.csv");
  profile::write_profile(p.input.profile, out + "/profile.json");  // for mutwo report --profile --plan
  write_file(out + "/rewritten.ir", ir::print(p.rewritten.graph));
}

// Profiles the rewritten step once more, for its own timeline, and plots it
// beside the profile the plan was made from (the before/after plots under `out`).
void profile_planned_and_plot(const PlannedOnDevice& p, c10::Device dev, uint64_t seed, const std::string& name,
                              int64_t batch, const std::string& out) {
  const ir::Graph& planned = p.rewritten.graph;
  profile::ProfileOptions po;
  po.device = dev.str();
  po.seed = seed;
  po.iters = 1;
  po.progress = false;
  po.model = name;
  po.batch = batch;
  profile::Profile prof_after = profile::profile_step(planned, po);
  profile::Profile prof_before = p.input.profile;
  report::plot_before_after(prof_before, prof_after, p.plan.budget_bytes, out);
}

// What optimize measured, for its JSON line.
struct Measurements {
  std::string name;              // --model, or the captured step's name
  Measured baseline;             // empty when it does not fit
  Measured planned;
  bool baseline_fits = false;    // the unplanned step fits the device, and was measured
  bool fits = false;             // the planned step's measured peak is at or under the budget
  Check check;                   // status "skipped" without --check
  const char* reference_name = "";  // what --check compared with: "unplanned" or "most-recomputation"
};

// A measured step as the report's plain data; `ran` false: it did not fit and was not run.
report::StepMeasurement step_measurement(const Measured& m, bool ran) {
  report::StepMeasurement s;
  s.measured = ran;
  s.peak_bytes = m.peak_bytes;
  s.reserved_peak_bytes = m.reserved_peak_bytes;
  s.step_ms = m.step_ms;
  s.last_loss = ran ? m.losses.back() : 0.0;
  s.step_ms_min = m.step_ms_min;
  s.step_ms_max = m.step_ms_max;
  s.steps = static_cast<int>(m.losses.size());
  return s;
}

// The check's measured noise for the JSON line: null where the reference did not run twice.
json noise_json(const Check& c) {
  if (!c.noise) return json();
  return {{"tensor", c.noise->tensor}, {"absolute", c.noise->absolute}, {"relative", c.noise->relative}};
}

// The before/after summary optimize prints and report.md holds, on `device`.
report::OptimizeSummary optimize_summary(const OptimizeCommand& cmd, const PlannedOnDevice& p, const std::string& device,
                                         const Measurements& r) {
  report::OptimizeSummary s;
  s.what = cmd.step.what();
  s.device = device;
  s.plan = p.plan;
  s.unplanned_peak = p.unplanned_peak;
  s.dropped_bytes = plan::dropped_bytes(p.input.graph, p.plan);
  s.baseline = step_measurement(r.baseline, r.baseline_fits);
  s.planned = step_measurement(r.planned, true);
  s.check = r.check.status;
  s.command = command_line();
  return s;
}

json optimize_json(const OptimizeCommand& cmd, const PlannedOnDevice& p, const report::OptimizeSummary& s,
                  const Measurements& r) {
  const Measured &mb = r.baseline, &mp = r.planned;
  const bool baseline_fits = r.baseline_fits;
  json j{{"command", "optimize"},
         {"model", r.name},
         {"batch", cmd.step.graph.empty() ? json(cmd.step.batch) : json()},
         {"graph", cmd.step.graph},
         {"device", s.device},
         {"planner", p.plan.planner},
         {"cuda_graph", cmd.cuda_graph},
         {"budget_bytes", p.plan.budget_bytes},
         {"baseline",
          {{"peak_bytes", baseline_fits ? json(mb.peak_bytes) : json()},
           {"reserved_peak_bytes", baseline_fits ? json(mb.reserved_peak_bytes) : json()},
           {"device_peak_bytes", baseline_fits ? json(mb.device_peak_bytes) : json()},
           {"leftover_bytes", baseline_fits ? json(mb.leftover_bytes) : json()},
           {"step_ms", baseline_fits ? json(mb.step_ms) : json()},
           {"predicted_peak_bytes", p.unplanned_peak},
           {"losses", mb.losses},
           {"fits", baseline_fits}}},
         {"planned",
          {{"peak_bytes", mp.peak_bytes},
           {"reserved_peak_bytes", mp.reserved_peak_bytes},
           {"device_peak_bytes", mp.device_peak_bytes},
           {"leftover_bytes", mp.leftover_bytes},
           {"step_ms", mp.step_ms},
           {"predicted_peak_bytes", p.plan.predicted.peak_bytes},
           {"predicted_extra_ms", p.plan.predicted.extra_ms},
           {"losses", mp.losses},
           {"dropped", p.plan.drop.size()},
           {"dropped_bytes", s.dropped_bytes},
           {"swapped", p.plan.swap.size()},
           {"swapped_bytes", plan::swapped_bytes(p.input.graph, p.plan)},
           {"replayed", plan::replayed_random(p.input, p.plan).size()},
           {"host_peak_bytes", p.plan.predicted.host_peak_bytes},
           {"predicted_swap_ms", p.plan.predicted.swap_ms},
           {"arena", mp.arena.has_value()}}},
         {"arena", mp.arena.has_value()},
         {"arena_from", cmd.arena.from()},
         {"fits", r.fits},
         {"feasible", p.plan.feasible},
         {"check", r.check.status},
         {"check_reference", r.reference_name},
         {"check_noise", noise_json(r.check)},
         {"check_noise_multiple", kCheckNoiseMultiple},
         {"out_dir", cmd.out}};
  add_rank_json(j);
  if (world_size() > 1) j["shard_optimizer"] = cmd.step.shard_optimizer;
  if (mp.arena) add_arena_json(j["planned"], *mp.arena, mp.arena_use);
  return j;
}

}  // namespace

void OptimizeCommand::add_to(CLI::App& app) {
  planning.swap.add_to(app);
  step.add_to(app);
  CLI::Option* b = planning.add_to(app, "memory budget: 2GiB, 1500MiB, 60% (of the activation memory; docs/budgets.md) or "
                                        "lowest (required unless --plan)");
  app.add_option("--plan", plan_path,
                 "apply this saved plan.json (from plan or optimize) instead of planning, under its own budget; "
                 "refused when it was made for another model, batch or graph")
      ->check(CLI::ExistingFile)
      ->excludes(b)
      ->excludes("--planner");
  device.add_to(app);
  app.add_option("--steps", steps, "training steps measured for each of baseline and plan")
      ->capture_default_str()
      ->check(kPositive);
  app.add_option("--out", out, "directory for the plan, rewritten graph, plots, report.md and memory_before_after.pickle")
      ->required();
  app.add_option("--memory-snapshot", memory_snapshot,
                 "write PyTorch's memory snapshot of the unplanned and the planned step, as predicted, to this file "
                 "instead of OUT/memory_before_after.pickle; view it with python -m torch.cuda._memory_viz trace_plot "
                 "FILE -o page.html");
  app.add_flag("--check", check, "also compare loss and every gradient bit for bit with the unplanned step");
  app.add_flag("--cuda-graph", cuda_graph, "CUDA: time baseline and plan as captured CUDA graphs (the check runs without)");
  arena.add_to(app, "the planned step when measured", "the baseline stays with the allocator; not with --cuda-graph");
  output.add_to(app);
}

int OptimizeCommand::run() const {
  MUTWO_CHECK(!planning.budget.empty() || !plan_path.empty(),
              "--budget is required (or --plan plan.json to apply a saved plan); e.g. --budget 60%");
  // A saved plan is read and checked before anything is built or run.
  const std::optional<plan::SavedPlan> saved =
      plan_path.empty() ? std::nullopt : std::optional<plan::SavedPlan>(plan::read_plan(plan_path));
  if (!memory_snapshot.empty()) check_writable(memory_snapshot);  // before anything runs or is written
  MUTWO_CHECK(!arena.on || !cuda_graph, "{}", runtime::kArenaWithCudaGraph);
  c10::Device dev = device.open();
  const bool use_arena = arena.resolve(dev, /*bounded=*/!cuda_graph);  // a budget, or a saved plan's
  std::optional<runtime::SideStream> side;
  if (cuda_graph) side.emplace(dev);  // profile, measurements and captures on one stream: one set of library workspaces
  make_dirs(out);
  ir::Graph g = step.build();
  const std::string name = step.name(g);
  const uint64_t seed = device.seed;
  const ProfilingOptions po = ProfilingOptions::of(dev, device, !output.quiet, name, step.batch_or_none());
  plan::PlanOptions options = planning.plan_options(!output.quiet);
  options.replay_random = !cuda_graph;
  const rewrite::PassOptions passes = step.dump_ir_after.rewrite_passes();
  PlannedOnDevice p = saved ? apply_saved_plan(g, po, *saved, plan_path, options, passes) : plan_step(g, po, options, passes);
  MeasureOptions planned_options{steps, cuda_graph};
  if (use_arena) {  // refused over --device-memory (exit 3) before measuring; planned again where the arena passes the budget
    runtime::ExecutorOptions ao{dev, seed};
    ao.arena = true;
    if (int rc = fit_plan_to_arena(p, options, passes, !saved, ao); rc != 0) return rc;
    planned_options.arena_workspace = std::move(ao.arena_workspace);
  }
  const std::string& planner_used = p.plan.planner;  // --planner, or the saved plan's
  const ir::Graph& base = p.input.graph;
  const ir::Graph& planned = p.rewritten.graph;
  Measurements r;
  r.name = name;
  // Where the unplanned step does not fit, it is neither measured nor the
  // reference of --check: the step under the most recomputation is.
  const bool baseline_fits = r.baseline_fits = !p.profiled_under;
  // The reference runs the vocabulary loss in the plan's chunks: a chunk's
  // size changes how cuBLAS sums its products, so on CUDA the unplanned step's
  // default chunks can differ from the plan's in the last bits of the head's
  // gradients (test_vocab_loss checks chunking against autograd; --check,
  // what the recomputation rewrite changes, bit for bit).
  const ir::Graph chunked_base = plan::chunked_graph(base, p.plan);
  const ir::Graph& reference = baseline_fits ? chunked_base : *p.profiled_under;
  r.reference_name = baseline_fits ? "unplanned" : "most-recomputation";
  if (!output.quiet)
    fmt::print(stderr, "optimize: measuring {}the plan, {} steps{}\n", baseline_fits ? "the baseline and " : "", steps,
               baseline_fits ? " each" : " (the baseline does not fit)");
  r.baseline = baseline_fits ? measure(base, dev, seed, {steps, cuda_graph}) : Measured{};
  r.planned = measure(planned, dev, seed, planned_options);
  const Measured &mb = r.baseline, &mp = r.planned;
  r.check = check ? check_steps(reference, planned, {dev, seed, {}}) : Check{"skipped", "", std::nullopt};
  const std::string& check_result = r.check.status;
  const std::string& check_detail = r.check.detail;
  const bool fits = r.fits = mp.peak_bytes <= p.plan.budget_bytes;

  // What was written: the plan, the rewritten graph, both measured timelines, the report.
  write_plan_files(p, out, memory_snapshot);
  profile_planned_and_plot(p, dev, seed, name, step.batch_or_none(), out);

  const report::OptimizeSummary summary = optimize_summary(*this, p, dev.str(), r);
  const std::string table = report::optimize_table(summary);
  fmt::print("mutwo optimize: {} on {}, planner {}\n{}", step.what(), dev.str(), planner_used, table);
  fmt::print("measured peak {} the budget; bitwise check: {}{}{}\n", fits ? "fits" : "EXCEEDS", check_result,
             check_detail.empty() ? "" : " (" + check_detail + ")",
             check && !baseline_fits ? " against the most-recomputation step (the unplanned one does not fit)" : "");
  if (!p.plan.note.empty()) fmt::print("note: {}\n", p.plan.note);
  if (mp.arena) fmt::print("planned step's {}\n", arena_line(*mp.arena, mp.arena_use));
  fmt::print("{}", report::optimize_details(summary, p.input, 5));
  for (const Measured* m : {&mb, &mp})
    if (m != &mb || baseline_fits)
    if (std::string note = fragmentation_note(m->peak_bytes, m->reserved_peak_bytes); !note.empty())
      fmt::print("{} ({}): {}\n", m == &mb ? "baseline" : "planned", dev.str(), note);

  report::write_optimize_report(summary, p.input, out);

  if (output.json) std::cout << optimize_json(*this, p, summary, r).dump() << std::endl;
  if (check && check_result == "failed") {
    fmt::print(stderr, "mutwo: bitwise check FAILED: {}\n", check_detail);
    return 1;
  }
  if (!p.plan.feasible) {
    fmt::print(stderr, "mutwo: {} (its plan was run and written to {} anyway)\n", plan::infeasible_text(p, options), out);
    return kExitInfeasible;
  }
  return 0;
}

}  // namespace mutwo::cli
