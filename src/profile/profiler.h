// The profiler: runs a training step a few times under the executor and
// records every node's time and memory into a Profile (phase 1 of mu-TWO).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "profile/profile.h"

namespace mutwo::runtime {
class Executor;
}

namespace mutwo::profile {

struct ProfileOptions {
  std::string device = "cpu";  // "cpu", "cuda", "cuda:N"
  int warmup = 1;              // unmeasured steps first (allocator and library warm-up)
  int iters = 3;               // measured steps; times are those of the median step
  uint64_t seed = 0;
  bool progress = true;        // "iteration i of N" lines on stderr
  std::string model;           // labels for the report
  int64_t batch = 0;
  // Fills the persistent values in place of Executor::initialize() (mutwo.torch
  // binds the user's tensors).
  std::function<void(runtime::Executor&)> initialize;
  // Live bytes of the graph's own tensors only: what the process held at the
  // step's start beyond the graph's persistent values is subtracted (in the
  // user's process, their optimizer state, data and anything else).
  bool graph_only = false;
};

// Per node: time (steady clock on CPU; CUDA events on GPU), allocated bytes
// before and after, the high-water mark while it ran and so its workspace.
// Per value: bytes, role, lifetime in ranks and idle time. Throws UserError
// for a bad device.
Profile profile_step(const ir::Graph& g, const ProfileOptions& options);

// The profile of `g` measured on `g` with `drop` (value ids of the graph as
// planners number it, plan::make_input's) recomputed (a step that fits
// where `g` does not): each node's time and workspace from its own run
// there, memory as the liveness analysis predicts for `g` plus what the
// device held beyond the graph's tensors. `rewritten` receives that step.
Profile profile_step_under(const ir::Graph& g, const std::vector<ir::ValueId>& drop, const ProfileOptions& options,
                           ir::Graph* rewritten = nullptr);

}  // namespace mutwo::profile
