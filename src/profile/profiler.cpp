// The profiler (see profiler.h): an executor observer that times and measures
// every node; the graph-derived half of the Profile is describe.cpp's.
#include "profile/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#ifdef MUTWO_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#endif

#include "analysis/liveness.h"
#include "ir/text.h"
#include "rewrite/recompute.h"
#include "runtime/executor.h"
#include "runtime/memory.h"
#include "support/error.h"

namespace mutwo::profile {

namespace {

// Records one step's per-node memory and time.
class Recorder final : public runtime::NodeObserver {
 public:
  Recorder(c10::Device device, size_t nodes)
      : device_(device), live_before(nodes), live_after(nodes), peak_during(nodes), ms(nodes), t0_(nodes) {
#ifdef MUTWO_WITH_CUDA
    if (device_.is_cuda())
      events_.reserve(nodes + 1);
    if (device_.is_cuda())
      for (size_t i = 0; i <= nodes; ++i) events_.emplace_back(cudaEventDefault);  // timing enabled
#endif
  }

  void before(size_t n) override {
    runtime::reset_peak(device_);
    live_before[n] = runtime::memory_stats(device_).current;
#ifdef MUTWO_WITH_CUDA
    if (device_.is_cuda()) {
      if (n == 0) events_[0].record();
      return;
    }
#endif
    t0_[n] = std::chrono::steady_clock::now();
  }

  void after(size_t n) override {
#ifdef MUTWO_WITH_CUDA
    if (device_.is_cuda()) events_[n + 1].record();
#endif
    if (device_.is_cpu()) ms[n] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_[n]).count();
    runtime::MemoryStats s = runtime::memory_stats(device_);
    peak_during[n] = s.peak;
    live_after[n] = s.current;
    reserved_peak = std::max(reserved_peak, s.reserved_peak);
  }

  // After the step (the executor has synchronised the device).
  void finish() {
#ifdef MUTWO_WITH_CUDA
    if (device_.is_cuda())
      for (size_t n = 0; n < ms.size(); ++n) ms[n] = events_[n].elapsed_time(events_[n + 1]);
#endif
  }

  c10::Device device_;
  std::vector<int64_t> live_before, live_after, peak_during;
  std::vector<double> ms;
  int64_t reserved_peak = 0;  // the allocator's reserved high-water mark over the measured steps

 private:
  std::vector<std::chrono::steady_clock::time_point> t0_;
#ifdef MUTWO_WITH_CUDA
  std::vector<at::cuda::CUDAEvent> events_;  // events_[n] .. events_[n+1] bracket node n
#endif
};


}  // namespace

