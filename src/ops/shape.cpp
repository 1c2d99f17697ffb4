// Shape and reduction ops: reshape (a view), sum, mean, their backward
// (expansion), and sum_to, the one op autodiff uses to reduce broadcast gradients.
// Their kernels are in src/kernels/shape.cpp.
#include <algorithm>

#include "ops/builder.h"
#include "ops/infer.h"

namespace mutwo::ops {

namespace {

using ir::Shape;
using ir::TensorType;
using ir::ValueId;

// reshape {shape}: one entry may be -1. A view of its (contiguous) input.
Shape resolve_reshape(const Shape& in, const Shape& target) {
  int64_t numel = 1;
  for (int64_t d : in) numel *= d;
  Shape out = target;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      MUTWO_CHECK(infer_at < 0, "reshape: only one dimension may be -1 in {}", ir::shape_string(target));
      infer_at = static_cast<int64_t>(i);
    } else {
      MUTWO_CHECK(out[i] >= 0, "reshape: negative dimension in {}", ir::shape_string(target));
      known *= out[i];
    }
  }
  if (infer_at >= 0) {
    MUTWO_CHECK(known > 0 && numel % known == 0, "reshape: cannot reshape {} into {}", ir::shape_string(in),
                ir::shape_string(target));
    out[static_cast<size_t>(infer_at)] = numel / known;
    known *= out[static_cast<size_t>(infer_at)];
  }
  MUTWO_CHECK(known == numel, "reshape: {} has {} elements, {} has {}", ir::shape_string(in), numel,
              ir::shape_string(target), known);
  return out;
}
Types reshape_infer(const InferArgs& a) {
  return {TensorType{resolve_reshape(a.input(0).shape, a.node.attrs.ints("shape")), a.input(0).dtype}};
}
Grads reshape_grad(GradArgs& a) {
  const Shape& s = a.b.shape(a.in(0));
  return {a.b.op("reshape", {a.g()}, {{"shape", s}}, a.grad_name(0))};
}

// sum / mean {dims (empty: all), keepdim}.
Types reduce_infer(const InferArgs& a) {
  infer::require_float(a.input(0), "reduction input");
  auto dims = infer::reduce_dims(a.node.attrs, a.input(0).rank());
  bool keep = a.node.attrs.i_or("keepdim", 0) != 0;
  return {TensorType{infer::reduced_shape(a.input(0).shape, dims, keep), a.input(0).dtype}};
}
ir::Attrs backward_attrs(GradArgs& a) {
  ir::Attrs attrs = a.node.attrs;
  attrs.set("shape", a.b.shape(a.in(0)));
  return attrs;
}
Grads sum_grad(GradArgs& a) { return {a.b.op("sum_backward", {a.g()}, backward_attrs(a), a.grad_name(0))}; }
Grads mean_grad(GradArgs& a) { return {a.b.op("mean_backward", {a.g()}, backward_attrs(a), a.grad_name(0))}; }

// sum_backward / mean_backward {shape, dims, keepdim}: the gradient expanded
// back to the reduced input's shape (a view for sum; divided by the count for
// mean, as PyTorch's mean_backward does).
Types reduce_backward_infer(const InferArgs& a) {
  const Shape& s = a.node.attrs.ints("shape");
  auto dims = infer::reduce_dims(a.node.attrs, static_cast<int64_t>(s.size()));
  bool keep = a.node.attrs.i_or("keepdim", 0) != 0;
  infer::require_shape(a.input(0), infer::reduced_shape(s, dims, keep), "reduction gradient");
  return {TensorType{s, a.input(0).dtype}};
}

// sum_to {shape}: sums a broadcast gradient back to an operand's shape.
Types sum_to_infer(const InferArgs& a) {
  const Shape& target = a.node.attrs.ints("shape");
  infer::require_float(a.input(0), "sum_to input");
  MUTWO_CHECK(infer::broadcast(target, a.input(0).shape) == a.input(0).shape,
              "sum_to: {} does not broadcast to {}", ir::shape_string(target), ir::to_string(a.input(0)));
  MUTWO_CHECK(target != a.input(0).shape, "sum_to: input already has shape {}", ir::shape_string(target));
  return {TensorType{target, a.input(0).dtype}};
}

}  // namespace

void add_shape_ops(std::vector<OpDef>& t) {
  const std::vector<AttrSpec> reduce{{"dims", kIntsAttr, kOptional}, {"keepdim", kIntAttr, kOptional}};
  std::vector<AttrSpec> backward = reduce;  // and the reduced input's shape
  backward.push_back({"shape", kIntsAttr});
  // name, tags, inputs (min, max), shape inference, derivative, FLOPs, attributes
  t.push_back({"reshape", kView, 1, 1, reshape_infer, reshape_grad, nullptr, {{"shape", kIntsAttr}}});
  t.push_back({"sum", kReduction, 1, 1, reduce_infer, sum_grad, nullptr, reduce});
  t.push_back({"mean", kReduction, 1, 1, reduce_infer, mean_grad, nullptr, reduce});
  t.push_back({"sum_backward", kView, 1, 1, reduce_backward_infer, nullptr, nullptr, backward});
  t.push_back({"mean_backward", kPointwise, 1, 1, reduce_backward_infer, nullptr, nullptr, backward});
  t.push_back({"sum_to", kReduction, 1, 1, sum_to_infer, nullptr, nullptr, {{"shape", kIntsAttr}}});
}

}  // namespace mutwo::ops
