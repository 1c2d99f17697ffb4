// The whole pipeline for one training step, shared by optimize, sweep and
// max-batch: profile -> plan -> rewrite -> run and measure.
#pragma once

#include <c10/core/Device.h>

#include <string>
#include <vector>

#include "ir/graph.h"
#include "plan/plan.h"
#include "rewrite/recompute.h"

namespace mutwo::cli {

struct Measured {
  int64_t peak_bytes = 0;           // allocated, the most over the measured steps
  int64_t reserved_peak_bytes = 0;  // reserved by the allocator, the most over the measured steps
  int64_t leftover_bytes = 0;  // allocated before the step's own values (nothing, in a fresh process)
  double step_ms = 0;      // median
  std::vector<double> losses;
};

// One warm-up step (two with cuda_graph: the third is captured), then `steps`
// measured ones, from `seed`.
Measured measure(const ir::Graph& g, const c10::Device& device, uint64_t seed, int steps, bool cuda_graph = false);

struct Planned {
  plan::PlanInput input;  // the profiled step (its graph is the baseline)
  int64_t unplanned_peak = 0;  // simulated, without recomputation
  plan::Plan plan;
  rewrite::Recomputed rewritten;
};

// Profiles `g` on `device`, plans under `budget` ("2GiB", "60%", ...) with `planner`, rewrites.
Planned plan_step(const ir::Graph& g, const c10::Device& device, uint64_t seed, const std::string& planner,
                  const std::string& budget, bool progress, const std::string& model, int64_t batch);

// The command line as the user typed it (for the reproduce line of reports).
std::string& command_line();

// Runs both graphs one step from the same state and compares the loss and
// every parameter gradient bit for bit; empty if equal, else what differs first.
std::string compare_bitwise(const ir::Graph& base, const ir::Graph& planned, const c10::Device& device,
                            uint64_t seed);

}  // namespace mutwo::cli
