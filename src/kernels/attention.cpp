// Kernels of the transformer arithmetic ops (rows in src/ops/attention.cpp):
// embedding, layer_norm, softmax, batched matmul with transpose flags, causal
// masking, scaling by a constant and tanh, with the ATen backward kernels
// PyTorch's autograd uses.
#include <limits>

#include "kernels/kernel.h"
#include "kernels/kernels.h"
#include "ops/attrs.h"

namespace mutwo::kernels {

namespace {

void embedding_kernel(KernelCall& k) { k.output(0) = at::embedding(k.input(0), k.input(1), ops::padding_idx(k.node)); }
void embedding_backward_kernel(KernelCall& k) {
  k.output(0) = at::embedding_dense_backward(k.input(0), k.input(1), k.node.attrs.i("num_weights"),
                                             ops::padding_idx(k.node), /*scale_grad_by_freq=*/false);
}

void layer_norm_kernel(KernelCall& k) {
  const at::Tensor& x = k.input(0);
  auto [y, mean, rstd] = at::native_layer_norm(x, {x.size(-1)}, k.input(1), k.input(2), ops::ln_eps(k.node));
  k.output(0) = y;
  k.output(1) = mean;
  k.output(2) = rstd;
}
void layer_norm_backward_kernel(KernelCall& k) {
  const at::Tensor& x = k.input(1);
  auto m = ops::ln_mask(k.node);
  auto [dx, dw, db] =
      at::native_layer_norm_backward(k.input(0), x, {x.size(-1)}, k.input(2), k.input(3), k.input(4), k.input(5), m);
  size_t o = 0;
  if (m[0]) k.output(o++) = dx;
  if (m[1]) k.output(o++) = dw;
  if (m[2]) k.output(o++) = db;
}

void softmax_kernel(KernelCall& k) { k.output(0) = at::_softmax(k.input(0), k.node.attrs.i("dim"), false); }
void softmax_backward_kernel(KernelCall& k) {
  k.output(0) = at::_softmax_backward_data(k.input(0), k.input(1), k.node.attrs.i("dim"), k.input(1).scalar_type());
}

// (..., R, S) -> (batch, R, S), transposed as asked: a view where the layout allows.
at::Tensor as_batches(const at::Tensor& t, bool transpose) {
  at::Tensor b = t.reshape({-1, t.size(-2), t.size(-1)});
  return transpose ? b.transpose(1, 2) : b;
}
void matmul_kernel(KernelCall& k) {
  const at::Tensor& x = k.input(0);
  const at::Tensor& y = k.input(1);
  bool ta = k.node.attrs.i_or("transpose_a", 0) != 0, tb = k.node.attrs.i_or("transpose_b", 0) != 0;
  if (x.dim() == 2) {
    k.output(0) = at::mm(ta ? x.t() : x, tb ? y.t() : y);
    return;
  }
  at::Tensor c = at::bmm(as_batches(x, ta), as_batches(y, tb));  // (batch, M, N)
  std::vector<int64_t> out(x.sizes().begin(), x.sizes().end() - 2);
  out.push_back(c.size(1));
  out.push_back(c.size(2));
  k.output(0) = c.view(out);
}

double lowest_finite(at::ScalarType t) {
  double v = 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, t, "lowest_finite",
                                  [&] { v = static_cast<double>(std::numeric_limits<scalar_t>::lowest()); });
  return v;
}
void causal_mask_fill_kernel(KernelCall& k) {
  const at::Tensor& x = k.input(0);
  int64_t t = x.size(-2), s = x.size(-1);
  double value = k.node.attrs.has("value") ? k.node.attrs.f("value") : lowest_finite(x.scalar_type());
  at::Tensor future = at::ones({t, s}, x.options().dtype(at::kBool)).triu_(s - t + 1);  // (T, S): keys after the query
  // One pass, as Hugging Face's torch.where: masked_fill copies x, then fills.
  k.output(0) = at::where(future, at::Scalar(value), x);
}

void padding_mask_fill_kernel(KernelCall& k) {
  const at::Tensor& x = k.input(0);
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);  // mask (B, S) -> (B, 1, ..., 1, S)
  shape.front() = x.size(0);
  shape.back() = x.size(-1);
  at::Tensor padding = k.input(1).eq(0).view(shape);
  // An integer scalar for integer x: a float one would promote the result to float.
  at::Scalar value = at::isFloatingType(x.scalar_type())
                         ? at::Scalar(k.node.attrs.has("value") ? k.node.attrs.f("value") : lowest_finite(x.scalar_type()))
                         : at::Scalar(static_cast<int64_t>(k.node.attrs.f("value")));
  k.output(0) = at::where(padding, value, x);
}

void scale_kernel(KernelCall& k) { k.output(0) = at::mul(k.input(0), k.node.attrs.f("alpha")); }

void tanh_kernel(KernelCall& k) { k.output(0) = at::tanh(k.input(0)); }
void tanh_backward_kernel(KernelCall& k) { k.output(0) = at::tanh_backward(k.input(0), k.input(1)); }

}  // namespace

void add_attention_kernels(KernelRows& t) {
  t.push_back({"embedding", {embedding_kernel}});
  t.push_back({"embedding_backward", {embedding_backward_kernel}});
  t.push_back({"layer_norm", {layer_norm_kernel}});
  t.push_back({"layer_norm_backward", {layer_norm_backward_kernel}});
  t.push_back({"softmax", {softmax_kernel}});
  t.push_back({"softmax_backward", {softmax_backward_kernel}});
  t.push_back({"matmul", {matmul_kernel}});
  t.push_back({"causal_mask_fill", {causal_mask_fill_kernel}});
  t.push_back({"padding_mask_fill", {padding_mask_fill_kernel}});
  t.push_back({"scale", {scale_kernel}});
  t.push_back({"tanh", {tanh_kernel}});
  t.push_back({"tanh_backward", {tanh_backward_kernel}});
}

}  // namespace mutwo::kernels
