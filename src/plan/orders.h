// The order of a step's independent sub-graphs (mutwo many's copies,
// models/copies.h): μ-TWO's candidate orders, and its scheduler's choice among
// them, each order planned under one budget by the one planner and judged by
// the one simulator. The phase rule that lets sub-graphs interleave is
// ir::independent_subgraphs' (ir/verify.h).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "plan/input.h"
#include "plan/pipeline.h"

namespace mutwo::plan {

// With sub-graphs S_0 .. S_{N-1} (ir::independent_subgraphs' numbering), each
// split into its forward part F_i (fwd and loss nodes) and backward part B_i
// (bwd and optim nodes), each sub-graph's own nodes always in their own order:
// - by_phase: every F_i's fwd nodes, then every loss node, then every
//   backward, then every update (models::compose_copies' order): every
//   copy's activations are live at the end of the forward pass;
// - sequential: S_0 whole, then S_1, ...: one copy's activations at a time;
// - paired: μ-TWO's multiplexed order F_0, [B_0, F_1], [B_1, F_2], ...,
//   B_{N-1}, where [B_i, F_{i+1}] interleaves the two op by op, each at its
//   share of the pair's time (the next node is the one whose part has done
//   the smaller fraction of its time; B_i's first on a tie), as if the two
//   ran side by side: B_i frees its activations while F_{i+1} makes its own.
//   choose_order weighs every node alike (one per node), so the order does
//   not move with timing noise.
// On one stream with independent copies, sequential's unplanned peak is never
// above another order's (each node's live bytes are its own copy's plus the
// persistent ones); paired and by_phase give each activation a longer gap
// between its last forward and first backward use, which hides swaps behind
// other copies' compute (on CUDA, where copies run beside compute).
enum class CopyOrder { by_phase, sequential, paired };
std::string to_string(CopyOrder o);  // "by-phase", "sequential", "paired"
// The candidates in their tie order (by_phase first: the order the copies are composed in).
const std::vector<CopyOrder>& copy_orders();

// The nodes of `g` in order `o`: per position, the index in `g` of the node
// there. `node_ms`: per node of `g`, the weights of paired's interleaving (its
// measured times; empty or all zero: one per node). A graph of one sub-graph
// keeps its order. `g` is unplanned (no recompute nodes).
std::vector<int32_t> copy_schedule(const ir::Graph& g, CopyOrder o, const std::vector<double>& node_ms);

// `g` with its nodes in `schedule` (copy_schedule's), values and outputs unchanged, verified.
ir::Graph reorder(const ir::Graph& g, const std::vector<int32_t>& schedule);
// `in` with its graph reordered and every per-node record moved with its node:
// times, workspaces and the profile's node records (its values' ranks and idle
// times recomputed; a node's measured bytes kept relative to its predicted
// ones). What a planner reads of `in` otherwise is unchanged.
PlanInput reorder(const PlanInput& in, const std::vector<int32_t>& schedule);

// One candidate order, planned (not rewritten).
struct OrderCandidate {
  CopyOrder order = CopyOrder::by_phase;
  std::vector<int32_t> schedule;  // copy_schedule's, over the nodes of choose_order's `p`
  PlannedStep step;               // its input reordered, its plan under the one budget
};
struct OrderChoice {
  std::vector<OrderCandidate> candidates;  // in the order asked
  size_t chosen = 0;
  OrderCandidate& best() { return candidates.at(chosen); }
  const OrderCandidate& best() const { return candidates.at(chosen); }
};
// μ-TWO's scheduler for one step of independent sub-graphs: each order of
// `orders` (not empty) made from `p` (prepared: plan::prepare, in any order),
// planned by o.planner under one budget: a byte budget as given; a fraction
// resolved once, on `p` as given (so `60%` means what it means for `p`'s
// order); lowest, each order's lowest; none, each order as it is. Chosen:
// under lowest, the lowest predicted peak (ties to the faster step); else the
// fastest predicted step (Simulation::step_ms) among the plans that fit, ties
// (times within a part in 1e9) to the lower peak, then to the earlier in
// `orders`; when none fits, the lowest peak (infeasible: the caller reports it).
OrderChoice choose_order(const PlannedStep& p, const PlanOptions& o, const std::vector<CopyOrder>& orders);

}  // namespace mutwo::plan
