// Transformer op rows, the layout and token helpers: permute (a view),
// contiguous (a copy), split and cat (each other's derivative), and the integer
// ops that make a language model's ids and labels: arange (position ids),
// shift_left (next-token labels) and int_constant (a fixed batch of token ids
// read from a file when the graph is built). Their kernels are in
// src/kernels/layout.cpp.
#include <algorithm>
#include <numeric>

#include "ops/builder.h"
#include "ops/infer.h"

namespace mutwo::ops {

namespace {

using ir::DType;
using ir::Shape;
using ir::TensorType;
using ir::ValueId;

// ---- permute(x) {dims}: a view with the dimensions reordered (dims[i] is the
// input dimension that becomes output dimension i). Its derivative permutes the
// gradient back and makes it contiguous, so that the reshape (a view) that
// usually precedes a permute in the forward pass can view it again; autograd
// makes the same copy in that reshape's backward.
std::vector<int64_t> checked_perm(const ir::Node& n, int64_t rank) {
  std::vector<int64_t> dims = n.attrs.ints("dims");
  MUTWO_CHECK(static_cast<int64_t>(dims.size()) == rank, "permute: dims [{}] must list all {} dimensions",
              fmt::join(dims, ","), rank);
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t& d : dims) {
    d = infer::dim(d, rank, "permute");
    MUTWO_CHECK(!seen[static_cast<size_t>(d)], "permute: dimension {} is listed twice", d);
    seen[static_cast<size_t>(d)] = true;
  }
  return dims;
}
Types permute_infer(const InferArgs& a) {
  const TensorType& x = a.input(0);
  auto dims = checked_perm(a.node, x.rank());
  Shape out;
  for (int64_t d : dims) out.push_back(x.shape[static_cast<size_t>(d)]);
  return {TensorType{out, x.dtype}};
}
Grads permute_grad(GradArgs& a) {
  auto dims = checked_perm(a.node, a.b.type(a.in(0)).rank());
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[static_cast<size_t>(dims[i])] = static_cast<int64_t>(i);
  std::string name = a.grad_name(0);
  ValueId back = a.b.op("permute", {a.g()}, {{"dims", inverse}}, name + ".permute");
  return {a.b.op("contiguous", {back}, {}, name)};
}
double no_flops(const FlopArgs&) { return 0; }

// ---- contiguous(x): a fresh, contiguous copy (always a copy, even of a
// contiguous input, so liveness may treat it as new storage). d/dx = g.
Types contiguous_infer(const InferArgs& a) { return {a.input(0)}; }
Grads contiguous_grad(GradArgs& a) { return {a.g()}; }

// ---- split(x) {dim, sizes} -> one contiguous copy per size (torch.split
// returns views; copies here keep the liveness model of one storage per
// non-view output). The derivative is cat of the gradients, zeros for parts
// that got none, as autograd's split_backward.
Types split_infer(const InferArgs& a) {
  const TensorType& x = a.input(0);
  MUTWO_CHECK(x.rank() >= 1, "split: the input needs at least one dimension");
  int64_t d = infer::dim(a.node.attrs.i("dim"), x.rank(), "split");
  const auto& sizes = a.node.attrs.ints("sizes");
  MUTWO_CHECK(!sizes.empty(), "split: sizes is empty");
  int64_t total = 0;
  Types out;
  for (int64_t s : sizes) {
    MUTWO_CHECK(s > 0, "split: sizes must be positive, got [{}]", fmt::join(sizes, ","));
    total += s;
    Shape part = x.shape;
    part[static_cast<size_t>(d)] = s;
    out.push_back(TensorType{part, x.dtype});
  }
  MUTWO_CHECK(total == x.shape[static_cast<size_t>(d)], "split: sizes [{}] add up to {}, but dimension {} of {} is {}",
              fmt::join(sizes, ","), total, d, ir::to_string(x), x.shape[static_cast<size_t>(d)]);
  return out;
}
Grads split_grad(GradArgs& a) {
  std::vector<ValueId> parts;
  for (size_t i = 0; i < a.node.outputs.size(); ++i) {
    ValueId gi = a.g(i);
    if (gi == ir::kNoValue) {
      const TensorType& t = a.b.type(a.out(i));
      gi = a.b.op("full", {}, {{"shape", t.shape}, {"value", 0.0}, {"dtype", std::string(ir::to_string(t.dtype))}},
                  a.b.graph().value(a.out(i)).name + ".grad");
    }
    parts.push_back(gi);
  }
  return {a.b.op("cat", parts, {{"dim", a.node.attrs.i("dim")}}, a.grad_name(0))};
}

// ---- cat(x1, x2, ...) {dim}: concatenation; its derivative is split of the gradient.
Types cat_infer(const InferArgs& a) {
  const TensorType& x = a.input(0);
  MUTWO_CHECK(x.rank() >= 1, "cat: inputs need at least one dimension");
  int64_t d = infer::dim(a.node.attrs.i("dim"), x.rank(), "cat");
  size_t dd = static_cast<size_t>(d);
  Shape out = x.shape;
  out[dd] = 0;
  for (size_t i = 0; i < a.in.size(); ++i) {
    MUTWO_CHECK(a.has(i), "cat: input {} is absent", i);
    const TensorType& t = a.input(i);
    infer::require_same_dtype(x, t, "cat inputs");
    bool fits = t.rank() == x.rank();
    for (size_t j = 0; fits && j < x.shape.size(); ++j) fits = j == dd || t.shape[j] == x.shape[j];
    MUTWO_CHECK(fits, "cat: input {} is {}, but input 0 is {}; they may differ only in dimension {}", i,
                ir::to_string(t), ir::to_string(x), d);
    out[dd] += t.shape[dd];
  }
  return {TensorType{out, x.dtype}};
}
Grads cat_grad(GradArgs& a) {
  int64_t d = a.node.attrs.i("dim");
  size_t dd = static_cast<size_t>(infer::dim(d, a.b.type(a.in(0)).rank(), "cat"));
  std::vector<int64_t> sizes;
  for (ValueId v : a.node.inputs) sizes.push_back(a.b.shape(v)[dd]);
  auto outs = a.b.call("split", {a.g()}, {{"dim", d}, {"sizes", sizes}}, a.grad_name(0));
  Grads g(outs.size(), ir::kNoValue);
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!a.needs(i)) continue;  // computed anyway (one split), left unused
    g[i] = outs[i];
    if (i > 0) a.b.graph().rename(outs[i], a.b.graph().unique_name(a.grad_name(i)));
  }
  return g;
}

