// The generator state a recomputed random node replays (ops: rng_save and the
// attribute rng_replay): taken as a tensor where the forward node runs, put
// back around the recomputation, and the live state restored after it, so the
// rest of the step draws exactly what it draws unplanned.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>

#include "ir/graph.h"

namespace mutwo::kernels {

// The state of `gen` as rng_save's output, i64[ops::kRngStateWords] on the
// CPU: the CPU generator's own get_state() (the Mersenne Twister's 5056
// bytes), or CUDA's Philox seed and offset in the first two words. Refused
// while a CUDA graph is being captured (the offset is then the graph's).
at::Tensor save_rng_state(at::Generator gen);

// While alive, `gen` draws from `saved` (save_rng_state's tensor); after, it
// is back where it was, without allocating (the CPU engine and its cached
// normal samples are copied, not serialised), so a replayed node holds no
// memory beyond its outputs.
class ReplayedRngState {
 public:
  ReplayedRngState(at::Generator& gen, const at::Tensor& saved);
  ~ReplayedRngState();
  ReplayedRngState(const ReplayedRngState&) = delete;
  ReplayedRngState& operator=(const ReplayedRngState&) = delete;

 private:
  at::Generator& gen_;
  bool cuda_ = false;
  uint64_t seed_ = 0, offset_ = 0;  // CUDA
  std::optional<at::Generator> cpu_;  // CPU: a clone of the live generator
};

}  // namespace mutwo::kernels
