// The pipeline shared by optimize, sweep and max-batch (see pipeline.h).
#include "cli/pipeline.h"
#include "cli/ranks.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/common.h"
#include "ir/text.h"
#include "profile/profiler.h"
#include "runtime/executor.h"
#include "runtime/memory.h"
#include "analysis/liveness.h"
#include "support/units.h"
#include "support/error.h"

namespace mutwo::cli {

Measured measure(const ir::Graph& g, const c10::Device& device, uint64_t seed, int steps, bool cuda_graph) {
  // What earlier work in this process left cached would change this step's
  // peak: start from a fresh process's allocator.
  runtime::release_cached_memory(device);
  Measured m;
  m.leftover_bytes = runtime::memory_stats(device).current;
  runtime::ExecutorOptions o{device, seed};
  o.cuda_graph = cuda_graph;
  runtime::Executor ex(g, o);
  ex.initialize();
  for (int w = 0; w < (cuda_graph ? 2 : 1); ++w) ex.step();  // warm-up: allocator caches and library handles
  std::vector<double> times;
  for (int s = 0; s < steps; ++s) {
    runtime::StepResult r = ex.step();
    m.peak_bytes = std::max(m.peak_bytes, r.peak_bytes);
    m.reserved_peak_bytes = std::max(m.reserved_peak_bytes, r.reserved_peak_bytes);
    times.push_back(r.ms);
    m.losses.push_back(rank_mean(r.outputs).at(0));  // on several ranks: the whole batch's loss
  }
  m.step_ms = median(times);
  m.device_peak_bytes = m.reserved_peak_bytes + runtime::outside_allocator_bytes(device);
  return m;
}

std::string& command_line() {
  static std::string line;
  return line;
}

// Profiles `g` for planning (see plan_step): the plan input, its unplanned
// peak, and the step it was measured as when the unplanned one does not fit.
Planned profile_for_plan(const ir::Graph& g, const ProfilingOptions& so) {
  const c10::Device& device = so.device;
  const int64_t device_memory = so.device_memory;
  profile::ProfileOptions o;
  o.model = so.model;
  o.batch = so.batch;
  o.device = device.str();
  o.seed = so.seed;
  o.progress = so.progress;
  Planned p;
  std::optional<profile::Profile> prof;
  const bool predicted_over = device_memory > 0 && analysis::analyze_liveness(g).peak_bytes > device_memory;
  if (!predicted_over) {
    try {
      prof = profile::profile_step(g, o);
    } catch (const std::exception& e) {
      if (!runtime::is_out_of_memory(e)) throw;
      runtime::release_cached_memory(device);
    }
  }
  if (!prof) {
    if (so.progress)
      fmt::print(stderr, "profile: the unplanned step does not fit{}; profiling it under the most recomputation\n",
                 predicted_over ? fmt::format(" --device-memory {}", format_bytes(device_memory)) : std::string());
    ir::Graph most;
    prof = profile::profile_step_under(g, plan::lowest_drop(g, o.device), o, &most);
    p.profiled_under = std::move(most);
  }
  if (ranks()) {
    // Every rank plans from the same numbers, so every rank makes the same plan
    // (the planners are deterministic): node times are the mean over the
    // ranks; measured bytes (workspaces, and what the collectives' own buffers
    // add, Gloo's on the CPU) the largest.
    std::vector<double> ms, bytes;
    for (const profile::NodeRecord& n : prof->nodes) {
      ms.push_back(n.ms);
      for (int64_t b : {n.workspace_bytes, n.live_before, n.live_after, n.peak_during}) bytes.push_back(static_cast<double>(b));
    }
    ms = ranks()->mean(std::move(ms));
    bytes = ranks()->max(std::move(bytes));
    for (size_t i = 0; i < prof->nodes.size(); ++i) {
      profile::NodeRecord& n = prof->nodes[i];
      n.ms = ms[i];
      auto at = [&](size_t k) { return static_cast<int64_t>(bytes[4 * i + k]); };
      n.workspace_bytes = at(0);
      n.live_before = at(1);
      n.live_after = at(2);
      n.peak_during = at(3);
    }
  }
  static_cast<plan::Planned&>(p) = plan::prepare(*prof, apply_swap_flags);
  return p;
}

Planned prepare_profile(const profile::Profile& prof, const ProfilingOptions& o) {
  Planned p;
  static_cast<plan::Planned&>(p) = plan::prepare(prof, apply_swap_flags);
  p.input.replay_random = o.replay_random;
  return p;
}

namespace {

// The plan's step: recomputation, early updates, swaps, each verified and
// dumped by --dump-ir-after (rewrite/passes.h).
void rewrite_planned(Planned& p) {
  p.rewritten = plan::rewrite_plan(p.input, p.plan, {/*verify=*/true, dump_ir_after});
}

}  // namespace

void plan_prepared(Planned& p, const plan::PlanOptions& plan) {
  plan::run(p, plan);
  rewrite_planned(p);
}

Planned plan_step(const ir::Graph& g, const ProfilingOptions& o, const plan::PlanOptions& plan) {
  Planned p = profile_for_plan(g, o);
  p.input.replay_random = o.replay_random;
  plan_prepared(p, plan);
  return p;
}

Planned apply_saved_plan(const ir::Graph& g, const ProfilingOptions& o, const plan::SavedPlan& saved,
                         const std::string& saved_path) {
  plan::check_saved(saved, saved_path, o.model, o.batch, g);
  Planned p = profile_for_plan(g, o);
  p.plan = plan::apply_saved(p.input, saved, saved_path);
  rewrite_planned(p);
  return p;
}

namespace {

// The graph with every parameter gradient of `base` (and the loss) kept as an
// output: `g` is base or its planned form (whose swap copies of a gradient are
// not outputs: the gradient itself is).
ir::Graph with_gradients(const ir::Graph& g, const ir::Graph& base) {
  ir::Graph out = g;
  for (const ir::Value& v : base.values())
    if (v.role == ir::Role::gradient) out.outputs.push_back(g.find(v.name));
  return out;
}

}  // namespace

namespace {

// Collects the kernels ATen names as having no deterministic implementation
// while deterministic algorithms are on with warn_only (its TORCH_WARN text:
// "<kernel> does not have a deterministic implementation, but you set ...").
class NondeterministicKernels : public c10::WarningHandler {
 public:
  NondeterministicKernels() : guard_(this) {}
  void process(const c10::Warning& warning) override {
    const std::string& msg = warning.msg();
    const size_t at = msg.find(" does not have a deterministic implementation");
    if (at == std::string::npos) return;
    const std::string kernel = msg.substr(0, at);
    if (std::find(kernels.begin(), kernels.end(), kernel) == kernels.end()) kernels.push_back(kernel);
  }
  std::vector<std::string> kernels;

