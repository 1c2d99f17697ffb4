// Kernels of the convolutional-network ops (rows in src/ops/conv.cpp):
// conv2d, batch_norm (training mode; cuDNN where PyTorch takes it),
// max_pool2d with indices and adaptive average pooling, and their backward
// ops, each the ATen call PyTorch's autograd makes (derivatives.yaml).
#include <ATen/detail/CUDAHooksInterface.h>

#include <array>
#include <limits>

#include "kernels/kernel.h"
#include "kernels/kernels.h"
#include "ops/attrs.h"
#include "support/error.h"

namespace mutwo::kernels {

namespace {

using ir::Shape;
using ops::dilation_of;
using ops::output_mask;
using ops::padding_of;
using ops::pair_attr;
using ops::stride_of;

const Shape kNoOutputPadding{0, 0};  // at::convolution's output_padding for a plain (not transposed) conv

c10::optional<at::Tensor> optional_input(const KernelCall& k, size_t i) {
  if (i < k.node.inputs.size() && k.input(i).defined()) return k.input(i);
  return c10::nullopt;
}

// Assigns the gradients a backward kernel made to the node's outputs, in mask order.
void assign_masked(KernelCall& k, const std::array<bool, 3>& mask, std::tuple<at::Tensor, at::Tensor, at::Tensor> r) {
  size_t j = 0;
  if (mask[0]) k.output(j++) = std::get<0>(r);
  if (mask[1]) k.output(j++) = std::get<1>(r);
  if (mask[2]) k.output(j++) = std::get<2>(r);
}

void conv2d_kernel(KernelCall& k) {
  const ir::Node& n = k.node;
  k.output(0) = at::convolution(k.input(0), k.input(1), optional_input(k, 2), stride_of(n), padding_of(n),
                                dilation_of(n), /*transposed=*/false, kNoOutputPadding,
                                n.attrs.i_or("groups", 1));
}

void conv2d_backward_kernel(KernelCall& k) {
  const ir::Node& n = k.node;
  auto mask = output_mask(n);
  std::vector<int64_t> bias_sizes{k.input(2).size(0)};
  at::OptionalIntArrayRef bias = mask[2] ? at::OptionalIntArrayRef(bias_sizes) : at::OptionalIntArrayRef(c10::nullopt);
  assign_masked(k, mask,
                at::convolution_backward(k.input(0), k.input(1), k.input(2), bias, stride_of(n), padding_of(n),
                                         dilation_of(n), /*transposed=*/false, kNoOutputPadding,
                                         n.attrs.i_or("groups", 1), mask));
}

// Whether PyTorch's batch norm takes cuDNN for these operands (the conditions
// of ATen's _batch_norm_impl_index, training mode), so forward and backward
// make the calls eager PyTorch makes: cuDNN is about twice as fast as ATen's
// own CUDA kernels here.
bool batch_norm_uses_cudnn(const at::Tensor& x, const c10::optional<at::Tensor>& w, bool has_bias, double eps) {
  const auto& hooks = at::detail::getCUDAHooks();
  return x.is_cuda() && at::globalContext().userEnabledCuDNN() && hooks.compiledWithCuDNN() &&
         hooks.versionCuDNN() >= 5110L && w && w->defined() && has_bias &&
         x.scalar_type() == at::kFloat && w->scalar_type() == at::kFloat && x.dim() >= 3 && x.size(0) <= 880801 &&
         eps >= hooks.batchnormMinEpsilonCuDNN() && x.numel() < std::numeric_limits<int32_t>::max();
}

void batch_norm_kernel(KernelCall& k) {
  const at::Tensor& x = k.input(0);
  auto w = optional_input(k, 1), b = optional_input(k, 2), mean = optional_input(k, 3), var = optional_input(k, 4);
  const double eps = k.node.attrs.f("eps"), momentum = k.node.attrs.f_or("momentum", 0.1);
  if (batch_norm_uses_cudnn(x, w, b.has_value(), eps)) {
    auto [y, save_mean, save_invstd, reserve] =
        at::cudnn_batch_norm(x, *w, b, mean, var, /*training=*/true, momentum, eps);
    // The backward passes an empty reserve: exact only while cuDNN keeps none
    // (its non-persistent spatial mode, which contiguous NCHW inputs get).
    MUTWO_ASSERT(reserve.numel() == 0, "cuDNN batch norm kept a {}-byte reserve space", reserve.numel());
    k.output(0) = y;
    k.output(1) = save_mean;
    k.output(2) = save_invstd;
    return;
  }
  auto [y, save_mean, save_invstd] = at::native_batch_norm(x, w, b, mean, var, /*training=*/true, momentum, eps);
  k.output(0) = y;
  k.output(1) = save_mean;
  k.output(2) = save_invstd;
}

void batch_norm_backward_kernel(KernelCall& k) {
  auto mask = output_mask(k.node);
  const at::Tensor& x = k.input(1);
  auto w = optional_input(k, 2);
  const double eps = k.node.attrs.f("eps");
  if (batch_norm_uses_cudnn(x, w, k.node.attrs.i_or("has_bias", 1) != 0, eps)) {
    auto grads = at::cudnn_batch_norm_backward(x, k.input(0).contiguous(x.suggest_memory_format()), *w,
                                               /*running_mean=*/{}, /*running_var=*/{}, k.input(3), k.input(4), eps,
                                               /*reserveSpace=*/at::empty({0}, x.options().dtype(at::kByte)));
    assign_masked(k, mask, grads);
    return;
  }
  assign_masked(k, mask,
                at::native_batch_norm_backward(k.input(0), x, w, /*running_mean=*/{}, /*running_var=*/{}, k.input(3),
                                               k.input(4), /*train=*/true, eps, mask));
}

void max_pool2d_kernel(KernelCall& k) {
  const ir::Node& n = k.node;
  Shape kernel = n.attrs.ints("kernel");
  auto [out, indices] = at::max_pool2d_with_indices(k.input(0), kernel, pair_attr(n, "stride", kernel, 1),
                                                    padding_of(n), dilation_of(n), n.attrs.i_or("ceil_mode", 0) != 0);
  k.output(0) = out;
  k.output(1) = indices;
}

void max_pool2d_backward_kernel(KernelCall& k) {
  const ir::Node& n = k.node;
  Shape kernel = n.attrs.ints("kernel");
  k.output(0) = at::max_pool2d_with_indices_backward(k.input(0), k.input(1), kernel, pair_attr(n, "stride", kernel, 1),
                                                     padding_of(n), dilation_of(n), n.attrs.i_or("ceil_mode", 0) != 0,
                                                     k.input(2));
}

void adaptive_avg_pool2d_kernel(KernelCall& k) {
  k.output(0) = at::_adaptive_avg_pool2d(k.input(0), k.node.attrs.ints("output_size"));
}

void adaptive_avg_pool2d_backward_kernel(KernelCall& k) {
  k.output(0) = at::_adaptive_avg_pool2d_backward(k.input(0), k.input(1));
}

}  // namespace

void add_conv_kernels(KernelRows& t) {
  t.push_back({"conv2d", {conv2d_kernel}});
  t.push_back({"conv2d_backward", {conv2d_backward_kernel}});
  t.push_back({"batch_norm", {batch_norm_kernel}});
  t.push_back({"batch_norm_backward", {batch_norm_backward_kernel}});
  t.push_back({"max_pool2d", {max_pool2d_kernel}});
  t.push_back({"max_pool2d_backward", {max_pool2d_backward_kernel}});
  t.push_back({"adaptive_avg_pool2d", {adaptive_avg_pool2d_kernel}});
  t.push_back({"adaptive_avg_pool2d_backward", {adaptive_avg_pool2d_backward_kernel}});
}

}  // namespace mutwo::kernels
