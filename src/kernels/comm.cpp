// Kernels of the data-parallel ops (rows and bucket layout in src/ops/comm.cpp),
// through the process group's Collectives (collectives.h).
#include "kernels/collectives.h"
#include "kernels/kernel.h"
#include "kernels/kernels.h"
#include "ops/attrs.h"
#include "support/error.h"

namespace mutwo::kernels {

namespace {

Collectives& comm(const KernelCall& k) {
  MUTWO_CHECK(k.comm, "{}: this step is data-parallel; launch it under torchrun (RANK and WORLD_SIZE set)", k.node.op);
  MUTWO_CHECK(k.comm->world_size() == ops::world_of(k.node),
              "{}: the step was made for {} ranks, this process group has {}; build it again for this group", k.node.op,
              ops::world_of(k.node), k.comm->world_size());
  return *k.comm;
}

// Inputs [0, count) flattened one after another, zero-padded to `numel` elements.
at::Tensor flatten(const KernelCall& k, size_t count, int64_t numel) {
  std::vector<at::Tensor> parts;
  int64_t n = 0;
  for (size_t i = 0; i < count; ++i) {
    parts.push_back(k.input(i).reshape({-1}));
    n += parts.back().numel();
  }
  if (numel > n) parts.push_back(at::zeros({numel - n}, parts.front().options()));
  return at::cat(parts);
}

int64_t total_numel(const KernelCall& k, size_t count) {
  int64_t n = 0;
  for (size_t i = 0; i < count; ++i) n += k.input(i).numel();
  return n;
}

void shard_rows_kernel(KernelCall& k) {
  const at::Tensor& x = k.input(0);
  int64_t rows = x.size(0) / ops::world_of(k.node);
  k.output(0) = x.narrow(0, comm(k).rank() * rows, rows);
}

// The mean over ranks: divided before the sum, as DDP does (exact for a power-of-two world).
void allreduce_start_kernel(KernelCall& k) {
  const size_t count = k.node.inputs.size();
  at::Tensor flat = flatten(k, count, total_numel(k, count));
  flat.div_(static_cast<double>(ops::world_of(k.node)));
  comm(k).all_reduce_start(k.node.attrs.i("bucket"), flat);
  k.output(0) = flat;
}

void allreduce_wait_kernel(KernelCall& k) {
  comm(k).wait(k.node.attrs.i("bucket"));
  const at::Tensor& flat = k.input(0);
  int64_t offset = 0;
  std::vector<ir::Shape> shapes = ops::bucket_shapes(k.node);
  for (size_t i = 0; i < shapes.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : shapes[i]) n *= d;
    k.output(i) = flat.narrow(0, offset, n).view(shapes[i]);
    offset += n;
  }
}

void reduce_scatter_start_kernel(KernelCall& k) {
  const size_t count = k.node.inputs.size();
  const int64_t world = ops::world_of(k.node);
  at::Tensor flat = flatten(k, count, ops::padded_numel(total_numel(k, count), world));
  flat.div_(static_cast<double>(world));
  comm(k).reduce_scatter_start(k.node.attrs.i("bucket"), flat);
  k.output(0) = flat;
}

void reduce_scatter_wait_kernel(KernelCall& k) {
  Collectives& c = comm(k);
  c.wait(k.node.attrs.i("bucket"));
  const at::Tensor& flat = k.input(0);
  int64_t shard = flat.numel() / ops::world_of(k.node);
  k.output(0) = flat.narrow(0, c.rank() * shard, shard).clone();
}

// Copies only this rank's elements: the whole bucket is never made.
void flat_shard_kernel(KernelCall& k) {
  const size_t count = k.node.inputs.size();
  const int64_t world = ops::world_of(k.node);
  at::Tensor out = k.input(0);  // shares the shard's storage: written in place
  const int64_t shard = out.numel(), begin = comm(k).rank() * shard, end = begin + shard;
  int64_t offset = 0;
  for (size_t i = 1; i < count; ++i) {
    const at::Tensor& p = k.input(i);
    const int64_t n = p.numel(), lo = std::max(offset, begin), hi = std::min(offset + n, end);
    if (lo < hi) out.narrow(0, lo - begin, hi - lo).copy_(p.reshape({-1}).narrow(0, lo - offset, hi - lo));
    offset += n;
  }
  if (offset < end) out.narrow(0, std::max(offset, begin) - begin, end - std::max(offset, begin)).zero_();  // padding
  (void)world;
}

void all_gather_kernel(KernelCall& k) {
  const at::Tensor& shard = k.input(0);
  at::Tensor out = at::empty({shard.numel() * ops::world_of(k.node)}, shard.options());
  comm(k).all_gather(shard, out);
  k.output(0) = out;
}

void unflatten_into_kernel(KernelCall& k) {
  const size_t count = k.node.inputs.size() - 1;
  const at::Tensor& flat = k.input(count);
  int64_t offset = 0;
  for (size_t i = 0; i < count; ++i) {
    at::Tensor p = k.input(i);  // shares the parameter's storage: written in place
    p.view({-1}).copy_(flat.narrow(0, offset, p.numel()));
    offset += p.numel();
  }
}

}  // namespace

void add_comm_kernels(KernelRows& t) {
  t.push_back({"shard_rows", {shard_rows_kernel}});
  t.push_back({"allreduce_start", {allreduce_start_kernel}});
  t.push_back({"allreduce_wait", {allreduce_wait_kernel}});
  t.push_back({"reduce_scatter_start", {reduce_scatter_start_kernel}});
  t.push_back({"reduce_scatter_wait", {reduce_scatter_wait_kernel}});
  t.push_back({"flat_shard", {flat_shard_kernel}});
  t.push_back({"all_gather", {all_gather_kernel}});
  t.push_back({"unflatten_into", {unflatten_into_kernel}});
}

}  // namespace mutwo::kernels
