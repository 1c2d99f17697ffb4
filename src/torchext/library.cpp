// The extension module python/mutwo/torch.py loads with torch.ops.load_library:
// mutwo's sessions (session.h) behind a few operators in the `mutwo`
// namespace, so that no Python headers or bindings are needed and one build
// serves any Python whose torch uses this libtorch. A session is named by
// an integer handle. Errors reach Python as RuntimeError whose text starts
// with "mutwo: " (the user's mistake, one line) or "mutwo budget: " (no plan
// fits), which mutwo.torch turns into MutwoError and BudgetError.
#include <torch/library.h>
#include <torch/version.h>

#include <map>
#include <memory>
#include <mutex>
#include "plan/pipeline.h"
#include "plan/plan.h"
#include "runtime/memory.h"
#include "support/error.h"
#include "torchext/translated.h"
#include "torchext/session.h"

namespace mutwo::torchext {

namespace {

std::mutex mutex;
std::map<int64_t, std::unique_ptr<Session>> sessions;
int64_t next_handle = 1;

Session& session(int64_t handle) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = sessions.find(handle);
  if (it == sessions.end()) throw std::runtime_error(fmt::format("mutwo: no session {} (released?)", handle));
  return *it->second;
}

int64_t create(const std::string& step_json, std::vector<std::string> names, std::vector<at::Tensor> tensors,
               const std::string& options_json) {
  return translated([&] {
    auto s = std::make_unique<Session>(step_json, names, tensors, read_session_options(options_json));
    std::lock_guard<std::mutex> lock(mutex);
    sessions.emplace(next_handle, std::move(s));
    return next_handle++;
  });
}

std::vector<at::Tensor> forward(int64_t handle, std::vector<at::Tensor> primals) {
  return translated([&] { return session(handle).forward(primals); });
}

std::vector<at::Tensor> backward(int64_t handle, std::vector<at::Tensor> output_grads) {
  return translated([&] { return session(handle).backward(output_grads); });
}

std::string info(int64_t handle) {
  return translated([&] { return session(handle).info_json(); });
}

void report(int64_t handle, const std::string& dir) {
  translated([&] { session(handle).write_report(dir); });
}

void release(int64_t handle) {
  std::lock_guard<std::mutex> lock(mutex);
  sessions.erase(handle);
}

// The libtorch this library was built against, which the importing torch must match.
std::string torch_version() { return fmt::format("{}.{}", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR); }

// Peak and current bytes allocated on `device` as mutwo counts them (the
// counting CPU allocator, installed when this library loads; CUDA's caching
// allocator), and a reset of the peak: for tests and examples that measure
// their own loop.
std::vector<int64_t> memory(const std::string& device) {
  return translated([&] {
    c10::Device d(device);
    runtime::MemoryStats s = runtime::memory_stats(d);
    return std::vector<int64_t>{s.current, s.peak};
  });
}

void reset_peak(const std::string& device) {
  translated([&] { runtime::reset_peak(c10::Device(device)); });
}

// The planners' names (plan::planner_names()), for wrap() and backend() to check theirs when called.
std::vector<std::string> planners() { return plan::planner_names(); }

// Counted from the moment the library loads: tensors made before are not.
const bool tracking = (runtime::track_cpu_memory(), true);

}  // namespace

}  // namespace mutwo::torchext

TORCH_LIBRARY(mutwo, m) {
  using namespace mutwo::torchext;
  m.def("create(str step, str[] names, Tensor[] tensors, str options) -> int", &create);
  m.def("forward(int session, Tensor[] primals) -> Tensor[]", &forward);
  m.def("backward(int session, Tensor[] output_grads) -> Tensor[]", &backward);
  m.def("info(int session) -> str", &info);
  m.def("report(int session, str dir) -> ()", &report);
  m.def("release(int session) -> ()", &release);
  m.def("torch_version() -> str", &torch_version);
  m.def("memory(str device) -> int[]", &memory);
  m.def("reset_peak(str device) -> ()", &reset_peak);
  m.def("planners() -> str[]", &planners);
}
