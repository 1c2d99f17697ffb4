// optimize --check's rule (src/cli/check.h) on the CPU, whose kernels are
// reproducible, so steps are made noisy on purpose here: a correct plan
// passes within the reference's own run-to-run noise, or within the fixed
// tolerance; a difference past both fails; and a planted fault (a recomputed
// node fed the wrong input) fails with or without noise.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>

#include "autodiff/autodiff.h"
#include "cli/check.h"
#include "models/model.h"
#include "ops/op.h"
#include "plan/plan.h"
#include "profile/profile.h"
#include "rewrite/recompute.h"

namespace mutwo {
namespace {

// The MLP's step and its planned form: every activation the planners may
// drop is recomputed.
struct Steps {
  ir::Graph base, planned;
};
Steps mlp_steps() {
  models::ModelOptions o;
  o.name = "mlp";
  o.batch = 16;
  models::Model m = models::build_model(o);
  plan::PlanInput in = plan::make_input(profile::describe(autodiff::build_training_step(std::move(m.graph), m.loss, {})));
  std::vector<ir::ValueId> drop;
  for (const auto& c : plan::candidates(in)) drop.insert(drop.end(), c.members.begin(), c.members.end());
  rewrite::Rewritten r = rewrite::insert_recomputation(in.graph, drop);
  EXPECT_GT(r.clones, 0);
  return {std::move(in.graph), std::move(r.graph)};
}

bool has_recompute(const ir::Graph& g) {
  return std::any_of(g.nodes().begin(), g.nodes().end(), [](const ir::Node& n) { return n.phase == ir::Phase::recompute; });
}

// The planted fault: the first recomputed node (one that does not write over
// its input) reads, in place of one of its inputs, another value of the same
// type that is ready by then. Returns what it did.
std::string plant_fault(ir::Graph& g) {
  std::vector<bool> ready(g.num_values(), true);  // inputs, parameters, state: from the start
  for (const ir::Node& n : g.nodes())
    for (ir::ValueId out : n.outputs) ready[out] = false;
  for (ir::Node& n : g.nodes()) {
    if (n.phase == ir::Phase::recompute && !ops::has(n, ops::kOverwrite) && !ops::replays_rng(n)) {
      for (ir::ValueId& in : n.inputs) {
        if (in == ir::kNoValue) continue;
        for (const ir::Value& v : g.values())
          if (ready[v.id] && v.id != in && v.type == g.type(in)) {
            const std::string what = fmt::format("%{} reads %{} instead of %{}", g.value(n.outputs[0]).name, v.name,
                                                 g.value(in).name);
            in = v.id;
            return what;
          }
      }
    }
    for (ir::ValueId out : n.outputs) ready[out] = true;
  }
  return {};
}

// Steps on the executor, made noisy on purpose: every gradient output gets
// noise uniform in +-`noise` of its largest magnitude, a fresh draw each run,
// the way backward kernels without a deterministic implementation (atomic
// adds) differ from run to run; the loss, a forward value, stays
// reproducible. The planned step's gradients are moved by a further `offset`
// of their largest magnitude. Output `quiet` gets noise in the planned step
// alone: one the reference's two runs leave equal.
struct NoisySteps {
  double noise = 0;
  double offset = 0;
  size_t quiet = 0;  // 0: none (output 0 is the loss)
  uint64_t draws = 100;
  cli::StepOutputs operator()(const ir::Graph& g, bool hashes) {
    EXPECT_FALSE(hashes);
    cli::StepOutputs out = cli::run_step_outputs(g, c10::Device(c10::kCPU), 5, false);
    const bool planned = has_recompute(g);
    at::Generator gen = at::detail::createCPUGenerator(draws++);
    for (size_t i = 1; i < out.tensors.size(); ++i) {  // 0 is the loss
      at::Tensor& t = out.tensors[i];
      const double scale = t.abs().max().item<double>();
      if (planned || i != quiet) t = t + (at::rand(t.sizes(), gen, t.options()) * 2 - 1) * (noise * scale);
      if (planned) t = t + offset * scale;
    }
    return out;
  }
};

cli::Check check(const Steps& s, NoisySteps noisy) {
  cli::CheckOptions o;
  o.seed = 5;
  o.run_step = noisy;
  return cli::check_steps(s.base, s.planned, o);
}

TEST(Check, ACorrectPlanPassesBitForBitOnTheExecutor) {
  const Steps s = mlp_steps();
  const cli::Check c = cli::check_steps(s.base, s.planned, {c10::Device(c10::kCPU), 5, {}});
  EXPECT_EQ(c.status, "passed") << c.detail;
  EXPECT_FALSE(c.noise);
}

// Noise of 1e-3 of each gradient's largest magnitude, ten times the fixed
// tolerance: only the noise-scaled allowance lets the correct plan pass.
TEST(Check, ACorrectPlanPassesWithinTheReferencesOwnNoise) {
  const Steps s = mlp_steps();
  const cli::Check c = check(s, {1e-3, 0});
  EXPECT_EQ(c.status, "passed-within-tolerance") << c.detail;
  ASSERT_TRUE(c.noise);
  // Two draws of +-1e-3 differ by at most 2e-3, and over many elements by nearly that.
  EXPECT_GT(c.noise->relative, 1e-3);
  EXPECT_LE(c.noise->relative, 2e-3 * (1 + 1e-6));
  EXPECT_NE(c.detail.find(fmt::format("{:.3g}", c.noise->absolute)), std::string::npos) << c.detail;
  EXPECT_NE(c.detail.find(c.noise->tensor), std::string::npos) << c.detail;
  EXPECT_NE(c.detail.find("every output is within 2x the reference's noise or 0.0001, of each output's largest "
                          "magnitude, whichever is larger"),
            std::string::npos)
      << c.detail;
}

// An output the two reference runs leave equal may still differ by the
// step's noise: measured on CUDA, such outputs are common in bf16 (an output
// compared with its own noise alone, zero, would fail there).
TEST(Check, AnOutputTheReferenceRepeatsMayDifferByTheStepsNoise) {
  const Steps s = mlp_steps();
  const cli::Check c = check(s, {1e-3, 0, 1});
  EXPECT_EQ(c.status, "passed-within-tolerance") << c.detail;
  EXPECT_TRUE(c.noise);
}

// Noise far below the fixed tolerance, and the planned step 3e-5 off: past
// twice the noise, within 1e-4 of the largest magnitude.
TEST(Check, ACorrectPlanPassesWithinTheFixedTolerance) {
  const Steps s = mlp_steps();
  const cli::Check c = check(s, {1e-9, 3e-5});
  EXPECT_EQ(c.status, "passed-within-tolerance") << c.detail;
  ASSERT_TRUE(c.noise);
  EXPECT_LT(c.noise->relative, 1e-8);
}

TEST(Check, ADifferencePastTheNoiseAndTheToleranceFails) {
  const Steps s = mlp_steps();
  const cli::Check c = check(s, {1e-9, 3e-4});
  EXPECT_EQ(c.status, "failed") << c.detail;
  EXPECT_NE(c.detail.find("allowed (2x the reference's noise or 0.0001"), std::string::npos) << c.detail;
  // Noisy at 1e-4, off by 6e-4: past twice the noise (at most 4e-4 apart) and the tolerance.
  EXPECT_EQ(check(s, {1e-4, 6e-4}).status, "failed");
}

// A reproducible reference allows no difference at all.
TEST(Check, AReproducibleReferenceAllowsNoDifference) {
  const Steps s = mlp_steps();
  const cli::Check c = check(s, {0, 1e-7});
  EXPECT_EQ(c.status, "failed") << c.detail;
  EXPECT_NE(c.detail.find("two runs of the reference gave the same bits, so no difference is allowed"),
            std::string::npos) << c.detail;
  EXPECT_FALSE(c.noise);
}

TEST(Check, APlantedFaultFailsWithAndWithoutNoise) {
  Steps s = mlp_steps();
  const std::string fault = plant_fault(s.planned);
  ASSERT_FALSE(fault.empty()) << "no recomputed node to plant a fault in";
  const cli::Check exact = cli::check_steps(s.base, s.planned, {c10::Device(c10::kCPU), 5, {}});
  EXPECT_EQ(exact.status, "failed") << fault;
  for (double noise : {1e-3, 1e-2}) {
    const cli::Check c = check(s, {noise, 0});
    EXPECT_EQ(c.status, "failed") << fault << ", noise " << noise << ": " << c.detail;
    EXPECT_TRUE(c.noise) << fault;
  }
}

}  // namespace
}  // namespace mutwo
