// The counting CPU allocator and the CUDA allocator statistics (see memory.h).
#include "runtime/memory.h"

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cstring>
#include <new>
#include <string>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#ifdef MUTWO_WITH_CUDA
#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "runtime/device_memory.h"
#include "runtime/served.h"
#include "support/error.h"
#include "support/units.h"

namespace mutwo::runtime {

// cuda_source.cpp.
std::shared_ptr<AllocationSource> set_cuda_allocation_source(const c10::Device& device, std::shared_ptr<AllocationSource> source);

namespace {

// Wraps the default CPU allocator and counts live bytes. The data pointer is
// also the context pointer (oneDNN's raw_allocate requires it), so sizes and
// the wrapped allocation live in a side table keyed by the pointer.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) override { return allocate_impl(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  MemoryStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak = stats_.current;
  }

  void set_limit(int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    limit_ = bytes;
  }
  int64_t limit() {
    std::lock_guard<std::mutex> lock(mu_);
    return limit_;
  }

  std::shared_ptr<AllocationSource> set_source(std::shared_ptr<AllocationSource> source) {
    return served_.set(std::move(source));
  }

  static CountingAllocator* instance;

 private:
  c10::DataPtr allocate_impl(size_t n) const {
    if (void* p = served_.take(n)) return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
    if (limit_ > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      TORCH_CHECK(stats_.current + static_cast<int64_t>(n) <= limit_, "CPU out of memory: allocating ", n, " bytes with ",
                  stats_.current, " in use passes the --device-memory limit of ", limit_, " bytes");
    }
    c10::DataPtr inner = base_->allocate(n);
    void* p = inner.get();
    if (p == nullptr) return {nullptr, nullptr, &release, c10::Device(c10::DeviceType::CPU)};  // n == 0
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.current += static_cast<int64_t>(n);
      stats_.peak = std::max(stats_.peak, stats_.current);
      table_.emplace(p, Entry{n, std::move(inner)});
    }
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }

  static void release(void* p) {
    // raw_allocate(0) hands out nullptr (allocate_impl does not track empty
    // allocations) and raw_deallocate gives it back here, as oneDNN's gelu
    // does with an empty scratchpad: like free(nullptr), a no-op.
    if (p == nullptr || instance->served_.give_back(p)) return;
    c10::DataPtr inner;
    {
      std::lock_guard<std::mutex> lock(instance->mu_);
      auto it = instance->table_.find(p);
      MUTWO_ASSERT(it != instance->table_.end(), "counting allocator: unknown pointer");
      instance->stats_.current -= static_cast<int64_t>(it->second.bytes);
      inner = std::move(it->second.inner);
      instance->table_.erase(it);
    }
    // `inner` frees the memory through the wrapped allocator here, outside the lock.
  }

  struct Entry {
    size_t bytes;
    c10::DataPtr inner;
  };
  c10::Allocator* base_;
  mutable std::mutex mu_;
  mutable MemoryStats stats_;
  mutable std::unordered_map<void*, Entry> table_;
  mutable Served served_;  // by the installed source first, not counted
  int64_t limit_ = 0;  // 0: none
};

CountingAllocator* CountingAllocator::instance = nullptr;

}  // namespace

void track_cpu_memory() {
  static std::once_flag once;
  std::call_once(once, [] {
    CountingAllocator::instance = new CountingAllocator(c10::GetCPUAllocator());  // lives for the process
    c10::SetAllocator(c10::DeviceType::CPU, CountingAllocator::instance);
  });
}

std::shared_ptr<AllocationSource> set_allocation_source(const c10::Device& device, std::shared_ptr<AllocationSource> source) {
  if (device.is_cpu()) {
    track_cpu_memory();
    return CountingAllocator::instance->set_source(std::move(source));
  }
  return set_cuda_allocation_source(device, std::move(source));
}