// ---- arange {end} -> i64[end]: 0, 1, ..., end-1 (position ids).
Types arange_infer(const InferArgs& a) {
  int64_t end = a.node.attrs.i("end");
  MUTWO_CHECK(end > 0, "arange: end must be positive, got {}", end);
  return {TensorType{{end}, DType::i64}};
}

// ---- shift_left(ids (..., T)) {fill = -100}: out[..., t] = ids[..., t+1], and the last
// position = fill: next-token labels, as Hugging Face's causal-LM loss makes
// them (pad with ignore_index -100, drop the first position).
Types shift_left_infer(const InferArgs& a) {
  const TensorType& x = a.input(0);
  MUTWO_CHECK(x.dtype == DType::i64 || x.dtype == DType::i32, "shift_left: input must be integer ids, got {}",
              ir::to_string(x));
  MUTWO_CHECK(x.rank() >= 1, "shift_left: the input needs at least one dimension");
  return {x};
}

// ---- int_constant {shape, values} -> i64[shape]: a constant held in the graph
// (the transformer-lm's fixed batch of byte tokens read from --data).
Types int_constant_infer(const InferArgs& a) {
  const Shape& s = a.node.attrs.ints("shape");
  int64_t n = 1;
  for (int64_t d : s) {
    MUTWO_CHECK(d >= 0, "int_constant: negative dimension in {}", ir::shape_string(s));
    n *= d;
  }
  auto count = static_cast<int64_t>(a.node.attrs.ints("values").size());
  MUTWO_CHECK(count == n, "int_constant: shape {} needs {} values, got {}", ir::shape_string(s), n, count);
  return {TensorType{s, DType::i64}};
}

}  // namespace

void add_layout_ops(std::vector<OpDef>& t) {
  // name, tags, inputs (min, max), shape inference, derivative, FLOPs, attributes
  t.push_back({"permute", kView, 1, 1, permute_infer, permute_grad, no_flops, {{"dims", kIntsAttr}}});
  t.push_back({"contiguous", 0, 1, 1, contiguous_infer, contiguous_grad, nullptr});
  t.push_back({"split", 0, 1, 1, split_infer, split_grad, nullptr, {{"dim", kIntAttr}, {"sizes", kIntsAttr}}});
  t.push_back({"cat", 0, 1, 64, cat_infer, cat_grad, nullptr, {{"dim", kIntAttr}}});
  t.push_back({"arange", 0, 0, 0, arange_infer, nullptr, nullptr, {{"end", kIntAttr}}});
  t.push_back({"shift_left", 0, 1, 1, shift_left_infer, nullptr, nullptr, {{"fill", kIntAttr, kOptional}}});
  t.push_back({"int_constant", 0, 0, 0, int_constant_infer, nullptr, no_flops,
               {{"shape", kIntsAttr}, {"values", kIntsAttr}}});
}

}  // namespace mutwo::ops
