// Convolutional-network ops: conv2d, batch_norm (training mode, updating the
// running statistics it is given), max_pool2d with indices and adaptive
// average pooling, each with a backward op that is the ATen backward kernel
// PyTorch's autograd calls (derivatives.yaml) on the same operands. Their
// kernels (cuDNN batch norm where PyTorch takes it) are in src/kernels/conv.cpp.
//
// Backward design: one node per op's backward (`conv2d_backward`,
// `batch_norm_backward`), as autograd makes one call; its outputs are the
// gradients that autodiff asked for, in input order, chosen by the attribute
// `output_mask` = [input, weight, bias] (0/1). So a first conv, whose input is
// data, computes only the weight gradient.
#include <algorithm>
#include <array>

#include "ops/attrs.h"
#include "ops/builder.h"
#include "ops/infer.h"

namespace mutwo::ops {

using ir::Shape;

Shape pair_attr(const ir::Node& n, std::string_view key, Shape dflt, int64_t min) {
  Shape v = n.attrs.has(key) ? n.attrs.ints(key) : dflt;
  MUTWO_CHECK(v.size() == 2, "{}: {} must have 2 entries (height, width), got {}", n.op, key, ir::shape_string(v));
  MUTWO_CHECK(v[0] >= min && v[1] >= min, "{}: {} entries must be >= {}, got {}", n.op, key, min,
              ir::shape_string(v));
  return v;
}
Shape stride_of(const ir::Node& n) { return pair_attr(n, "stride", {1, 1}, 1); }
Shape padding_of(const ir::Node& n) { return pair_attr(n, "padding", {0, 0}, 0); }
Shape dilation_of(const ir::Node& n) { return pair_attr(n, "dilation", {1, 1}, 1); }

std::array<bool, 3> output_mask(const ir::Node& n) {
  const Shape& m = n.attrs.ints("output_mask");
  MUTWO_CHECK(m.size() == 3, "{}: output_mask must have 3 entries (input, weight, bias), got {}", n.op,
              ir::shape_string(m));
  std::array<bool, 3> r{m[0] != 0, m[1] != 0, m[2] != 0};
  MUTWO_CHECK(r[0] || r[1] || r[2], "{}: output_mask asks for no gradient", n.op);
  return r;
}

namespace {

using ir::DType;
using ir::TensorType;
using ir::ValueId;

// --- helpers -----------------------------------------------------------------

// The dtype of batch-norm statistics: float for half types (as ATen's CUDA kernels make them).
DType stats_dtype(DType t) { return t == DType::f16 || t == DType::bf16 ? DType::f32 : t; }

// Builds `op(inputs){attrs + output_mask}` for the inputs that need a gradient
// (positions 0..2 of the forward node) and names each output "<input>.grad".
Grads backward_call(GradArgs& a, std::string_view op, std::vector<ValueId> inputs, ir::Attrs attrs) {
  std::array<bool, 3> mask{};
  for (size_t i = 0; i < 3; ++i) mask[i] = i < a.node.inputs.size() && a.in(i) != ir::kNoValue && a.needs(i);
  attrs.set("output_mask", Shape{mask[0], mask[1], mask[2]});
  Grads g(a.node.inputs.size(), ir::kNoValue);
  if (!(mask[0] || mask[1] || mask[2])) return g;
  size_t first = mask[0] ? 0 : mask[1] ? 1 : 2;
  std::vector<ValueId> outs = a.b.call(op, std::move(inputs), std::move(attrs), a.grad_name(first));
  size_t k = 0;
  for (size_t i = 0; i < 3; ++i) {
    if (!mask[i]) continue;
    g[i] = outs[k++];
    if (i != first) a.b.graph().rename(g[i], a.b.graph().unique_name(a.grad_name(i)));
  }
  return g;
}

// --- conv2d --------------------------------------------------------------------

// conv2d(x (N, C, H, W), w (O, C/groups, kH, kW), b? (O)) {stride, padding, dilation, groups}
// -> (N, O, H', W'), H' = (H + 2 pad - dil (kH - 1) - 1) / stride + 1.
TensorType conv2d_type(const ir::Node& n, const TensorType& x, const TensorType& w, const TensorType* b) {
  infer::require_float(x, "conv2d input");
  infer::require_rank(x, 4, "conv2d input (N, C, H, W)");
  infer::require_rank(w, 4, "conv2d weight (out_channels, in_channels/groups, kH, kW)");
  infer::require_same_dtype(x, w, "conv2d input and weight");
  int64_t groups = n.attrs.i_or("groups", 1);
  MUTWO_CHECK(groups >= 1, "conv2d: groups must be >= 1, got {}", groups);
  MUTWO_CHECK(w.shape[1] * groups == x.shape[1],
              "conv2d: input has {} channels but the weight {} with groups={} expects {}", x.shape[1],
              ir::shape_string(w.shape), groups, w.shape[1] * groups);
  MUTWO_CHECK(w.shape[0] % groups == 0, "conv2d: {} output channels are not divisible by groups={}", w.shape[0],
              groups);
  if (b) {
    infer::require_shape(*b, {w.shape[0]}, "conv2d bias");
    infer::require_same_dtype(x, *b, "conv2d input and bias");
  }
  Shape s = stride_of(n), p = padding_of(n), d = dilation_of(n);
  Shape out{x.shape[0], w.shape[0], 0, 0};
  for (size_t i = 0; i < 2; ++i) {
    int64_t span = d[i] * (w.shape[2 + i] - 1) + 1;  // the dilated kernel's extent
    int64_t padded = x.shape[2 + i] + 2 * p[i];
    MUTWO_CHECK(padded >= span, "conv2d: input {} is smaller than the kernel {}x{} (dilation {}, padding {})",
                ir::shape_string(x.shape), w.shape[2], w.shape[3], ir::shape_string(d), ir::shape_string(p));
    out[2 + i] = (padded - span) / s[i] + 1;
  }
  return {out, x.dtype};
}
Types conv2d_infer(const InferArgs& a) {
  return {conv2d_type(a.node, a.input(0), a.input(1), a.has(2) ? &a.input(2) : nullptr)};
}
// Multiply-adds: each output element sums C/groups * kH * kW products.
double conv2d_macs(const TensorType& w, const TensorType& out) {
  return static_cast<double>(out.numel()) * static_cast<double>(w.shape[1] * w.shape[2] * w.shape[3]);
}
double conv2d_flops(const FlopArgs& a) {
  double bias = a.in.size() > 2 && a.in[2] ? static_cast<double>(a.out[0]->numel()) : 0.0;
  return 2.0 * conv2d_macs(*a.in[1], *a.out[0]) + bias;
}
Grads conv2d_grad(GradArgs& a) {
  return backward_call(a, "conv2d_backward", {a.g(), a.in(0), a.in(1)}, a.node.attrs);
}

// conv2d_backward(g, x, w) {conv2d's attributes, output_mask} -> the asked-for
// of (d/dx, d/dw, d/db), from one at::convolution_backward call as autograd makes.
Types conv2d_backward_infer(const InferArgs& a) {
  const TensorType& x = a.input(1);
  const TensorType& w = a.input(2);
  TensorType out = conv2d_type(a.node, x, w, nullptr);
  infer::require_shape(a.input(0), out.shape, "conv2d_backward gradient");
  infer::require_same_dtype(a.input(0), x, "conv2d_backward gradient and input");
  auto mask = output_mask(a.node);
  Types t;
  if (mask[0]) t.push_back(x);
  if (mask[1]) t.push_back(w);
  if (mask[2]) t.push_back(TensorType{{w.shape[0]}, x.dtype});
  return t;
}
double conv2d_backward_flops(const FlopArgs& a) {
  auto mask = output_mask(a.node);
  double matmul = 2.0 * conv2d_macs(*a.in[2], *a.in[0]);  // each of d/dx and d/dw costs a forward
  return (mask[0] ? matmul : 0) + (mask[1] ? matmul : 0) + (mask[2] ? static_cast<double>(a.in[0]->numel()) : 0);
}

// --- batch_norm (training mode) ---------------------------------------------------

// x (N, C, ...) with more than one value per channel; weight/bias (C).
void check_batch_norm_input(const TensorType& x, std::string_view op) {
  infer::require_float(x, fmt::format("{} input", op));
  MUTWO_CHECK(x.rank() >= 2, "{}: input must be (N, C, ...), got {}", op, ir::to_string(x));
  MUTWO_CHECK(x.shape[1] > 0 && x.numel() / x.shape[1] > 1,
              "{}: training mode needs more than one value per channel, got input {}; use a larger batch or image",
              op, ir::to_string(x));
}
void check_channel_param(const TensorType& x, const TensorType& p, std::string_view what) {
  infer::require_shape(p, {x.shape[1]}, what);
  infer::require_same_dtype(x, p, what);
}

// batch_norm(x, w?, b?, running_mean?, running_var?) {eps, momentum}
// -> (y (x's type), save_mean (C), save_invstd (C)), training mode. Given the
// running statistics, it updates them in place in the same call, as PyTorch's
// BatchNorm does (running = (1 - m) running + m stat, unbiased variance). A
// recomputed clone leaves them out (the rewrite drops inputs written in place),
// so recomputation never updates them twice; y and the saved statistics do not
// depend on them.
Types batch_norm_infer(const InferArgs& a) {
  const TensorType& x = a.input(0);
  check_batch_norm_input(x, "batch_norm");
  if (a.has(1)) check_channel_param(x, a.input(1), "batch_norm weight");
  if (a.has(2)) check_channel_param(x, a.input(2), "batch_norm bias");
  MUTWO_CHECK(a.has(3) == a.has(4), "batch_norm: give both running_mean and running_var, or neither");
  for (size_t i : {size_t{3}, size_t{4}}) {
    if (!a.has(i)) continue;
    const char* what = i == 3 ? "batch_norm running_mean" : "batch_norm running_var";
    infer::require_shape(a.input(i), {x.shape[1]}, what);
    infer::require_dtype(a.input(i), stats_dtype(x.dtype), what);
  }
  double eps = a.node.attrs.f("eps");
  MUTWO_CHECK(eps > 0, "batch_norm: eps must be > 0, got {}", eps);
  double m = a.node.attrs.f_or("momentum", 0.1);
  MUTWO_CHECK(m >= 0 && m <= 1, "batch_norm: momentum must be in [0, 1], got {}", m);
  TensorType stats{{x.shape[1]}, stats_dtype(x.dtype)};
  return {x, stats, stats};
}
double batch_norm_flops(const FlopArgs& a) { return 5.0 * static_cast<double>(a.in[0]->numel()); }
Grads batch_norm_grad(GradArgs& a) {
  if (a.g(0) == ir::kNoValue) return Grads(a.node.inputs.size(), ir::kNoValue);  // only y is differentiable
  return backward_call(a, "batch_norm_backward",
                       {a.g(0), a.in(0), a.node.inputs.size() > 1 ? a.in(1) : ir::kNoValue, a.out(1), a.out(2)},
                       {{"eps", a.node.attrs.f("eps")}, {"has_bias", int64_t{a.node.inputs.size() > 2 && a.in(2) != ir::kNoValue}}});
}

// batch_norm_backward(g, x, w?, save_mean, save_invstd) {eps, output_mask, has_bias}
// -> the asked-for of (d/dx, d/dw, d/db), by the kernel the forward used:
// cudnn_batch_norm_backward or native_batch_norm_backward (training mode).
// has_bias (default 1) says whether the forward had a bias, which its choice of kernel depends on.
Types batch_norm_backward_infer(const InferArgs& a) {
  const TensorType& x = a.input(1);
  check_batch_norm_input(x, "batch_norm_backward");
  infer::require_shape(a.input(0), x.shape, "batch_norm_backward gradient");
  infer::require_same_dtype(a.input(0), x, "batch_norm_backward gradient and input");
  if (a.has(2)) check_channel_param(x, a.input(2), "batch_norm_backward weight");
  TensorType stats{{x.shape[1]}, stats_dtype(x.dtype)};
  infer::require_shape(a.input(3), stats.shape, "batch_norm_backward save_mean");
  infer::require_shape(a.input(4), stats.shape, "batch_norm_backward save_invstd");
  auto mask = output_mask(a.node);
  MUTWO_CHECK(!mask[1] || a.has(2), "batch_norm_backward: a weight gradient needs the weight as input 2");
  Types t;
  if (mask[0]) t.push_back(x);
  if (mask[1]) t.push_back(a.input(2));
  if (mask[2]) t.push_back(TensorType{{x.shape[1]}, x.dtype});
  return t;
}
double batch_norm_backward_flops(const FlopArgs& a) { return 8.0 * static_cast<double>(a.in[1]->numel()); }

// --- max_pool2d -----------------------------------------------------------------

// ATen's pooling_output_shape: floor (or ceil) division, and with ceil_mode the
// last window must start inside the input or its left padding.
int64_t pool_out(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil) {
  int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil ? stride - 1 : 0);
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil && (out - 1) * stride >= in + pad) --out;
  return out;
}

