// The data-parallel pass: one rank's training step from a one-process step,
// with the gradient communication as graph nodes (ops in src/ops/comm.cpp), so
// that liveness, the simulator and the planners see the buckets and shards and
// the budget is per rank. ATen-free; runtime/process_group.h runs the collectives.
#pragma once

#include <cstdint>

#include "ir/graph.h"

namespace mutwo::dist {

struct DataParallelOptions {
  int64_t world = 1;                    // ranks
  int64_t bucket_bytes = int64_t{25} << 20;  // gradients per bucket, at most (one tensor may exceed it alone), as DDP
  bool shard_optimizer = false;         // ZeRO stages 1 and 2: reduce-scatter, sharded state, all-gather
};

// Takes a verified training step at the per-rank batch B (one optimizer node,
// as autodiff::append_optimizer makes it) and returns one rank's step:
// - every graph input (role input) is made at N*B rows, drawn from the same
//   seed as a one-process step at batch N*B draws it, and a first node
//   `shard_rows` takes the rank's rows [r*B, (r+1)*B) (a view) for the step;
// - gradients are grouped into buckets of at most bucket_bytes in the order
//   the backward pass makes them; right after a bucket's last gradient, a
//   start node copies them into one flat tensor, divides by N and launches the
//   sum over the ranks; before the optimizer a wait node finishes it;
// - unsharded: `allreduce_start` ... `allreduce_wait` (the mean gradients as
//   views of the bucket) and the optimizer step as before;
// - sharded: `reduce_scatter_start` ... `reduce_scatter_wait` (the rank's
//   slice of the bucket's mean; the wait comes right after the next bucket's
//   start, so at most two full buckets are live, as ZeRO-2 wants), `flat_shard` (the rank's slice of the
//   flattened parameters copied into a persistent value, optimizer state as
//   ZeRO counts it), the optimizer step on the slices with optimizer state
//   only for the slice (the per-parameter state values are gone), then
//   `all_gather` and `unflatten_into`, which write the parameters back.
// Inputs read from a tensor file (init=data, a captured step) hold one batch:
// refused (UserError). The result is verified; roles are kept (buckets and
// gradient shards are gradients, gathered buckets other).
// Run before planning: the recompute rewrite comes after and leaves the
// collectives alone (ops::recomputable).
ir::Graph data_parallel(const ir::Graph& step, const DataParallelOptions& options);

}  // namespace mutwo::dist
