// The pipeline shared by optimize, sweep, max-batch and train (see pipeline.h).
#include "cli/pipeline.h"
#include "cli/ranks.h"

#include <fmt/format.h>

#include <algorithm>

#include "cli/commands.h"
#include "cli/common.h"
#include "ir/text.h"
#include "profile/profiler.h"
#include "runtime/executor.h"
#include "runtime/memory.h"
#include "analysis/liveness.h"
#include "support/units.h"
#include "support/error.h"

namespace mutwo::cli {

Measured measure(const ir::Graph& g, const c10::Device& device, uint64_t seed, const MeasureOptions& mo) {
  runtime::ExecutorOptions o{device, seed};
  o.cuda_graph = mo.cuda_graph;
  o.arena = mo.arena_workspace.has_value();
  if (o.arena) o.arena_workspace = *mo.arena_workspace;
  // What earlier work in this process left cached would change this step's
  // peak: start from a fresh process's allocator.
  runtime::release_cached_memory(device);
  Measured m;
  m.leftover_bytes = runtime::memory_stats(device).current;
  runtime::Executor ex(g, o);
  ex.initialize();
  for (int w = 0; w < (mo.cuda_graph ? 2 : 1); ++w) ex.step();  // warm-up: allocator caches and library handles
  std::vector<double> times;
  for (int s = 0; s < mo.steps; ++s) {
    runtime::StepResult r = ex.step();
    m.peak_bytes = std::max(m.peak_bytes, r.peak_bytes);
    m.reserved_peak_bytes = std::max(m.reserved_peak_bytes, r.reserved_peak_bytes);
    m.arena_use = runtime::most(m.arena_use, r.arena);
    times.push_back(r.ms);
    m.losses.push_back(rank_mean(r.outputs).at(0));  // on several ranks: the whole batch's loss
  }
  m.step_ms = median(times);
  if (!times.empty()) {
    m.step_ms_min = *std::min_element(times.begin(), times.end());
    m.step_ms_max = *std::max_element(times.begin(), times.end());
  }
  m.device_peak_bytes = m.reserved_peak_bytes + runtime::outside_allocator_bytes(device);
  if (ex.arena_plan()) m.arena = *ex.arena_plan();
  return m;
}

std::string& command_line() {
  static std::string line;
  return line;
}

std::vector<std::string>& command_args() {
  static std::vector<std::string> args;
  return args;
}

// Profiles `g` for planning (see plan_step): the plan input, its unplanned
// peak, and the step it was measured as when the unplanned one does not fit.
PlannedOnDevice profile_for_plan(const ir::Graph& g, const ProfilingOptions& so, const plan::PlanOptions& plan) {
  const c10::Device& device = so.device;
  const int64_t device_memory = so.device_memory;
  profile::ProfileOptions o;
  o.model = so.model;
  o.batch = so.batch;
  o.device = device.str();
  o.seed = so.seed;
  o.progress = so.progress;
  PlannedOnDevice p;
  std::optional<profile::Profile> prof;
  const bool predicted_over = device_memory > 0 && analysis::analyze_liveness(g).peak_bytes > device_memory;
  if (!predicted_over) {
    try {
      prof = profile::profile_step(g, o);
    } catch (const std::exception& e) {
      if (!runtime::is_out_of_memory(e)) throw;
      runtime::release_cached_memory(device);
    }
  }
  if (!prof) {
    if (so.progress)
      fmt::print(stderr, "profile: the unplanned step does not fit{}; profiling it under the most recomputation\n",
                 predicted_over ? fmt::format(" --device-memory {}", format_bytes(device_memory)) : std::string());
    ir::Graph most;
    prof = profile::profile_step_under(g, plan::lowest_drop(g, o.device), o, &most);
    p.profiled_under = std::move(most);
  }
  if (ranks()) {
    // Every rank plans from the same numbers, so every rank makes the same plan
    // (the planners are deterministic): node times are the mean over the
    // ranks; measured bytes (workspaces, and what the collectives' own buffers
    // add, Gloo's on the CPU) the largest.
    std::vector<double> ms, bytes;
    for (const profile::NodeRecord& n : prof->nodes) {
      ms.push_back(n.ms);
      for (int64_t b : {n.workspace_bytes, n.live_before, n.live_after, n.peak_during}) bytes.push_back(static_cast<double>(b));
    }
    ms = ranks()->mean(std::move(ms));
    bytes = ranks()->max(std::move(bytes));
    for (size_t i = 0; i < prof->nodes.size(); ++i) {
      profile::NodeRecord& n = prof->nodes[i];
      n.ms = ms[i];
      auto at = [&](size_t k) { return static_cast<int64_t>(bytes[4 * i + k]); };
      n.workspace_bytes = at(0);
      n.live_before = at(1);
      n.live_after = at(2);
      n.peak_during = at(3);
    }
  }
  static_cast<plan::PlannedStep&>(p) = plan::prepare(*prof, plan);
  return p;
}

PlannedOnDevice plan_step(const ir::Graph& g, const ProfilingOptions& o, const plan::PlanOptions& plan,
                          const rewrite::PassOptions& passes) {
  PlannedOnDevice p = profile_for_plan(g, o, plan);
  plan::plan_and_rewrite(p, plan, passes);
  return p;
}

PlannedOnDevice apply_saved_plan(const ir::Graph& g, const ProfilingOptions& o, const plan::SavedPlan& saved,
                                 const std::string& saved_path, const plan::PlanOptions& plan,
                                 const rewrite::PassOptions& passes) {
  plan::check_saved(saved, saved_path, o.model, o.batch, g);
  PlannedOnDevice p = profile_for_plan(g, o, plan);
  p.plan = plan::apply_saved(p.input, saved, saved_path);
  p.rewritten = plan::rewrite_plan(p.input, p.plan, passes);
  return p;
}

}  // namespace mutwo::cli