 private:
  c10::WarningUtils::WarningHandlerGuard guard_;
};

// One step of `g` from `seed`; its outputs on the host (hashes only when
// `hashes`: on the CPU under a cap, where host memory is the device's).
struct Outputs {
  std::vector<at::Tensor> tensors;
  std::vector<uint64_t> hashes;
};
Outputs run_once(const ir::Graph& g, const c10::Device& device, uint64_t seed, bool hashes) {
  runtime::Executor e(g, {device, seed, /*keep_outputs=*/true});
  e.initialize();
  e.step();
  Outputs out;
  for (ir::ValueId v : g.outputs) {
    at::Tensor t = std::move(e.value(v));
    if (hashes) out.hashes.push_back(runtime::bytes_hash(t));
    else out.tensors.push_back(device.is_cpu() ? t : t.to(at::kCPU));
  }
  return out;
}

// The first output of `b` that differs from `a`'s ("" if none): bit for bit,
// or within `rtol` of each reference output's largest magnitude.
std::string first_difference(const ir::Graph& g, const Outputs& a, const Outputs& b, double rtol) {
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const std::string& name = g.value(g.outputs[i]).name;
    if (!a.hashes.empty()) {
      if (a.hashes[i] != b.hashes[i]) return fmt::format("%{} differs (its bytes hash differently)", name);
      continue;
    }
    const at::Tensor &x = a.tensors[i], &y = b.tensors[i];
    if (at::equal(x, y)) continue;  // equal bits are within any tolerance (and an empty tensor has no max)
    const at::Tensor xd = x.to(at::kDouble), yd = y.to(at::kDouble);
    const double diff = (xd - yd).abs().max().item<double>();
    const double scale = xd.abs().max().item<double>();
    if (rtol > 0 && diff <= rtol * scale) continue;
    return fmt::format("%{} differs (largest absolute difference {:.3g}{})", name, diff,
                       rtol > 0 ? fmt::format(", above {:g} of its largest magnitude {:.3g}", rtol, scale) : "");
  }
  return {};
}

}  // namespace

Check check_steps(const ir::Graph& base, const ir::Graph& planned, const c10::Device& device, uint64_t seed) {
  // Deterministic kernels where ATen has them; an op without one still runs,
  // and ATen's warning names it.
  runtime::DeterministicAlgorithms deterministic;
  NondeterministicKernels nondeterministic;
  // One step at a time, so that the check needs no more device memory than
  // the larger of the two steps: the reference's outputs wait in host memory
  // (on the CPU under a --device-memory cap, as a hash of their bytes).
  const bool hashes = device.is_cpu() && runtime::memory_limit(device) > 0;
  ir::Graph a = with_gradients(base, base), b = with_gradients(planned, base);
  MUTWO_ASSERT(a.outputs.size() == b.outputs.size() &&
                   std::find(b.outputs.begin(), b.outputs.end(), ir::kNoValue) == b.outputs.end(),
               "the two steps have different outputs");
  for (size_t i = 0; i < a.outputs.size(); ++i)
    MUTWO_ASSERT(b.value(b.outputs[i]).name == a.value(a.outputs[i]).name, "output {} differs in name", i);
  const Outputs ref = run_once(a, device, seed, hashes);
  const Outputs got = run_once(b, device, seed, hashes);
  std::string diff = first_difference(a, ref, got, 0);
  if (diff.empty()) return {"passed", ""};
  // Not bit for bit. A bug of mutwo's, unless the reference itself is not
  // reproducible: a kernel without a deterministic implementation (named by
  // ATen), or one that differs from run to run without saying so (the
  // reference run twice differs).
  std::string why;
  if (!nondeterministic.kernels.empty()) {
    why = fmt::format("{} {} no deterministic implementation", fmt::join(nondeterministic.kernels, ", "),
                      nondeterministic.kernels.size() == 1 ? "has" : "have");
  } else if (!hashes) {
    const Outputs again = run_once(a, device, seed, hashes);
    if (std::string self = first_difference(a, ref, again, 0); !self.empty())
      why = fmt::format("the unplanned step differs from itself between two runs ({})", self);
  }
  if (why.empty() || hashes) return {"failed", diff};
  if (std::string beyond = first_difference(a, ref, got, kCheckTolerance); !beyond.empty())
    return {"failed", fmt::format("{}; {}", beyond, why)};
  return {"passed-within-tolerance", fmt::format("{}; {}, so outputs were compared within {:g} of each one's largest "
                                                 "magnitude", diff, why, kCheckTolerance)};
}

}  // namespace mutwo::cli
