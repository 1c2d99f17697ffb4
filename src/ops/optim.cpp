// Optimizer steps as in-place ops, written as torch::optim's C++ SGD and
// Adam/AdamW write them, so that the parameters after N steps match bit for bit.
#include "ops/builder.h"
#include "ops/infer.h"
#include "ops/kernel.h"

#include <cmath>

namespace mutwo::ops {

namespace {

using ir::TensorType;
using Types = std::vector<TensorType>;

// Every input is the parameter's shape and dtype; no outputs.
Types optim_infer(const InferArgs& a) {
  infer::require_float(a.input(0), "parameter");
  for (size_t i = 1; i < a.in.size(); ++i)
    if (a.has(i)) infer::require_shape(a.input(i), a.input(0).shape, "gradient and optimizer state");
  double lr = a.node.attrs.f("lr");
  MUTWO_CHECK(lr >= 0 && std::isfinite(lr), "{}: learning rate must be a finite number >= 0, got {}", a.node.op, lr);
  return {};
}

// sgd_step(p, g, momentum_buffer?) {lr, momentum, dampening, weight_decay, nesterov}
void sgd_kernel(KernelCall& k) {
  const auto& at_ = k.node.attrs;
  at::Tensor p = k.input(0);
  at::Tensor d_p = k.input(1);
  double wd = at_.f_or("weight_decay", 0), momentum = at_.f_or("momentum", 0);
  double dampening = at_.f_or("dampening", 0);
  if (wd != 0) d_p = d_p.add(p, wd);
  if (momentum != 0) {
    at::Tensor buf = k.input(2);
    if (k.step == 1) buf.copy_(d_p);  // torch::optim clones the first gradient
    else buf.mul_(momentum).add_(d_p, 1 - dampening);
    d_p = at_.i_or("nesterov", 0) ? d_p.add(buf, momentum) : buf;
  }
  p.add_(d_p, -at_.f("lr"));
}

// adam_step(p, g, exp_avg, exp_avg_sq) {lr, beta1, beta2, eps, weight_decay, decoupled (AdamW)}
void adam_kernel(KernelCall& k) {
  const auto& a = k.node.attrs;
  at::Tensor p = k.input(0);
  at::Tensor grad = k.input(1);
  at::Tensor exp_avg = k.input(2);
  at::Tensor exp_avg_sq = k.input(3);
  double lr = a.f("lr"), beta1 = a.f_or("beta1", 0.9), beta2 = a.f_or("beta2", 0.999);
  double eps = a.f_or("eps", 1e-8), wd = a.f_or("weight_decay", 0);
  bool decoupled = a.i_or("decoupled", 0) != 0;
  auto step = static_cast<double>(k.step);
  double bias_correction1 = 1 - std::pow(beta1, step);
  double bias_correction2 = 1 - std::pow(beta2, step);
  if (wd != 0) {
    if (decoupled) p.mul_(1 - lr * wd);
    else grad = grad.add(p, wd);
  }
  exp_avg.mul_(beta1).add_(grad, 1 - beta1);
  exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
  at::Tensor denom = (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(eps);
  p.addcdiv_(exp_avg, denom, -lr / bias_correction1);
}

double sgd_flops(const FlopArgs& a) { return 4.0 * static_cast<double>(a.in[0]->numel()); }
double adam_flops(const FlopArgs& a) { return 12.0 * static_cast<double>(a.in[0]->numel()); }

}  // namespace

void add_optim_ops(std::vector<OpDef>& t) {
  // name, tags, inputs (min, max), shape inference, derivative, FLOPs, kernel, inputs written in place
  t.push_back({"sgd_step", kInplace, 2, 3, optim_infer, nullptr, sgd_flops, sgd_kernel, {0, 2}});
  t.push_back({"adam_step", kInplace, 4, 4, optim_infer, nullptr, adam_flops, adam_kernel, {0, 2, 3}});
}

}  // namespace mutwo::ops
