// Measured memory: on CPU a counting allocator installed through c10's
// allocator hook; on CUDA the caching allocator's own statistics. Both report
// bytes allocated to tensors (current and peak since the last reset), and the
// bytes reserved from the device (CUDA: segments the caching allocator holds,
// allocated or not; CPU: the same as allocated, as nothing is cached).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <string>

namespace mutwo::runtime {

struct MemoryStats {
  int64_t current = 0;        // bytes allocated now
  int64_t peak = 0;           // most bytes allocated at once since reset_peak
  int64_t reserved_peak = 0;  // most bytes reserved at once since reset_peak
};

// Allocations served before the device's allocator is asked, while installed
// (the executor's arena, runtime/arena.h): take() gives an address for an
// allocation of `bytes` made now, or null to leave it to the allocator;
// give_back() is called when a tensor it served is freed. Bytes it serves are
// not counted again as allocated (its own memory was, once).
class AllocationSource {
 public:
  virtual ~AllocationSource() = default;
  virtual void* take(size_t bytes) = 0;
  virtual void give_back(void* p) = 0;
};

// Installs `source` ahead of `device`'s allocator for this thread's
// allocations (null: none); returns the one installed before. CPU: the
// counting allocator asks it; CUDA: a wrapper of the caching allocator,
// installed by start_device, asks it.
std::shared_ptr<AllocationSource> set_allocation_source(const c10::Device& device, std::shared_ptr<AllocationSource> source);

// Installs the counting CPU allocator (idempotent). CPU tensors allocated
// before this call are not counted; call it before building any tensor.
void track_cpu_memory();

MemoryStats memory_stats(const c10::Device& device);
void reset_peak(const c10::Device& device);

// Waits for the device to finish queued work (a no-op on CPU).
void synchronize(const c10::Device& device);

// CUDA: gives back the cuBLAS/cuBLASLt workspaces ATen keeps per (handle,
// stream) and every cached block no tensor uses, so that a measurement that
// follows starts from a fresh process's allocator. Without it, the blocks an
// earlier step left cached decide which blocks the next one gets, and a block
// handed out whole, larger than asked for, counts whole as allocated: 40 MiB
// more at BERT-base batch 32's peak, measured. A no-op on CPU.
void release_cached_memory(const c10::Device& device);

// CUDA: makes a stream other than the default one current for its lifetime,
// so that profiling, measuring and CUDA-graph capture (which needs such a
// stream) share one set of cuBLAS/cuBLASLt workspaces instead of allocating a
// second set that no prediction counts. A no-op on CPU.
class SideStream {
 public:
  explicit SideStream(const c10::Device& device);
  ~SideStream();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Caps what the process may hold on `device` (0: no cap), standing in for a
// smaller card: on CUDA the caching allocator's memory fraction (what it may
// reserve), on the CPU the counting allocator, which then fails an
// allocation past the cap with an out-of-memory error, as a card would.
void set_memory_limit(const c10::Device& device, int64_t bytes);

// The cap set_memory_limit put on `device`, 0 for none.
int64_t memory_limit(const c10::Device& device);

// A 64-bit hash (FNV-1a) of a tensor's bytes in C order, read on the host:
// bit-for-bit comparison without keeping the tensor.
uint64_t bytes_hash(const at::Tensor& t);

// What the device holds for this process outside the allocator's reserved
// bytes: on CUDA the context and libraries (this process's device bytes,
// runtime/device_memory.h, less the caching allocator's reserved ones; other
// processes on the card are not counted); 0 on the CPU.
// device_peak_bytes = reserved peak + this.
int64_t outside_allocator_bytes(const c10::Device& device);

// CUDA: makes this process's context and starts the caching allocator on
// `device` once, after reading what other processes hold there
// (take_device_baseline). Every CUDA command calls it before its first CUDA
// work (open_device). A no-op on the CPU.
void start_device(const c10::Device& device);

// What this process may hold on `device` now: what it holds plus what is free
// on the card (`--device-memory free`, max-batch's default cap on CUDA).
int64_t available_device_bytes(const c10::Device& device);

// Whether `e` says the device ran out of memory (CUDA's caching allocator, the
// CPU allocator, std::bad_alloc, or a CUDA library that could not allocate
// its handle or workspace: says_out_of_memory), as opposed to any other
// failure: what max-batch reads as "does not fit" and nothing else.
bool is_out_of_memory(const std::exception& e);
// Whether an error's text says so: "out of memory" and its kin, and the
// libraries' allocation statuses (CUBLAS_STATUS_ALLOC_FAILED when cuBLAS
// makes its handle on a full card, CUDNN_STATUS_ALLOC_FAILED, cuSOLVER's,
// cuFFT's), any case.
bool says_out_of_memory(std::string text);

// Whether this build and machine can run on CUDA, with a reason if not.
bool cuda_available(std::string* why_not = nullptr);

// Copy bandwidth between host memory and `device`, GB/s (1e9 bytes a second),
// each way, timed over a 64 MiB copy after a warm-up: pinned host memory and
// asynchronous copies on CUDA (what swap_out and swap_in do), memcpy on the CPU.
struct CopyBandwidth {
  double h2d_gbps = 0, d2h_gbps = 0;
};
CopyBandwidth measure_copy_bandwidth(const c10::Device& device);

}  // namespace mutwo::runtime
