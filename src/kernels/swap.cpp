// Kernels of the swap ops (rows in src/ops/swap.cpp). On CUDA the copies run
// on two side streams, one per direction, so the compute stream does not wait
// for them: swap_out waits for the compute stream's work so far, copies into
// pinned host memory and marks the device tensor used by its stream (the
// caching allocator reuses the block only after the copy); swap_in waits for
// that copy, allocates on the compute stream and copies back; swap_wait makes
// the compute stream wait for the copy back (a copy back starts once the
// compute stream reaches its swap_in, whose block it may be reusing). Events travel between the three
// by the address of the tensor they guard. On the CPU the copies are plain
// and synchronous, into host memory the CPU allocator's counting does not see
// (it measures the "device", which the host copy has left).
#include <cstdlib>
#include <unordered_map>

#ifdef MUTWO_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include "kernels/kernel.h"
#include "kernels/kernels.h"
#include "support/error.h"

namespace mutwo::kernels {

namespace {

// The strides a copy of `t` keeps: its own where they are dense, else contiguous.
std::vector<int64_t> copy_strides(const at::Tensor& t) {
  return t.is_non_overlapping_and_dense() ? t.strides().vec() : at::empty(t.sizes(), at::kMeta).strides().vec();
}

// Host memory outside the CPU allocator (so outside its counting).
at::Tensor untracked_host_empty(const at::Tensor& like, const std::vector<int64_t>& strides) {
  int64_t extent = like.numel() > 0 ? 1 : 0;
  for (int64_t d = 0; d < like.dim(); ++d)
    if (like.numel() > 0) extent += (like.size(d) - 1) * strides[static_cast<size_t>(d)];
  void* p = std::malloc(static_cast<size_t>(std::max<int64_t>(1, extent * static_cast<int64_t>(like.element_size()))));
  MUTWO_CHECK(p, "swap_out: out of host memory for {} bytes; lower --host-memory", extent * like.element_size());
  return at::from_blob(p, like.sizes(), strides, [](void* q) { std::free(q); }, at::TensorOptions().dtype(like.scalar_type()));
}

#ifdef MUTWO_WITH_CUDA
struct Streams {
  c10::cuda::CUDAStream out, in;  // device to host, host to device
};
Streams& streams(c10::DeviceIndex d) {
  static std::unordered_map<c10::DeviceIndex, Streams> by_device;
  auto it = by_device.find(d);
  if (it == by_device.end())
    it = by_device.emplace(d, Streams{c10::cuda::getStreamFromPool(false, d), c10::cuda::getStreamFromPool(false, d)}).first;
  return it->second;
}
// A copy in flight, by the address of the tensor it fills.
std::unordered_map<const void*, at::cuda::CUDAEvent>& pending() {
  static std::unordered_map<const void*, at::cuda::CUDAEvent> events;
  return events;
}

// dst := src on `stream`, as one cudaMemcpyAsync where both have the same
// dense layout (every swap: the host side is made with the device side's
// strides), else through ATen's copy. The host memory is mutwo's own (a
// swap_out node's buffer, or state kept in host memory), alive until the
// executor is gone and never reused by another tensor, so PyTorch's pinned
// allocator need not track the copy: its tracking records and queries events,
// which a captured CUDA graph may not.
void copy_on(const at::Tensor& src, at::Tensor& dst, const c10::cuda::CUDAStream& stream) {
  if (src.strides() == dst.strides() && src.sizes() == dst.sizes() && src.scalar_type() == dst.scalar_type() &&
      src.is_non_overlapping_and_dense()) {
    C10_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), static_cast<size_t>(src.numel() * src.element_size()), cudaMemcpyDefault,
                                   stream.stream()));
    return;
  }
  c10::cuda::CUDAStreamGuard guard(stream);
  dst.copy_(src, /*non_blocking=*/true);
}
#endif

// Host memory shaped like `like` (its strides where dense): pinned for copies
// from a CUDA device, else outside the CPU allocator's counting.
at::Tensor host_empty(const at::Tensor& like, bool pinned) {
  const std::vector<int64_t> strides = copy_strides(like);
  if (pinned) return at::empty_strided(like.sizes(), strides, like.options().device(at::kCPU).pinned_memory(true));
  return untracked_host_empty(like, strides);
}

