// mutwo optimize --check (see check.h): both steps run, their outputs
// compared bit for bit, then, where the reference is not reproducible, each
// output against the reference's run-to-run noise.
#include "cli/check.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>

#include "runtime/executor.h"
#include "runtime/memory.h"
#include "support/error.h"

namespace mutwo::cli {

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

// The graph with every parameter gradient of `base` (and the loss) kept as an
// output: `g` is base or its planned form (whose swap copies of a gradient are
// not outputs: the gradient itself is).
ir::Graph with_gradients(const ir::Graph& g, const ir::Graph& base) {
  ir::Graph out = g;
  for (const ir::Value& v : base.values())
    if (v.role == ir::Role::gradient) out.outputs.push_back(g.find(v.name));
  return out;
}

std::string output_name(const ir::Graph& g, size_t i) { return "%" + g.value(g.outputs[i]).name; }

// How far `y` is from `x`: the largest absolute difference, and x's largest
// magnitude (both 0 when they are equal bit for bit).
struct Difference {
  bool equal = true;
  double largest = 0;
  double scale = 0;
};
Difference difference(const at::Tensor& x, const at::Tensor& y) {
  if (at::equal(x, y)) return {};  // equal bits are within any allowance (and an empty tensor has no max)
  const at::Tensor xd = x.to(at::kDouble), yd = y.to(at::kDouble);
  return {false, (xd - yd).abs().max().item<double>(), xd.abs().max().item<double>()};
}

// The first output of `b` that differs from `a`'s bit for bit ("" if none).
std::string first_bitwise_difference(const ir::Graph& g, const StepOutputs& a, const StepOutputs& b) {
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    if (!a.hashes.empty()) {
      if (a.hashes[i] != b.hashes[i]) return fmt::format("{} differs (its bytes hash differently)", output_name(g, i));
      continue;
    }
    const Difference d = difference(a.tensors[i], b.tensors[i]);
    if (!d.equal) return fmt::format("{} differs (largest absolute difference {:.3g})", output_name(g, i), d.largest);
  }
  return {};
}

// The reference's noise: of each output, the largest absolute difference
// between its two runs over its largest magnitude; the largest of these
// (none if the two runs are equal bit for bit).
std::optional<CheckNoise> noise_of(const ir::Graph& g, const StepOutputs& ref, const StepOutputs& again) {
  std::optional<CheckNoise> noise;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const Difference n = difference(ref.tensors[i], again.tensors[i]);
    if (n.equal) continue;
    const double relative = n.scale > 0 ? n.largest / n.scale : std::numeric_limits<double>::infinity();
    if (!noise || relative > noise->relative) noise = CheckNoise{output_name(g, i), n.largest, relative};
  }
  return noise;
}

// Every output of `got` against `ref`: allowed kCheckNoiseMultiple times the
// reference's noise, or kCheckTolerance, of the output's largest magnitude,
// whichever is larger.
struct Judged {
  std::string beyond;   // the first output past its allowance ("" if none)
  std::string closest;  // otherwise, the output nearest its allowance
};
Judged judge(const ir::Graph& g, const StepOutputs& ref, const StepOutputs& got, double noise) {
  const double allowed = std::max(kCheckNoiseMultiple * noise, kCheckTolerance);  // of each largest magnitude
  Judged j;
  double nearest = -1;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const Difference d = difference(ref.tensors[i], got.tensors[i]);
    if (d.equal) continue;
    // Relative, so that an output exactly `multiple` times the noise where it was measured passes.
    const double part = d.scale > 0 ? d.largest / d.scale : std::numeric_limits<double>::infinity();
    if (!(part <= allowed)) {  // NaN too
      if (j.beyond.empty())
        j.beyond = fmt::format("{} differs by {:.3g}, {:.3g} of its largest magnitude {:.3g}, above the {:.3g} allowed",
                               output_name(g, i), d.largest, part, d.scale, allowed);
      continue;
    }
    if (part / allowed > nearest) {
      nearest = part / allowed;
      j.closest = fmt::format("{}, {:.3g} of its largest magnitude", output_name(g, i), part);
    }
  }
  return j;
}

}  // namespace

