// The recomputation rewrite (phase 3 of mu-TWO): for every dropped activation,
// clone the subgraph that recomputes it into the backward pass, just before its
// first backward use, and redirect the backward uses to the clones. Liveness
// then frees the original after its last forward use.
//
// Contract:
//   before: a verified training-step graph (autodiff::build_training_step);
//           `drop` names activations only (a dropout mask among them).
//   after:  a verified graph; original value ids are unchanged (clones are
//           appended), so a Profile of the input graph still describes them.
//   Recompute sources are the values kept at that point: persistent values and
//   activations not dropped. Every other value a clone needs is itself
//   recomputed, once: a clone made for one backward node is reused by later ones.
//   A random node (tag random: dropout_mask, captured native_dropout,
//   bernoulli, rand) is recomputed by replaying the generator: an rng_save node
//   just before the forward node makes `<first output>.rng_state` (role
//   activation, i64[ops::kRngStateWords]), and the clone takes it as its last
//   input with attribute rng_replay=1, so it draws the forward pass's numbers and
//   the executor puts the live state back after it. rng_save nodes have origin -1.
//   Do not run a pass after this one that merges identical nodes (CSE): it would
//   undo the rewrite.
//
// The memory simulator runs this same pass and the same liveness analysis, so
// its prediction walks exactly the schedule that is executed.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"

namespace mutwo::rewrite {

// What every rewrite pass returns (recomputation, early updates, swaps): the
// rewritten graph and, per node, where it came from.
struct Rewritten {
  ir::Graph graph;
  std::vector<int32_t> origin;  // per node of `graph`: the rank of the node it is (or clones) in the input;
                                // -1 for a swap node (swap.h)
  int32_t clones = 0;           // recompute nodes inserted
  int32_t swaps = 0;            // storages swapped (swap.h)
  // Per node: the share of its origin's time it takes; empty: every node all
  // of it. A multi-tensor optimizer node split for swapped gradients (swap.h)
  // takes its parameters' share of the bytes.
  std::vector<double> share;
  double share_of(size_t n) const { return share.empty() ? 1.0 : share[n]; }
};

Rewritten insert_recomputation(const ir::Graph& g, const std::vector<ir::ValueId>& drop);

// Kept at backward time: the values that the backward pass, and the clones
// the rewrite makes for it, read as they are. The one definition, which the
// rewrite runs and every planner models (the greedy's recompute subgraphs,
// the MILP's value kinds, plan.json's recompute sources):
//   - a value without a producer is kept when it is persistent (no node may
//     read any other: ir::verify);
//   - a value made outside the forward part (ir::is_forward: backward,
//     recompute or optimizer nodes) is kept: recomputation is not about it;
//   - an output of a node recomputation may not repeat (ops::recomputable:
//     in place, a collective, rng_save) is kept whether or not the backward
//     pass reads it: a clone that needs it holds it into the backward pass;
//   - an output of a random node is kept unless it is in `drop`, whether or
//     not the backward pass reads it (a dropout mask read only in the forward
//     pass is held for a clone that reads it): a random node is replayed only
//     where a planner chose to, paying for its state;
//   - a value the forward part makes with a recomputable node is kept when a
//     backward-part node (ir::is_backward) reads it and it is not in `drop`.
// Everything else is recomputed where the backward pass needs it.
std::vector<bool> kept_at_backward(const ir::Graph& g, const ir::UseIndex& uses, const std::vector<ir::ValueId>& drop);

// True for values recomputation may drop: activations made by a recomputable
// node (a random one included: it replays its state).
// (Planners drop whole storages: plan::candidates groups a view with its base.)
bool droppable(const ir::Graph& g, ir::ValueId v);

}  // namespace mutwo::rewrite
