// The allocation source on CUDA (memory.h: set_allocation_source): a wrapper
// of PyTorch's caching allocator, installed in its place (the allocator ATen's
// CUDA tensors take, c10::cuda::CUDACachingAllocator::get(), and c10's
// registry), whose allocate() asks the installed source first (served.h: the
// executor's arena, on its own thread) and leaves everything else to the
// caching allocator: raw allocations (cuBLAS's workspaces), statistics, pools
// (CUDA graphs), streams, snapshots. What the source serves is not counted by
// the caching allocator: the arena's own block was, once.
//
// Installed on first use and kept for the process; blocks the caching
// allocator handed out before still free through it (their deleter is its
// own). Written against torch 2.11's CUDAAllocator (_compat's minimum).
#include "runtime/memory.h"

#include "support/error.h"

#ifdef MUTWO_WITH_CUDA
#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include <cstdint>
#include <mutex>

#include "runtime/served.h"
#endif

namespace mutwo::runtime {

#ifdef MUTWO_WITH_CUDA
namespace {

namespace cca = c10::cuda::CUDACachingAllocator;

class ServingAllocator final : public cca::CUDAAllocator {
 public:
  explicit ServingAllocator(cca::CUDAAllocator* base) : base_(base), base_raw_deleter_(base->raw_deleter()) {}

  static ServingAllocator* instance;
  Served served;

