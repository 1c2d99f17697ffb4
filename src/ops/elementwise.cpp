// Pointwise ops: add, mul, full, relu, gelu, and dropout as two ops (a random
// mask that is kept, and a pointwise mask-and-scale that may be recomputed).
#include "ops/builder.h"
#include "ops/infer.h"
#include "ops/kernel.h"

namespace mutwo::ops {

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
void add_kernel(KernelCall& k) { k.output(0) = at::add(k.input(0), k.input(1)); }

// mul: out = a * b (broadcast).
Grads mul_grad(GradArgs& a) {
  Grads g(2, ir::kNoValue);
  if (a.needs(0)) g[0] = a.b.op("mul", {a.g(), a.in(1)}, {}, a.grad_name(0));
  if (a.needs(1)) g[1] = a.b.op("mul", {a.g(), a.in(0)}, {}, a.grad_name(1));
  return g;
}
void mul_kernel(KernelCall& k) { k.output(0) = at::mul(k.input(0), k.input(1)); }

// full {shape, value, dtype}: a constant, e.g. the seed gradient of the loss.
Types full_infer(const InferArgs& a) {
  auto dt = ir::parse_dtype(a.node.attrs.s("dtype"));
  MUTWO_CHECK(dt.has_value(), "full: unknown dtype '{}'", a.node.attrs.s("dtype"));
  for (int64_t d : a.node.attrs.ints("shape")) MUTWO_CHECK(d >= 0, "full: negative dimension {}", d);
  return {TensorType{a.node.attrs.ints("shape"), *dt}};
}
void full_kernel(KernelCall& k) {
  auto dt = to_aten(*ir::parse_dtype(k.node.attrs.s("dtype")));
  k.output(0) = at::full(k.node.attrs.ints("shape"), k.node.attrs.f("value"), k.options.dtype(dt));
}

// relu: d/dx = threshold_backward(g, out, 0), from the output as PyTorch saves it.
Grads relu_grad(GradArgs& a) { return {a.b.op("relu_backward", {a.g(), a.out(0)}, {}, a.grad_name(0))}; }
void relu_kernel(KernelCall& k) { k.output(0) = at::relu(k.input(0)); }
void relu_backward_kernel(KernelCall& k) { k.output(0) = at::threshold_backward(k.input(0), k.input(1), 0); }

// gelu {approximate: "none" | "tanh"}: d/dx = gelu_backward(g, x).
std::string gelu_mode(const ir::Node& n) { return n.attrs.has("approximate") ? n.attrs.s("approximate") : "none"; }
Types gelu_infer(const InferArgs& a) {
  auto m = gelu_mode(a.node);
  MUTWO_CHECK(m == "none" || m == "tanh", "gelu: approximate must be \"none\" or \"tanh\", got \"{}\"", m);
  return infer::same_as_input0(a);
}
Grads gelu_grad(GradArgs& a) {
  return {a.b.op("gelu_backward", {a.g(), a.in(0)}, a.node.attrs, a.grad_name(0))};
}
void gelu_kernel(KernelCall& k) { k.output(0) = at::gelu(k.input(0), gelu_mode(k.node)); }
void gelu_backward_kernel(KernelCall& k) {
  k.output(0) = at::gelu_backward(k.input(0), k.input(1), gelu_mode(k.node));
}
Types gelu_backward_infer(const InferArgs& a) {
  gelu_infer(a);
  return infer::pair_same_shape(a);
}

// dropout_mask {p}: a bool tensor of x's shape, true with probability 1-p.
// Random: kept, never recomputed, so recomputation reproduces the same masks.
Types dropout_mask_infer(const InferArgs& a) {
  double p = a.node.attrs.f("p");
  MUTWO_CHECK(p >= 0 && p < 1, "dropout: p must be in [0, 1), got {}", p);
  return {TensorType{a.input(0).shape, ir::DType::boolean}};
}
void dropout_mask_kernel(KernelCall& k) {
  double p = k.node.attrs.f("p");
  k.output(0) = at::empty(k.input(0).sizes(), k.input(0).options().dtype(at::kBool)).bernoulli_(1.0 - p, k.generator);
}

// dropout_apply {p}: x * mask * (1/(1-p)), the arithmetic of PyTorch's
// native_dropout_backward. On CUDA that kernel itself (one fused pass; a where
// and a scale were two, 0.62 against 0.23 ms on GPT-2's attention
// probabilities); on CPU, where ATen's makes a temporary of x's size, a where
// and an in-place scale. Its own derivative is the same op on the gradient.
double dropout_scale(const ir::Node& n) { return 1.0 / (1.0 - n.attrs.f("p")); }
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
void dropout_apply_kernel(KernelCall& k) {
  const at::Tensor& x = k.input(0);
  if (x.is_cuda())
    k.output(0) = at::native_dropout_backward(x, k.input(1), dropout_scale(k.node));
  else
    k.output(0) = at::where(k.input(1), x, 0.0).mul_(dropout_scale(k.node));
}

double gelu_flops(const FlopArgs& a) { return 8.0 * static_cast<double>(a.out[0]->numel()); }

}  // namespace

void add_elementwise_ops(std::vector<OpDef>& t) {
  // name, tags, inputs (min, max), shape inference, derivative, FLOPs, kernel
  t.push_back({"add", kPointwise, 2, 2, binary_broadcast, add_grad, nullptr, add_kernel});
  t.push_back({"mul", kPointwise, 2, 2, binary_broadcast, mul_grad, nullptr, mul_kernel});
  t.push_back({"full", 0, 0, 0, full_infer, nullptr, nullptr, full_kernel});
  t.push_back({"relu", kPointwise, 1, 1, infer::same_as_input0, relu_grad, nullptr, relu_kernel});
  t.push_back({"relu_backward", kPointwise, 2, 2, infer::pair_same_shape, nullptr, nullptr, relu_backward_kernel});
  t.push_back({"gelu", kPointwise, 1, 1, gelu_infer, gelu_grad, gelu_flops, gelu_kernel});
  t.push_back({"gelu_backward", kPointwise, 2, 2, gelu_backward_infer, nullptr, gelu_flops, gelu_backward_kernel});
  t.push_back({"dropout_mask", kRandom, 1, 1, dropout_mask_infer, nullptr, nullptr, dropout_mask_kernel});
  t.push_back({"dropout_apply", kPointwise, 2, 2, dropout_apply_infer, dropout_apply_grad, nullptr,
               dropout_apply_kernel});
}

}  // namespace mutwo::ops