// max_pool2d(x (N, C, H, W)) {kernel, stride (default kernel), padding, dilation, ceil_mode}
// -> (out (N, C, H', W'), indices i64 (N, C, H', W')).
Types max_pool2d_infer(const InferArgs& a) {
  const ir::Node& n = a.node;
  const TensorType& x = a.input(0);
  infer::require_float(x, "max_pool2d input");
  infer::require_rank(x, 4, "max_pool2d input (N, C, H, W)");
  Shape k = pair_attr(n, "kernel", {}, 1);
  Shape s = pair_attr(n, "stride", k, 1), p = padding_of(n), d = dilation_of(n);
  bool ceil = n.attrs.i_or("ceil_mode", 0) != 0;
  Shape out{x.shape[0], x.shape[1], 0, 0};
  for (size_t i = 0; i < 2; ++i) {
    MUTWO_CHECK(p[i] <= k[i] / 2, "max_pool2d: padding {} must be at most half the kernel {}", ir::shape_string(p),
                ir::shape_string(k));
    out[2 + i] = pool_out(x.shape[2 + i], k[i], p[i], s[i], d[i], ceil);
    MUTWO_CHECK(out[2 + i] >= 1, "max_pool2d: input {} is too small for kernel {} (stride {}, padding {}, dilation {})",
                ir::shape_string(x.shape), ir::shape_string(k), ir::shape_string(s), ir::shape_string(p),
                ir::shape_string(d));
  }
  return {TensorType{out, x.dtype}, TensorType{out, DType::i64}};
}
double max_pool2d_flops(const FlopArgs& a) {
  const Shape& k = a.node.attrs.ints("kernel");
  return static_cast<double>(a.out[0]->numel() * k[0] * k[1]);  // comparisons
}
Grads max_pool2d_grad(GradArgs& a) {
  return {a.b.op("max_pool2d_backward", {a.g(0), a.in(0), a.out(1)}, a.node.attrs, a.grad_name(0))};
}

