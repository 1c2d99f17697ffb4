// The training step the core's tests share: a three-layer MLP built with
// ops::Builder, its backward pass and SGD (test_step.cpp, test_planning.cpp).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "autodiff/autodiff.h"
#include "ir/graph.h"
#include "ops/builder.h"

namespace mutwo::core_test {

using ir::Role;
using ir::TensorType;
using ir::ValueId;

constexpr int64_t kBatch = 64, kIn = 8, kHidden = 32, kClasses = 4, kLayers = 3;

// x (64, 8) -> 3 x (linear to 32, relu) -> linear to 4 -> log_softmax -> nll_loss,
// then the backward pass and SGD with momentum: one training step.
struct Step {
  ir::Graph graph;
  std::vector<ValueId> relu;  // each hidden layer's relu output
};
inline Step mlp_step() {
  ir::Graph g;
  ops::Builder b(g);
  ValueId h = b.input("x", TensorType{{kBatch, kIn}}, Role::input);
  ValueId labels = b.input("labels", TensorType{{kBatch}, ir::DType::i64}, Role::input);
  std::vector<std::string> relu_names;
  auto linear = [&](ValueId x, int64_t in, int64_t out) {
    ValueId w = b.input(b.scope + ".weight", TensorType{{out, in}}, Role::parameter);
    ValueId bias = b.input(b.scope + ".bias", TensorType{{out}}, Role::parameter);
    return b.op("linear", {x, w, bias}, {}, b.scope + ".out");
  };
  for (int64_t l = 0; l < kLayers; ++l) {
    ops::Builder::Scope s(b, "fc" + std::to_string(l + 1));
    h = b.op("relu", {linear(h, l == 0 ? kIn : kHidden, kHidden)}, {}, b.scope + ".relu");
    relu_names.push_back(b.scope + ".relu");
  }
  ValueId logits;
  {
    ops::Builder::Scope s(b, "head");
    logits = linear(h, kHidden, kClasses);
  }
  b.phase = ir::Phase::loss;
  ValueId logp = b.op("log_softmax", {logits}, {{"dim", int64_t{1}}}, "logp");
  ValueId loss = b.call("nll_loss", {logp, labels}, {}, "loss")[0];
  Step s{autodiff::build_training_step(std::move(g), loss, {}), {}};
  for (const std::string& name : relu_names) s.relu.push_back(s.graph.find(name));
  return s;
}

inline int32_t node_of(const ir::Graph& g, ValueId v) {
  for (size_t n = 0; n < g.nodes().size(); ++n)
    if (std::count(g.nodes()[n].outputs.begin(), g.nodes()[n].outputs.end(), v)) return static_cast<int32_t>(n);
  return -1;
}

}  // namespace mutwo::core_test
