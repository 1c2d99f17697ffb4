// What the data-parallel kernels (comm.cpp) need from the other ranks, as an
// interface: runtime/process_group.h implements it on c10d (Gloo on the CPU,
// NCCL on CUDA). A collective is launched by a start node and finished by a
// wait node that names the same bucket; between the two the step runs on
// (NCCL: on the process group's own stream; Gloo: on its threads).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace mutwo::kernels {

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Sums `flat` over the ranks, in place. Returns at once; wait(bucket) finishes it.
  virtual void all_reduce_start(int64_t bucket, at::Tensor flat) = 0;
  // Sums slice `rank` of `flat` (world_size equal slices) over the ranks, into
  // that slice of `flat`; the other slices are left undefined. Returns at once.
  virtual void reduce_scatter_start(int64_t bucket, at::Tensor flat) = 0;
  // Until the bucket's collective is done (NCCL: the current stream waits for it).
  virtual void wait(int64_t bucket) = 0;
  // `out` (world_size * shard.numel() elements) gets every rank's `shard`, in rank order.
  virtual void all_gather(const at::Tensor& shard, at::Tensor out) = 0;
};

}  // namespace mutwo::kernels
