// The step's device memory planned ahead: one arena, and an offset in it for
// every storage the step allocates, from the liveness analysis (liveness.h),
// so that what the device reserves is what the plan says. Best-fit offset
// assignment as static-graph compilers do it (TFLite's greedy by size, XLA's
// heap simulator), tried in a few orders, the smallest arena kept. Plain
// data: the executor (runtime/arena.h) serves allocations from it.
//
// What is in the arena: every storage a node makes on the device (a view
// shares its storage's block), from the node making it to the last node
// reading any value in it, and each node's stated workspace for that node
// alone. What is not: persistent state (allocated before the step, kept
// across steps), host memory (swap_out's copies), and the storages swap_out
// and swap_into copy from, which the caching allocator holds until the copy on its side
// stream is done, a time the node order does not give.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/liveness.h"
#include "ir/graph.h"

namespace mutwo::analysis {

struct ArenaOptions {
  int64_t alignment = 64;          // every offset and block size a multiple of it (CPU 64, CUDA 512)
  std::vector<int64_t> workspace;  // per node: bytes its kernel takes beyond its outputs; empty: none
};

// One block: a storage (owner) or a node's workspace (owner kNoValue), live
// from node `first` to node `last`, both included.
struct ArenaBlock {
  ir::ValueId owner = ir::kNoValue;
  int32_t first = 0, last = 0;
  int64_t bytes = 0;  // rounded up to the alignment
  int64_t offset = -1;
};

struct ArenaPlan {
  std::vector<ArenaBlock> blocks;
  std::vector<int64_t> offset;            // per value: its storage's offset; -1 outside the arena
  std::vector<int64_t> workspace_offset;  // per node: its workspace block's offset; -1 none
  int64_t bytes = 0;                      // the arena's size
  int64_t live_peak_bytes = 0;            // the most block bytes live at one node: no arena is smaller
  int64_t alignment = 64;
  int32_t left_out = 0;                   // storages left to the allocator by the rules above (swap_out's)
  std::string order;                      // the placement order that gave the smallest arena
};

// Offsets for `g`'s step under `L` (analyze_liveness(g)).
ArenaPlan plan_arena(const ir::Graph& g, const Liveness& L, const ArenaOptions& o = {});

// Two blocks live at one node whose byte ranges overlap, or a block past the
// arena's end, described; empty when there are none (the property tests' check).
std::string arena_conflict(const ArenaPlan& a);

}  // namespace mutwo::analysis
