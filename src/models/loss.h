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

}  // namespace mutwo::models
