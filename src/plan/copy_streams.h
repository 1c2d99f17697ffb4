// The one rule for when a copy to host memory pays (docs/planners.md,
// "Swaps"), for both routes: the CLI's greedy swaps storages of the executor's
// graph with it (mutwo.cpp), and the compiled route offloads saved tensors
// with it (compiled.h, offload_order). Two copy streams, one each way, run
// under the nodes' compute: a copy out fills its stream from the start of its
// gap forward, a copy back from the end of its gap backward. What the compute
// cannot hide is the copy's cost; the simulator (or the compiled route's
// phase walk) then accounts the memory at the positions the copies take.
#pragma once

#include <cstdint>
#include <vector>

namespace mutwo::plan {

// A storage's idle stretch: its last read (or its making) before, its first
// read after; the copy out runs in (before, after), the copy back too.
struct CopyGap {
  int32_t before = -1;  // -1: live from the step's start (optimizer state): nothing hides its copy out
  int32_t after = -1;
};

// Where a taken copy sits: the node under which the copy out ends (the
// storage's device bytes are free after it) and the node under which the
// copy back starts (its device bytes are live again from it).
struct CopyPlaced {
  int32_t out_done = -1;
  int32_t in_start = -1;
};

class CopyStreams {
 public:
  // `node_ms`: each node's compute time, in run order; copy rates in bytes per
  // millisecond each way; `overlap`: false where the copies serialise with compute.
  CopyStreams(std::vector<double> node_ms, double d2h_bytes_per_ms, double h2d_bytes_per_ms, bool overlap);

  // Milliseconds of a copy out and back of `bytes` that the gap cannot hide,
  // given the copies taken so far.
  double cost(int64_t bytes, const CopyGap& gap) const;
  // The copy taken: its time fills the streams' free time under the gap's nodes.
  CopyPlaced take(int64_t bytes, const CopyGap& gap);

 private:
  void sum();
  std::vector<double> out_free_, in_free_, out_sum_, in_sum_;
  double d2h_, h2d_;
  bool overlap_;
};

// A swap's worth, as the greedy ranks it: bytes freed per millisecond it
// costs. A copy the compute hides entirely still occupies the bus: a 1 us floor.
double swap_ratio(int64_t bytes, double cost_ms);

}  // namespace mutwo::plan
