// N copies of a training step as one graph (`mutwo many`, issue 51): each
// copy's forward, loss, backward and optimizer update an independent
// sub-graph of its own values, so that the one planner plans the copies under
// one budget and the one executor runs them as one step.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace mutwo::models {

// The composed step, in the simplest order, phase by phase: every copy's
// forward, copy 0's first, then every copy's loss, backward and update, each
// copy's nodes in its own order. Each copy is one independent sub-graph
// (ir::independent_subgraphs), so the verifier lets the copies interleave:
// plan/orders.h makes the other orders (one copy after another, one copy's
// backward beside the next one's forward) and chooses among them.
// Values are named `copy<i>.<name>`, nodes scoped
// `copy<i>[.<scope>]`. Every node that draws from the generator (tag random)
// carries attribute ops::kSeedOffsetAttr = i, so the executor draws copy i's
// dropout from a generator seeded seed + i, as a lone run from that seed would.
struct Copies {
  ir::Graph graph;
  // Per copy: its own step's value id -> the composed graph's (every value of the copy).
  std::vector<std::vector<ir::ValueId>> value_of;
  // Per copy: the index in graph.outputs of its first output (its loss).
  std::vector<size_t> loss_output;
};

// The copies of `steps` (training steps, autodiff::build_training_step or
// equal), verified. A step whose values are read from a tensor file
// (Init::data) is refused: the copies would share its names.
Copies compose_copies(const std::vector<ir::Graph>& steps);

// The value name copy `copy` gives `name`.
std::string copy_value_name(size_t copy, std::string_view name);

}  // namespace mutwo::models
