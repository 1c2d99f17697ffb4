// The verifier: a graph every pass must leave behind is well formed.
//
// Structure (here): every use comes after its definition, one producer per
// value, phases in schedule order within each independent sub-graph (below),
// roles consistent with where a value is made and used. Types (through the op table, passed in as `OpChecker` so that the
// IR does not depend on ops): each node's output types equal what its op infers,
// and only in-place ops write into their inputs, and only into persistent state.
// A failure throws UserError naming the node and what is wrong.
#pragma once

#include <functional>
#include <vector>

#include "ir/graph.h"

namespace mutwo::ir {

struct OpCheck {
  std::vector<TensorType> outputs;  // inferred output types
  std::vector<int> mutated_inputs;  // input positions the op writes into (in-place ops)
};

// Infers a node's outputs from its inputs; throws UserError if the op is
// unknown or its inputs are not accepted.
using OpChecker = std::function<OpCheck(const Graph&, const Node&)>;

void verify(const Graph& g, const OpChecker& check);

// The phase rule, stated once. Two nodes are in one independent sub-graph
// when they share a value (read or make it, persistent values included),
// directly or through other nodes. Within a sub-graph the phases come in
// schedule order: fwd, loss, bwd (and recompute), optim. Nodes of different
// sub-graphs share nothing, so no order between them changes what either
// computes: they may interleave (mutwo many's copies, models/copies.h, each
// one sub-graph, run in the order plan/orders.h chooses). A training step of
// one model is one sub-graph, so for it the rule is the whole step's order.
// Per node, its sub-graph's index, numbered in order of their first node (a
// node with no values is a sub-graph of its own); ids out of range are
// skipped (verify reports them).
std::vector<int32_t> independent_subgraphs(const Graph& g);

}  // namespace mutwo::ir
