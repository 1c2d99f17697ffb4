// mutwo sweep and mutwo max-batch: memory and time against batch size, with
// and without checkpointing, measured. With --json, stdout ends with one JSON
// object, on failure too (then with "error").
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "ir/text.h"
#include "cli/pipeline.h"
#include "report/report.h"
#include "runtime/memory.h"
#include "support/error.h"
#include "support/files.h"
#include "support/units.h"

namespace mutwo::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Runs `body`. Where it throws and --json is on, stdout's last line is still
// one JSON object: `partial` (what the command found so far, which `body`
// fills) with "error", the message main prints on stderr; the exception goes
// on to main, which picks the exit code as without --json.
template <class Body>
int ending_in_json(bool json_out, json& partial, Body body) {
  try {
    return body();
  } catch (const std::exception& e) {
    if (json_out) {
      const auto* aten = dynamic_cast<const c10::Error*>(&e);
      partial["error"] = aten ? aten->what_without_backtrace() : e.what();
      std::cout << partial.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
    }
    throw;
  }
}

// The planners of --planners, in order ("none,per-layer,mutwo").
std::vector<std::string> planner_list(const std::string& planners) {
  std::vector<std::string> v;
  size_t pos = 0;
  while (pos <= planners.size()) {
    size_t c = planners.find(',', pos);
    v.push_back(planners.substr(pos, c == std::string::npos ? std::string::npos : c - pos));
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return v;
}

}  // namespace

void SweepCommand::add_to(CLI::App& app) {
  add_swap_flags(app);
  step.add_to(app, /*with_batch=*/false, /*with_graph=*/false);
  app.add_option("--batches", batches, "batch sizes, e.g. 8,16,32")->capture_default_str();
  planning.add_to(app, "budget for the planner at every batch: 60% (of that batch's activation memory; docs/budgets.md), "
                       "2GiB or lowest",
                  "planner to compare with the baseline and per-layer")
      ->capture_default_str();
  device.add_to(app);
  app.add_option("--steps", steps, "measured steps per point")->capture_default_str()->check(kPositive);
  app.add_option("--out", out, "directory for CSV, plots and report.md")->required();
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
  make_dirs(out);
  report::Sweep sw{step.model, dev.str(), planner, planning.budget, command_line(), {"baseline", "per-layer", planner}, {}};
  for (int64_t b : parse_int_list(batches)) {
    StepOptions s = step;
    s.batch = b;
    ir::Graph g = s.build();
    for (const std::string& v : {std::string("per-layer"), planner}) {
      if (!output.quiet) fmt::print(stderr, "sweep: batch {} {}\n", b, v);
      const ProfilingOptions po = ProfilingOptions::of(dev, device, false, step.model, b);
      plan::PlanOptions o = planning.plan_options();
      o.planner = v;
      if (v == "per-layer") o.budget = Budget::of_fraction(1.0);  // judged against the unplanned peak
      Planned p = plan_step(g, po, o);
      if (v == "per-layer" && p.profiled_under) {
        fmt::print(stderr, "sweep: batch {}: the unplanned step does not fit the device; no baseline point\n", b);
      } else if (v == "per-layer") {
        const Measured m = measure(p.input.graph, dev, seed, steps);
        sw.points.push_back({b, "baseline", 0, m.peak_bytes, p.unplanned_peak, m.step_ms, std::nullopt});
      }
      const Measured m = measure(p.rewritten.graph, dev, seed, steps);
      sw.points.push_back({b, v, p.plan.budget_bytes, m.peak_bytes, p.plan.predicted.peak_bytes, m.step_ms,
                           p.plan.feasible});
    }
  }
  fmt::print("{}", report::sweep_table(sw));
  report::write_sweep_dir(sw, out);
  if (output.json) {
    json rows = json::array();
    for (const auto& p : sw.points)
      rows.push_back({{"batch", p.batch}, {"variant", p.variant}, {"budget_bytes", p.budget_bytes},
                      {"peak_bytes", p.peak_bytes}, {"predicted_peak_bytes", p.predicted_peak_bytes},
                      {"step_ms", p.step_ms}, {"feasible", p.feasible ? json(*p.feasible) : json()}});
    std::cout << json{{"command", "sweep"}, {"points", rows}, {"out_dir", out}}.dump() << std::endl;
  }
  return 0;
}

void MaxBatchCommand::add_to(CLI::App& app) {
  add_swap_flags(app);
  step.add_to(app, /*with_batch=*/false, /*with_graph=*/false);
  app.add_option("--memory", memory,
                 "what the process may hold, e.g. 8GiB, or `free`: what the card has free now (the default on CUDA)")
      ->check(kSizeOrFree);
  app.add_option("--planners", planners, "planners to compare (none = no checkpointing)")->capture_default_str();
  device.add_to(app);
  app.add_option("--limit", limit, "largest batch to try")->capture_default_str()->check(kPositive);
  app.add_option("--out", out, "directory for each answer's rewritten step, PLANNER.ir (train it with run --graph)");
  output.add_to(app);
}

