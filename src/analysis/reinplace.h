// PyTorch's reinplace pass, for the ops the table gives an overwriting variant
// (OpDef::overwriting, e.g. cross_entropy_backward_): a node that is the last
// reader of its input 0's storage, where a node made that storage (not a
// parameter, input or optimizer state) and no graph output shares it, takes the
// variant, which writes its result over input 0 instead of into a new buffer;
// any other node of such an op takes the plain form. Storages and last reads
// are the liveness analysis's. Decides afresh on every run, so a rewrite that
// adds readers runs it again. Graph outputs must be set.
#pragma once

#include "ir/graph.h"

namespace mutwo::analysis {

void reinplace(ir::Graph& g);

}  // namespace mutwo::analysis
