// Kernels of the pointwise ops (rows in src/ops/elementwise.cpp): add, mul,
// full, relu, gelu, dropout's random mask and mask-and-scale, and rng_save
// (the state a recomputed random node replays: rng_state.h).
#include "kernels/kernel.h"
#include "kernels/kernels.h"
#include "kernels/rng_state.h"
#include "ops/attrs.h"

namespace mutwo::kernels {

namespace {

void add_kernel(KernelCall& k) { k.output(0) = at::add(k.input(0), k.input(1)); }
void accumulate_inplace_kernel(KernelCall& k) { k.output(0) = k.input(0).add_(k.input(1)); }
void mul_kernel(KernelCall& k) { k.output(0) = at::mul(k.input(0), k.input(1)); }

void full_kernel(KernelCall& k) {
  auto dt = to_aten(*ir::parse_dtype(k.node.attrs.s("dtype")));
  k.output(0) = at::full(k.node.attrs.ints("shape"), k.node.attrs.f("value"), k.options.dtype(dt));
}

void relu_kernel(KernelCall& k) { k.output(0) = at::relu(k.input(0)); }
void relu_backward_kernel(KernelCall& k) { k.output(0) = at::threshold_backward(k.input(0), k.input(1), 0); }

void gelu_kernel(KernelCall& k) { k.output(0) = at::gelu(k.input(0), ops::gelu_mode(k.node)); }
void gelu_backward_kernel(KernelCall& k) {
  k.output(0) = at::gelu_backward(k.input(0), k.input(1), ops::gelu_mode(k.node));
}

void dropout_mask_kernel(KernelCall& k) {
  double p = k.node.attrs.f("p");
  k.output(0) = at::empty(k.input(0).sizes(), k.input(0).options().dtype(at::kBool)).bernoulli_(1.0 - p, k.generator);
}

// dropout_apply {p}: x * mask * (1/(1-p)), the arithmetic of PyTorch's
// native_dropout_backward. On CUDA that kernel itself (one fused pass; a where
// and a scale were two, 0.62 against 0.23 ms on GPT-2's attention
// probabilities); on CPU, where ATen's makes a temporary of x's size, a where
// and an in-place scale.
double dropout_scale(const ir::Node& n) { return 1.0 / (1.0 - n.attrs.f("p")); }
void dropout_apply_kernel(KernelCall& k) {
  const at::Tensor& x = k.input(0);
  if (x.is_cuda())
    k.output(0) = at::native_dropout_backward(x, k.input(1), dropout_scale(k.node));
  else
    k.output(0) = at::where(k.input(1), x, 0.0).mul_(dropout_scale(k.node));
}

void rng_save_kernel(KernelCall& k) { k.output(0) = save_rng_state(k.generator); }

}  // namespace

void add_elementwise_kernels(KernelRows& t) {
  t.push_back({"add", {add_kernel}});
  t.push_back({"accumulate", {add_kernel}});
  t.push_back({"accumulate_", {accumulate_inplace_kernel}});
  t.push_back({"mul", {mul_kernel}});
  t.push_back({"full", {full_kernel}});
  t.push_back({"relu", {relu_kernel}});
  t.push_back({"relu_backward", {relu_backward_kernel}});
  t.push_back({"gelu", {gelu_kernel}});
  t.push_back({"gelu_backward", {gelu_backward_kernel}});
  t.push_back({"dropout_mask", {dropout_mask_kernel}});
  t.push_back({"dropout_apply", {dropout_apply_kernel}});
  t.push_back({"rng_save", {rng_save_kernel}});
}

}  // namespace mutwo::kernels