StepOutputs run_step_outputs(const ir::Graph& g, const c10::Device& device, uint64_t seed, bool hashes) {
  runtime::Executor e(g, {device, seed, /*keep_outputs=*/true});
  e.initialize();
  e.step();
  StepOutputs out;
  for (ir::ValueId v : g.outputs) {
    at::Tensor t = std::move(e.value(v));
    if (hashes) out.hashes.push_back(runtime::bytes_hash(t));
    else out.tensors.push_back(device.is_cpu() ? t : t.to(at::kCPU));
  }
  return out;
}

Check check_steps(const ir::Graph& base, const ir::Graph& planned, const CheckOptions& o) {
  // Deterministic kernels where ATen has them; an op without one still runs,
  // and ATen's warning names it.
  runtime::DeterministicAlgorithms deterministic;
  NondeterministicKernels nondeterministic;
  // One step at a time, so that the check needs no more device memory than
  // the larger of the two steps: the reference's outputs wait in host memory
  // (on the CPU under a --device-memory cap, as a hash of their bytes).
  const bool hashes = o.device.is_cpu() && runtime::memory_limit(o.device) > 0;
  ir::Graph a = with_gradients(base, base), b = with_gradients(planned, base);
  MUTWO_ASSERT(a.outputs.size() == b.outputs.size() &&
                   std::find(b.outputs.begin(), b.outputs.end(), ir::kNoValue) == b.outputs.end(),
               "the two steps have different outputs");
  for (size_t i = 0; i < a.outputs.size(); ++i)
    MUTWO_ASSERT(b.value(b.outputs[i]).name == a.value(a.outputs[i]).name, "output {} differs in name", i);
  const RunStep run = o.run_step ? o.run_step : [&o](const ir::Graph& g, bool h) {
    return run_step_outputs(g, o.device, o.seed, h);
  };
  const StepOutputs ref = run(a, hashes);
  const StepOutputs got = run(b, hashes);
  const std::string diff = first_bitwise_difference(a, ref, got);
  if (diff.empty()) return {"passed", "", std::nullopt};
  if (hashes) return {"failed", diff, std::nullopt};  // hashes: bit for bit only (the CPU's kernels are deterministic)
  // Not bit for bit. A bug of mutwo's, unless the reference itself is not
  // reproducible: a kernel without a deterministic implementation (named by
  // ATen), or a second run of the reference that differs from its first.
  const StepOutputs again = run(a, false);
  const std::optional<CheckNoise> noise = noise_of(a, ref, again);
  std::vector<std::string> why;
  if (!nondeterministic.kernels.empty())
    why.push_back(fmt::format("{} {} no deterministic implementation", fmt::join(nondeterministic.kernels, ", "),
                              nondeterministic.kernels.size() == 1 ? "has" : "have"));
  if (noise)
    why.push_back(fmt::format("the reference differs from itself between two runs (most at {}: {:.3g}, {:.3g} of "
                              "its largest magnitude)",
                              noise->tensor, noise->absolute, noise->relative));
  else
    why.push_back("two runs of the reference gave the same bits");
  if (!noise && nondeterministic.kernels.empty())
    return {"failed", fmt::format("{}; {}, so no difference is allowed", diff, why.back()), std::nullopt};
  const std::string reasons = fmt::format("{}", fmt::join(why, "; "));
  const std::string rule = fmt::format("{:g}x the reference's noise or {:g}, of each output's largest magnitude, "
                                       "whichever is larger",
                                       kCheckNoiseMultiple, kCheckTolerance);
  const Judged j = judge(a, ref, got, noise ? noise->relative : 0);
  if (!j.beyond.empty()) return {"failed", fmt::format("{} ({}); {}", j.beyond, rule, reasons), noise};
  return {"passed-within-tolerance",
          fmt::format("{}; {}; every output is within {} (closest to its allowance: {})", diff, reasons, rule,
                      j.closest),
          noise};
}

}  // namespace mutwo::cli