int MaxBatchCommand::run() const {
  json result{{"command", "max-batch"}, {"memory_bytes", nullptr}, {"model", step.model}, {"results", json::array()}};
  return ending_in_json(output.json, result, [&] { return search(result); });
}

// Fills `result`'s memory_bytes and, planner by planner, its results.
int MaxBatchCommand::search(nlohmann::json& result) const {
  for (const std::string& planner : planner_list(planners)) check_planner(planner);  // before any batch is tried
  c10::Device dev = device.open();
  const uint64_t seed = device.seed;
  MUTWO_CHECK(!memory.empty() || dev.is_cuda(), "max-batch on the CPU needs --memory (e.g. --memory 2GiB)");
  const int64_t cap = device_memory_bytes(dev, memory.empty() ? "free" : memory);
  result["memory_bytes"] = cap;
  json& rows = result["results"];
  fmt::print("| planner | largest batch | measured peak | device peak |\n|---|---|---|---|\n");
  for (const std::string& planner : planner_list(planners)) {
    // Device bytes of `planner` at batch b (0 if it does not fit `cap`). A
    // budget is what the device holds for the process: the plan's allocated
    // budget leaves room for what the CUDA context and libraries hold, and
    // when the measured device peak still passes the cap (the allocator's
    // fragmentation, workspaces), the overshoot comes off the budget and the
    // step is planned again, up to three times.
    struct Fit {
      int64_t peak = 0, device_peak = 0;  // allocated and device bytes; 0: does not fit
      std::string step;                   // the rewritten step, as IR text (--out)
    };
    auto fits = [&](int64_t b) -> Fit {
      StepOptions s = step;
      s.batch = b;
      if (!output.quiet) fmt::print(stderr, "max-batch: {} at batch {}\n", planner, b);
      const ir::Graph g = s.build();
      int64_t budget = cap - runtime::outside_allocator_bytes(dev);
      for (int attempt = 0; attempt < (planner == "none" ? 1 : 3) && budget > 0; ++attempt) {
        try {
          plan::PlanOptions o;
          o.planner = planner;
          o.budget = Budget::of_bytes(budget);
          Planned p = plan_step(g, ProfilingOptions::of(dev, device, false, step.model, b), o);
          if (planner != "none" && !p.plan.feasible) return {};
          const Measured m = measure(p.rewritten.graph, dev, seed, 2);
          if (m.device_peak_bytes <= cap && m.peak_bytes <= cap)
            return {m.peak_bytes, m.device_peak_bytes, out.empty() ? std::string() : ir::print(p.rewritten.graph)};
          budget -= m.device_peak_bytes - cap;
        } catch (const std::exception& e) {
          if (!runtime::is_out_of_memory(e)) throw;  // any other failure is an error, not a smaller batch
          runtime::release_cached_memory(dev);
          budget = budget / 20 * 19;  // out of memory: how far over is unknown
        }
      }
      return {};
    };
    int64_t lo = 0, hi = 1;
    Fit best;
    while (hi <= limit) {  // doubling
      const Fit f = fits(hi);
      if (!f.peak) break;
      lo = hi;
      best = f;
      hi *= 2;
    }
    if (hi > limit) hi = limit + 1;
    while (hi - lo > 1) {  // bisection between a fitting and a failing batch
      const int64_t mid = lo + (hi - lo) / 2;
      const Fit f = fits(mid);
      if (f.peak) {
        lo = mid;
        best = f;
      } else {
        hi = mid;
      }
    }
    // The bisection refused lo + 1; a batch 5% above the answer is tried on its
    // own as well, so that an answer that happens to sit below a batch that
    // fits after all (the search assumes fitting is monotone in the batch) shows.
    const int64_t above = std::max(lo + 1, (lo * 105 + 99) / 100);
    const bool above_fits = lo > 0 && above <= limit && fits(above).peak > 0;
    fmt::print("| {} | {} | {} | {} |\n", planner, lo, format_bytes(best.peak), format_bytes(best.device_peak));
    json r{{"planner", planner},       {"max_batch", lo},    {"peak_bytes", best.peak}, {"device_peak_bytes", best.device_peak},
           {"above_batch", above},     {"above_fits", above_fits}};
    if (above_fits)
      fmt::print(stderr, "max-batch: {} also fits batch {}, 5% above its answer {}: fitting is not monotone here\n", planner,
                 above, lo);
    if (!out.empty() && lo > 0) {
      make_dirs(out);
      const std::string path = out + "/" + planner + ".ir";
      write_file(path, best.step);
      r["step"] = path;
    }
    rows.push_back(r);
  }
  if (output.json) std::cout << result.dump() << std::endl;
  return 0;
}

}  // namespace mutwo::cli
