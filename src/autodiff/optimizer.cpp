// The optimizer node: one in-place multi-tensor sgd_step or adam_step over
// every parameter, with its state (see src/ops/optim.cpp for the layout).
#include "autodiff/autodiff.h"
#include "ops/builder.h"
#include "support/error.h"

namespace mutwo::autodiff {

using ir::ValueId;

void append_optimizer(ir::Graph& g, const std::vector<std::pair<ValueId, ValueId>>& grads,
                      const OptimizerConfig& c) {
  MUTWO_CHECK(c.lr >= 0, "learning rate must be >= 0, got {}", c.lr);
  if (grads.empty()) return;
  ops::Builder b(g);
  b.phase = ir::Phase::optimizer;
  auto state = [&](ValueId p, std::string_view suffix) {
    const ir::Value& pv = g.value(p);
    return b.input(pv.name + std::string(suffix), pv.type, ir::Role::optimizer_state, ir::Init{ir::Init::zeros});
  };
  // Input lists: parameters, gradients, then each state; entry i of each is parameter i's.
  std::vector<ValueId> params, gradients, first, second;
  for (auto [p, grad] : grads) {
    params.push_back(p);
    gradients.push_back(grad);
    if (c.kind == Optimizer::sgd) {
      if (c.momentum != 0) first.push_back(state(p, ".momentum"));
    } else {
      first.push_back(state(p, ".adam_m"));
      second.push_back(state(p, ".adam_v"));
    }
  }
  std::vector<ValueId> in = params;
  for (const auto* list : {&gradients, &first, &second}) in.insert(in.end(), list->begin(), list->end());
  if (c.kind == Optimizer::sgd) {
    b.call("sgd_step", in,
           {{"lr", c.lr}, {"momentum", c.momentum}, {"dampening", c.dampening},
            {"weight_decay", c.weight_decay}, {"nesterov", int64_t{c.nesterov}}});
  } else {
    b.call("adam_step", in,
           {{"lr", c.lr}, {"beta1", c.beta1}, {"beta2", c.beta2}, {"eps", c.eps},
            {"weight_decay", c.weight_decay}, {"decoupled", int64_t{c.kind == Optimizer::adamw}}});
  }
}

}  // namespace mutwo::autodiff