MemoryStats memory_stats(const c10::Device& device) {
  if (device.is_cpu()) {
    MUTWO_ASSERT(CountingAllocator::instance, "track_cpu_memory() was not called");
    MemoryStats s = CountingAllocator::instance->stats();
    s.reserved_peak = s.peak;
    return s;
  }
#ifdef MUTWO_WITH_CUDA
  auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index() < 0 ? 0 : device.index());
  const auto& a = s.allocated_bytes[0];  // StatType::AGGREGATE
  return {a.current, a.peak, s.reserved_bytes[0].peak};
#else
  MUTWO_FAIL("this mutwo was built without CUDA");
#endif
}

void reset_peak(const c10::Device& device) {
  if (device.is_cpu()) {
    MUTWO_ASSERT(CountingAllocator::instance, "track_cpu_memory() was not called");
    CountingAllocator::instance->reset_peak();
    return;
  }
#ifdef MUTWO_WITH_CUDA
  c10::cuda::CUDACachingAllocator::resetPeakStats(device.index() < 0 ? 0 : device.index());
#endif
}

void synchronize(const c10::Device& device) {
#ifdef MUTWO_WITH_CUDA
  if (device.is_cuda()) c10::cuda::device_synchronize();
#endif
}

void release_cached_memory(const c10::Device& device) {
#ifdef MUTWO_WITH_CUDA
  if (!device.is_cuda()) return;
  synchronize(device);
  at::cuda::clearCublasWorkspaces();
  c10::cuda::CUDACachingAllocator::emptyCache();
#else
  (void)device;
#endif
}

struct SideStream::Impl {
#ifdef MUTWO_WITH_CUDA
  c10::cuda::CUDAStreamGuard guard;
#endif
};

SideStream::SideStream(const c10::Device& device) {
#ifdef MUTWO_WITH_CUDA
  if (device.is_cuda())
    impl_.reset(new Impl{c10::cuda::CUDAStreamGuard(c10::cuda::getStreamFromPool(false, device.index() < 0 ? 0 : device.index()))});
#else
  (void)device;
#endif
}
SideStream::~SideStream() = default;

bool cuda_available(std::string* why_not) {
#ifdef MUTWO_WITH_CUDA
  if (at::hasCUDA()) return true;
  if (why_not) *why_not = "this mutwo was built with CUDA but no CUDA device is visible";
  return false;
#else
  if (why_not)
    *why_not = "this mutwo was built against a CPU-only libtorch; rebuild against a CUDA libtorch (README: GPU build)";
  return false;
#endif
}

bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e)) return true;
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e)) return true;
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  return says_out_of_memory(c10_error ? c10_error->what_without_backtrace() : e.what());
}

bool says_out_of_memory(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* says : {"out of memory", "can't allocate memory", "not enough memory", "failed to allocate",
                           "cublas_status_alloc_failed", "cudnn_status_alloc_failed", "cusolver_status_alloc_failed",
                           "cufft_alloc_failed"})
    if (text.find(says) != std::string::npos) return true;
  return false;
}

namespace {
int64_t cuda_limit = 0;  // what set_memory_limit last capped CUDA at
}  // namespace

int64_t memory_limit(const c10::Device& device) {
  if (device.is_cpu()) return CountingAllocator::instance ? CountingAllocator::instance->limit() : 0;
  return cuda_limit;
}

