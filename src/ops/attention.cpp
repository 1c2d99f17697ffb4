// Transformer op rows, the arithmetic: embedding, layer_norm, softmax, batched
// matmul with transpose flags, causal and padding masks, scaling by a constant and tanh,
// each differentiated with the ATen backward kernel PyTorch's autograd uses.
// What eager attention needs (matmul -> scale -> mask -> softmax -> dropout ->
// matmul); the layout ops (permute, contiguous, split, cat) and the token
// helpers (arange, shift_left, int_constant) are in layout.cpp. Their kernels
// are in src/kernels/attention.cpp.
#include <array>
#include <cmath>

#include "ops/attrs.h"
#include "ops/builder.h"
#include "ops/infer.h"

namespace mutwo::ops {

int64_t padding_idx(const ir::Node& n) { return n.attrs.i_or("padding_idx", -1); }
double ln_eps(const ir::Node& n) { return n.attrs.f_or("eps", 1e-5); }
std::array<bool, 3> ln_mask(const ir::Node& n) {
  const auto& m = n.attrs.ints("mask");
  return {m[0] != 0, m[1] != 0, m[2] != 0};
}

namespace {

using ir::DType;
using ir::Shape;
using ir::TensorType;
using ir::ValueId;

// Names a multi-output backward node's output after the input it is the gradient of.

// ---- embedding(weight (V, C), ids (...) i64|i32) {padding_idx = -1: none} -> (..., C)
// d/dweight = embedding_dense_backward(g, ids, V, padding_idx) (the padding
// row gets no gradient, as torch.nn.Embedding(padding_idx=...)); ids get none.
void require_ids(const TensorType& t, std::string_view what) {
  MUTWO_CHECK(t.dtype == DType::i64 || t.dtype == DType::i32, "{} must be token ids (element type i64 or i32), got {}",
              what, ir::to_string(t));
}
void require_padding_idx(int64_t p, int64_t rows) {
  MUTWO_CHECK(p >= -1 && p < rows, "embedding: padding_idx {} is out of range for {} rows (-1 means none)", p, rows);
}
Types embedding_infer(const InferArgs& a) {
  const TensorType& w = a.input(0);
  infer::require_float(w, "embedding weight");
  infer::require_rank(w, 2, "embedding weight (rows, dim)");
  require_ids(a.input(1), "embedding indices");
  require_padding_idx(padding_idx(a.node), w.shape[0]);
  Shape out = a.input(1).shape;
  out.push_back(w.shape[1]);  // (..., C)
  return {TensorType{out, w.dtype}};
}
Grads embedding_grad(GradArgs& a) {
  Grads g(2, ir::kNoValue);
  if (a.needs(0))
    g[0] = a.b.op("embedding_backward", {a.g(), a.in(1)},
                  {{"num_weights", a.b.shape(a.in(0))[0]}, {"padding_idx", padding_idx(a.node)}}, a.grad_name(0));
  return g;
}

// embedding_backward(g (..., C), ids (...)) {num_weights, padding_idx} -> (num_weights, C)
Types embedding_backward_infer(const InferArgs& a) {
  const TensorType& g = a.input(0);
  infer::require_float(g, "embedding gradient");
  require_ids(a.input(1), "embedding indices");
  Shape lead(g.shape.begin(), g.shape.end() - (g.rank() ? 1 : 0));
  MUTWO_CHECK(g.rank() >= 1 && lead == a.input(1).shape, "embedding_backward: gradient {} does not match indices {}",
              ir::to_string(g), ir::to_string(a.input(1)));
  int64_t rows = a.node.attrs.i("num_weights");
  MUTWO_CHECK(rows > 0, "embedding_backward: num_weights must be positive, got {}", rows);
  require_padding_idx(padding_idx(a.node), rows);
  return {TensorType{{rows, g.shape.back()}, g.dtype}};
}

// ---- layer_norm(x (..., C), weight (C), bias (C)) {eps = 1e-5} -> (y, mean, rstd)
// Normalises over the last dimension (torch.nn.LayerNorm(C)) with
// native_layer_norm; mean and rstd, shaped (..., 1), are what its backward
// needs. They are f32 for f16/bf16 input (CUDA's accumulation type).
Shape stat_shape(Shape s) {
  s.back() = 1;
  return s;
}
DType stat_dtype(DType d) { return d == DType::f16 || d == DType::bf16 ? DType::f32 : d; }
void require_ln_params(const InferArgs& a, const TensorType& x, size_t w, size_t b) {
  infer::require_shape(a.input(w), {x.shape.back()}, "layer_norm weight");
  infer::require_shape(a.input(b), {x.shape.back()}, "layer_norm bias");
  infer::require_same_dtype(x, a.input(w), "layer_norm input and weight");
  infer::require_same_dtype(x, a.input(b), "layer_norm input and bias");
}
Types layer_norm_infer(const InferArgs& a) {
  const TensorType& x = a.input(0);
  infer::require_float(x, "layer_norm input");
  MUTWO_CHECK(x.rank() >= 1, "layer_norm: the input needs at least one dimension, got {}", ir::to_string(x));
  require_ln_params(a, x, 1, 2);
  MUTWO_CHECK(ln_eps(a.node) > 0, "layer_norm: eps must be positive, got {}", ln_eps(a.node));
  TensorType stat{stat_shape(x.shape), stat_dtype(x.dtype)};
  return {x, stat, stat};
}
Grads layer_norm_grad(GradArgs& a) {
  MUTWO_ASSERT(a.g(0) != ir::kNoValue, "layer_norm: a gradient reached mean/rstd only");
  std::vector<int64_t> mask{a.needs(0), a.needs(1), a.needs(2)};
  ir::Attrs attrs = a.node.attrs;
  attrs.set("mask", mask);
  size_t first = mask[0] ? 0 : mask[1] ? 1 : 2;
  auto outs = a.b.call("layer_norm_backward", {a.g(0), a.in(0), a.out(1), a.out(2), a.in(1), a.in(2)}, attrs,
                       a.grad_name(first));
  Grads g(3, ir::kNoValue);
  size_t o = 0;
  for (size_t i = 0; i < 3; ++i)
    if (mask[i]) {
      g[i] = outs[o++];
      name_gradient(a, g[i], i);
    }
  return g;
}
double layer_norm_flops(const FlopArgs& a) { return 8.0 * static_cast<double>(a.in[0]->numel()); }

// layer_norm_backward(g, x, mean, rstd, weight, bias) {eps, mask: [dx, dweight, dbias]}
// -> one output per mask entry that is set, in that order.
Types layer_norm_backward_infer(const InferArgs& a) {
  const TensorType& x = a.input(1);
  infer::require_float(x, "layer_norm input");
  MUTWO_CHECK(x.rank() >= 1, "layer_norm_backward: the input needs at least one dimension");
  infer::require_shape(a.input(0), x.shape, "layer_norm gradient");
  infer::require_same_dtype(a.input(0), x, "layer_norm gradient and input");
  TensorType stat{stat_shape(x.shape), stat_dtype(x.dtype)};
  MUTWO_CHECK(a.input(2) == stat && a.input(3) == stat, "layer_norm_backward: mean and rstd must be {}, got {} and {}",
              ir::to_string(stat), ir::to_string(a.input(2)), ir::to_string(a.input(3)));
  require_ln_params(a, x, 4, 5);
  MUTWO_CHECK(a.node.attrs.ints("mask").size() == 3,
              "layer_norm_backward: mask must list 3 flags [input, weight, bias]");
  auto m = ln_mask(a.node);
  MUTWO_CHECK(m[0] || m[1] || m[2], "layer_norm_backward: mask asks for no gradient");
  Types out;
  if (m[0]) out.push_back(x);
  if (m[1]) out.push_back(a.input(4));
  if (m[2]) out.push_back(a.input(5));
  return out;
}

// ---- softmax {dim}: _softmax; d/dx = _softmax_backward_data(g, out), from the output.
Types softmax_infer(const InferArgs& a) {
  infer::require_float(a.input(0), "softmax input");
  infer::dim(a.node.attrs.i("dim"), a.input(0).rank(), "softmax");
  return {a.input(0)};
}
Grads softmax_grad(GradArgs& a) {
  return {a.b.op("softmax_backward", {a.g(), a.out(0)}, a.node.attrs, a.grad_name(0))};
}
Types softmax_backward_infer(const InferArgs& a) {
  infer::pair_same_shape(a);
  return softmax_infer(a);
}
double softmax_flops(const FlopArgs& a) { return 5.0 * static_cast<double>(a.out[0]->numel()); }

// ---- matmul(a, b) {transpose_a = 0, transpose_b = 0}: op(a) @ op(b) over equal
// leading (batch) dimensions, no broadcasting: a (..., M, K) or, transposed,
// (..., K, M); b (..., K, N) or (..., N, K) -> (..., M, N). The flags let the
// backward (and q @ k^T) use transposed operands without materialising them:
// bmm reads a transposed view directly. Derivatives, as bmm's autograd formula
// (grad @ b^T, a^T @ grad) written with flags:
//   dA = ta ? op(b) @ g^T : g @ op(b)^T      dB = tb ? g^T @ op(a) : op(a)^T @ g
struct MatmulDims {
  bool ta, tb;
  int64_t m, k, n;
};
MatmulDims matmul_dims(const ir::Node& node, const Shape& a, const Shape& b) {
  MatmulDims d{node.attrs.i_or("transpose_a", 0) != 0, node.attrs.i_or("transpose_b", 0) != 0, 0, 0, 0};
  size_t r = a.size();
  d.m = d.ta ? a[r - 1] : a[r - 2];
  d.k = d.ta ? a[r - 2] : a[r - 1];
  d.n = d.tb ? b[r - 2] : b[r - 1];
  return d;
}
Types matmul_infer(const InferArgs& a) {
  const TensorType& x = a.input(0);
  const TensorType& y = a.input(1);
  infer::require_float(x, "matmul left operand");
  infer::require_same_dtype(x, y, "matmul operands");
  MUTWO_CHECK(x.rank() >= 2 && x.rank() == y.rank(),
              "matmul: operands must have the same rank (at least 2), got {} and {}", ir::to_string(x),
              ir::to_string(y));
  MUTWO_CHECK(std::equal(x.shape.begin(), x.shape.end() - 2, y.shape.begin()),
              "matmul: leading (batch) dimensions differ: {} and {} (no broadcasting)", ir::to_string(x),
              ir::to_string(y));
  MatmulDims d = matmul_dims(a.node, x.shape, y.shape);
  int64_t kb = d.tb ? y.shape.back() : y.shape[y.shape.size() - 2];
  MUTWO_CHECK(d.k == kb, "matmul: inner dimensions differ ({} vs {}) for {}{} @ {}{}", d.k, kb, ir::to_string(x),
              d.ta ? "^T" : "", ir::to_string(y), d.tb ? "^T" : "");
  Shape out(x.shape.begin(), x.shape.end() - 2);
  out.push_back(d.m);
  out.push_back(d.n);
  return {TensorType{out, x.dtype}};
}
ir::Attrs matmul_attrs(bool ta, bool tb) {
  return {{"transpose_a", int64_t{ta}}, {"transpose_b", int64_t{tb}}};
}
Grads matmul_grad(GradArgs& a) {
  const ir::Node& n = a.node;
  bool ta = n.attrs.i_or("transpose_a", 0) != 0, tb = n.attrs.i_or("transpose_b", 0) != 0;
  Grads g(2, ir::kNoValue);
  if (a.needs(0))
    g[0] = ta ? a.b.op("matmul", {a.in(1), a.g()}, matmul_attrs(tb, true), a.grad_name(0))
              : a.b.op("matmul", {a.g(), a.in(1)}, matmul_attrs(false, !tb), a.grad_name(0));
  if (a.needs(1))
    g[1] = tb ? a.b.op("matmul", {a.g(), a.in(0)}, matmul_attrs(true, ta), a.grad_name(1))
              : a.b.op("matmul", {a.in(0), a.g()}, matmul_attrs(!ta, false), a.grad_name(1));
  return g;
}
double matmul_flops(const FlopArgs& a) {
  MatmulDims d = matmul_dims(a.node, a.in[0]->shape, a.in[1]->shape);
  return 2.0 * static_cast<double>(a.out[0]->numel()) * static_cast<double>(d.k);
}

// ---- causal_mask_fill(x (..., T, S)) {value}: x with every entry above the
// causal diagonal (key j > query i + S - T) set to `value`; by default the
// lowest finite value of the element type, as Hugging Face's eager attention
// does (torch.where(causal_mask, w, finfo.min)). Its derivative is the same op
// on the gradient with value 0.
Types causal_mask_fill_infer(const InferArgs& a) {
  infer::require_float(a.input(0), "causal_mask_fill input");
  MUTWO_CHECK(a.input(0).rank() >= 2, "causal_mask_fill: input must be (..., queries, keys), got {}",
              ir::to_string(a.input(0)));
  const Shape& s = a.input(0).shape;
  MUTWO_CHECK(s[s.size() - 2] <= s.back(), "causal_mask_fill: more queries ({}) than keys ({})", s[s.size() - 2],
              s.back());
  return {a.input(0)};
}
Grads causal_mask_fill_grad(GradArgs& a) {
  return {a.b.op("causal_mask_fill", {a.g()}, {{"value", 0.0}}, a.grad_name(0))};
}

// ---- padding_mask_fill(x (B, ..., S), mask (B, S) i64) {value}: x with every
// entry whose key position s has mask[b, s] == 0 (padding, Hugging Face's
// attention_mask convention) set to `value`; by default the lowest finite value
// of a float x, as the additive mask HF's BERT adds (finfo.min) leaves it:
// softmax then gives those keys weight 0. An integer x (the MLM labels, value
// -100 for ignore_index) needs `value`. Derivative: the same op on the gradient
// with value 0 (where softmax's derivative is 0 already).
Types padding_mask_fill_infer(const InferArgs& a) {
  const TensorType& x = a.input(0);
  const TensorType& mask = a.input(1);
  MUTWO_CHECK(x.rank() >= 2, "padding_mask_fill: input must be (batch, ..., keys), got {}", ir::to_string(x));
  MUTWO_CHECK(ir::is_floating(x.dtype) || a.node.attrs.has("value"),
              "padding_mask_fill: an integer input needs a value to fill with");
  infer::require_dtype(mask, DType::i64, "padding mask");
  infer::require_shape(mask, Shape{x.shape.front(), x.shape.back()}, "padding mask (batch, keys)");
  return {x};
}
Grads padding_mask_fill_grad(GradArgs& a) {
  if (!a.needs(0)) return {ir::kNoValue, ir::kNoValue};
  return {a.b.op("padding_mask_fill", {a.g(), a.in(1)}, {{"value", 0.0}}, a.grad_name(0)), ir::kNoValue};
}

// ---- scale(x) {alpha}: x * alpha (attention's 1/sqrt(head_dim)); d/dx = g * alpha.
Types scale_infer(const InferArgs& a) {
  double alpha = a.node.attrs.f("alpha");
  MUTWO_CHECK(std::isfinite(alpha), "scale: alpha must be finite, got {}", alpha);
  return infer::same_as_input0(a);
}
Grads scale_grad(GradArgs& a) { return {a.b.op("scale", {a.g()}, a.node.attrs, a.grad_name(0))}; }

// ---- tanh: d/dx = tanh_backward(g, out), from the output as PyTorch saves it.
Grads tanh_grad(GradArgs& a) { return {a.b.op("tanh_backward", {a.g(), a.out(0)}, {}, a.grad_name(0))}; }

}  // namespace

void add_attention_ops(std::vector<OpDef>& t) {
  const AttrSpec padding{"padding_idx", kIntAttr, kOptional}, eps{"eps", kNumberAttr, kOptional}, dim{"dim", kIntAttr},
      value{"value", kNumberAttr, kOptional};
  // name, tags, inputs (min, max), shape inference, derivative, FLOPs, attributes
  t.push_back({"embedding", 0, 2, 2, embedding_infer, embedding_grad, nullptr, {padding}});
  t.push_back({"embedding_backward", 0, 2, 2, embedding_backward_infer, nullptr, nullptr,
               {{"num_weights", kIntAttr}, padding}});
  t.push_back({"layer_norm", 0, 3, 3, layer_norm_infer, layer_norm_grad, layer_norm_flops, {eps}});
  t.push_back({"layer_norm_backward", 0, 6, 6, layer_norm_backward_infer, nullptr, layer_norm_flops,
               {eps, {"mask", kIntsAttr}}});
  t.push_back({"softmax", 0, 1, 1, softmax_infer, softmax_grad, softmax_flops, {dim}});
  t.push_back({"softmax_backward", 0, 2, 2, softmax_backward_infer, nullptr, softmax_flops, {dim}});
  t.push_back({"matmul", kHeavy, 2, 2, matmul_infer, matmul_grad, matmul_flops,
               {{"transpose_a", kIntAttr, kOptional}, {"transpose_b", kIntAttr, kOptional}}});
  t.push_back({"causal_mask_fill", kPointwise, 1, 1, causal_mask_fill_infer, causal_mask_fill_grad, nullptr, {value}});
  t.push_back({"padding_mask_fill", kPointwise, 2, 2, padding_mask_fill_infer, padding_mask_fill_grad, nullptr,
               {value}});
  t.push_back({"scale", kPointwise, 1, 1, scale_infer, scale_grad, nullptr, {{"alpha", kNumberAttr}}});
  t.push_back({"tanh", kPointwise, 1, 1, infer::same_as_input0, tanh_grad, nullptr});
  t.push_back({"tanh_backward", kPointwise, 2, 2, infer::pair_same_shape, nullptr, nullptr});
}

}  // namespace mutwo::ops