// dst (host) := src. On CUDA on the copy-out stream, after the compute
// stream's work so far; src is marked used by that stream (its block returns
// to the allocator once the copy is done) and the copy is pending on dst.
void copy_out(const at::Tensor& src, at::Tensor& dst) {
#ifdef MUTWO_WITH_CUDA
  if (src.is_cuda()) {
    const c10::cuda::CUDAStream side = streams(src.get_device()).out;
    at::cuda::CUDAEvent made;
    made.record(c10::cuda::getCurrentCUDAStream(src.get_device()));
    made.block(side);
    copy_on(src, dst, side);
    src.record_stream(side);
    at::cuda::CUDAEvent copied;
    copied.record(side);
    pending()[dst.data_ptr()] = std::move(copied);
    return;
  }
#endif
  dst.copy_(src);
}

// A swap_out node's pinned host memory on CUDA, made at its first run and
// reused by every later step: a captured CUDA graph may not allocate pinned
// memory, and replays write the same buffer. (The step is ordered: a step's
// copy out starts after the compute stream's work so far, which waited for
// the last step's copy back of the same buffer.)
struct HostSlot {
  mutable at::Tensor buffer;
};

std::shared_ptr<const void> swap_out_prepare(const ir::Graph&, const ir::Node&) { return std::make_shared<HostSlot>(); }

void swap_out_kernel(KernelCall& k) {
  const at::Tensor& x = k.input(0);
  at::Tensor h;
  if (x.is_cuda()) {
    const auto& slot = *static_cast<const HostSlot*>(k.state);
    if (!slot.buffer.defined()) slot.buffer = host_empty(x, true);
    h = slot.buffer;
  } else {
    h = host_empty(x, false);
  }
  copy_out(x, h);
  k.output(0) = h;
}

void swap_in_kernel(KernelCall& k) {
  const at::Tensor& h = k.input(0);
  at::Tensor x = at::empty_strided(h.sizes(), h.strides(), k.options.dtype(h.scalar_type()));
#ifdef MUTWO_WITH_CUDA
  if (x.is_cuda()) {
    const c10::cuda::CUDAStream side = streams(x.get_device()).in;
    // The copy that filled h: this step's swap_out, or last step's swap_into
    // (none before the first step: state kept in host memory starts there).
    if (auto it = pending().find(h.data_ptr()); it != pending().end()) {
      it->second.block(side);
      pending().erase(it);
    }
    // x was allocated on the compute stream, whose queued kernels may still
    // use the block (the allocator reuses blocks in stream order): the copy
    // starts after them. The compute stream waits (swap_wait) before any use of
    // x, so no record_stream is needed.
    at::cuda::CUDAEvent allocated;
    allocated.record(c10::cuda::getCurrentCUDAStream(x.get_device()));
    allocated.block(side);
    copy_on(h, x, side);
    at::cuda::CUDAEvent copied;
    copied.record(side);
    pending()[x.data_ptr()] = std::move(copied);
    k.output(0) = x;
    return;
  }
#endif
  x.copy_(h);
  k.output(0) = x;
}

void swap_wait_kernel(KernelCall& k) {
  const at::Tensor& x = k.input(0);
#ifdef MUTWO_WITH_CUDA
  if (x.is_cuda()) {
    auto it = pending().find(x.data_ptr());
    MUTWO_ASSERT(it != pending().end(), "swap_wait: no swap_in is copying %{}", k.node.inputs[0]);
    it->second.block(c10::cuda::getCurrentCUDAStream(x.get_device()));
    pending().erase(it);
  }
#endif
  k.output(0) = x;
}

// swap_into(src, dst): dst (host) := src (device), like swap_out but into a
// tensor that persists.
void swap_into_kernel(KernelCall& k) {
  at::Tensor dst = k.input(1);  // shares its storage: written in place
  copy_out(k.input(0), dst);
}

}  // namespace

void join_copies(const c10::Device& device) {
#ifdef MUTWO_WITH_CUDA
  if (!device.is_cuda()) return;
  // The step's device ("cuda" names the current one): its streams, which the swap kernels used.
  const c10::DeviceIndex index = device.has_index() ? device.index() : c10::cuda::current_device();
  const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(index);
  for (c10::cuda::CUDAStream side : {streams(index).out, streams(index).in}) {
    at::cuda::CUDAEvent done;
    done.record(side);
    done.block(compute);
  }
  pending().clear();  // every copy is now behind the compute stream
#else
  (void)device;
#endif
}

at::Tensor host_tensor(const at::Tensor& t) {
  at::Tensor h = host_empty(t, at::hasCUDA());
  h.copy_(t);
  return h;
}

void add_swap_kernels(KernelRows& t) {
  t.push_back({"swap_out", {swap_out_kernel, swap_out_prepare}});
  t.push_back({"swap_in", {swap_in_kernel}});
  t.push_back({"swap_wait", {swap_wait_kernel}});
  t.push_back({"swap_into", {swap_into_kernel}});
}

}  // namespace mutwo::kernels
