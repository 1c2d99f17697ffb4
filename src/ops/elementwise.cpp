// Pointwise ops: add, mul, full, relu, gelu, and dropout as two ops (a random
// mask, and a pointwise mask-and-scale); rng_save, the generator state a
// recomputed random node replays; accumulate, the sum of a parameter's
// gradient contributions.
// Their kernels are in src/kernels/elementwise.cpp.
#include "ops/attrs.h"
#include "ops/builder.h"
#include "ops/infer.h"

namespace mutwo::ops {

std::string gelu_mode(const ir::Node& n) { return n.attrs.has("approximate") ? n.attrs.s("approximate") : "none"; }

namespace {

using ir::TensorType;
using ir::ValueId;

// Two floating inputs of one dtype, broadcast together.
Types binary_broadcast(const InferArgs& a) {
  infer::require_float(a.input(0), "left operand");
  infer::require_same_dtype(a.input(0), a.input(1), "operands");
  return {TensorType{infer::broadcast(a.input(0).shape, a.input(1).shape), a.input(0).dtype}};
}

// add: out = a + b (broadcast). d/da = d/db = g, reduced to each shape by autodiff.
Grads add_grad(GradArgs& a) { return {a.g(), a.g()}; }

// accumulate(a, b) = a + b of one shape: autodiff's sum of two gradient
// contributions to one parameter (a tied weight: BERT's word embedding and MLM
// decoder). accumulate_ writes it over a where a dies there
// (analysis::reinplace), so the sum takes no third buffer of the parameter's
// size. Same bits as add.
Types accumulate_infer(const InferArgs& a) {
  infer::require_float(a.input(0), "accumulate: the gradient");
  infer::require_shape(a.input(1), a.input(0).shape, "accumulate: the gradient added");
  infer::require_same_dtype(a.input(0), a.input(1), "accumulate: the two gradients");
  return {a.input(0)};
}

// mul: out = a * b (broadcast).
Grads mul_grad(GradArgs& a) {
  Grads g(2, ir::kNoValue);
  if (a.needs(0)) g[0] = a.b.op("mul", {a.g(), a.in(1)}, {}, a.grad_name(0));
  if (a.needs(1)) g[1] = a.b.op("mul", {a.g(), a.in(0)}, {}, a.grad_name(1));
  return g;
}

// full {shape, value, dtype}: a constant, e.g. the seed gradient of the loss.
Types full_infer(const InferArgs& a) {
  auto dt = ir::parse_dtype(a.node.attrs.s("dtype"));
  MUTWO_CHECK(dt.has_value(), "full: unknown dtype '{}'", a.node.attrs.s("dtype"));
  for (int64_t d : a.node.attrs.ints("shape")) MUTWO_CHECK(d >= 0, "full: negative dimension {}", d);
  return {TensorType{a.node.attrs.ints("shape"), *dt}};
}

// relu: d/dx = threshold_backward(g, out, 0), from the output as PyTorch saves it.
Grads relu_grad(GradArgs& a) { return {a.b.op("relu_backward", {a.g(), a.out(0)}, {}, a.grad_name(0))}; }

// gelu {approximate: "none" | "tanh"}: d/dx = gelu_backward(g, x).
Types gelu_infer(const InferArgs& a) {
  auto m = gelu_mode(a.node);
  MUTWO_CHECK(m == "none" || m == "tanh", "gelu: approximate must be \"none\" or \"tanh\", got \"{}\"", m);
  return infer::same_as_input0(a);
}
Grads gelu_grad(GradArgs& a) {
  return {a.b.op("gelu_backward", {a.g(), a.in(0)}, a.node.attrs, a.grad_name(0))};
}
Types gelu_backward_infer(const InferArgs& a) {
  gelu_infer(a);
  return infer::pair_same_shape(a);
}

// dropout_mask {p}: a bool tensor of x's shape, true with probability 1-p.
// Random: recomputed only with its generator state (rng_save below), so a
// recomputation draws the forward pass's mask.
Types dropout_mask_infer(const InferArgs& a) {
  double p = a.node.attrs.f("p");
  MUTWO_CHECK(p >= 0 && p < 1, "dropout: p must be in [0, 1), got {}", p);
  return {TensorType{a.input(0).shape, ir::DType::boolean}};
}

// dropout_apply {p}: x * mask * (1/(1-p)), the arithmetic of PyTorch's
// native_dropout_backward. Its own derivative is the same op on the gradient.
Types dropout_apply_infer(const InferArgs& a) {
  infer::require_float(a.input(0), "dropout input");
  infer::require_dtype(a.input(1), ir::DType::boolean, "dropout mask");
  infer::require_shape(a.input(1), a.input(0).shape, "dropout mask");
  dropout_mask_infer(a);
  return {a.input(0)};
}
Grads dropout_apply_grad(GradArgs& a) {
  if (!a.needs(0)) return {ir::kNoValue, ir::kNoValue};
  return {a.b.op("dropout_apply", {a.g(), a.in(1)}, a.node.attrs, a.grad_name(0)), ir::kNoValue};
}

// rng_save: the executor's generator state where the node runs, without
// drawing (rewrite::insert_recomputation puts one just before every random
// node it recomputes; the clone takes it as its last input, attribute
// rng_replay). i64[kRngStateWords]: CPU's Mersenne Twister state, or CUDA's
// Philox seed and offset in its first two words.
Types rng_save_infer(const InferArgs&) { return {rng_state_type()}; }
double no_flops(const FlopArgs&) { return 0; }

double gelu_flops(const FlopArgs& a) { return 8.0 * static_cast<double>(a.out[0]->numel()); }

}  // namespace

void add_elementwise_ops(std::vector<OpDef>& t) {
  // name, tags, inputs (min, max), shape inference, derivative, FLOPs, attributes
  t.push_back({"add", kPointwise, 2, 2, binary_broadcast, add_grad, nullptr});
  t.push_back({"accumulate", kPointwise, 2, 2, accumulate_infer, nullptr, nullptr, {}, {}, nullptr, "accumulate_"});
  t.push_back({"accumulate_", kPointwise | kView | kOverwrite, 2, 2, accumulate_infer, nullptr, nullptr});
  t.push_back({"mul", kPointwise, 2, 2, binary_broadcast, mul_grad, nullptr});
  t.push_back({"full", 0, 0, 0, full_infer, nullptr, nullptr,
               {{"shape", kIntsAttr}, {"value", kNumberAttr}, {"dtype", kStringAttr}}});
  t.push_back({"relu", kPointwise, 1, 1, infer::same_as_input0, relu_grad, nullptr});
  t.push_back({"relu_backward", kPointwise, 2, 2, infer::pair_same_shape, nullptr, nullptr});
  t.push_back({"gelu", kPointwise, 1, 1, gelu_infer, gelu_grad, gelu_flops, {{"approximate", kStringAttr, kOptional}}});
  t.push_back({"gelu_backward", kPointwise, 2, 2, gelu_backward_infer, nullptr, gelu_flops,
               {{"approximate", kStringAttr, kOptional}}});
  t.push_back({"dropout_mask", kRandom, 1, 1, dropout_mask_infer, nullptr, nullptr, {{"p", kNumberAttr}}});
  t.push_back({"dropout_apply", kPointwise, 2, 2, dropout_apply_infer, dropout_apply_grad, nullptr, {{"p", kNumberAttr}}});
  t.push_back({"rng_save", kRngState, 0, 0, rng_save_infer, nullptr, no_flops});
}

}  // namespace mutwo::ops
