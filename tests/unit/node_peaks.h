// A node observer for memory tests: the allocator's peak during each node.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/executor.h"
#include "runtime/memory.h"

namespace mutwo::testing {

// Records the allocator's peak during each node (CPU).
struct NodePeaks : runtime::NodeObserver {
  std::vector<int64_t> peak;
  void before(size_t) override { runtime::reset_peak(c10::Device(c10::kCPU)); }
  void after(size_t) override { peak.push_back(runtime::memory_stats(c10::Device(c10::kCPU)).peak); }
};

}  // namespace mutwo::testing
