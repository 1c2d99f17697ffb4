// Optimizer nodes: one in-place sgd_step or adam_step per parameter, with its state.
#include "autodiff/autodiff.h"
#include "ops/builder.h"
#include "support/error.h"

namespace mutwo::autodiff {

using ir::ValueId;

void append_optimizer(ir::Graph& g, const std::vector<std::pair<ValueId, ValueId>>& grads,
                      const OptimizerConfig& c) {
  MUTWO_CHECK(c.lr >= 0, "learning rate must be >= 0, got {}", c.lr);
  ir::UseIndex uses(g);
  ops::Builder b(g);
  b.phase = ir::Phase::optimizer;
  auto state = [&](ValueId p, std::string_view suffix) {
    const ir::Value& pv = g.value(p);
    return b.input(pv.name + std::string(suffix), pv.type, ir::Role::optimizer_state, ir::Init{ir::Init::zeros});
  };
  for (auto [p, grad] : grads) {
    const auto& users = uses.users[static_cast<size_t>(p)];
    b.scope = users.empty() ? std::string() : g.nodes()[static_cast<size_t>(users.front())].scope;
    if (c.kind == Optimizer::sgd) {
      ir::Attrs attrs{{"lr", c.lr}, {"momentum", c.momentum}, {"dampening", c.dampening},
                      {"weight_decay", c.weight_decay}, {"nesterov", int64_t{c.nesterov}}};
      std::vector<ValueId> in{p, grad};
      if (c.momentum != 0) in.push_back(state(p, ".momentum"));
      b.call("sgd_step", in, attrs);
    } else {
      ir::Attrs attrs{{"lr", c.lr},   {"beta1", c.beta1},
                      {"beta2", c.beta2}, {"eps", c.eps},
                      {"weight_decay", c.weight_decay}, {"decoupled", int64_t{c.kind == Optimizer::adamw}}};
      ValueId m = state(p, ".adam_m");
      ValueId v = state(p, ".adam_v");
      b.call("adam_step", {p, grad, m, v}, attrs);
    }
  }
}

}  // namespace mutwo::autodiff
