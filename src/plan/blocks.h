// What a block is: the unit the layer-wise planners (per-layer, sqrt-n), the
// reports and the PyTorch peers of bench/ (bench/blocks.py mirrors it) all
// work by.
#pragma once

#include <string>
#include <vector>

#include "plan/input.h"

namespace mutwo::plan {

// Module blocks for the layer-wise planners: a scope up to and including its
// first all-digit component ("layer1.0.conv1" -> "layer1.0", "encoder.layer.3.attention"
// -> "encoder.layer.3", "h.5.attn" -> "h.5"); "" when the scope has none.
std::string block_of(const std::string& scope);

// Drops the candidates made inside the given blocks, except those read by a
// forward node outside their block (the block's outputs) when the block is in `keep_outputs_of`.
std::vector<ir::ValueId> drop_inside_blocks(const PlanInput& in, const std::vector<std::string>& blocks,
                                            const std::vector<std::string>& keep_outputs_of);

}  // namespace mutwo::plan
