// The swap rewrite, for steps recomputation alone cannot fit: a storage idle across a gap in the step is
// copied to host memory after its last read before the gap and copied back
// ahead of its first read after it, so the device does not hold it between.
//
// The gap of a storage: from its last read (or its making) in the part of the
// step that makes it to its first read in a later part. Parts: the forward
// part (forward and loss nodes), the backward part (backward and recompute
// nodes), the optimizer. An activation's gap is the forward-to-backward one;
// a parameter gradient's, from its making in the backward pass to the
// optimizer node that reads it. Optimizer state (momentum, Adam's moments) is
// idle from one step's update to the next's: kept in host memory between
// steps, it is copied to the device ahead of its update (`swap_in` of the
// persistent value itself) and written back after it (`swap_into`), as
// ZeRO-Offload keeps optimizer state on the host.
//
// Contract:
//   before: a verified training-step graph, recomputation already inserted
//           (insert_recomputation): the clones' reads are part of the gaps.
//           `swap` names storage owners that swappable() accepts.
//   after:  a verified graph; value ids unchanged, swap values appended:
//             %x.host  = swap_out(%x)        right after the gap's first end
//             %x.back  = swap_in(%x.host)    at the prefetch point
//             %x.ready = swap_wait(%x.back)  before the first read after the gap
//           (for optimizer state: no swap_out; `swap_into(%m.ready, %m)`
//           right after the node that updates it)
//           and every read after the gap reads %x.ready (a view of %x that a
//           later read names is made again from it: its view node cloned).
//           The new values' role is `other` (a role says where a value is
//           made: ir::verify); analysis::charged_roles charges %x.back to %x's.
//   A multi-tensor optimizer node (sgd_step, adam_step) that reads swapped
//   gradients is split first: one node for the parameters whose gradients
//   stay, then one per bucket of swapped gradients and state (about
//   kOptimizerBucket bytes, or an eighth of what is swapped where less; in the order the backward pass made them), so the device holds one
//   bucket of them at a time. The arithmetic per parameter is unchanged.
//   The prefetch point: as late as the copy back still lands before the first
//   read after the gap, given the nodes' times, the host-to-device bandwidth
//   and the copies queued behind it on the one copy-back stream (as late as
//   possible: the device holds %x.back from there). Never before the swap_out.
#pragma once

#include <cstdint>
#include <vector>

#include "analysis/liveness.h"
#include "ir/graph.h"
#include "rewrite/recompute.h"

namespace mutwo::rewrite {

struct Gap {
  int32_t before = -1;  // last read (or the making) in the part that makes the storage
  int32_t after = -1;   // first read in a later part; -1: none, nothing to swap
  bool overwritten = false;  // a node writes over the storage in place (kOverwrite)
};
// The gap of every storage of `g` (L: its liveness), indexed by owner; one pass.
std::vector<Gap> swap_gaps(const ir::Graph& g, const analysis::Liveness& L);

// A storage the rewrite can swap: made by a node (not persistent, not a host
// copy, not a graph output), with a gap, and never written over in place
// (kOverwrite: a view made again from the copy would hold other bytes); or
// optimizer state that only multi-tensor optimizer nodes read.
bool swappable(const ir::Graph& g, const analysis::Liveness& L, const std::vector<Gap>& gaps, ir::ValueId owner);

inline constexpr int64_t kOptimizerBucket = int64_t{64} << 20;

struct SwapTiming {
  std::vector<double> node_ms;  // per node of the graph rewritten
  double h2d_bytes_per_ms = 0;  // 0: the copy back starts right before it is needed
};

// Where a copy back of `copy_ms` that must land by `land_by` (a time on
// `start`: start[n] is when node n starts, nodes back to back) starts: before
// the last node starting at or before land_by - copy_ms, clamped to
// (before, read]. The rewrite places every swap_in so (after the copies queued
// behind it), and the optimal planner's model so (alone on the stream).
int32_t prefetch_point(const std::vector<double>& start, double land_by, double copy_ms, int32_t before, int32_t read);

// `r` with the storages in `swap` swapped; origin maps swap nodes to -1.
Rewritten insert_swaps(const Rewritten& r, const std::vector<ir::ValueId>& swap, const SwapTiming& timing);

}  // namespace mutwo::rewrite
