// The vocabulary head of a captured step fused into linear_cross_entropy: the
// projection and cross-entropy that AOTAutograd emits as separate ATen nodes
// (addmm or mm, _log_softmax, nll_loss_forward, and in the backward
// nll_loss_backward, _log_softmax_backward_data, two mm and a sum) become one
// linear_cross_entropy node and one linear_cross_entropy_backward node, so
// that the (N, V) logits and their gradient never exist whole and the
// planners' chunk choice (src/plan/chunks.cpp) applies. ATen-free.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace mutwo::stepfile {

// Replaces every exact `linear -> cross_entropy` of `g` (docs/step-file.md
// lists the forms matched: mean reduction, no class weights, no label
// smoothing, logits and log-probabilities read by nothing else) with the
// fused pair; anything else is left as it was.
//
// Contract: `g` holds the generic `aten` nodes of a step file in captured
// order (stepfile's loader, before phases, roles and the optimizer). The
// values in `keep` and every value with role `gradient` are read after the
// pass (the loss, the gradients the optimizer will read): a match that would
// lose one is refused. The fused nodes make the loss and the hidden, weight
// and bias gradients under their existing value ids, so every reader stays
// wired; the nodes and views that only served the replaced ones are removed.
// Their values stay in the table, made by nobody: remove_unused_values drops
// them. Returns how many heads were fused.
int fuse_linear_cross_entropy(ir::Graph& g, const std::vector<ir::ValueId>& keep);

// Drops the values that no node makes or reads and that are not persistent
// (what fuse_linear_cross_entropy leaves behind), renumbering the rest in
// order. Returns the new id of each old one (kNoValue where dropped); node
// inputs, outputs and g.outputs are renumbered here.
std::vector<ir::ValueId> remove_unused_values(ir::Graph& g);

}  // namespace mutwo::stepfile
