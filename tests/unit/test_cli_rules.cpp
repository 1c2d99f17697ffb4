// The command line's rules on plain data (issue 47): which steps the arena
// serves by default, by device; which errors count as out of memory; and
// max-batch's search over batches (src/cli/batch_search.h) on made-up fits:
// monotone ones give the bisection's answer; where a batch fits above one that
// does not (measured on an H200 with the caching allocator: 192 fitted while
// 184 and 188 did not), the answer is the largest batch that fitted and the
// search says it was not monotone.
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>

#include "cli/batch_search.h"
#include "cli/common.h"
#include "runtime/memory.h"

namespace mutwo::cli {
namespace {

// No CUDA device is needed: a c10::Device of type CUDA is plain data.
TEST(ArenaDefault, CudaUnderABudgetOrCapTakesTheArenaTheCpuDoesNot) {
  const c10::Device cuda(c10::kCUDA, 0), cpu(c10::kCPU);
  EXPECT_TRUE(runtime::arena_by_default(cuda, true));
  EXPECT_FALSE(runtime::arena_by_default(cuda, false)) << "no budget or cap: the allocator";
  EXPECT_FALSE(runtime::arena_by_default(cpu, true));
  ArenaOptions neither, on, off;
  on.on = true;
  off.off = true;
  EXPECT_TRUE(neither.resolve(cuda, true));
  EXPECT_FALSE(neither.resolve(cpu, true));
  EXPECT_FALSE(off.resolve(cuda, true)) << "--no-arena wins on CUDA";
  EXPECT_TRUE(on.resolve(cpu, false)) << "--arena wins on the CPU";
  EXPECT_STREQ(neither.from(), "default");
  EXPECT_STREQ(on.from(), "--arena");
  EXPECT_STREQ(off.from(), "--no-arena");
}

// A CUDA library that cannot make its handle on a full card ran out of memory:
// max-batch's fresh child said so in cuBLAS's words and was taken for an error.
TEST(OutOfMemory, LibraryAllocationFailuresCount) {
  EXPECT_TRUE(runtime::says_out_of_memory(
      "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"));
  EXPECT_TRUE(runtime::says_out_of_memory("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"));
  EXPECT_TRUE(runtime::says_out_of_memory("CUDA out of memory. Tried to allocate 2.00 GiB"));
  EXPECT_FALSE(runtime::says_out_of_memory("CUBLAS_STATUS_INVALID_VALUE when calling `cublasSgemm`"));
  EXPECT_TRUE(runtime::is_out_of_memory(std::runtime_error("CUBLAS_STATUS_ALLOC_FAILED")));
  EXPECT_FALSE(runtime::is_out_of_memory(std::runtime_error("shape mismatch")));
}

TEST(BatchSearch, MonotoneFitsGiveTheLargest) {
  for (int64_t guess : {1, 7, 150, 500}) {
    int calls = 0;
    const BatchSearch s = search_batches(guess, 4096, [&](int64_t b) { return ++calls, b <= 203; });
    EXPECT_EQ(s.answer, 203) << guess;
    EXPECT_TRUE(s.monotone) << guess;
    EXPECT_FALSE(s.above_fits);
    EXPECT_EQ(s.above, batch_above(203));
    EXPECT_EQ(static_cast<size_t>(calls), s.tried.size()) << "each batch asked once";
  }
  EXPECT_EQ(search_batches(8, 64, [](int64_t) { return true; }).answer, 64);  // the limit
  EXPECT_EQ(search_batches(8, 64, [](int64_t) { return false; }).answer, 0);
}

TEST(BatchSearch, NotMonotoneKeepsTheLargestThatFitted) {
  // Fits up to 182, not 183 to 189, then 190 to 192 again: the bisection from
  // 150 settles on 182, the batch 5% above (192) fits, and the search goes on from there.
  auto fits = [](int64_t b) { return b <= 182 || (b >= 190 && b <= 192); };
  const BatchSearch s = search_batches(150, 4096, fits);
  EXPECT_EQ(s.first_answer, 182);
  EXPECT_EQ(s.answer, 192);
  EXPECT_FALSE(s.monotone);
  EXPECT_FALSE(s.above_fits);
  std::set<int64_t> seen;
  for (const auto& [b, fit] : s.tried) {
    EXPECT_TRUE(seen.insert(b).second) << "batch " << b << " tried twice";
    EXPECT_EQ(fit, fits(b)) << b;
  }
  EXPECT_TRUE(seen.count(193)) << "the batch above the answer is refused by a real try";
}

TEST(BatchSearch, AMissBelowTheAnswerIsNotMonotone) {
  // The guess 184 alone refused: the search steps down to 183, finds 193 (5% above) fitting and goes on to 200.
  const BatchSearch s = search_batches(184, 4096, [](int64_t b) { return b <= 200 && b != 184; });
  EXPECT_EQ(s.first_answer, 183);
  EXPECT_EQ(s.answer, 200);
  EXPECT_FALSE(s.monotone);
}

}  // namespace
}  // namespace mutwo::cli
