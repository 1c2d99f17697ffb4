// Reverse-mode differentiation over the op table's derivative rules.
#include "autodiff/autodiff.h"

#include <algorithm>

#include "analysis/reinplace.h"
#include "ops/builder.h"
#include "ops/op.h"
#include "support/error.h"

namespace mutwo::autodiff {

using ir::kNoValue;
using ir::ValueId;

std::unordered_map<ValueId, ValueId> append_gradients(ir::Graph& g, ValueId output, ValueId seed,
                                                      const std::vector<ValueId>& wrt) {
  // Which values depend on a value we differentiate for.
  std::vector<bool> needs(g.num_values(), false);
  for (ValueId v : wrt) needs[static_cast<size_t>(v)] = true;
  const size_t forward_nodes = g.nodes().size();
  for (size_t n = 0; n < forward_nodes; ++n) {
    const ir::Node& node = g.nodes()[n];
    bool any = false;
    for (ValueId v : node.inputs) any |= v != kNoValue && needs[static_cast<size_t>(v)];
    for (ValueId v : node.outputs) needs[static_cast<size_t>(v)] = any && ir::is_floating(g.type(v).dtype);
  }

  ops::Builder b(g);
  b.phase = ir::Phase::backward;
  std::unordered_map<ValueId, ValueId> grad{{output, seed}};

  auto accumulate = [&](ValueId v, ValueId gv) {
    const ir::TensorType& t = g.type(v);
    if (g.type(gv).shape != t.shape)  // a broadcast operand: reduce to its own shape, here only
      gv = b.op("sum_to", {gv}, {{"shape", t.shape}}, g.value(v).name + ".grad");
    auto it = grad.find(v);
    if (it == grad.end()) grad.emplace(v, gv);
    else  // a parameter's contributions are summed in place where the first dies (accumulate_)
      it->second = b.op(g.value(v).role == ir::Role::parameter ? "accumulate" : "add", {it->second, gv}, {},
                        g.value(v).name + ".grad");
  };

  for (size_t n = forward_nodes; n-- > 0;) {
    const ir::Node node = g.nodes()[n];  // a copy: appending invalidates references
    std::vector<ValueId> grad_out;
    bool any = false;
    for (ValueId v : node.outputs) {
      auto it = grad.find(v);
      grad_out.push_back(it == grad.end() ? kNoValue : it->second);
      any |= it != grad.end();
    }
    if (!any) continue;
    std::vector<bool> in_needs;
    for (ValueId v : node.inputs) in_needs.push_back(v != kNoValue && needs[static_cast<size_t>(v)]);
    if (std::none_of(in_needs.begin(), in_needs.end(), [](bool x) { return x; })) continue;
    const ops::OpDef& def = ops::op(node.op);
    MUTWO_CHECK(def.grad != nullptr, "op {} (scope '{}') has no derivative, but a gradient must flow through it",
                node.op, node.scope);
    b.scope = node.scope;
    ops::GradArgs args{node, grad_out, in_needs, b};
    std::vector<ValueId> in_grads = def.grad(args);
    MUTWO_ASSERT(in_grads.size() == node.inputs.size(), "derivative of {} returned {} gradients for {} inputs",
                 node.op, in_grads.size(), node.inputs.size());
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      ValueId v = node.inputs[i];
      if (v == kNoValue || !needs[static_cast<size_t>(v)] || in_grads[i] == kNoValue) continue;
      accumulate(v, in_grads[i]);
    }
  }

  std::unordered_map<ValueId, ValueId> result;
  for (ValueId v : wrt)
    if (auto it = grad.find(v); it != grad.end()) result.emplace(v, it->second);
  return result;
}

std::vector<std::pair<ValueId, ValueId>> append_backward(ir::Graph& g, ValueId loss) {
  const ir::TensorType& lt = g.type(loss);
  MUTWO_CHECK(lt.shape.empty() && ir::is_floating(lt.dtype), "the loss %{} must be a floating-point scalar, got {}",
              g.value(loss).name, ir::to_string(lt));
  std::vector<ValueId> params;
  for (const ir::Value& v : g.values())
    if (v.role == ir::Role::parameter) params.push_back(v.id);
  MUTWO_CHECK(!params.empty(), "the graph has no parameters to train; declare weights with role parameter");

  ops::Builder b(g);
  b.phase = ir::Phase::backward;
  ValueId seed = b.op("full", {}, {{"shape", ir::Shape{}}, {"value", 1.0}, {"dtype", std::string(ir::to_string(lt.dtype))}},
                      g.value(loss).name + ".grad");
  auto grads = append_gradients(g, loss, seed, params);
  std::vector<std::pair<ValueId, ValueId>> out;
  for (ValueId p : params) {
    auto it = grads.find(p);
    if (it == grads.end()) continue;  // unused parameter: nothing to update
    g.value(it->second).role = ir::Role::gradient;
    out.emplace_back(p, it->second);
  }
  return out;
}

void assign_roles(ir::Graph& g) {
  ir::UseIndex uses(g);
  const auto& nodes = g.nodes();
  for (size_t n = 0; n < nodes.size(); ++n) {
    ir::Phase ph = nodes[n].phase;
    for (ValueId v : nodes[n].outputs) {
      ir::Value& val = g.value(v);
      if (val.role == ir::Role::gradient) continue;
      bool fwd = ir::is_forward(ph);
      bool used_in_fwd = false, used_in_bwd = false;
      for (int32_t u : uses.users[static_cast<size_t>(v)]) {
        ir::Phase up = nodes[static_cast<size_t>(u)].phase;
        used_in_bwd |= ir::is_backward(up);
        used_in_fwd |= ir::is_forward(up);
      }
      val.role = fwd && used_in_fwd && used_in_bwd ? ir::Role::activation : ir::Role::other;
    }
  }
}

ir::Graph build_training_step(ir::Graph g, ValueId loss, const OptimizerConfig& config, const ir::AfterPass& after) {
  auto grads = append_backward(g, loss);
  append_optimizer(g, grads, config);
  assign_roles(g);
  g.outputs = {loss};
  if (after) after("autodiff", g);
  analysis::reinplace(g);
  if (after) after("reinplace", g);
  ops::verify(g);
  return g;
}

}  // namespace mutwo::autodiff
