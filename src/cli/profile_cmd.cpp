// mutwo profile: measures one training step node by node and writes the
// profile (JSON, CSV), plots and a Chrome trace into --out DIR.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/ranks.h"
#include "ops/op.h"
#include "profile/profiler.h"
#include "report/report.h"
#include "runtime/memory.h"
#include "support/error.h"
#include "support/files.h"
#include "support/units.h"

namespace mutwo::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Time in the collective nodes (src/ops/comm.cpp): their launches, and the
// waits for what the backward pass did not cover; what overlapped is not in it.
double communication_ms(const profile::Profile& p) {
  double ms = 0;
  for (const auto& n : p.nodes)
    if (const ops::OpDef* d = ops::find_op(n.op); d && d->has(ops::kCollective)) ms += n.ms;
  return ms;
}

double share(int64_t part, int64_t whole) {
  return whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

void print_summary(const profile::Profile& p, const std::string& dir) {
  const auto& peak = p.nodes.at(static_cast<size_t>(p.peak_node));
  double gap = p.step_ms > 0 ? 100.0 * (p.node_ms_sum - p.step_ms) / p.step_ms : 0.0;
  fmt::print("{}: {} nodes, median step {:.2f} ms (nodes sum to {:.2f} ms, {:+.1f}%)\n", p.label(), p.nodes.size(),
             p.step_ms, p.node_ms_sum, gap);
  fmt::print("peak {} at node {} ({} -> %{}, {})", format_bytes(p.peak_bytes), p.peak_node, peak.op, peak.name,
             ir::to_string(peak.phase));
  if (p.device_peak_bytes) fmt::print("; the device held {} for the process", format_bytes(p.device_peak_bytes));
  fmt::print("\n");
  for (int r = 0; r < ir::kNumRoles; ++r) {
    int64_t b = p.peak_by_role[static_cast<size_t>(r)];
    if (b) fmt::print("  {:<16} {:>12}  {:5.1f}%\n", ir::to_string(static_cast<ir::Role>(r)), format_bytes(b), share(b, p.peak_bytes));
  }
  if (p.peak_workspace_bytes)
    fmt::print("  {:<16} {:>12}  {:5.1f}%\n", "workspace", format_bytes(p.peak_workspace_bytes),
               share(p.peak_workspace_bytes, p.peak_bytes));
  int n_act = 0;
  for (const auto& v : p.values) n_act += v.role == ir::Role::activation;
  fmt::print("{} activations; written to {}\n", n_act, dir);
  if (world_size() > 1)
    fmt::print("rank {} of {}: {:.2f} ms in collectives (launches, and waits the backward pass did not cover)\n",
               rank(), world_size(), communication_ms(p));
}

json summary_json(const profile::Profile& p, const std::string& dir) {
  return {{"model", p.model},
          {"batch", p.batch},
          {"device", p.device},
          {"peak_bytes", p.peak_bytes},
          {"peak_node", p.peak_node},
          {"device_peak_bytes", p.device_peak_bytes},
          {"activation_bytes_at_peak", p.activation_bytes_at_peak()},
          {"activation_share", p.peak_bytes ? static_cast<double>(p.activation_bytes_at_peak()) / static_cast<double>(p.peak_bytes) : 0.0},
          {"persistent_bytes", p.persistent_bytes},
          {"step_ms", p.step_ms},
          {"node_ms_sum", p.node_ms_sum},
          {"nodes", p.nodes.size()},
          {"communication_ms", communication_ms(p)},
          {"rank", rank()},
          {"world_size", world_size()},
          {"out_dir", dir}};
}

profile::Profile profile_one(const ProfileCommand& c, int64_t batch, const std::string& dir) {
  StepOptions step = c.step;
  step.batch = batch;
  ir::Graph g = step.build();
  profile::ProfileOptions o;
  o.device = c.device.name;
  o.iters = c.iters;
  o.warmup = c.warmup;
  o.seed = c.device.seed;
  o.progress = !c.output.quiet;
  o.model = step.name(g);
  o.batch = step.batch_or_none();
  profile::Profile p = profile::profile_step(g, o);
  report::write_profile_dir(p, dir, c.memory_snapshot);
  return p;
}

}  // namespace

void ProfileCommand::add_to(CLI::App& app) {
  step.add_to(app);
  app.add_option("--batches", batches, "profile several batch sizes, e.g. 8,16,32 (instead of --batch)");
  device.add_to(app);
  app.add_option("--iters", iters, "measured steps (times are those of the median step)")->capture_default_str()->check(kPositive);
  app.add_option("--warmup", warmup, "unmeasured steps first")->capture_default_str()->check(CLI::Range(0, 1000));
  app.add_option("--out", out, "directory for profile.json, CSVs, plots, trace.json and memory_snapshot.pickle")
      ->required();
  app.add_option("--memory-snapshot", memory_snapshot,
                 "write PyTorch's memory snapshot of the step (measured, then predicted) to this file instead of "
                 "OUT/memory_snapshot.pickle; view it with python -m torch.cuda._memory_viz trace_plot FILE -o page.html")
      ->excludes("--batches");
  output.add_to(app);
}

int ProfileCommand::run() const {
  if (!memory_snapshot.empty()) check_writable(memory_snapshot);  // before anything runs or is written
  device.open();  // checks --device, applies --device-memory; profile_one opens it by name
  make_dirs(out);
  if (batches.empty()) {
    profile::Profile p = profile_one(*this, step.batch, out);
    print_summary(p, out);
    if (output.json) std::cout << summary_json(p, out).dump() << std::endl;
    return 0;
  }
  std::vector<profile::Profile> ps;
  json rows = json::array();
  for (int64_t b : parse_int_list(batches)) {
    std::string dir = fmt::format("{}/batch_{}", out, b);
    ps.push_back(profile_one(*this, b, dir));
    print_summary(ps.back(), dir);
    rows.push_back(summary_json(ps.back(), dir));
  }
  report::plot_batches(ps, out);
  if (output.json) {
    json j = rows.back();
    j["profiles"] = rows;
    j["out_dir"] = out;
    std::cout << j.dump() << std::endl;
  }
  return 0;
}

}  // namespace mutwo::cli
