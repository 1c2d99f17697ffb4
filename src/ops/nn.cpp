// Neural-network ops: linear (and its two backward matmuls), log_softmax and
// nll_loss (cross-entropy as two ops), each with the ATen backward kernel that
// PyTorch's autograd uses; cross_entropy, the two fused for vocabulary-sized
// heads, with a backward of its own that needs one buffer instead of three; and
// linear_cross_entropy, the vocabulary projection and cross_entropy in row
// chunks, so that the logits never exist whole.
// Their kernels are in src/kernels/nn.cpp.
#include <algorithm>

#include "ops/attrs.h"
#include "ops/builder.h"
#include "ops/infer.h"

namespace mutwo::ops {

int64_t nll_reduction(const ir::Node& n) { return n.attrs.i_or("reduction", 1); }

int64_t vocab_chunk_rows(const ir::Node& n, int64_t rows, int64_t vocab, int64_t elem_bytes) {
  int64_t want = n.attrs.i_or("chunk_rows", 0);
  if (want <= 0) want = kVocabChunkBytes / std::max<int64_t>(1, vocab * elem_bytes);
  want = std::max(kVocabBlockRows, want / kVocabBlockRows * kVocabBlockRows);
  return std::max<int64_t>(1, std::min(want, rows));
}

ir::DType vocab_logits_dtype(const ir::Node& n, ir::DType hidden) {
  if (!n.attrs.has("logits_dtype")) return hidden;
  return ir::parse_dtype(n.attrs.s("logits_dtype")).value_or(hidden);  // checked by shape inference
}

namespace {

using ir::Shape;
using ir::TensorType;
using ir::ValueId;

// linear(x, w, b?): x (..., in), w (out, in), b (out) -> (..., out).
Types linear_infer(const InferArgs& a) {
  const TensorType& x = a.input(0);
  const TensorType& w = a.input(1);
  infer::require_float(x, "linear input");
  infer::require_rank(w, 2, "linear weight");
  infer::require_same_dtype(x, w, "linear input and weight");
  MUTWO_CHECK(x.rank() >= 1 && x.shape.back() == w.shape[1],
              "linear: input has {} features (shape {}) but the weight {} expects {}",
              x.rank() ? x.shape.back() : 0, ir::shape_string(x.shape), ir::shape_string(w.shape), w.shape[1]);
  if (a.has(2)) {
    infer::require_shape(a.input(2), {w.shape[0]}, "linear bias");
    infer::require_same_dtype(x, a.input(2), "linear input and bias");
  }
  Shape out = x.shape;
  out.back() = w.shape[0];
  return {TensorType{out, x.dtype}};
}
double linear_flops(const FlopArgs& a) {
  return 2.0 * static_cast<double>(a.out[0]->numel()) * static_cast<double>(a.in[1]->shape[1]);
}
Grads linear_grad(GradArgs& a) {
  // d/dx = g @ w;  d/dw = g^T @ x (over all leading dims);  d/db = g, summed to (out) by autodiff.
  Grads g(a.node.inputs.size(), ir::kNoValue);
  if (a.needs(0)) g[0] = a.b.op("linear_backward_input", {a.g(), a.in(1)}, {}, a.grad_name(0));
  if (a.needs(1)) g[1] = a.b.op("linear_backward_weight", {a.g(), a.in(0)}, {}, a.grad_name(1));
  if (a.needs(2)) g[2] = a.g();
  return g;
}

// linear_backward_input(g, w): g (..., out), w (out, in) -> (..., in).
Types linear_backward_input_infer(const InferArgs& a) {
  const TensorType& g = a.input(0);
  const TensorType& w = a.input(1);
  infer::require_rank(w, 2, "linear weight");
  MUTWO_CHECK(g.rank() >= 1 && g.shape.back() == w.shape[0], "linear_backward_input: gradient {} does not match weight {}",
              ir::to_string(g), ir::to_string(w));
  Shape out = g.shape;
  out.back() = w.shape[1];
  return {TensorType{out, g.dtype}};
}
double linear_backward_input_flops(const FlopArgs& a) {
  return 2.0 * static_cast<double>(a.in[0]->numel()) * static_cast<double>(a.in[1]->shape[1]);
}

// linear_backward_weight(g, x): g (..., out), x (..., in) -> (out, in).
Types linear_backward_weight_infer(const InferArgs& a) {
  const TensorType& g = a.input(0);
  const TensorType& x = a.input(1);
  MUTWO_CHECK(g.rank() == x.rank() && g.rank() >= 1 &&
                  std::equal(g.shape.begin(), g.shape.end() - 1, x.shape.begin()),
              "linear_backward_weight: gradient {} and input {} differ in their leading dimensions", ir::to_string(g),
              ir::to_string(x));
  return {TensorType{{g.shape.back(), x.shape.back()}, g.dtype}};
}
double linear_backward_weight_flops(const FlopArgs& a) {
  return 2.0 * static_cast<double>(a.in[0]->numel()) * static_cast<double>(a.in[1]->shape.back());
}

// log_softmax {dim} and its backward from the output (as PyTorch saves it).
Types log_softmax_infer(const InferArgs& a) {
  infer::require_float(a.input(0), "log_softmax input");
  infer::dim(a.node.attrs.i("dim"), a.input(0).rank(), "log_softmax");
  return {a.input(0)};
}
Grads log_softmax_grad(GradArgs& a) {
  return {a.b.op("log_softmax_backward", {a.g(), a.out(0)}, a.node.attrs, a.grad_name(0))};
}
Types log_softmax_backward_infer(const InferArgs& a) {
  infer::require_shape(a.input(1), a.input(0).shape, "log_softmax output");
  return log_softmax_infer(a);
}
double softmax_flops(const FlopArgs& a) { return 5.0 * static_cast<double>(a.out[0]->numel()); }

// nll_loss(logp (N,C), target (N) i64) {reduction: 0 none, 1 mean, 2 sum; ignore_index}
// -> (loss, total_weight). total_weight is what nll_loss_backward needs.
// (N, C) float scores and (N) i64 class targets, as nll_loss and cross_entropy take them.
void check_scores_and_target(const InferArgs& a, const std::string& op) {
  infer::require_float(a.input(0), op + " input");
  infer::require_rank(a.input(0), 2, op + " input (N, classes)");
  infer::require_dtype(a.input(1), ir::DType::i64, op + " target");
  infer::require_shape(a.input(1), {a.input(0).shape[0]}, op + " target");
}
Types nll_loss_infer(const InferArgs& a) {
  const TensorType& logp = a.input(0);
  check_scores_and_target(a, "nll_loss");
  int64_t r = nll_reduction(a.node);
  MUTWO_CHECK(r >= 0 && r <= 2, "nll_loss: reduction must be 0 (none), 1 (mean) or 2 (sum), got {}", r);
  Shape loss = r == 0 ? Shape{logp.shape[0]} : Shape{};
  return {TensorType{loss, logp.dtype}, TensorType{{}, logp.dtype}};
}
Grads nll_loss_grad(GradArgs& a) {
  if (!a.needs(0)) return {ir::kNoValue, ir::kNoValue};
  return {a.b.op("nll_loss_backward", {a.g(0), a.in(0), a.in(1), a.out(1)}, a.node.attrs, a.grad_name(0)),
          ir::kNoValue};
}
Types nll_loss_backward_infer(const InferArgs& a) {
  std::vector<const TensorType*> fwd_in{a.in[1], a.in[2]};
  InferArgs fwd{a.node, fwd_in};
  Types t = nll_loss_infer(fwd);
  infer::require_shape(a.input(0), t[0].shape, "nll_loss gradient");
  return {a.input(1)};
}

// cross_entropy(logits (N,C), target (N) i64) {ignore_index} -> (loss (), logsumexp (N)):
// log_softmax + nll_loss (mean over the targets not ignored) as one op, for
// vocabulary-sized heads. It keeps only a per-row logsumexp for the backward,
// which writes the gradient over the logits (their last reader): the two-op
// form holds log-probabilities, their gradient and the logits' gradient at
// once, this one no (N, C) buffer beyond the logits. Equal to the two-op form
// within rounding, not bit for bit.
Types cross_entropy_infer(const InferArgs& a) {
  const TensorType& x = a.input(0);
  check_scores_and_target(a, "cross_entropy");
  return {TensorType{{}, x.dtype}, TensorType{{x.shape[0]}, x.dtype}};
}
Grads cross_entropy_grad(GradArgs& a) {
  if (!a.needs(0)) return {ir::kNoValue, ir::kNoValue};
  return {a.b.op("cross_entropy_backward", {a.in(0), a.g(0), a.in(1), a.out(1)}, a.node.attrs, a.grad_name(0)),
          ir::kNoValue};
}
// cross_entropy_backward(logits (N,C), g (), target (N), logsumexp (N)) -> (N,C);
// cross_entropy_backward_, the same written over the logits where nothing reads
// them afterwards (analysis::reinplace; kView | kOverwrite: one buffer).
Types cross_entropy_backward_infer(const InferArgs& a) {
  std::vector<const TensorType*> fwd_in{a.in[0], a.in[2]};
  InferArgs fwd{a.node, fwd_in};
  Types t = cross_entropy_infer(fwd);
  infer::require_shape(a.input(1), {}, "cross_entropy gradient");
  infer::require_shape(a.input(3), t[1].shape, "cross_entropy logsumexp");
  return {a.input(0)};
}
double cross_entropy_flops(const FlopArgs& a) { return 6.0 * static_cast<double>(a.in[0]->numel()); }

// linear_cross_entropy(hidden (N,H), weight (V,H), target (N) i64, bias (V)?)
//   {chunk_rows, ignore_index, logits_dtype?} -> (loss (), logsumexp (N)):
// cross_entropy(linear(hidden, weight, bias), target), computed chunk by chunk
// of rows (ops::vocab_chunk_rows): each chunk's logits are made, reduced to
// their rows' logsumexp and target logit, and freed. Its temporaries are one
// chunk of logits (the declared workspace), never the (N, V) whole. With
// logits_dtype "f32" on a bf16 or f16 head, each chunk's logits are made in
// the head's dtype and upcast before the reduction, and the loss and
// logsumexp are f32 (`cross_entropy(linear(h, w).float(), target)`).
Types linear_cross_entropy_infer(const InferArgs& a) {
  const TensorType& h = a.input(0);
  const TensorType& w = a.input(1);
  infer::require_float(h, "linear_cross_entropy hidden");
  infer::require_rank(h, 2, "linear_cross_entropy hidden (N, H)");
  infer::require_rank(w, 2, "linear_cross_entropy weight (V, H)");
  infer::require_same_dtype(h, w, "linear_cross_entropy hidden and weight");
  MUTWO_CHECK(w.shape[1] == h.shape[1], "linear_cross_entropy: hidden {} has {} features but the weight {} expects {}",
              ir::to_string(h), h.shape[1], ir::to_string(w), w.shape[1]);
  infer::require_dtype(a.input(2), ir::DType::i64, "linear_cross_entropy target");
  infer::require_shape(a.input(2), {h.shape[0]}, "linear_cross_entropy target");
  if (a.has(3)) {
    infer::require_shape(a.input(3), {w.shape[0]}, "linear_cross_entropy bias");
    infer::require_same_dtype(h, a.input(3), "linear_cross_entropy hidden and bias");
  }
  MUTWO_CHECK(a.node.attrs.i_or("chunk_rows", 0) >= 0,
              "linear_cross_entropy: chunk_rows must be positive (or 0: about {} MiB of logits per chunk), got {}",
              kVocabChunkBytes >> 20, a.node.attrs.i_or("chunk_rows", 0));
  if (a.node.attrs.has("logits_dtype")) {
    const std::string& s = a.node.attrs.s("logits_dtype");
    MUTWO_CHECK(s == ir::to_string(h.dtype) || (s == "f32" && (h.dtype == ir::DType::bf16 || h.dtype == ir::DType::f16)),
                "linear_cross_entropy: logits_dtype \"{}\" on a {} head; expected \"f32\" on a bf16 or f16 head, "
                "or the head's own dtype", s, ir::to_string(h.dtype));
  }
  const ir::DType logits = vocab_logits_dtype(a.node, h.dtype);
  return {TensorType{{}, logits}, TensorType{{h.shape[0]}, logits}};
}
// One gradient node for hidden, weight and bias; the target gets none, and
// the logsumexp output none (it is not differentiable here).
Grads linear_cross_entropy_grad(GradArgs& a) {
  Grads g(a.node.inputs.size(), ir::kNoValue);
  if (a.g(0) == ir::kNoValue) return g;
  const bool bias = a.node.inputs.size() > 3;
  std::vector<ValueId> in{a.in(0), a.in(1), a.in(2), a.out(1), a.g(0)};
  if (bias) in.push_back(a.in(3));
  auto outs = a.b.call("linear_cross_entropy_backward", in, a.node.attrs, a.grad_name(0));
  const std::vector<size_t> of{0, 1, 3};  // the input each output is the gradient of
  for (size_t o = 0; o < outs.size(); ++o)
    if (a.needs(of[o])) {
      g[of[o]] = outs[o];
      name_gradient(a, outs[o], of[o]);
    }
  return g;
}
// linear_cross_entropy_backward(hidden, weight, target, logsumexp, g (), bias?)
//   -> (d_hidden (N,H), d_weight (V,H), d_bias (V) with a bias): each chunk's
// logits made again, turned into (softmax - onehot) * g / count in place, then
// multiplied into d_hidden's rows and added into d_weight (and d_bias) block
// by block (ops::kVocabBlockRows). With an upcast (logits_dtype f32 on a bf16
// head) the gradient of the logits is rounded to the head's dtype before its
// products, as autograd's `.float()` backward does, and d_weight and d_bias add
// up in f32 buffers, rounded once at the end, as one matmul over all rows does.
Types linear_cross_entropy_backward_infer(const InferArgs& a) {
  std::vector<const TensorType*> fwd_in{a.in[0], a.in[1], a.in[2]};
  if (a.has(5)) fwd_in.push_back(a.in[5]);
  InferArgs fwd{a.node, fwd_in, a.graph};
  Types t = linear_cross_entropy_infer(fwd);
  infer::require_shape(a.input(3), t[1].shape, "linear_cross_entropy logsumexp");
  infer::require_shape(a.input(4), {}, "linear_cross_entropy gradient");
  Types out{a.input(0), a.input(1)};
  if (a.has(5)) out.push_back(a.input(5));
  return out;
}
// (N, V) products of H terms: one in the forward pass, three in the backward
// (the logits again, d_hidden, d_weight); the softmax's few per logit.
double vocab_products(const FlopArgs& a) {
  return 2.0 * static_cast<double>(a.in[0]->numel()) * static_cast<double>(a.in[1]->shape[0]);
}
double linear_cross_entropy_flops(const FlopArgs& a) {
  return vocab_products(a) + 6.0 * static_cast<double>(a.in[0]->shape[0] * a.in[1]->shape[0]);
}
double linear_cross_entropy_backward_flops(const FlopArgs& a) {
  return 3.0 * vocab_products(a) + 6.0 * static_cast<double>(a.in[0]->shape[0] * a.in[1]->shape[0]);
}
// One chunk of logits, in both directions (with an upcast, in both dtypes).
int64_t linear_cross_entropy_workspace(const FlopArgs& a) {
  const ir::DType head = a.in[0]->dtype, logits = vocab_logits_dtype(a.node, head);
  const int64_t n = a.in[0]->shape[0], v = a.in[1]->shape[0], elem = ir::element_size(logits);
  return vocab_chunk_rows(a.node, n, v, elem) * v * (elem + (logits != head ? ir::element_size(head) : 0));
}
// The backward's chunk, and with an upcast its f32 buffers of d_weight and d_bias.
int64_t linear_cross_entropy_backward_workspace(const FlopArgs& a) {
  const ir::DType head = a.in[0]->dtype, logits = vocab_logits_dtype(a.node, head);
  const int64_t sums = logits != head ? (a.in[1]->numel() + a.in[1]->shape[0]) * ir::element_size(logits) : 0;
  return linear_cross_entropy_workspace(a) + sums;
}

}  // namespace

void add_nn_ops(std::vector<OpDef>& t) {
  const AttrSpec dim{"dim", kIntAttr}, ignore{"ignore_index", kIntAttr, kOptional},
      reduction{"reduction", kIntAttr, kOptional}, chunk{"chunk_rows", kIntAttr, kOptional},
      logits{"logits_dtype", kStringAttr, kOptional};
  // name, tags, inputs (min, max), shape inference, derivative, FLOPs, attributes
  t.push_back({"linear", kHeavy, 2, 3, linear_infer, linear_grad, linear_flops});
  t.push_back({"linear_backward_input", kHeavy, 2, 2, linear_backward_input_infer, nullptr,
               linear_backward_input_flops});
  t.push_back({"linear_backward_weight", kHeavy, 2, 2, linear_backward_weight_infer, nullptr,
               linear_backward_weight_flops});
  t.push_back({"log_softmax", 0, 1, 1, log_softmax_infer, log_softmax_grad, softmax_flops, {dim}});
  t.push_back({"log_softmax_backward", 0, 2, 2, log_softmax_backward_infer, nullptr, softmax_flops, {dim}});
  t.push_back({"nll_loss", kReduction, 2, 2, nll_loss_infer, nll_loss_grad, nullptr, {reduction, ignore}});
  t.push_back({"nll_loss_backward", 0, 4, 4, nll_loss_backward_infer, nullptr, nullptr, {reduction, ignore}});
  t.push_back({"cross_entropy", kReduction, 2, 2, cross_entropy_infer, cross_entropy_grad, cross_entropy_flops,
               {ignore}});
  t.push_back({"cross_entropy_backward", 0, 4, 4, cross_entropy_backward_infer, nullptr, cross_entropy_flops, {ignore},
               {}, nullptr, "cross_entropy_backward_"});
  t.push_back({"cross_entropy_backward_", kView | kOverwrite, 4, 4, cross_entropy_backward_infer, nullptr,
               cross_entropy_flops, {ignore}});
  OpDef lce{"linear_cross_entropy", kHeavy | kReduction, 3, 4, linear_cross_entropy_infer, linear_cross_entropy_grad,
            linear_cross_entropy_flops, {chunk, ignore, logits}};
  lce.workspace = linear_cross_entropy_workspace;
  t.push_back(lce);
  OpDef lce_backward{"linear_cross_entropy_backward", kHeavy, 5, 6, linear_cross_entropy_backward_infer, nullptr,
                     linear_cross_entropy_backward_flops, {chunk, ignore, logits}};
  lce_backward.workspace = linear_cross_entropy_backward_workspace;
  t.push_back(lce_backward);
}

}  // namespace mutwo::ops