// max_pool2d_backward(g, x, indices) {max_pool2d's attributes} -> d/dx.
Types max_pool2d_backward_infer(const InferArgs& a) {
  std::vector<const TensorType*> fwd_in{a.in[1]};
  Types fwd = max_pool2d_infer(InferArgs{a.node, fwd_in});
  infer::require_shape(a.input(0), fwd[0].shape, "max_pool2d_backward gradient");
  infer::require_same_dtype(a.input(0), a.input(1), "max_pool2d_backward gradient and input");
  infer::require_dtype(a.input(2), DType::i64, "max_pool2d_backward indices");
  infer::require_shape(a.input(2), fwd[0].shape, "max_pool2d_backward indices");
  return {a.input(1)};
}

// --- adaptive_avg_pool2d ---------------------------------------------------------

// adaptive_avg_pool2d(x (N, C, H, W) or (C, H, W)) {output_size = [h, w]} -> (..., h, w).
// (PyTorch's nn.AdaptiveAvgPool2d computes a (1, 1) output as mean(-1, -2); this
// op always uses _adaptive_avg_pool2d, whose sums may round differently: ~1e-7.)
Types adaptive_avg_pool2d_infer(const InferArgs& a) {
  const TensorType& x = a.input(0);
  infer::require_float(x, "adaptive_avg_pool2d input");
  MUTWO_CHECK(x.rank() == 3 || x.rank() == 4, "adaptive_avg_pool2d input must be (N, C, H, W) or (C, H, W), got {}",
              ir::to_string(x));
  for (int64_t d : x.shape)
    MUTWO_CHECK(d > 0, "adaptive_avg_pool2d: input {} has an empty dimension", ir::to_string(x));
  Shape o = pair_attr(a.node, "output_size", {}, 1);
  Shape out = x.shape;
  out[out.size() - 2] = o[0];
  out[out.size() - 1] = o[1];
  return {TensorType{out, x.dtype}};
}
double adaptive_avg_pool2d_flops(const FlopArgs& a) { return static_cast<double>(a.in[0]->numel()); }
Grads adaptive_avg_pool2d_grad(GradArgs& a) {
  return {a.b.op("adaptive_avg_pool2d_backward", {a.g(0), a.in(0)}, a.node.attrs, a.grad_name(0))};
}

