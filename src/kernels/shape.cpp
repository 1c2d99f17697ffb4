// Kernels of the shape and reduction ops (rows in src/ops/shape.cpp): reshape
// (a view), sum, mean, their backward (expansion) and sum_to.
#include "kernels/kernel.h"
#include "kernels/kernels.h"
#include "ops/infer.h"

namespace mutwo::kernels {

namespace {

using ir::Shape;

void reshape_kernel(KernelCall& k) {
  const Shape& s = k.node.attrs.ints("shape");
  k.output(0) = k.input(0).view(s);  // a view: model builders make inputs contiguous first
}

void sum_kernel(KernelCall& k) {
  auto dims = ops::infer::reduce_dims(k.node.attrs, k.input(0).dim());
  k.output(0) = at::sum(k.input(0), dims, k.node.attrs.i_or("keepdim", 0) != 0);
}
void mean_kernel(KernelCall& k) {
  auto dims = ops::infer::reduce_dims(k.node.attrs, k.input(0).dim());
  k.output(0) = at::mean(k.input(0), dims, k.node.attrs.i_or("keepdim", 0) != 0);
}

// The gradient expanded back to the reduced input's shape: a view.
at::Tensor expand_back(KernelCall& k) {
  const Shape& s = k.node.attrs.ints("shape");
  at::Tensor g = k.input(0);
  if (k.node.attrs.i_or("keepdim", 0) == 0)
    for (int64_t d : ops::infer::reduce_dims(k.node.attrs, static_cast<int64_t>(s.size()))) g = g.unsqueeze(d);
  return g.expand(s);
}
void sum_backward_kernel(KernelCall& k) { k.output(0) = expand_back(k); }
void mean_backward_kernel(KernelCall& k) {
  const Shape& s = k.node.attrs.ints("shape");
  int64_t count = 1;
  for (int64_t d : ops::infer::reduce_dims(k.node.attrs, static_cast<int64_t>(s.size())))
    count *= s[static_cast<size_t>(d)];
  k.output(0) = expand_back(k) / count;
}

void sum_to_kernel(KernelCall& k) { k.output(0) = k.input(0).sum_to_size(k.node.attrs.ints("shape")); }

}  // namespace

void add_shape_kernels(KernelRows& t) {
  t.push_back({"reshape", {reshape_kernel}});
  t.push_back({"sum", {sum_kernel}});
  t.push_back({"mean", {mean_kernel}});
  t.push_back({"sum_backward", {sum_backward_kernel}});
  t.push_back({"mean_backward", {mean_backward_kernel}});
  t.push_back({"sum_to", {sum_to_kernel}});
}

}  // namespace mutwo::kernels
