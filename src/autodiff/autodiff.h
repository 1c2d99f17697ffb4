// Reverse-mode autodiff and the training step: from a forward graph with a
// scalar loss, append the backward nodes, then one multi-tensor optimizer
// node over every parameter. The result is one training-step graph in
// execution order.
#pragma once

#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "ir/pass.h"

namespace mutwo::autodiff {

enum class Optimizer { sgd, adam, adamw };

struct OptimizerConfig {
  Optimizer kind = Optimizer::sgd;
  double lr = 0.01;
  double momentum = 0.9;  // SGD
  double dampening = 0;   // SGD
  bool nesterov = false;  // SGD
  double weight_decay = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam/AdamW
};

// Appends nodes (phase bwd) computing d(output)/d(v) for every v in `wrt`,
// given `seed` = d(loss)/d(output). Gradients of values used several times are
// summed; gradients of broadcast operands are reduced to their shape (sum_to),
// both here and only here. Returns v -> its gradient (absent if none flows).
std::unordered_map<ir::ValueId, ir::ValueId> append_gradients(ir::Graph& g, ir::ValueId output, ir::ValueId seed,
                                                              const std::vector<ir::ValueId>& wrt);

// Appends the backward pass of a scalar loss for every parameter; the
// parameters' gradients get role `gradient`. Returns (parameter, gradient) pairs.
std::vector<std::pair<ir::ValueId, ir::ValueId>> append_backward(ir::Graph& g, ir::ValueId loss);

// Appends one in-place multi-tensor optimizer node (sgd_step or adam_step)
// over every (parameter, gradient), creating the optimizer state values
// (zeros: "<p>.momentum", "<p>.adam_m", "<p>.adam_v"); none without parameters.
void append_optimizer(ir::Graph& g, const std::vector<std::pair<ir::ValueId, ir::ValueId>>& grads,
                      const OptimizerConfig& config);

// Roles from structure: a value made in fwd/loss with a use in fwd/loss and a
// use in bwd is an activation (mu-TWO's candidates); any other made value keeps
// gradient or becomes other.
void assign_roles(ir::Graph& g);

// forward graph + loss -> the whole training step, reinplaced (analysis::reinplace) and verified.
// `after` hears two passes: "autodiff" (backward, optimizer and roles appended)
// and "reinplace".
ir::Graph build_training_step(ir::Graph forward, ir::ValueId loss, const OptimizerConfig& config,
                              const ir::AfterPass& after = {});

}  // namespace mutwo::autodiff
