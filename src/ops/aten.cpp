// The generic op's row: one row, `aten`, that runs any ATen operator through
// the c10 dispatcher by its schema, for steps captured from PyTorch
// (docs/step-file.md). Here its tags, inputs written in place, output types and
// FLOPs, per node; the dispatcher call is its kernel, src/kernels/aten.cpp.
//
// A node carries the operator and its arguments as attributes:
//   target="aten::addmm" overload="default"   the schema
//   args="[\"%0\",\"%1\",\"%2\",1,1]"          one JSON entry per schema argument;
//                                             "%i" is node input i, [..] a list
//   returns=[0]                               per returned tensor (a Tensor[] counts
//                                             its elements): node output index, -1 none
//   tags="view"                               random, view, inplace, overwrite
//   mutates=[3,4]                             node inputs written in place (persistent)
// Output types are the captured ones (the graph's); the first run checks them.
#include <algorithm>
#include <string>
#include <variant>

#include "ops/attrs.h"
#include "ops/op.h"
#include "support/error.h"

namespace mutwo::ops {

namespace {

uint32_t parse_tags(const std::string& s) {
  uint32_t t = 0;
  size_t b = 0;
  while (b < s.size()) {
    size_t e = s.find(',', b);
    if (e == std::string::npos) e = s.size();
    std::string_view w(s.data() + b, e - b);
    if (w == "random") t |= kRandom;
    else if (w == "view") t |= kView;
    else if (w == "inplace") t |= kInplace;
    else if (w == "overwrite") t |= kView | kOverwrite;
    else if (w == "heavy") t |= kHeavy;
    else MUTWO_FAIL("aten node: unknown tag '{}' (random, view, inplace, overwrite, heavy)", w);
    b = e + 1;
  }
  return t;
}

uint32_t aten_tags(const ir::Node& n) {
  const ir::Attr* a = n.attrs.find("tags");
  return a ? parse_tags(std::get<std::string>(*a)) : 0;
}

std::vector<int> aten_mutates(const ir::Node& n) {
  std::vector<int> out;
  if (const ir::Attr* a = n.attrs.find("mutates"))
    for (int64_t i : std::get<std::vector<int64_t>>(*a)) out.push_back(static_cast<int>(i));
  return out;
}

// The captured types: the node's own output values, as the step file declared them.
Types aten_infer(const InferArgs& a) {
  MUTWO_ASSERT(a.graph, "aten nodes take their output types from the graph");
  Types out;
  for (ir::ValueId v : a.node.outputs) out.push_back(a.graph->type(v));
  return out;
}

double matmul_class_flops(const FlopArgs& a) {
  const std::string& t = a.node.attrs.s("target");
  auto numel = [](const ir::TensorType* x) { return x ? static_cast<double>(x->numel()) : 0.0; };
  auto last = [](const ir::TensorType* x) { return x && x->rank() ? static_cast<double>(x->shape.back()) : 0.0; };
  const ir::TensorType* out0 = a.out.empty() ? nullptr : a.out[0];
  if (t == "aten::mm" || t == "aten::bmm" || t == "aten::matmul" || t == "aten::linear")
    return 2 * numel(out0) * last(a.in.empty() ? nullptr : a.in[0]);
  if (t == "aten::addmm" || t == "aten::baddbmm" || t == "aten::addbmm")
    return 2 * numel(out0) * last(a.in.size() > 1 ? a.in[1] : nullptr);
  if ((t == "aten::convolution" || t == "aten::_convolution") && a.in.size() > 1 && a.in[1] && a.in[1]->rank())
    return 2 * numel(out0) * numel(a.in[1]) / static_cast<double>(a.in[1]->shape[0]);
  if (t == "aten::convolution_backward" && a.in.size() > 2 && a.in[2] && a.in[2]->rank())  // grad_input and grad_weight
    return 4 * numel(a.in[0]) * numel(a.in[2]) / static_cast<double>(a.in[2]->shape[0]);
  if (t.find("scaled_dot_product") != std::string::npos && a.in.size() > 1 && a.in[0] && a.in[1] && a.in[0]->rank() >= 2) {
    double f = 4 * numel(a.in[0]) * static_cast<double>(a.in[1]->shape[static_cast<size_t>(a.in[1]->rank() - 2)]);
    return t.find("backward") != std::string::npos ? 2 * f : f;
  }
  // oneDNN's LSTM layer: per time step and batch row, its input and hidden
  // matmuls (inputs 1 and 2 are weight_ih (4H, I) and weight_hh (4H, H)).
  if ((t == "aten::mkldnn_rnn_layer" || t == "aten::mkldnn_rnn_layer_backward") && a.in.size() > 2 && a.in[0] &&
      a.in[0]->rank() && a.in[0]->shape.back() > 0) {
    double f = 2 * numel(a.in[0]) / static_cast<double>(a.in[0]->shape.back()) * (numel(a.in[1]) + numel(a.in[2]));
    return t == "aten::mkldnn_rnn_layer_backward" ? 2 * f : f;
  }
  double total = 0;
  for (const auto* o : a.out) total += numel(o);
  return total;
}

}  // namespace

std::optional<size_t> aten_input_ref(std::string_view s) {
  if (s.size() < 2 || s[0] != '%' || !std::all_of(s.begin() + 1, s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  size_t i = 0;
  for (char c : s.substr(1)) i = i * 10 + static_cast<size_t>(c - '0');
  return i;
}

void add_aten_ops(std::vector<OpDef>& t) {
  OpDef d{"aten", 0, 0, kVariadic, aten_infer, nullptr, matmul_class_flops,
          {{"target", kStringAttr}, {"overload", kStringAttr}, {"args", kStringAttr}, {"returns", kIntsAttr},
           {"tags", kStringAttr, kOptional}, {"mutates", kIntsAttr, kOptional}}};
  d.mutates_of = aten_mutates;
  d.tags_of = aten_tags;
  t.push_back(d);
}

}  // namespace mutwo::ops
