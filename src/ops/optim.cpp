// Optimizer steps as in-place multi-tensor ops: one node updates every
// parameter, as torch.optim's foreach implementations do (the kernels, with
// ATen's _foreach_* ops, are in src/kernels/optim.cpp).
//
// Inputs: lists of equal length n, one after another: the parameters, their
// gradients, then one list per optimizer state (SGD: momentum buffers, only
// when momentum != 0; Adam: first moments, second moments). Entry i of every
// list belongs to parameter i. The op writes into the parameters and the
// state lists, never the gradients.
#include "ops/attrs.h"
#include "ops/builder.h"
#include "ops/infer.h"

#include <cmath>
#include <unordered_map>

namespace mutwo::ops {

OptimLists sgd_lists(const ir::Attrs& a) {
  if (a.f_or("momentum", 0) != 0) return {"parameters", "gradients", "momentum buffers"};
  return {"parameters", "gradients"};
}
OptimLists adam_lists(const ir::Attrs&) { return {"parameters", "gradients", "first moments", "second moments"}; }

OptimLists optimizer_lists(const ir::Node& n) {
  if (n.op == "sgd_step") return sgd_lists(n.attrs);
  if (n.op == "adam_step") return adam_lists(n.attrs);
  return {};
}

ir::Node optimizer_part(const ir::Node& n, const std::vector<size_t>& params) {
  const size_t lists = optimizer_lists(n).size(), count = n.inputs.size() / lists;
  ir::Node part = n;
  part.inputs.clear();
  for (size_t l = 0; l < lists; ++l)
    for (size_t i : params) part.inputs.push_back(n.inputs[l * count + i]);
  return part;
}

double optimizer_share(const ir::Graph& g, const ir::Node& n, const std::vector<size_t>& params) {
  const size_t count = n.inputs.size() / optimizer_lists(n).size();
  double part = 0, total = 0;
  for (size_t i = 0; i < count; ++i) total += static_cast<double>(g.type(n.inputs[i]).bytes());
  for (size_t i : params) part += static_cast<double>(g.type(n.inputs[i]).bytes());
  return total > 0 ? part / total : 0.0;
}

namespace {

using ir::TensorType;

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
Types optim_infer(const InferArgs& a, const OptimLists& lists, std::string_view note = {}) {
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

// Elements of the parameters, times the FLOPs per element.
double optim_flops(const FlopArgs& a, size_t lists, double per_element) {
  double total = 0;
  for (size_t i = 0; i < a.in.size() / lists; ++i) total += static_cast<double>(a.in[i]->numel());
  return per_element * total;
}
double sgd_flops(const FlopArgs& a) { return optim_flops(a, sgd_lists(a.node.attrs).size(), 4); }
double adam_flops(const FlopArgs& a) { return optim_flops(a, adam_lists(a.node.attrs).size(), 12); }

}  // namespace

// sgd_step(params..., grads..., momentum_buffers...) {lr, momentum, dampening, weight_decay, nesterov}
// adam_step(params..., grads..., exp_avgs..., exp_avg_sqs...) {lr, beta1, beta2, eps, weight_decay, decoupled (AdamW)}
void add_optim_ops(std::vector<OpDef>& t) {
  const std::vector<AttrSpec> sgd{{"lr", kNumberAttr},
                                  {"momentum", kNumberAttr, kOptional},
                                  {"dampening", kNumberAttr, kOptional},
                                  {"weight_decay", kNumberAttr, kOptional},
                                  {"nesterov", kIntAttr, kOptional}};
  const std::vector<AttrSpec> adam{{"lr", kNumberAttr},
                                   {"beta1", kNumberAttr, kOptional},
                                   {"beta2", kNumberAttr, kOptional},
                                   {"eps", kNumberAttr, kOptional},
                                   {"weight_decay", kNumberAttr, kOptional},
                                   {"decoupled", kIntAttr, kOptional}};
  // name, tags, inputs (min, max), shape inference, derivative, FLOPs, attributes, inputs written in place
  t.push_back({"sgd_step", kInplace, 2, kVariadic, sgd_infer, nullptr, sgd_flops, sgd, {}, sgd_mutates});
  t.push_back({"adam_step", kInplace | kStepCount, 4, kVariadic, adam_infer, nullptr, adam_flops, adam, {}, adam_mutates});
}

}  // namespace mutwo::ops
