// Saving and replaying a generator's state for recomputed random nodes (see
// rng_state.h).
#include "kernels/rng_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <cstring>
#include <mutex>

#ifdef MUTWO_WITH_CUDA
#include <c10/cuda/CUDAGraphsC10Utils.h>
#endif

#include "ops/op.h"
#include "support/error.h"

namespace mutwo::kernels {

namespace {

void check_not_capturing(const at::Generator& gen) {
#ifdef MUTWO_WITH_CUDA
  MUTWO_CHECK(!gen.device().is_cuda() || c10::cuda::currentStreamCaptureStatusMayInitCtx() == c10::cuda::CaptureStatus::None,
              "a recomputed random node replays the generator's state, which a captured CUDA graph cannot do (its "
              "Philox offset is the graph's own); run without --cuda-graph, or plan with --cuda-graph so that no "
              "random node is recomputed");
#else
  (void)gen;
#endif
}

}  // namespace

at::Tensor save_rng_state(at::Generator gen) {
  check_not_capturing(gen);
  std::lock_guard<std::mutex> lock(gen.mutex());
  if (gen.device().is_cpu()) {
    // The generator's own bytes, viewed as words: no copy, so the node holds
    // exactly its declared output.
    at::Tensor bytes = gen.get_state();
    MUTWO_ASSERT(bytes.numel() == ops::kRngStateWords * 8, "the CPU generator's state is {} bytes, rng_save declares {}",
                 bytes.numel(), ops::kRngStateWords * 8);
    return bytes.view(at::kLong);
  }
  at::Tensor words = at::zeros({ops::kRngStateWords}, at::kLong);  // host memory
  int64_t* w = words.data_ptr<int64_t>();
  w[0] = static_cast<int64_t>(gen.current_seed());
  w[1] = static_cast<int64_t>(gen.get_offset());
  return words;
}

ReplayedRngState::ReplayedRngState(at::Generator& gen, const at::Tensor& saved) : gen_(gen) {
  check_not_capturing(gen);
  MUTWO_ASSERT(saved.defined() && saved.numel() == ops::kRngStateWords && saved.scalar_type() == at::kLong &&
                   saved.device().is_cpu(),
               "a replayed random node's state is not rng_save's");
  std::lock_guard<std::mutex> lock(gen.mutex());
  if (gen.device().is_cpu()) {
    cpu_ = gen.clone();  // the live state, held by a generator object, not a tensor
    gen.set_state(saved.view(at::kByte));
    return;
  }
  cuda_ = true;
  seed_ = gen.current_seed();
  offset_ = gen.get_offset();
  const auto* w = saved.const_data_ptr<int64_t>();
  gen.set_current_seed(static_cast<uint64_t>(w[0]));
  gen.set_offset(static_cast<uint64_t>(w[1]));
}

ReplayedRngState::~ReplayedRngState() {
  std::lock_guard<std::mutex> lock(gen_.mutex());
  if (cuda_) {
    gen_.set_current_seed(seed_);
    gen_.set_offset(offset_);
    return;
  }
  auto* live = at::check_generator<at::CPUGeneratorImpl>(*cpu_);
  auto* now = at::check_generator<at::CPUGeneratorImpl>(gen_);
  now->set_engine(live->engine());
  now->set_next_float_normal_sample(live->next_float_normal_sample());
  now->set_next_double_normal_sample(live->next_double_normal_sample());
}

}  // namespace mutwo::kernels
