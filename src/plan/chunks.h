// linear_cross_entropy's chunk size (chunks.cpp), which every planner's plan
// carries: picked under the budget before the planner runs, grown back after
// it where the plan leaves room.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "plan/input.h"

namespace mutwo::plan {

struct Plan;

// run_planner picks, before the planner runs, for each linear_cross_entropy
// node and its backward, the largest chunk_rows from the node's default (about
// ops::kVocabChunkBytes of logits) halving down to ops::kVocabBlockRows whose
// workspace keeps that node's simulated bytes (its live bytes without
// recomputation, plus its workspace) within the budget, or the smallest. The
// workspace is the profile's measurement re-scaled by the op's declared one
// (OpDef::workspace). The planner then plans the chunked graph.
struct ChunkChoice {
  int32_t node = -1;  // in the profiled graph (recomputation does not move it)
  int64_t rows = 0;
};
std::vector<ChunkChoice> choose_chunks(const PlanInput& in, int64_t budget_bytes);
// The rows node `n` of `g` runs with at its chunk_rows attribute (0 or
// absent: the default, about ops::kVocabChunkBytes of logits).
int64_t rows_of(const ir::Graph& g, const ir::Node& n);
// Sets each node's chunk_rows; on a PlanInput, re-scales its workspace too.
// Apply a plan's chunks to the graph before rewriting it with the plan's drops.
void apply_chunks(ir::Graph& g, const std::vector<ChunkChoice>& chunks);
void apply_chunks(PlanInput& in, const std::vector<ChunkChoice>& chunks);

// After the planner: choose_chunks judged each node by its live bytes without
// recomputation, which the plan's recomputation and swaps lower, and small
// chunks cost time (BERT-large at batch 32 on an H100: 32-row chunks made the
// head and its backward 21 ms slower than the default's). So for a plan that
// fits, each chunk grows back, up to the default, to the largest that keeps
// the plan's simulated peak within its budget, and the plan is simulated
// again. `in`: the unchunked input the planner's was made from.
void grow_chunks(const PlanInput& in, Plan& p);

}  // namespace mutwo::plan
