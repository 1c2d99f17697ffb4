// The allocation source on CUDA (memory.h: set_allocation_source): a wrapper
// of the caching allocator that asks the installed source first.
#include "runtime/memory.h"

#include "support/error.h"

namespace mutwo::runtime {

std::shared_ptr<AllocationSource> set_cuda_allocation_source(const c10::Device& device, std::shared_ptr<AllocationSource> source) {
  (void)device;
  (void)source;
  MUTWO_FAIL("--arena: not yet on CUDA");
}

}  // namespace mutwo::runtime