uint64_t bytes_hash(const at::Tensor& t) {
  const at::Tensor c = t.is_cpu() ? t.contiguous() : t.contiguous().to(at::kCPU);
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0, n = static_cast<size_t>(c.numel()) * c.element_size(); i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

void start_device(const c10::Device& device) {
#ifdef MUTWO_WITH_CUDA
  if (!device.is_cuda()) return;
  static bool started = false;
  if (started) return;
  take_device_baseline(device);  // before this process's context exists
  const c10::DeviceIndex index = device.index() < 0 ? 0 : device.index();
  c10::cuda::CUDAGuard guard(index);
  at::empty({1}, at::TensorOptions().device(c10::Device(c10::kCUDA, index)));  // the context, and the allocator's state
  started = true;
#else
  (void)device;
#endif
}

int64_t available_device_bytes(const c10::Device& device) {
  if (device.is_cpu()) return 0;
  start_device(device);
  const DeviceBytes b = process_device_bytes(device);
  return b.process + b.free;
}

void set_memory_limit(const c10::Device& device, int64_t bytes) {
  MUTWO_CHECK(bytes >= 0, "--device-memory must not be negative");
  if (device.is_cpu()) {
    track_cpu_memory();
    CountingAllocator::instance->set_limit(bytes);
    return;
  }
#ifdef MUTWO_WITH_CUDA
  const c10::DeviceIndex index = device.index() < 0 ? 0 : device.index();
  start_device(device);
  c10::cuda::CUDAGuard guard(index);
  size_t free = 0, total = 0;
  C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  MUTWO_CHECK(bytes == 0 || static_cast<size_t>(bytes) <= total, "--device-memory {} is more than the card's {}",
              bytes, total);
  // The caching allocator's cap, a fraction of the card: what it may reserve
  // once the context and libraries (held now, outside it) are counted, as on
  // a card of `bytes`.
  const int64_t outside = outside_allocator_bytes(device);
  MUTWO_CHECK(bytes == 0 || bytes > outside, "--device-memory {}: the CUDA context and libraries alone hold {}",
              format_bytes(bytes), format_bytes(outside));
  c10::cuda::CUDACachingAllocator::setMemoryFraction(
      bytes ? static_cast<double>(bytes - outside) / static_cast<double>(total) : 1.0, index);
  cuda_limit = bytes;
#else
  MUTWO_FAIL("this mutwo was built without CUDA");
#endif
}

int64_t outside_allocator_bytes(const c10::Device& device) {
#ifdef MUTWO_WITH_CUDA
  if (device.is_cuda()) {
    const c10::DeviceIndex index = device.index() < 0 ? 0 : device.index();
    start_device(device);
    const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
    return process_device_bytes(device).process - s.reserved_bytes[0].current;
  }
#endif
  (void)device;
  return 0;
}

CopyBandwidth measure_copy_bandwidth(const c10::Device& device) {
  using Clock = std::chrono::steady_clock;
  auto best_of_three = [](auto copy, int64_t bytes) {  // the copy engine's speed, not a hiccup; after a warm-up
    copy();
    double best = 0;
    for (int i = 0; i < 3; ++i) {
      auto t0 = Clock::now();
      copy();
      double s = std::chrono::duration<double>(Clock::now() - t0).count();
      best = std::max(best, static_cast<double>(bytes) / std::max(s, 1e-9) / 1e9);
    }
    return best;
  };
  CopyBandwidth b;
  if (device.is_cpu()) {
    // memcpy between buffers outside the CPU allocator: what swap_out and
    // swap_in do there, and nothing under a --device-memory cap.
    constexpr size_t kBytes = 16 << 20;
    std::vector<char> from(kBytes, 1), to(kBytes);
    b.h2d_gbps = b.d2h_gbps = best_of_three([&] { std::memcpy(to.data(), from.data(), kBytes); }, kBytes);
    return b;
  }
  constexpr int64_t kBytes = 64 << 20;
  auto bytes = at::TensorOptions().dtype(at::kByte);
  {
    at::Tensor h = at::empty({kBytes}, bytes.pinned_memory(true)).fill_(1);
    at::Tensor d = at::empty({kBytes}, bytes.device(device));
    b.h2d_gbps = best_of_three([&] { d.copy_(h, /*non_blocking=*/true); synchronize(device); }, kBytes);
    b.d2h_gbps = best_of_three([&] { h.copy_(d, /*non_blocking=*/true); synchronize(device); }, kBytes);
  }
  release_cached_memory(device);  // the step's memory is measured from here: leave nothing cached
  return b;
}

}  // namespace mutwo::runtime
