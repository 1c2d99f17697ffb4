// Kernels of the layout and token ops (rows in src/ops/layout.cpp): permute (a
// view), contiguous (a copy), split (contiguous copies), cat, and the integer
// ops arange, shift_left and int_constant.
#include "kernels/kernel.h"
#include "kernels/kernels.h"

namespace mutwo::kernels {

namespace {

void permute_kernel(KernelCall& k) { k.output(0) = k.input(0).permute(k.node.attrs.ints("dims")); }

void contiguous_kernel(KernelCall& k) { k.output(0) = at::clone(k.input(0), at::MemoryFormat::Contiguous); }

void split_kernel(KernelCall& k) {
  auto parts = at::split_with_sizes(k.input(0), k.node.attrs.ints("sizes"), k.node.attrs.i("dim"));
  for (size_t i = 0; i < parts.size(); ++i) k.output(i) = at::clone(parts[i], at::MemoryFormat::Contiguous);
}

void cat_kernel(KernelCall& k) {
  std::vector<at::Tensor> xs;
  for (size_t i = 0; i < k.node.inputs.size(); ++i) xs.push_back(k.input(i));
  k.output(0) = at::cat(xs, k.node.attrs.i("dim"));
}

void arange_kernel(KernelCall& k) { k.output(0) = at::arange(k.node.attrs.i("end"), k.options.dtype(at::kLong)); }

void shift_left_kernel(KernelCall& k) {
  const at::Tensor& x = k.input(0);
  k.output(0) = at::constant_pad_nd(x.narrow(-1, 1, x.size(-1) - 1), {0, 1}, k.node.attrs.i_or("fill", -100));
}

void int_constant_kernel(KernelCall& k) {
  at::Tensor t = at::tensor(k.node.attrs.ints("values"), at::TensorOptions().dtype(at::kLong));
  t = t.view(k.node.attrs.ints("shape"));
  k.output(0) = k.options.device().is_cpu() ? t : t.to(k.options.device());
}

}  // namespace

void add_layout_kernels(KernelRows& t) {
  t.push_back({"permute", {permute_kernel}});
  t.push_back({"contiguous", {contiguous_kernel}});
  t.push_back({"split", {split_kernel}});
  t.push_back({"cat", {cat_kernel}});
  t.push_back({"arange", {arange_kernel}});
  t.push_back({"shift_left", {shift_left_kernel}});
  t.push_back({"int_constant", {int_constant_kernel}});
}

}  // namespace mutwo::kernels
