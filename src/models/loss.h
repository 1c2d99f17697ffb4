// The loss every model builder ends with: mean cross-entropy of class scores
// against class ids, in the builder's current phase and scope.
#pragma once

#include "ops/builder.h"

namespace mutwo::models {

enum class CrossEntropyForm {
  two_ops,  // log_softmax + nll_loss: PyTorch's own kernels, bit for bit (MLP, ResNet)
  fused,    // cross_entropy: one (N, C) gradient buffer instead of three (vocabulary heads)
};

// scores (N, C), targets (N) i64 with -100 ignored; returns the scalar loss
// "loss" (its companion output named loss.total_weight or loss.logsumexp).
ir::ValueId cross_entropy_loss(ops::Builder& b, ir::ValueId scores, ir::ValueId targets, CrossEntropyForm form);

// The vocabulary head and its loss in one linear_cross_entropy: the mean
// cross-entropy of linear(hidden (N, H), weight (V, H), bias (V) or kNoValue)
// against targets (N) i64, -100 ignored, its logits made one chunk of rows at
// a time (chunk_rows 0: the default, until a planner picks one). Returns "loss"
// (its companion output named loss.logsumexp).
ir::ValueId linear_cross_entropy_loss(ops::Builder& b, ir::ValueId hidden, ir::ValueId weight, ir::ValueId bias,
                                      ir::ValueId targets);

}  // namespace mutwo::models
