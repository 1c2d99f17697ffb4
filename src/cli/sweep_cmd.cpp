// mutwo sweep: memory and time against batch size, with and without
// checkpointing, measured. With --json, stdout ends with one JSON object, on
// failure too (then with "error").
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/arena_output.h"
#include "cli/commands.h"
#include "cli/ending_in_json.h"
#include "ir/text.h"
#include "cli/pipeline.h"
#include "report/report.h"
#include "runtime/memory.h"
#include "support/error.h"
#include "support/files.h"
#include "support/progress.h"
#include "support/units.h"

namespace mutwo::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

}  // namespace

void SweepCommand::add_to(CLI::App& app) {
  planning.swap.add_to(app);
  step.add_to(app, /*with_batch=*/false, /*with_graph=*/false);
  app.add_option("--batches", batches, "batch sizes, e.g. 8,16,32")->capture_default_str();
  planning.add_to(app, "budget for the planner at every batch: 60% (of that batch's activation memory; docs/budgets.md), "
                       "2GiB or lowest",
                  "planner to compare with the baseline and per-layer")
      ->capture_default_str();
  device.add_to(app);
  app.add_option("--steps", steps, "measured steps per point")->capture_default_str()->check(kPositive);
  app.add_option("--out", out, "directory for CSV, plots and report.md")->required();
  arena.add_to(app, "each planned point's step when measured", "the baselines stay with the allocator");
  output.add_to(app);
}

int SweepCommand::run() const {
  json partial{{"command", "sweep"}, {"out_dir", out}};
  return ending_in_json(output.json, partial, [&] { return sweep(); });
}

int SweepCommand::sweep() const {
  c10::Device dev = device.open();
  const uint64_t seed = device.seed;
  const std::string& planner = planning.planner;
  const bool use_arena = arena.resolve(dev, /*bounded=*/true);  // every point is planned under --budget
  make_dirs(out);
  report::Sweep sw{step.model, dev.str(), planner, planning.budget, command_line(), {"baseline", "per-layer", planner}, {}};
  // Progress: each point's cost as its batch times its plain steps (a
  // profile's 1 + 3, a measurement's 1 + --steps).
  Progress progress("sweep", {!output.quiet});
  const std::vector<int64_t> bs = parse_int_list(batches);
  for (int64_t b : bs) progress.expect(static_cast<double>(b) * (2 * 4 + 3 * (1 + steps)));
  for (int64_t b : bs) {
    StepOptions s = step;
    s.batch = b;
    ir::Graph g = s.build();
    for (const std::string& v : {std::string("per-layer"), planner}) {
      progress.step(fmt::format("batch {} {}", b, v), static_cast<double>(b) * (4 + (1 + steps) * (v == planner ? 1 : 2)));
      const ProfilingOptions po = ProfilingOptions::of(dev, device, false, step.model, b);
      plan::PlanOptions o = planning.plan_options(!output.quiet);
      o.planner = v;
      if (v == "per-layer") o.budget = Budget::of_fraction(1.0);  // judged against the unplanned peak
      PlannedOnDevice p = plan_step(g, po, o, step.dump_ir_after.rewrite_passes());
      if (v == "per-layer" && p.profiled_under) {
        progress.warn(fmt::format("sweep: batch {}: the unplanned step does not fit the device; no baseline point", b));
      } else if (v == "per-layer") {
        const Measured m = measure(p.input.graph, dev, seed, {steps});
        sw.points.push_back({b, "baseline", 0, m.peak_bytes, p.unplanned_peak, m.step_ms, std::nullopt});
      }
      MeasureOptions mo{steps};
      if (use_arena) {  // its workspaces measured first; an arena over --device-memory exits 3
        runtime::ExecutorOptions ao{dev, seed};
        ao.arena = true;
        if (int rc = prepare_arena(p.rewritten.graph, ao); rc != 0) return rc;
        mo.arena_workspace = std::move(ao.arena_workspace);
      }
      const Measured m = measure(p.rewritten.graph, dev, seed, mo);
      sw.points.push_back({b, v, p.plan.budget_bytes, m.peak_bytes, p.plan.predicted.peak_bytes, m.step_ms,
                           p.plan.feasible});
    }
  }
  progress.done();
  fmt::print("{}", report::sweep_table(sw));
  report::write_sweep_dir(sw, out);
  if (output.json) {
    json rows = json::array();
    for (const auto& p : sw.points)
      rows.push_back({{"batch", p.batch}, {"variant", p.variant}, {"budget_bytes", p.budget_bytes},
                      {"peak_bytes", p.peak_bytes}, {"predicted_peak_bytes", p.predicted_peak_bytes},
                      {"step_ms", p.step_ms}, {"feasible", p.feasible ? json(*p.feasible) : json()}});
    std::cout << json{{"command", "sweep"}, {"points", rows}, {"out_dir", out}, {"arena", use_arena},
                      {"arena_from", arena.from()}}
                     .dump()
              << std::endl;
  }
  return 0;
}

}  // namespace mutwo::cli
