// The vocabulary chunk size under the budget: linear_cross_entropy's
// chunk_rows, chosen for every planner before it plans and grown back after
// (see plan.h).
#include <algorithm>

#include "analysis/liveness.h"
#include "ops/attrs.h"
#include "ops/op.h"
#include "plan/plan.h"
#include "support/error.h"

namespace mutwo::plan {

namespace {

bool chunked_op(const ir::Node& n) {
  return n.op == "linear_cross_entropy" || n.op == "linear_cross_entropy_backward";
}

// The profile's workspace of node `n`, re-scaled from the chunk it was
// measured with to `rows`: what was measured beyond the declared chunk stays.
int64_t workspace_at(const PlanInput& in, size_t n, int64_t rows) {
  const ir::Node& node = in.graph.nodes()[n];
  ir::Node at = node;
  at.attrs.set("chunk_rows", rows);
  const int64_t beyond = in.workspace[n] - ops::workspace_bytes(in.graph, node);
  return std::max<int64_t>(0, beyond + ops::workspace_bytes(in.graph, at));
}

}  // namespace

int64_t rows_of(const ir::Graph& g, const ir::Node& n) {
  const ir::TensorType& h = g.type(n.inputs[0]);
  const ir::TensorType& w = g.type(n.inputs[1]);
  return ops::vocab_chunk_rows(n, h.shape[0], w.shape[0], ir::element_size(ops::vocab_logits_dtype(n, h.dtype)));
}

std::vector<ChunkChoice> choose_chunks(const PlanInput& in, int64_t budget_bytes) {
  std::vector<ChunkChoice> out;
  const auto& nodes = in.graph.nodes();
  if (std::none_of(nodes.begin(), nodes.end(), chunked_op)) return out;
  const analysis::Liveness L = analysis::analyze_liveness(in.graph);
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (!chunked_op(nodes[n])) continue;
    // From the rows the node has (the default, about kVocabChunkBytes of
    // logits), halving, down to one block; the first that fits, else the last.
    int64_t rows = rows_of(in.graph, nodes[n]);
    while (rows > ops::kVocabBlockRows &&
           L.live_during[n] + workspace_at(in, n, rows) + in.start_extra_bytes > budget_bytes)
      rows = std::max(ops::kVocabBlockRows, rows / 2 / ops::kVocabBlockRows * ops::kVocabBlockRows);
    out.push_back({static_cast<int32_t>(n), rows});
  }
  return out;
}

void grow_chunks(const PlanInput& in, Plan& p) {
  if (p.chunks.empty() || !p.feasible) return;
  auto fits = [&](const std::vector<ChunkChoice>& chunks) {
    PlanInput chunked = in;
    apply_chunks(chunked, chunks);
    return simulate(chunked, p.drop, p.swap, p.update_early).peak_bytes <= p.budget_bytes;
  };
  std::vector<ChunkChoice> chunks = p.chunks;
  bool grew = false;
  for (ChunkChoice& c : chunks) {
    // The largest multiple of a block in [rows, the default] that still fits:
    // the default first (often it does), then bisection (the peak grows with the chunk).
    const int64_t most = rows_of(in.graph, in.graph.nodes()[static_cast<size_t>(c.node)]);
    int64_t lo = c.rows / ops::kVocabBlockRows, hi = most / ops::kVocabBlockRows;  // in blocks; lo fits
    if (hi <= lo) continue;
    const int64_t kept = c.rows;
    c.rows = hi * ops::kVocabBlockRows;
    if (!fits(chunks)) {
      --hi;  // hi + 1 does not fit
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        c.rows = mid * ops::kVocabBlockRows;
        if (fits(chunks)) lo = mid;
        else hi = mid - 1;
      }
      c.rows = lo * ops::kVocabBlockRows;
    }
    grew |= c.rows != kept;
  }
  if (!grew) return;
  PlanInput chunked = in;
  apply_chunks(chunked, chunks);
  Plan q = finish(chunked, p.planner, p.budget_bytes, p.drop, p.swap, p.update_early);
  MUTWO_ASSERT(q.feasible, "grow_chunks: the grown chunks put the plan over its budget");
  q.chunks = std::move(chunks);
  q.order = std::move(p.order);
  q.note = std::move(p.note);
  q.planning_ms = p.planning_ms;
  p = std::move(q);
}

void apply_chunks(ir::Graph& g, const std::vector<ChunkChoice>& chunks) {
  for (const ChunkChoice& c : chunks) {
    ir::Node& node = g.nodes()[static_cast<size_t>(c.node)];
    MUTWO_ASSERT(chunked_op(node), "node {} ({}) has no chunk_rows", c.node, node.op);
    node.attrs.set("chunk_rows", c.rows);
  }
}

ir::Graph chunked_graph(const ir::Graph& g, const Plan& p) {
  ir::Graph out = g;
  apply_chunks(out, p.chunks);
  return out;
}

void apply_chunks(PlanInput& in, const std::vector<ChunkChoice>& chunks) {
  for (const ChunkChoice& c : chunks)
    in.workspace[static_cast<size_t>(c.node)] = workspace_at(in, static_cast<size_t>(c.node), c.rows);
  apply_chunks(in.graph, chunks);
}

}  // namespace mutwo::plan
