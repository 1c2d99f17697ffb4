// mutwo optimize --check: the planned step against its reference (the
// unplanned step, or the most-recomputation one where that does not fit),
// loss and every parameter gradient, bit for bit, or within the reference's
// own run-to-run noise where the reference is not reproducible.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace mutwo::cli {

// The fixed tolerance: a part of each output's largest magnitude.
inline constexpr double kCheckTolerance = 1e-4;
// How many times the reference's own run-to-run noise the planned step may
// differ from it. The noise is measured per output (the largest absolute
// difference between two runs of the reference, over that output's largest
// magnitude) and the largest of these is the step's noise: an output's
// allowance is the multiple times that, times the output's own largest
// magnitude. A kernel without a deterministic implementation flips the last
// bits of many outputs, but not of every output in every run: an output two
// reference runs left equal can differ in a third (see docs/testing.md,
// "optimize --check's rule", for what was measured). A correct plan is one more run of the
// same arithmetic; bf16 outputs differ by whole units in the last place, and
// a third run 2 units off where the second was 1 off was measured: hence 2.
inline constexpr double kCheckNoiseMultiple = 2;

// The reference's run-to-run noise, where it ran twice: the output whose
// largest absolute difference between the two runs is the largest part of
// its largest magnitude.
struct CheckNoise {
  std::string tensor;  // "%name"
  double absolute = 0;  // largest absolute difference between the two runs
  double relative = 0;  // that, over the output's largest magnitude: the step's noise
};

// What --check found: "passed" (every output bit for bit),
// "passed-within-tolerance" (not bit for bit, but the reference is not
// reproducible itself, and every output is within kCheckNoiseMultiple times
// the reference's noise, or within kCheckTolerance, of its largest magnitude,
// whichever is larger), or "failed"
// (a real mismatch: the only outcome that exits 1).
struct Check {
  std::string status;
  std::string detail;  // what differs first, the noise measured and the allowance
  std::optional<CheckNoise> noise;  // set when two runs of the reference differ
};

// One step's outputs, on the host; hashes of their bytes instead on the CPU
// under a --device-memory cap, where host memory is the device's.
struct StepOutputs {
  std::vector<at::Tensor> tensors;
  std::vector<uint64_t> hashes;
};

// How the check runs one step of a graph (`hashes`: keep hashes only). The
// executor by default; unit tests pass one that makes steps noisy on purpose.
using RunStep = std::function<StepOutputs(const ir::Graph& g, bool hashes)>;

struct CheckOptions {
  c10::Device device = c10::Device(c10::kCPU);
  uint64_t seed = 0;  // both steps start from it
  RunStep run_step;   // empty: one step on the executor, from `seed` on `device`
};

// One step of `g` on the executor from `seed`, its outputs kept on the host.
StepOutputs run_step_outputs(const ir::Graph& g, const c10::Device& device, uint64_t seed, bool hashes);

// Runs both graphs one step from the same state, with deterministic
// algorithms where ATen has them, and compares the loss and every parameter
// gradient of `base`. Where they are not bit for bit equal, the reference
// runs a second time: if it is reproducible (the same bits, and ATen named no
// kernel as nondeterministic) the check fails; otherwise each output is judged
// against the measured noise (see kCheckNoiseMultiple).
Check check_steps(const ir::Graph& base, const ir::Graph& planned, const CheckOptions& o);

}  // namespace mutwo::cli