  c10::DataPtr allocate(size_t n) override {
    if (void* p = served.take(n)) return {p, p, &release, c10::Device(c10::kCUDA, c10::cuda::current_device())};
    return base_->allocate(n);
  }
  static void release(void* p) {
    const bool was_served = instance->served.give_back(p);
    MUTWO_ASSERT(was_served, "CUDA allocation source: freeing {} it did not serve", p);
  }
  // Allocator::raw_allocate hands out allocate()'s pointer and frees it through
  // raw_deleter(): the source's, or the caching allocator's own.
  static void raw_delete_any(void* p) {
    if (!instance->served.give_back(p)) instance->base_raw_deleter_(p);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &raw_delete_any; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { base_->copy_data(dest, src, count); }

  // What the source serves lives in its own block, on the executor's stream,
  // for as long as the step: another stream's use adds nothing to wait for.
  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override {
    if (ptr.get_deleter() != &release) base_->recordStream(ptr, stream);
  }
  void* getBaseAllocation(void* ptr, size_t* size) override {
    if (!served.has(ptr)) return base_->getBaseAllocation(ptr, size);
    if (size != nullptr) *size = 0;  // a block of the source's, its size the source's own
    return ptr;
  }

  // Everything else is the caching allocator's.
  void* raw_alloc(size_t nbytes) override { return base_->raw_alloc(nbytes); }
  void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override {
    return base_->raw_alloc_with_stream(nbytes, stream);
  }
  void raw_delete(void* ptr) override { base_->raw_delete(ptr); }
  void init(int device_count) override { base_->init(device_count); }
  bool initialized() override { return base_->initialized(); }
  double getMemoryFraction(c10::DeviceIndex device) override { return base_->getMemoryFraction(device); }
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override {
    base_->setMemoryFraction(fraction, device);
  }
  std::vector<cca::StreamSegmentSize> getExpandableSegmentSizes(c10::DeviceIndex device) override {
    return base_->getExpandableSegmentSizes(device);
  }
  void enable(bool value) override { base_->enable(value); }
  bool isEnabled() const override { return base_->isEnabled(); }
  void emptyCache(c10::MempoolId_t mempool_id) override { base_->emptyCache(mempool_id); }
  void cacheInfo(c10::DeviceIndex device, size_t* largest) override { base_->cacheInfo(device, largest); }
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    return base_->getDeviceStats(device);
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override { base_->resetAccumulatedStats(device); }
  void resetPeakStats(c10::DeviceIndex device) override { base_->resetPeakStats(device); }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override { return base_->getMemoryInfo(device); }
  cca::SnapshotInfo snapshot(c10::MempoolId_t mempool_id, bool include_traces) override {
    return base_->snapshot(mempool_id, include_traces);
  }
  void beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id,
                           std::function<bool(cudaStream_t)> filter) override {
    base_->beginAllocateToPool(device, id, std::move(filter));
  }
  void endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id) override { base_->endAllocateToPool(device, id); }
  void releasePool(c10::DeviceIndex device, c10::MempoolId_t id) override { base_->releasePool(device, id); }
  int getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t id) override { return base_->getPoolUseCount(device, id); }
  void createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t id,
                          std::shared_ptr<cca::CUDAAllocator> allocator) override {
    base_->createOrIncrefPool(device, id, std::move(allocator));
  }
  void setUseOnOOM(c10::DeviceIndex device, c10::MempoolId_t id, bool use_on_oom) override {
    base_->setUseOnOOM(device, id, use_on_oom);
  }
  void setNoSplit(c10::DeviceIndex device, c10::MempoolId_t id) override { base_->setNoSplit(device, id); }
  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10::MempoolId_t id,
                                const std::unordered_set<void*>& expected) override {
    return base_->checkPoolLiveAllocations(device, id, expected);
  }
  cca::ShareableHandle shareIpcHandle(void* ptr) override { return base_->shareIpcHandle(ptr); }
  std::shared_ptr<void> getIpcDevPtr(std::string handle) override { return base_->getIpcDevPtr(std::move(handle)); }
  bool isHistoryEnabled() override { return base_->isHistoryEnabled(); }
  void recordHistory(bool enabled, cca::CreateContextFn recorder, size_t max_entries, cca::RecordContext when,
                     bool clear, const std::vector<std::string>& skip_actions) override {
    base_->recordHistory(enabled, std::move(recorder), max_entries, when, clear, skip_actions);
  }
  void recordAnnotation(const std::vector<std::pair<std::string, std::string>>& md) override {
    base_->recordAnnotation(md);
  }
  void pushCompileContext(std::string& md) override { base_->pushCompileContext(md); }
  void popCompileContext() override { base_->popCompileContext(); }
  void setUserMetadata(const std::string& metadata) override { base_->setUserMetadata(metadata); }
  std::string getUserMetadata() override { return base_->getUserMetadata(); }
  void attachOutOfMemoryObserver(cca::OutOfMemoryObserver observer) override {
    base_->attachOutOfMemoryObserver(std::move(observer));
  }
  void attachAllocatorTraceTracker(cca::AllocatorTraceTracker tracker) override {
    base_->attachAllocatorTraceTracker(std::move(tracker));
  }
  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex to) override { base_->enablePeerAccess(dev, to); }
  cudaError_t memcpyAsync(void* dst, int dst_device, const void* src, int src_device, size_t count, cudaStream_t stream,
                          bool p2p_enabled) override {
    return base_->memcpyAsync(dst, dst_device, src, src_device, count, stream, p2p_enabled);
  }
  std::shared_ptr<cca::AllocatorState> getCheckpointState(c10::DeviceIndex device, c10::MempoolId_t id) override {
    return base_->getCheckpointState(device, id);
  }
  cca::CheckpointDelta setCheckpointPoolState(c10::DeviceIndex device,
                                              std::shared_ptr<cca::AllocatorState> state) override {
    return base_->setCheckpointPoolState(device, std::move(state));
  }
  // PyTorch branches on the backend's name ("native", "cudaMallocAsync"): the wrapped one's.
  std::string name() override { return base_->name(); }

 private:
  cca::CUDAAllocator* base_;
  c10::DeleterFnPtr base_raw_deleter_;
};

ServingAllocator* ServingAllocator::instance = nullptr;

}  // namespace

std::shared_ptr<AllocationSource> set_cuda_allocation_source(const c10::Device& device, std::shared_ptr<AllocationSource> source) {
  static std::once_flag once;
  std::call_once(once, [&device] {
    start_device(device);
    ServingAllocator::instance = new ServingAllocator(cca::get());  // lives for the process
    cca::allocator.store(ServingAllocator::instance);
    c10::SetAllocator(c10::kCUDA, ServingAllocator::instance, /*priority=*/UINT8_MAX);  // ahead of CUDA's own registration
  });
  return ServingAllocator::instance->served.set(std::move(source));
}

#else

std::shared_ptr<AllocationSource> set_cuda_allocation_source(const c10::Device& device, std::shared_ptr<AllocationSource> source) {
  (void)source;
  MUTWO_FAIL("--arena on {}: this mutwo was built without CUDA", device.str());
}

#endif

}  // namespace mutwo::runtime
