// The allocation source on CUDA (memory.h: set_allocation_source). To come: a
// wrapper of the caching allocator (c10::cuda::CUDACachingAllocator::CUDAAllocator,
// installed by start_device before the first allocation) whose allocate()
// asks the installed source first and delegates everything else. Until then
// the executor refuses --arena on CUDA.
#include "runtime/memory.h"

#include "support/error.h"

namespace mutwo::runtime {

std::shared_ptr<AllocationSource> set_cuda_allocation_source(const c10::Device& device, std::shared_ptr<AllocationSource> source) {
  (void)source;
  MUTWO_FAIL("--arena on {}: not on CUDA yet (the executor refuses it before this)", device.str());
}

}  // namespace mutwo::runtime
