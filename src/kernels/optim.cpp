// Kernels of the optimizer steps (rows and input lists in src/ops/optim.cpp):
// ATen's _foreach_* ops over every parameter at once (one launch per list
// chunk on CUDA; on the CPU ATen loops over the tensors with the per-tensor
// ops). The arithmetic per tensor is torch::optim's C++ SGD and Adam/AdamW,
// op for op, so the parameters after N steps match those bit for bit.
#include <cmath>

#include "kernels/kernel.h"
#include "kernels/kernels.h"
#include "ops/attrs.h"

namespace mutwo::kernels {

namespace {

// List l of the node's inputs, as ATen tensors (handles to the same storage).
std::vector<at::Tensor> tensor_list(const KernelCall& k, size_t l, size_t n) {
  std::vector<at::Tensor> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(k.input(l * n + i));
  return out;
}

// sgd_step: torch.optim.SGD(foreach=True)'s order of operations
// (_multi_tensor_sgd), which per tensor is torch::optim::SGD's.
void sgd_kernel(KernelCall& k) {
  const auto& at_ = k.node.attrs;
  size_t lists = ops::sgd_lists(at_).size(), n = k.node.inputs.size() / lists;
  std::vector<at::Tensor> params = tensor_list(k, 0, n);
  std::vector<at::Tensor> d_p = tensor_list(k, 1, n);  // the gradients, never written
  double wd = at_.f_or("weight_decay", 0), momentum = at_.f_or("momentum", 0);
  double dampening = at_.f_or("dampening", 0);
  bool own = wd != 0;  // d_p holds temporaries of this kernel, not the gradients
  if (wd != 0) d_p = at::_foreach_add(d_p, params, wd);
  if (momentum != 0) {
    std::vector<at::Tensor> bufs = tensor_list(k, 2, n);
    if (k.step == 1) {
      for (size_t i = 0; i < n; ++i) bufs[i].copy_(d_p[i]);  // torch::optim clones the first gradient
    } else {
      at::_foreach_mul_(bufs, momentum);
      at::_foreach_add_(bufs, d_p, 1 - dampening);
    }
    if (at_.i_or("nesterov", 0) == 0) d_p = std::move(bufs);
    else if (own) at::_foreach_add_(d_p, bufs, momentum);
    else d_p = at::_foreach_add(d_p, bufs, momentum);
  }
  at::_foreach_add_(params, d_p, -at_.f("lr"));
}

// adam_step: torch.optim.Adam(foreach=True)'s order of operations
// (_multi_tensor_adam), except the first moment: torch::optim's
// exp_avg.mul_(beta1).add_(grad, 1 - beta1) where PyTorch 2.x's Python Adam
// has exp_avg.lerp_(grad, 1 - beta1).
void adam_kernel(KernelCall& k) {
  const auto& a = k.node.attrs;
  size_t lists = ops::adam_lists(a).size(), n = k.node.inputs.size() / lists;
  std::vector<at::Tensor> params = tensor_list(k, 0, n);
  std::vector<at::Tensor> grads = tensor_list(k, 1, n);
  std::vector<at::Tensor> exp_avgs = tensor_list(k, 2, n);
  std::vector<at::Tensor> exp_avg_sqs = tensor_list(k, 3, n);
  double lr = a.f("lr"), beta1 = a.f_or("beta1", 0.9), beta2 = a.f_or("beta2", 0.999);
  double eps = a.f_or("eps", 1e-8), wd = a.f_or("weight_decay", 0);
  bool decoupled = a.i_or("decoupled", 0) != 0;
  auto step = static_cast<double>(k.step);
  double bias_correction1 = 1 - std::pow(beta1, step);
  double bias_correction2 = 1 - std::pow(beta2, step);
  if (wd != 0) {
    if (decoupled) at::_foreach_mul_(params, 1 - lr * wd);
    else grads = at::_foreach_add(grads, params, wd);
  }
  at::_foreach_mul_(exp_avgs, beta1);
  at::_foreach_add_(exp_avgs, grads, 1 - beta1);
  at::_foreach_mul_(exp_avg_sqs, beta2);
  at::_foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2);
  grads.clear();  // frees the weight-decayed copies before the denominators are made
  std::vector<at::Tensor> denom = at::_foreach_sqrt(exp_avg_sqs);
  at::_foreach_div_(denom, std::sqrt(bias_correction2));
  at::_foreach_add_(denom, eps);
  at::_foreach_addcdiv_(params, exp_avgs, denom, -lr / bias_correction1);
}

}  // namespace

void add_optim_kernels(KernelRows& t) {
  t.push_back({"sgd_step", {sgd_kernel}});
  t.push_back({"adam_step", {adam_kernel}});
}

}  // namespace mutwo::kernels
