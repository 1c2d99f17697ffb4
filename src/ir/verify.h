// The verifier: a graph every pass must leave behind is well formed.
//
// Structure (here): every use comes after its definition, one producer per
// value, phases in schedule order, roles consistent with where a value is made
// and used. Types (through the op table, passed in as `OpChecker` so that the
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

}  // namespace mutwo::ir
