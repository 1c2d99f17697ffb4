// Optimizer steps as in-place multi-tensor ops: one node updates every
// parameter, as torch.optim's foreach implementations do, with ATen's
// _foreach_* kernels (one launch per list chunk on CUDA; on the CPU ATen
// loops over the tensors with the per-tensor ops). The arithmetic per tensor
// is torch::optim's C++ SGD and Adam/AdamW, op for op, so the parameters after
// N steps match those bit for bit.
//
// Inputs: lists of equal length n, one after another: the parameters, their
// gradients, then one list per optimizer state (SGD: momentum buffers, only
// when momentum != 0; Adam: first moments, second moments). Entry i of every
// list belongs to parameter i. The op writes into the parameters and the
// state lists, never the gradients.
#include "ops/builder.h"
#include "ops/infer.h"
#include "ops/kernel.h"

#include <cmath>
#include <unordered_map>

namespace mutwo::ops {

namespace {

using ir::TensorType;
using Lists = std::vector<std::string_view>;  // what each input list holds, in input order

Lists sgd_lists(const ir::Attrs& a) {
  if (a.f_or("momentum", 0) != 0) return {"parameters", "gradients", "momentum buffers"};
  return {"parameters", "gradients"};
}
Lists adam_lists(const ir::Attrs&) { return {"parameters", "gradients", "first moments", "second moments"}; }

// Input positions written in place: every list but the gradients (list 1).
std::vector<int> written(const ir::Node& node, size_t lists) {
  size_t n = node.inputs.size() / lists;
  std::vector<int> pos;
  if (n == 0) return pos;
  for (size_t i = 0; i < node.inputs.size(); ++i)
    if (i / n != 1) pos.push_back(static_cast<int>(i));
  return pos;
}
std::vector<int> sgd_mutates(const ir::Node& node) { return written(node, sgd_lists(node.attrs).size()); }
std::vector<int> adam_mutates(const ir::Node& node) { return written(node, adam_lists(node.attrs).size()); }

// Every parameter is a float tensor, and its entry in every other list has its
// type; no tensor is written twice. No outputs.
Types optim_infer(const InferArgs& a, const Lists& lists, std::string_view note = {}) {
  const std::string& op = a.node.op;
  double lr = a.node.attrs.f("lr");
  MUTWO_CHECK(lr >= 0 && std::isfinite(lr), "{}: learning rate must be a finite number >= 0, got {}", op, lr);
  size_t count = a.in.size(), n = count / lists.size();
  MUTWO_CHECK(count % lists.size() == 0,
              "{} takes {} lists of equal length ({}), one entry per parameter{}; got {} inputs", op, lists.size(),
              fmt::join(lists, ", "), note, count);
  for (size_t i = 0; i < n; ++i) {
    MUTWO_CHECK(a.has(i), "{}: parameter {} (input {}) is absent", op, i + 1, i);
    const TensorType& p = a.input(i);
    MUTWO_CHECK(ir::is_floating(p.dtype), "{}: parameter {} must be a floating-point tensor, got {}", op, a.name(i),
                ir::to_string(p));
    for (size_t l = 1; l < lists.size(); ++l) {
      size_t j = l * n + i;
      MUTWO_CHECK(a.has(j), "{}: input {}, in the {} of parameter {}, is absent", op, j, lists[l], a.name(i));
      MUTWO_CHECK(a.input(j) == p, "{}: {}, in the {}, must be {} like its parameter {}, got {}", op, a.name(j),
                  lists[l], ir::to_string(p), a.name(i), ir::to_string(a.input(j)));
    }
  }
  std::unordered_map<ir::ValueId, size_t> first;  // in-place lists alias nothing: each tensor is written once
  for (int j : written(a.node, lists.size())) {
    auto [it, fresh] = first.emplace(a.node.inputs[static_cast<size_t>(j)], static_cast<size_t>(j));
    MUTWO_CHECK(fresh, "{} writes into {} twice (inputs {} and {})", op, a.name(static_cast<size_t>(j)), it->second, j);
  }
  return {};
}
Types sgd_infer(const InferArgs& a) {
  return optim_infer(a, sgd_lists(a.node.attrs), " (the momentum buffers only with momentum != 0)");
}
Types adam_infer(const InferArgs& a) { return optim_infer(a, adam_lists(a.node.attrs)); }

// List l of the node's inputs, as ATen tensors (handles to the same storage).
std::vector<at::Tensor> tensor_list(const KernelCall& k, size_t l, size_t n) {
  std::vector<at::Tensor> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(k.input(l * n + i));
  return out;
}

// Elements of the parameters, times the FLOPs per element.
double optim_flops(const FlopArgs& a, size_t lists, double per_element) {
  double total = 0;
  for (size_t i = 0; i < a.in.size() / lists; ++i) total += static_cast<double>(a.in[i]->numel());
  return per_element * total;
}
double sgd_flops(const FlopArgs& a) { return optim_flops(a, sgd_lists(a.node.attrs).size(), 4); }
double adam_flops(const FlopArgs& a) { return optim_flops(a, adam_lists(a.node.attrs).size(), 12); }

// sgd_step(params..., grads..., momentum_buffers...) {lr, momentum, dampening, weight_decay, nesterov}
// torch.optim.SGD(foreach=True)'s order of operations (_multi_tensor_sgd),
// which per tensor is torch::optim::SGD's.
void sgd_kernel(KernelCall& k) {
  const auto& at_ = k.node.attrs;
  size_t lists = sgd_lists(at_).size(), n = k.node.inputs.size() / lists;
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

// adam_step(params..., grads..., exp_avgs..., exp_avg_sqs...) {lr, beta1, beta2, eps, weight_decay, decoupled (AdamW)}
// torch.optim.Adam(foreach=True)'s order of operations (_multi_tensor_adam),
// except the first moment: torch::optim's exp_avg.mul_(beta1).add_(grad,
// 1 - beta1) where PyTorch 2.x's Python Adam has exp_avg.lerp_(grad, 1 - beta1).
void adam_kernel(KernelCall& k) {
  const auto& a = k.node.attrs;
  size_t lists = adam_lists(a).size(), n = k.node.inputs.size() / lists;
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

void add_optim_ops(std::vector<OpDef>& t) {
  // name, tags, inputs (min, max), shape inference, derivative, FLOPs, kernel, -, inputs written in place
  t.push_back({"sgd_step", kInplace, 2, kVariadic, sgd_infer, nullptr, sgd_flops, sgd_kernel, {}, sgd_mutates});
  t.push_back({"adam_step", kInplace | kStepCount, 4, kVariadic, adam_infer, nullptr, adam_flops, adam_kernel, {}, adam_mutates});
}

}  // namespace mutwo::ops