// adaptive_avg_pool2d_backward(g, x) {output_size} -> d/dx (x is needed for its shape, as autograd saves it).
Types adaptive_avg_pool2d_backward_infer(const InferArgs& a) {
  std::vector<const TensorType*> fwd_in{a.in[1]};
  Types fwd = adaptive_avg_pool2d_infer(InferArgs{a.node, fwd_in});
  infer::require_shape(a.input(0), fwd[0].shape, "adaptive_avg_pool2d_backward gradient");
  infer::require_same_dtype(a.input(0), a.input(1), "adaptive_avg_pool2d_backward gradient and input");
  return {a.input(1)};
}

}  // namespace

void add_conv_ops(std::vector<OpDef>& t) {
  const AttrSpec stride{"stride", kIntsAttr, kOptional}, padding{"padding", kIntsAttr, kOptional},
      dilation{"dilation", kIntsAttr, kOptional}, mask{"output_mask", kIntsAttr};
  const std::vector<AttrSpec> conv{stride, padding, dilation, {"groups", kIntAttr, kOptional}};
  const std::vector<AttrSpec> pool{{"kernel", kIntsAttr}, stride, padding, dilation, {"ceil_mode", kIntAttr, kOptional}};
  const std::vector<AttrSpec> adaptive{{"output_size", kIntsAttr}};
  std::vector<AttrSpec> conv_backward = conv;
  conv_backward.push_back(mask);
  // name, tags, inputs (min, max), shape inference, derivative, FLOPs, attributes, inputs written in place
  t.push_back({"conv2d", kHeavy, 2, 3, conv2d_infer, conv2d_grad, conv2d_flops, conv});
  t.push_back({"conv2d_backward", kHeavy, 3, 3, conv2d_backward_infer, nullptr, conv2d_backward_flops, conv_backward});
  t.push_back({"batch_norm", 0, 1, 5, batch_norm_infer, batch_norm_grad, batch_norm_flops,
               {{"eps", kNumberAttr}, {"momentum", kNumberAttr, kOptional}}, {3, 4}});
  t.push_back({"batch_norm_backward", 0, 5, 5, batch_norm_backward_infer, nullptr, batch_norm_backward_flops,
               {{"eps", kNumberAttr}, mask, {"has_bias", kIntAttr, kOptional}}});
  t.push_back({"max_pool2d", kReduction, 1, 1, max_pool2d_infer, max_pool2d_grad, max_pool2d_flops, pool});
  t.push_back({"max_pool2d_backward", 0, 3, 3, max_pool2d_backward_infer, nullptr, nullptr, pool});
  t.push_back({"adaptive_avg_pool2d", kReduction, 1, 1, adaptive_avg_pool2d_infer, adaptive_avg_pool2d_grad,
               adaptive_avg_pool2d_flops, adaptive});
  t.push_back({"adaptive_avg_pool2d_backward", 0, 2, 2, adaptive_avg_pool2d_backward_infer, nullptr, nullptr, adaptive});
}

}  // namespace mutwo::ops
