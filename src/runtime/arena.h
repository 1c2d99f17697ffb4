// The executor's arena: one allocation of the planned size (analysis/arena.h)
// on the device, and while a step runs, each node's outputs served at their
// planned offsets and its stated workspace from its own block, through the
// allocator hook (runtime/memory.h: AllocationSource). What the arena cannot
// serve (an allocation the plan does not name, a workspace past what the plan
// states, a block whose earlier tenant is still held) falls back to the
// device's allocator, and is counted.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "analysis/arena.h"
#include "runtime/memory.h"

namespace mutwo::runtime {

// Whether a step is served from an arena when the user says neither yes nor
// no (--arena, --no-arena, wrap(arena=)): on CUDA where a budget or a memory
// cap applies (`bounded`), since there the caching allocator's reserve and
// fragmentation are what a budget loses to; never on the CPU, where the
// arena's gaps only cost (docs/budgets.md). The CLI and mutwo.torch ask here.
inline bool arena_by_default(const c10::Device& device, bool bounded) { return device.is_cuda() && bounded; }

// One step's use of the arena.
struct ArenaUse {
  int64_t fallback_allocations = 0;  // allocations the device's allocator served instead
  int64_t fallback_bytes = 0;        // their bytes, summed
  int64_t moved_storages = 0;   // outputs made elsewhere (a same-sized temporary of their kernel held their block), copied there
  int64_t missed_storages = 0;  // planned storages that could not be at their offset: their block was still held
};

// Each count the larger of two steps'.
inline ArenaUse most(const ArenaUse& a, const ArenaUse& b) {
  return {std::max(a.fallback_allocations, b.fallback_allocations), std::max(a.fallback_bytes, b.fallback_bytes),
          std::max(a.moved_storages, b.moved_storages), std::max(a.missed_storages, b.missed_storages)};
}

class Arena final : public AllocationSource {
 public:
  // `plan` for graph `g` (analysis::plan_arena on g's liveness).
  Arena(const ir::Graph& g, analysis::ArenaPlan plan);
  ~Arena() override;

  // The arena's memory, one allocation on `device` (at first call; again after release()).
  void allocate(const c10::Device& device);
  // Serving node `n`'s allocations from now on.
  void begin_node(size_t n);
  // A node's outputs (storage owners) at their planned offsets: where their
  // kernel made them, or copied there once their block is free, or else
  // copied out to the allocator (counted as missed); those the plan leaves
  // out, out of the arena.
  void place(const std::vector<std::pair<ir::ValueId, at::Tensor*>>& outputs);
  // What this step used; resets the counts.
  ArenaUse take_use();

  const analysis::ArenaPlan& plan() const { return plan_; }

  void* take(size_t bytes) override;
  void give_back(void* p) override;

 private:
  struct Expected {
    int64_t offset, bytes, exact;  // exact: the value's own bytes, what its kernel asks for
  };
  bool free_range(int64_t offset, int64_t bytes) const;
  int64_t workspace_fit(int64_t bytes) const;
  bool placed(ir::ValueId v, const at::Tensor& t) const;
  bool in_arena(const at::Tensor& t) const;
  // A copy of `t` in `block` (offset, bytes); offset -2: from the allocator.
  at::Tensor copy_to(const at::Tensor& t, std::pair<int64_t, int64_t> block);
  bool move_home(ir::ValueId v, at::Tensor& t);  // to its block if free  // an offset in the node's workspace block, -1 if none is free
  void* serve(int64_t offset, int64_t bytes);

  analysis::ArenaPlan plan_;
  std::vector<std::vector<Expected>> expected_;  // per node: its outputs' storages
  std::vector<std::pair<int64_t, int64_t>> workspace_;  // per node: its workspace block (offset, bytes), offset -1 if none
  at::Tensor memory_;
  char* base_ = nullptr;
  std::mutex mu_;
  size_t node_ = 0;
  int64_t workspace_start_ = 0, workspace_end_ = 0;  // the current node's workspace block
  std::vector<int64_t> block_bytes_;                // per storage owner in the arena: its block's bytes
  std::pair<int64_t, int64_t> pinned_{-1, 0};       // the block the next allocation takes (copy_to), offset -1 none
  int64_t pinned_takes_ = 0;                        // allocations served at a pinned block (move_home's check)
  std::map<int64_t, int64_t> live_;                 // served now: offset -> end
  ArenaUse use_;
};

}  // namespace mutwo::runtime
