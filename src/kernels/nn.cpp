// Kernels of the neural-network ops (rows in src/ops/nn.cpp): linear and its
// two backward matmuls, log_softmax and nll_loss with the ATen backward
// kernels PyTorch's autograd uses, the fused cross_entropy, whose backward
// writes the gradient into one buffer (or over the logits), and
// linear_cross_entropy, which makes its logits one chunk of rows at a time.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/kernel.h"
#include "kernels/kernels.h"
#include "ops/attrs.h"

namespace mutwo::kernels {

namespace {

void linear_kernel(KernelCall& k) {
  c10::optional<at::Tensor> bias;
  if (k.node.inputs.size() > 2 && k.input(2).defined()) bias = k.input(2);
  k.output(0) = at::linear(k.input(0), k.input(1), bias);
}
void linear_backward_input_kernel(KernelCall& k) { k.output(0) = at::matmul(k.input(0), k.input(1)); }
void linear_backward_weight_kernel(KernelCall& k) {
  const at::Tensor& g = k.input(0);
  const at::Tensor& x = k.input(1);
  k.output(0) = at::mm(g.reshape({-1, g.size(-1)}).t(), x.reshape({-1, x.size(-1)}));
}

void log_softmax_kernel(KernelCall& k) { k.output(0) = at::_log_softmax(k.input(0), k.node.attrs.i("dim"), false); }
void log_softmax_backward_kernel(KernelCall& k) {
  k.output(0) = at::_log_softmax_backward_data(k.input(0), k.input(1), k.node.attrs.i("dim"), k.input(1).scalar_type());
}

// nll_loss's and cross_entropy's {ignore_index}, default -100.
int64_t ignore_index(const ir::Node& n) { return n.attrs.i_or("ignore_index", -100); }
void nll_loss_kernel(KernelCall& k) {
  auto [loss, total_weight] =
      at::nll_loss_forward(k.input(0), k.input(1), c10::nullopt, ops::nll_reduction(k.node), ignore_index(k.node));
  k.output(0) = loss;
  k.output(1) = total_weight;
}
void nll_loss_backward_kernel(KernelCall& k) {
  k.output(0) = at::nll_loss_backward(k.input(0), k.input(1), k.input(2), c10::nullopt, ops::nll_reduction(k.node),
                                      ignore_index(k.node), k.input(3));
}

// The targets that count, as 0/1 in x's dtype, and their number.
std::pair<at::Tensor, at::Tensor> counted(const at::Tensor& target, const ir::Node& n, at::ScalarType dtype) {
  at::Tensor valid = target.ne(ignore_index(n)).to(dtype);
  return {valid, valid.sum()};
}
// Rows per logsumexp call: ATen's makes a temporary the size of its input (x
// minus the row maxima, exponentiated), which for a whole vocabulary head is
// the logits again (BERT-base batch 32: 477 MiB); in row blocks of about this
// many bytes it is a block.
constexpr int64_t kLogsumexpBlockBytes = int64_t{32} << 20;
void cross_entropy_kernel(KernelCall& k) {
  const at::Tensor& x = k.input(0);
  const at::Tensor& target = k.input(1);
  const int64_t n = x.size(0);
  const int64_t rows = std::max<int64_t>(1, kLogsumexpBlockBytes / std::max<int64_t>(1, x.size(1) * x.element_size()));
  at::Tensor lse = at::empty({n}, x.options());                                    // (N)
  for (int64_t r = 0; r < n; r += rows) {
    at::Tensor block = lse.narrow(0, r, std::min(rows, n - r));
    at::logsumexp_out(block, x.narrow(0, r, block.size(0)), {1});
  }
  at::Tensor picked = x.gather(1, target.clamp_min(0).unsqueeze(1)).squeeze(1);   // (N)
  auto [valid, count] = counted(target, k.node, x.scalar_type());
  k.output(0) = ((lse - picked) * valid).sum() / count;
  k.output(1) = lse;
}
// d/dx = (softmax(x) - onehot(target)) * g / count on counted rows, from
// `grad` = x - logsumexp (a new buffer, or x's own in place).
void cross_entropy_gradient(KernelCall& k, at::Tensor grad) {
  const at::Tensor& target = k.input(2);
  grad.exp_();
  at::Tensor index = target.clamp_min(0).unsqueeze(1);
  grad.scatter_(1, index, grad.gather(1, index) - 1);
  auto [valid, count] = counted(target, k.node, grad.scalar_type());
  grad.mul_((valid * (k.input(1) / count)).unsqueeze(1));
  k.output(0) = std::move(grad);
}

// linear_cross_entropy: one chunk of rows' logits, (m, V), as at::linear makes
// them for a 2-D input (addmm with a bias, mm without).
at::Tensor chunk_logits(const at::Tensor& h, const at::Tensor& w, const at::Tensor& bias) {
  return bias.defined() ? at::addmm(bias, h, w.t()) : at::mm(h, w.t());
}
at::Tensor optional_input(const KernelCall& k, size_t i) {
  return k.node.inputs.size() > i && k.input(i).defined() ? k.input(i) : at::Tensor();
}
// The dtype the logits are reduced in: the head's, or f32 for an upcast head.
at::ScalarType logits_type(const KernelCall& k, const at::Tensor& h) {  // (the attribute is checked on load)
  return k.node.attrs.has("logits_dtype") ? to_aten(ops::vocab_logits_dtype(k.node, ir::DType::f32)) : h.scalar_type();
}
int64_t chunk_rows(const KernelCall& k, const at::Tensor& h, const at::Tensor& w) {
  return ops::vocab_chunk_rows(k.node, h.size(0), w.size(0), at::elementSize(logits_type(k, h)));
}
// lse = logsumexp of each row of x, with ATen's arithmetic (logsumexp_out: the
// row maxima, infinite ones taken as 0, subtracted; exp; sum; log; plus the
// maxima), but x itself overwritten instead of a second chunk-sized temporary,
// and the maxima written into `maxes` (m, 1), a slice of a buffer of all rows.
void logsumexp_over(at::Tensor& x, at::Tensor lse, at::Tensor maxes) {
  at::amax_out(maxes, x, {1}, true);
  maxes.nan_to_num_(std::numeric_limits<double>::quiet_NaN(), 0.0, 0.0);  // +-inf -> 0, in place
  at::sum_out(lse, x.sub_(maxes).exp_(), {1});
  lse.log_().add_(maxes.squeeze(1));
}
void linear_cross_entropy_kernel(KernelCall& k) {
  const at::Tensor& h = k.input(0);  // (N, H)
  const at::Tensor& w = k.input(1);  // (V, H)
  const at::Tensor& target = k.input(2);
  const at::Tensor bias = optional_input(k, 3);
  const int64_t n = h.size(0), rows = chunk_rows(k, h, w);
  const at::TensorOptions f = h.options().dtype(logits_type(k, h));  // the logits' dtype
  // Every per-row temporary is a slice of a buffer of all N rows, allocated
  // once: besides them the kernel holds one chunk of logits, so what it holds
  // beyond the declared workspace does not depend on the chunk (the planners
  // re-scale a measured workspace to another chunk: plan/chunks.cpp).
  at::Tensor lse = at::empty({n}, f);        // (N)
  at::Tensor picked = at::empty({n, 1}, f);  // (N, 1): each row's target logit
  at::Tensor maxes = at::empty({n, 1}, f);   // (N, 1): each row's largest logit
  at::Tensor index = target.clamp_min(0).unsqueeze(1);
  for (int64_t r = 0; r < n; r += rows) {
    const int64_t m = std::min(rows, n - r);
    at::Tensor logits = chunk_logits(h.narrow(0, r, m), w, bias).to(f.dtype());  // (m, V), upcast if asked
    at::Tensor pc = picked.narrow(0, r, m);
    at::gather_out(pc, logits, 1, index.narrow(0, r, m));
    logsumexp_over(logits, lse.narrow(0, r, m), maxes.narrow(0, r, m));
  }
  auto [valid, count] = counted(target, k.node, lse.scalar_type());
  k.output(0) = ((lse - picked.squeeze(1)) * valid).sum() / count;
  k.output(1) = lse;
}
// Per chunk: the logits again, turned in place into cross_entropy's gradient
// (softmax - onehot) * g / count on counted rows; d_hidden's rows are that
// times the weight; d_weight (and d_bias) add it block by block of
// kVocabBlockRows rows in row order, so their bits do not depend on the chunk.
// With an upcast the logits' gradient is made in f32, rounded to the head's
// dtype for its products, and d_weight and d_bias add up in f32 (see nn.cpp).
void linear_cross_entropy_backward_kernel(KernelCall& k) {
  const at::Tensor& h = k.input(0);
  const at::Tensor& w = k.input(1);
  const at::Tensor& target = k.input(2);
  const at::Tensor& lse = k.input(3);
  const at::Tensor bias = optional_input(k, 5);
  const int64_t n = h.size(0), rows = chunk_rows(k, h, w);
  const at::ScalarType f = logits_type(k, h);
  at::Tensor d_hidden = at::empty_like(h);                                      // (N, H)
  at::Tensor d_weight = at::zeros(w.sizes(), w.options().dtype(f));             // (V, H), in the logits' dtype
  at::Tensor d_bias = bias.defined() ? at::zeros(bias.sizes(), bias.options().dtype(f)) : bias;  // (V)
  auto [valid, count] = counted(target, k.node, f);
  at::Tensor scale = valid * (k.input(4) / count);  // (N)
  at::Tensor index = target.clamp_min(0).unsqueeze(1);
  at::Tensor picked = at::empty({n, 1}, h.options().dtype(f));  // (N, 1): per-row temporaries of all rows, as forward
  for (int64_t r = 0; r < n; r += rows) {
    const int64_t m = std::min(rows, n - r);
    at::Tensor hc = h.narrow(0, r, m);
    at::Tensor grad = chunk_logits(hc, w, bias).to(f);  // (m, V)
    grad.sub_(lse.narrow(0, r, m).unsqueeze(1)).exp_();
    at::Tensor ic = index.narrow(0, r, m), pc = picked.narrow(0, r, m);
    grad.scatter_(1, ic, at::gather_out(pc, grad, 1, ic).sub_(1));
    grad.mul_(scale.narrow(0, r, m).unsqueeze(1));
    grad = grad.to(h.scalar_type());  // an upcast's gradient, rounded to the head's dtype (else itself)
    at::Tensor dh = d_hidden.narrow(0, r, m);
    at::mm_out(dh, grad, w);
    for (int64_t b = 0; b < m; b += ops::kVocabBlockRows) {
      const int64_t bm = std::min(ops::kVocabBlockRows, m - b);
      at::Tensor gb = grad.narrow(0, b, bm).to(f);
      d_weight.addmm_(gb.t(), hc.narrow(0, b, bm).to(f));
      if (d_bias.defined()) d_bias.add_(gb.sum(0));
    }
  }
  k.output(0) = d_hidden;
  k.output(1) = d_weight.to(w.scalar_type());
  if (d_bias.defined()) k.output(2) = d_bias.to(bias.scalar_type());
}

void cross_entropy_backward_kernel(KernelCall& k) {
  cross_entropy_gradient(k, k.input(0) - k.input(3).unsqueeze(1));
}
void cross_entropy_backward_inplace_kernel(KernelCall& k) {
  cross_entropy_gradient(k, k.input(0).sub_(k.input(3).unsqueeze(1)));
}

}  // namespace

void add_nn_kernels(KernelRows& t) {
  t.push_back({"linear", {linear_kernel}});
  t.push_back({"linear_backward_input", {linear_backward_input_kernel}});
  t.push_back({"linear_backward_weight", {linear_backward_weight_kernel}});
  t.push_back({"log_softmax", {log_softmax_kernel}});
  t.push_back({"log_softmax_backward", {log_softmax_backward_kernel}});
  t.push_back({"nll_loss", {nll_loss_kernel}});
  t.push_back({"nll_loss_backward", {nll_loss_backward_kernel}});
  t.push_back({"cross_entropy", {cross_entropy_kernel}});
  t.push_back({"cross_entropy_backward", {cross_entropy_backward_kernel}});
  t.push_back({"cross_entropy_backward_", {cross_entropy_backward_inplace_kernel}});
  t.push_back({"linear_cross_entropy", {linear_cross_entropy_kernel}});
  t.push_back({"linear_cross_entropy_backward", {linear_cross_entropy_backward_kernel}});
}

}  // namespace mutwo::kernels
