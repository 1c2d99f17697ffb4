// Builder: type-checked node construction (see builder.h).
#include "ops/builder.h"

#include "ops/op.h"
#include "support/error.h"

namespace mutwo::ops {

ir::ValueId Builder::input(std::string_view name, ir::TensorType type, ir::Role role, ir::Init init) {
  MUTWO_ASSERT(ir::is_persistent(role), "graph input %{} must be an input, parameter, buffer or optimizer state", name);
  MUTWO_ASSERT(g_.find(name) == ir::kNoValue, "graph input %{} declared twice", name);
  return g_.add_value(std::string(name), std::move(type), role, init);
}

std::vector<ir::ValueId> Builder::call(std::string_view op_name, std::vector<ir::ValueId> inputs, ir::Attrs attrs,
                                       std::string_view name) {
  ir::Node node;
  node.op = std::string(op_name);
  node.inputs = std::move(inputs);
  node.attrs = std::move(attrs);
  node.phase = phase;
  node.scope = scope;
  ir::OpCheck c;
  try {
    c = check(g_, node);
  } catch (const UserError& e) {
    std::vector<std::string> ins;
    for (ir::ValueId v : node.inputs)
      ins.push_back(v == ir::kNoValue ? "_" : fmt::format("%{}: {}", g_.value(v).name, ir::to_string(g_.type(v))));
    MUTWO_FAIL("cannot build {}({}){}: {}", op_name, fmt::join(ins, ", "), scope.empty() ? "" : " in " + scope,
               e.what());
  }
  std::string base = name.empty() ? (scope.empty() ? std::string(op_name) : scope + "." + std::string(op_name))
                                  : std::string(name);
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    std::string n = g_.unique_name(i == 0 ? base : fmt::format("{}.{}", base, i));
    node.outputs.push_back(g_.add_value(std::move(n), c.outputs[i], ir::Role::other));
  }
  std::vector<ir::ValueId> outs = node.outputs;
  g_.append(std::move(node));
  return outs;
}

ir::ValueId Builder::op(std::string_view op_name, std::vector<ir::ValueId> inputs, ir::Attrs attrs,
                        std::string_view name) {
  auto outs = call(op_name, std::move(inputs), std::move(attrs), name);
  MUTWO_ASSERT(outs.size() == 1, "op {} makes {} outputs; use Builder::call", op_name, outs.size());
  return outs[0];
}

Builder::Scope::Scope(Builder& b, std::string_view part) : b_(b), saved_(b.scope) {
  b_.scope = saved_.empty() ? std::string(part) : saved_ + "." + std::string(part);
}

}  // namespace mutwo::ops
