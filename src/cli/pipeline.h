// The whole pipeline for one training step, shared by optimize, sweep,
// max-batch and train: profile on the device -> plan -> rewrite (the last two
// plan::plan_and_rewrite, as for every front end) -> run and measure.
#pragma once

#include <c10/core/Device.h>

#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "analysis/arena.h"
#include "cli/common.h"
#include "ir/graph.h"
#include "plan/plan.h"
#include "plan/pipeline.h"
#include "plan/plan_file.h"
#include "profile/profiler.h"
#include "rewrite/recompute.h"
#include "runtime/arena.h"

namespace mutwo::cli {

struct Measured {
  int64_t peak_bytes = 0;           // allocated, the most over the measured steps
  int64_t reserved_peak_bytes = 0;  // reserved by the allocator, the most over the measured steps
  int64_t device_peak_bytes = 0;    // what the device held for the process: reserved + context and libraries
  int64_t leftover_bytes = 0;  // allocated before the step's own values (nothing, in a fresh process)
  double step_ms = 0;      // median
  double step_ms_min = 0, step_ms_max = 0;  // the fastest and slowest measured step
  std::vector<double> losses;
  std::optional<analysis::ArenaPlan> arena;  // with MeasureOptions::arena_workspace: the arena it ran from
  runtime::ArenaUse arena_use;               // ... and the most one step left to the allocator
};

struct MeasureOptions {
  int steps = 5;            // measured, after one warm-up step (two with cuda_graph: the third is captured)
  bool cuda_graph = false;  // CUDA: captured once, replayed
  // Served from its arena with these workspaces per node (prepare_arena's); none: from the allocator.
  std::optional<std::vector<int64_t>> arena_workspace{};
};

// The step measured from `seed` under fresh allocator statistics.
Measured measure(const ir::Graph& g, const c10::Device& device, uint64_t seed, const MeasureOptions& o);

// A step profiled on this process's device, then planned and rewritten
// (plan::PlannedStep), and:
struct PlannedOnDevice : plan::PlannedStep {
  // Set when the unplanned step ran out of memory (or was predicted to pass
  // --device-memory) and was profiled under the most recomputation instead:
  // that step, which fits, is then the reference of --check.
  std::optional<ir::Graph> profiled_under;
};

// Where and how a step is profiled for planning: plan_step's and
// apply_saved_plan's shared options.
struct ProfilingOptions {
  c10::Device device = c10::Device(c10::kCPU);
  uint64_t seed = 0;
  bool progress = false;     // progress lines on stderr
  std::string model;         // for plan.json and the profile
  int64_t batch = 0;         // 0: none (a --graph step)
  int64_t device_memory = 0;  // --device-memory: a predicted peak above it profiles under the most recomputation

  // A command's: on `dev` (opened by d.open()), from d's seed, under d's --device-memory cap.
  static ProfilingOptions of(const c10::Device& dev, const DeviceOptions& d, bool progress, std::string model,
                             int64_t batch) {
    return {dev, d.seed, progress, std::move(model), batch, d.memory_cap(dev)};
  }
};

// Profiles `g` on `o.device` (under the most recomputation when the unplanned
// step does not fit: out of memory, or a predicted peak above
// `o.device_memory`), then plans under `plan` and rewrites
// (plan::plan_and_rewrite), each rewrite pass shown to `passes.after`.
PlannedOnDevice plan_step(const ir::Graph& g, const ProfilingOptions& o, const plan::PlanOptions& plan,
                          const rewrite::PassOptions& passes);

// plan_step's first half, for a caller that plans one step many times
// (max-batch, each time on a copy, with plan::plan_and_rewrite): the step
// profiled for planning and prepared under `plan` (its swap, host limit and
// replay; plan::prepare).
PlannedOnDevice profile_for_plan(const ir::Graph& g, const ProfilingOptions& o, const plan::PlanOptions& plan);

// As plan_step, with a saved plan (plan.json, read by plan::read_plan from
// `saved_path`) instead of a planner: refused (UserError naming the file and
// what differs) before anything runs when it was made for another model,
// batch or graph, and after profiling when its activations are not the
// step's; judged against its own budget. `plan`: its swap and host limit
// for the step's input.
PlannedOnDevice apply_saved_plan(const ir::Graph& g, const ProfilingOptions& o, const plan::SavedPlan& saved,
                                 const std::string& saved_path, const plan::PlanOptions& plan,
                                 const rewrite::PassOptions& passes);

// The command line as the user typed it (for the reproduce line of reports).
std::string& command_line();
// The same, one argument each, argv[1] on (max-batch's search children take them again).
std::vector<std::string>& command_args();

}  // namespace mutwo::cli