Profile profile_step(const ir::Graph& g, const ProfileOptions& o) {
  MUTWO_CHECK(o.iters >= 1 && o.warmup >= 0, "--iters must be at least 1 and --warmup at least 0");
  c10::Device device = o.device == "cpu" ? c10::Device(c10::kCPU) : c10::Device(o.device);
  Profile p = describe(g);
  p.model = o.model;
  p.batch = o.batch;
  p.device = device.str();
  p.iters = o.iters;
  p.warmup = o.warmup;

  runtime::release_cached_memory(device);  // measure as a fresh process would (sweep and max-batch profile many)
  runtime::Executor ex(g, {device, o.seed});
  const runtime::CopyBandwidth bw = runtime::measure_copy_bandwidth(device);  // before the step holds anything
  p.h2d_gbps = bw.h2d_gbps;
  p.d2h_gbps = bw.d2h_gbps;
  if (o.initialize) o.initialize(ex);
  else ex.initialize();
  auto t_start = std::chrono::steady_clock::now();
  auto progress = [&](const char* what, int i, int n) {
    if (!o.progress) return;
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    std::fprintf(stderr, "profile: %s %d of %d (%.1f s)\n", what, i, n, s);
  };
  for (int i = 0; i < o.warmup; ++i) {
    ex.step();
    progress("warm-up step", i + 1, o.warmup);
  }
  const size_t nn = g.nodes().size();
  std::vector<std::vector<double>> node_ms(nn);
  std::vector<double> step_ms;
  int64_t last_start_bytes = 0;
  Recorder rec(device, nn);
  ex.set_observer(&rec);
  for (int i = 0; i < o.iters; ++i) {
    runtime::StepResult r = ex.step();
    last_start_bytes = r.start_bytes;
    rec.finish();
    step_ms.push_back(r.ms);
    for (size_t n = 0; n < nn; ++n) node_ms[n].push_back(rec.ms[n]);
    progress("iteration", i + 1, o.iters);
  }
  ex.set_observer(nullptr);
  if (!o.graph_only) p.device_peak_bytes = rec.reserved_peak + runtime::outside_allocator_bytes(device);

  // Memory is deterministic from step to step: the last iteration's numbers.
  analysis::Liveness L = analysis::analyze_liveness(g);
  if (o.graph_only) {
    const int64_t outside = last_start_bytes - L.persistent_bytes;
    for (size_t n = 0; n < nn; ++n) {
      rec.live_before[n] -= outside;
      rec.live_after[n] -= outside;
      rec.peak_during[n] -= outside;
    }
  }
  // Node times come from one iteration, the one whose step time is the median:
  // they then add up to a real step (medians of parts taken across iterations
  // need not add up to the median of the whole on a noisy machine).
  size_t mid = 0;
  {
    std::vector<size_t> order(step_ms.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return step_ms[a] < step_ms[b]; });
    mid = order[order.size() / 2];
    p.step_ms = step_ms[mid];
    p.step_ms_min = step_ms[order.front()];
    p.step_ms_max = step_ms[order.back()];
  }
  for (size_t n = 0; n < nn; ++n) {
    NodeRecord& r = p.nodes[n];
    r.ms = node_ms[n][mid];
    r.live_before = rec.live_before[n];
    r.live_after = rec.live_after[n];
    r.peak_during = rec.peak_during[n];
    r.workspace_bytes = r.peak_during - (r.live_before + (L.live_during[n] - L.live_before[n]));
  }
  summarize(p);
  return p;
}

Profile profile_step_under(const ir::Graph& g, const std::vector<ir::ValueId>& drop, const ProfileOptions& o,
                           ir::Graph* rewritten) {
  // `drop` holds value ids as planners number them: in the graph parsed back
  // from the profile's text (plan::make_input), which lists persistent values
  // first, so ids differ from `g`'s. Nodes keep their order, so node indices
  // of `g` and of this copy agree.
  const ir::Graph planned_view = ir::parse(ir::print(g));
  rewrite::Rewritten r = rewrite::insert_recomputation(planned_view, drop);
  const Profile measured = profile_step(r.graph, o);
  const analysis::Liveness L = analysis::analyze_liveness(g), Lr = analysis::analyze_liveness(r.graph);
  std::vector<int32_t> at(g.nodes().size(), -1);  // each node of g where it runs in r.graph, outside recomputation
  for (size_t k = 0; k < r.graph.nodes().size(); ++k)
    if (r.graph.nodes()[k].phase != ir::Phase::recompute && r.origin[k] >= 0) at[static_cast<size_t>(r.origin[k])] = static_cast<int32_t>(k);
  Profile p = describe(g);
  p.model = o.model;
  p.batch = o.batch;
  p.device = measured.device;
  p.iters = measured.iters;
  p.warmup = measured.warmup;
  p.device_peak_bytes = measured.device_peak_bytes;
  p.h2d_gbps = measured.h2d_gbps;
  p.d2h_gbps = measured.d2h_gbps;
  for (size_t n = 0; n < p.nodes.size(); ++n) {
    MUTWO_ASSERT(at[n] >= 0, "node {} does not run in the most-recomputation step", n);
    const auto k = static_cast<size_t>(at[n]);
    const NodeRecord& y = measured.nodes[k];
    NodeRecord& x = p.nodes[n];
    const int64_t beyond = y.live_before - Lr.live_before[k];  // what the device held beyond the graph's tensors
    x.ms = y.ms;
    x.workspace_bytes = y.workspace_bytes;
    x.live_before = L.live_before[n] + beyond;
    x.live_after = L.live_after[n] + (y.live_after - Lr.live_after[k]);
    x.peak_during = L.live_during[n] + std::max<int64_t>(0, y.workspace_bytes) + beyond;
  }
  summarize(p);
  p.step_ms = p.node_ms_sum;
  if (rewritten) *rewritten = std::move(r.graph);
  return p;
}

}  // namespace mutwo::profile
