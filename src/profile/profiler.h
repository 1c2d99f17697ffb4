// The profiler: runs a training step a few times under the executor and
// records every node's time and memory into a Profile (phase 1 of mu-TWO).
#pragma once

#include <cstdint>
#include <string>

#include "ir/graph.h"
#include "profile/profile.h"

namespace mutwo::profile {

struct ProfileOptions {
  std::string device = "cpu";  // "cpu", "cuda", "cuda:N"
  int warmup = 1;              // unmeasured steps first (allocator and library warm-up)
  int iters = 3;               // measured steps; times are those of the median step
  uint64_t seed = 0;
  bool progress = true;        // "iteration i of N" lines on stderr
  std::string model;           // labels for the report
  int64_t batch = 0;
};

// Per node: time (steady clock on CPU; CUDA events on GPU), allocated bytes
// before and after, the high-water mark while it ran and so its workspace.
// Per value: bytes, role, lifetime in ranks and idle time. Throws UserError
// for a bad device.
Profile profile_step(const ir::Graph& g, const ProfileOptions& options);

}  // namespace mutwo::profile
