// Training tests: the MLP's losses and parameters after 5 steps against a
// reference written with libtorch autograd and torch::optim (SGD with momentum,
// Adam, AdamW); the multi-tensor optimizer node against per-parameter nodes and
// torch::optim, bit for bit, and its shape errors; measured CPU peak memory
// against the liveness prediction; dropout's determinism under a seed.
#include <gtest/gtest.h>
#include <torch/torch.h>  // the reference needs torch::optim; only this test file includes it

#include "autodiff/autodiff.h"
#include "ir/text.h"
#include "kernels/kernel.h"
#include "models/model.h"
#include "node_peaks.h"
#include "ops/builder.h"
#include "ops/op.h"
#include "runtime/executor.h"
#include "runtime/memory.h"
#include "support/error.h"

namespace mutwo {
namespace {

models::MlpConfig small_mlp(double dropout) {
  models::MlpConfig c;
  c.batch = 32;
  c.in_features = 64;
  c.hidden = 48;
  c.depth = 2;
  c.classes = 10;
  c.dropout = dropout;
  return c;
}

struct Trained {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> params;  // after the last step
};

Trained run_mutwo(const models::MlpConfig& c, const autodiff::OptimizerConfig& oc, int steps, uint64_t seed,
                  std::map<std::string, at::Tensor>* initial = nullptr) {
  models::Model m = models::build_mlp(c);
  ir::Graph g = autodiff::build_training_step(std::move(m.graph), m.loss, oc);
  runtime::Executor ex(g, {c10::Device(c10::kCPU), seed});
  ex.initialize();
  if (initial)
    for (const ir::Value& v : g.values())
      if (ir::is_persistent(v.role) && v.role != ir::Role::optimizer_state)
        (*initial)[v.name] = ex.value(v.id).clone();
  Trained t;
  for (int s = 0; s < steps; ++s) t.losses.push_back(ex.step().outputs.at(0));
  for (const ir::Value& v : g.values())
    if (v.role == ir::Role::parameter) t.params[v.name] = ex.value(v.id).clone();
  return t;
}

// The same MLP written directly with ATen ops under autograd, trained by torch::optim.
Trained run_reference(const models::MlpConfig& c, const autodiff::OptimizerConfig& oc, int steps,
                      std::map<std::string, at::Tensor> init) {
  std::vector<std::string> layers;
  for (int64_t l = 0; l < c.depth; ++l) layers.push_back("fc" + std::to_string(l + 1));
  layers.push_back("head");
  std::vector<at::Tensor> params;
  for (const auto& l : layers)
    for (const char* suffix : {".weight", ".bias"}) {
      at::Tensor& p = init.at(l + suffix);
      p.set_requires_grad(true);
      params.push_back(p);
    }
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (oc.kind == autodiff::Optimizer::sgd)
    opt = std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(oc.lr).momentum(oc.momentum));
  else if (oc.kind == autodiff::Optimizer::adam)
    opt = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(oc.lr).weight_decay(oc.weight_decay));
  else
    opt = std::make_unique<torch::optim::AdamW>(params,
                                                torch::optim::AdamWOptions(oc.lr).weight_decay(oc.weight_decay));
  Trained t;
  for (int s = 0; s < steps; ++s) {
    opt->zero_grad();
    at::Tensor h = init.at("x");
    for (size_t l = 0; l + 1 < layers.size(); ++l)
      h = at::relu(at::linear(h, init.at(layers[l] + ".weight"), init.at(layers[l] + ".bias")));
    at::Tensor logits = at::linear(h, init.at("head.weight"), init.at("head.bias"));
    at::Tensor loss = at::nll_loss(at::log_softmax(logits, 1), init.at("labels"));
    loss.backward();
    opt->step();
    t.losses.push_back(loss.item<double>());
  }
  for (const auto& l : layers)
    for (const char* suffix : {".weight", ".bias"}) t.params[l + suffix] = init.at(l + suffix).detach().clone();
  return t;
}

// Relative difference, the largest over elements.
double max_rel_diff(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor denom = at::maximum(a.abs(), b.abs()).clamp_min(1e-12);
  return ((a - b).abs() / denom).max().item<double>();
}

void expect_matches_reference(const autodiff::OptimizerConfig& oc) {
  const int steps = 5;
  models::MlpConfig c = small_mlp(0.0);  // the reference has no dropout masks to share
  std::map<std::string, at::Tensor> init;
  Trained ours = run_mutwo(c, oc, steps, 3, &init);
  Trained ref = run_reference(c, oc, steps, init);
  ASSERT_EQ(ours.losses.size(), ref.losses.size());
  // Not bit-exact by design: autograd computes d/dW of addmm as (x^T g)^T while
  // mutwo computes g^T x, and BLAS may sum the same products in another order.
  // Everything else (kernels, optimizer arithmetic) is the same, so 1e-6 relative
  // after 5 steps bounds those rounding differences.
  for (int s = 0; s < steps; ++s)
    EXPECT_NEAR(ours.losses[static_cast<size_t>(s)], ref.losses[static_cast<size_t>(s)],
                1e-6 * std::abs(ref.losses[static_cast<size_t>(s)]))
        << "step " << s + 1;
  for (const auto& [name, p] : ref.params) {
    const at::Tensor& q = ours.params.at(name);
    // Elements near zero make a pure relative test meaningless: 1e-6 relative or 1e-8 absolute.
    EXPECT_TRUE(at::allclose(q, p, 1e-6, 1e-8)) << name << ": max relative difference " << max_rel_diff(q, p);
  }
  EXPECT_LT(ours.losses.back(), ours.losses.front()) << "the loss should fall";
}

TEST(Reference, MlpWithSgdMomentumMatchesTorchOptim) {
  autodiff::OptimizerConfig oc;
  oc.kind = autodiff::Optimizer::sgd;
  oc.lr = 0.05;
  oc.momentum = 0.9;
  expect_matches_reference(oc);
}

TEST(Reference, MlpWithAdamMatchesTorchOptim) {
  autodiff::OptimizerConfig oc;
  oc.kind = autodiff::Optimizer::adam;
  oc.lr = 1e-3;
  expect_matches_reference(oc);
}

TEST(Reference, MlpWithAdamWMatchesTorchOptim) {
  autodiff::OptimizerConfig oc;
  oc.kind = autodiff::Optimizer::adamw;
  oc.lr = 1e-3;
  oc.weight_decay = 0.01;
  expect_matches_reference(oc);
}

// --- the multi-tensor optimizer node ------------------------------------------

// Parameters of mixed shapes and element types; their gradients are graph
// inputs that the test feeds each step.
struct OptimParam {
  std::string name;
  ir::TensorType type;
};
const std::vector<OptimParam> kOptimParams = {{"a.weight", {{4, 3}}},
                                              {"a.bias", {{4}}},
                                              {"b.weight", {{2, 3, 2}, ir::DType::f64}},
                                              {"c.scale", {{1}}}};

// Only optimizer nodes: one over every parameter (fused), or one per parameter.
ir::Graph optimizer_only_graph(const autodiff::OptimizerConfig& oc, bool fused) {
  ir::Graph g;
  ops::Builder b(g);
  std::vector<std::pair<ir::ValueId, ir::ValueId>> grads;
  for (const auto& p : kOptimParams)
    grads.emplace_back(b.input(p.name, p.type, ir::Role::parameter, ir::Init{ir::Init::uniform, -1, 1}),
                       b.input(p.name + ".grad", p.type, ir::Role::input));
  if (fused) autodiff::append_optimizer(g, grads, oc);
  else
    for (const auto& pg : grads) autodiff::append_optimizer(g, {pg}, oc);
  ops::verify(g);
  return g;
}

// The parameters (and optimizer state, by name) after `steps` steps with
// seeded random gradients.
std::map<std::string, at::Tensor> run_optimizer(const ir::Graph& g, int steps) {
  runtime::Executor ex(g, {c10::Device(c10::kCPU), 5});
  ex.initialize();
  at::Generator gen = at::detail::createCPUGenerator(9);
  for (int s = 0; s < steps; ++s) {
    for (const auto& p : kOptimParams)
      ex.value(g.find(p.name + ".grad")) =
          at::randn(p.type.shape, gen, at::TensorOptions().dtype(kernels::to_aten(p.type.dtype)));
    ex.step();
  }
  std::map<std::string, at::Tensor> out;
  for (const ir::Value& v : g.values())
    if (v.role == ir::Role::parameter || v.role == ir::Role::optimizer_state) out[v.name] = ex.value(v.id).clone();
  return out;
}

// The same updates by torch::optim, from the same initial values and gradients.
std::map<std::string, at::Tensor> run_torch_optim(const autodiff::OptimizerConfig& oc, int steps) {
  ir::Graph g = optimizer_only_graph(oc, true);
  runtime::Executor ex(g, {c10::Device(c10::kCPU), 5});
  ex.initialize();
  std::vector<at::Tensor> params;
  for (const auto& p : kOptimParams) params.push_back(ex.value(g.find(p.name)).clone().set_requires_grad(true));
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (oc.kind == autodiff::Optimizer::sgd)
    opt = std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(oc.lr)
                                                          .momentum(oc.momentum)
                                                          .dampening(oc.dampening)
                                                          .weight_decay(oc.weight_decay)
                                                          .nesterov(oc.nesterov));
  else if (oc.kind == autodiff::Optimizer::adam)
    opt = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(oc.lr)
                                                           .betas({oc.beta1, oc.beta2})
                                                           .eps(oc.eps)
                                                           .weight_decay(oc.weight_decay));
  else
    opt = std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(oc.lr)
                                                            .betas({oc.beta1, oc.beta2})
                                                            .eps(oc.eps)
                                                            .weight_decay(oc.weight_decay));
  at::Generator gen = at::detail::createCPUGenerator(9);
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < params.size(); ++i)
      params[i].mutable_grad() = at::randn(kOptimParams[i].type.shape, gen,
                                           at::TensorOptions().dtype(kernels::to_aten(kOptimParams[i].type.dtype)));
    opt->step();
  }
  std::map<std::string, at::Tensor> out;
  for (size_t i = 0; i < params.size(); ++i) out[kOptimParams[i].name] = params[i].detach().clone();
  return out;
}

TEST(Optimizer, OneMultiTensorNodeEqualsPerParameterNodesAndTorchOptimBitForBit) {
  const int steps = 3;
  std::vector<std::pair<std::string, autodiff::OptimizerConfig>> configs;
  for (bool nesterov : {false, true}) {
    autodiff::OptimizerConfig oc;
    oc.lr = 0.05;
    oc.momentum = 0.9;
    oc.dampening = nesterov ? 0 : 0.1;  // torch::optim: nesterov needs dampening 0
    oc.weight_decay = 1e-2;
    oc.nesterov = nesterov;
    configs.emplace_back(nesterov ? "sgd nesterov" : "sgd momentum", oc);
  }
  autodiff::OptimizerConfig plain;
  plain.momentum = 0;
  plain.weight_decay = 1e-2;
  configs.emplace_back("sgd without momentum", plain);
  for (auto kind : {autodiff::Optimizer::adam, autodiff::Optimizer::adamw}) {
    autodiff::OptimizerConfig oc;
    oc.kind = kind;
    oc.lr = 1e-2;
    oc.weight_decay = 1e-2;
    configs.emplace_back(kind == autodiff::Optimizer::adam ? "adam" : "adamw", oc);
  }
  for (const auto& [what, oc] : configs) {
    ir::Graph fused = optimizer_only_graph(oc, true);
    ir::Graph separate = optimizer_only_graph(oc, false);
    ASSERT_EQ(fused.nodes().size(), 1u) << what;
    ASSERT_EQ(separate.nodes().size(), kOptimParams.size()) << what;
    auto a = run_optimizer(fused, steps);
    auto b = run_optimizer(separate, steps);
    auto ref = run_torch_optim(oc, steps);
    auto initial = run_optimizer(fused, 0);
    ASSERT_EQ(a.size(), b.size()) << what;
    for (const auto& [name, t] : a) EXPECT_TRUE(at::equal(t, b.at(name))) << what << ": " << name;
    for (const auto& [name, t] : ref) {
      EXPECT_TRUE(at::equal(a.at(name), t)) << what << ": " << name << " differs from torch::optim";
      EXPECT_FALSE(at::equal(a.at(name), initial.at(name))) << what << ": " << name << " never moved";
    }
  }
}

// Runs `f`, expecting a UserError whose message contains every needle.
template <class F>
void expect_user_error(F&& f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << *needles.begin();
  } catch (const UserError& e) {
    for (const auto& needle : needles)
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message was: " << e.what();
  }
}

TEST(Optimizer, MultiTensorNodeNamesTheParameterOfABadEntry) {
  ir::Graph g;
  ops::Builder b(g);
  b.phase = ir::Phase::optimizer;
  auto value = [&](const std::string& name, ir::TensorType t, ir::Role r) { return b.input(name, std::move(t), r); };
  ir::ValueId w = value("a.weight", {{4, 3}}, ir::Role::parameter);
  ir::ValueId s = value("c.scale", {{5}}, ir::Role::parameter);
  ir::ValueId gw = value("a.weight.grad", {{4, 3}}, ir::Role::input);
  ir::ValueId gs = value("c.scale.grad", {{5}}, ir::Role::input);
  ir::ValueId gs_bad = value("c.scale.grad.bad", {{6}}, ir::Role::input);
  ir::ValueId mw = value("a.weight.momentum", {{4, 3}}, ir::Role::optimizer_state);
  ir::ValueId mw_f64 = value("a.weight.momentum.f64", {{4, 3}, ir::DType::f64}, ir::Role::optimizer_state);
  ir::ValueId ms = value("c.scale.momentum", {{5}}, ir::Role::optimizer_state);
  ir::Attrs sgd{{"lr", 0.1}, {"momentum", 0.9}};
  auto sgd_step = [&](std::vector<ir::ValueId> in) { return [&b, &sgd, in] { b.call("sgd_step", in, sgd); }; };
  EXPECT_NO_THROW(b.call("sgd_step", {w, s, gw, gs, mw, ms}, sgd));
  expect_user_error(sgd_step({w, s, gw, gs_bad, mw, ms}),
                    {"%c.scale.grad.bad, in the gradients, must be f32[5] like its parameter %c.scale, got f32[6]"});
  expect_user_error(sgd_step({w, s, gw, gs, mw_f64, ms}),
                    {"in the momentum buffers, must be f32[4,3] like its parameter %a.weight, got f64[4,3]"});
  expect_user_error(sgd_step({w, s, gw, gs, mw}), {"sgd_step takes 3 lists of equal length",
                                                   "(parameters, gradients, momentum buffers)", "got 5 inputs"});
  expect_user_error(sgd_step({w, w, gw, gw, mw, mw}), {"sgd_step writes into %a.weight twice (inputs 0 and 1)"});
  expect_user_error([&] { b.call("adam_step", {w, s, gw, gs, mw, ms, mw, mw}, {{"lr", 0.1}}); },
                    {"%a.weight.momentum, in the second moments, must be f32[5] like its parameter %c.scale"});
  // The verifier (a graph read from text) says the same, after the node.
  ir::Graph bad = ir::parse(
      "graph t\n%p : f32[3] parameter\n%q : f32[2] parameter\n%p.grad : f32[3] input\n%q.grad : f32[3] input\n"
      "_ = sgd_step(%p, %q, %p.grad, %q.grad) {lr=0.1} optim\n");
  expect_user_error([&] { ops::verify(bad); }, {"%q.grad, in the gradients, must be f32[2] like its parameter %q"});
}

using testing::NodePeaks;

TEST(Memory, MeasuredCpuPeakEqualsLivenessPrediction) {
  runtime::track_cpu_memory();
  for (double dropout : {0.0, 0.1}) {
    models::MlpConfig c = small_mlp(dropout);
    models::Model m = models::build_mlp(c);
    ir::Graph g = autodiff::build_training_step(std::move(m.graph), m.loss, {});
    runtime::Executor ex(g, {c10::Device(c10::kCPU), 0});
    ex.initialize();
    ex.step();  // warm-up
    runtime::StepResult r = ex.step();
    const analysis::Liveness& L = ex.liveness();
    EXPECT_EQ(r.start_bytes, L.persistent_bytes) << "dropout " << dropout;
    // The counting allocator sees exact request sizes: no rounding to allow for.
    EXPECT_EQ(r.peak_bytes, L.peak_bytes) << "dropout " << dropout << ", predicted peak at node " << L.peak_node
                                          << " (" << g.nodes()[static_cast<size_t>(L.peak_node)].op << ")";
    // Node by node: what a node allocates beyond its outputs is its workspace.
    // Here the only workspace is ATen's 0-dim CPU tensor for a Scalar operand
    // (dropout's 1/(1-p), SGD's momentum): 8 bytes as double plus 4 once cast
    // to f32, made and freed inside the kernel.
    NodePeaks peaks;
    ex.set_observer(&peaks);
    ex.step();
    ex.set_observer(nullptr);
    ASSERT_EQ(peaks.peak.size(), g.nodes().size());
    for (size_t n = 0; n < g.nodes().size(); ++n) {
      int64_t workspace = peaks.peak[n] - L.live_during[n];
      EXPECT_TRUE(workspace == 0 || workspace == 12) << "node " << n << " " << g.nodes()[n].op << ": " << workspace;
    }
    EXPECT_EQ(runtime::memory_stats(c10::Device(c10::kCPU)).current, L.persistent_bytes)
        << "everything made during the step is freed by its end";
  }
}

TEST(Dropout, SameSeedSameLossesDifferentSeedDifferent) {
  models::MlpConfig c = small_mlp(0.5);
  autodiff::OptimizerConfig oc;
  Trained a = run_mutwo(c, oc, 3, 11);
  Trained b = run_mutwo(c, oc, 3, 11);
  EXPECT_EQ(a.losses, b.losses);  // bit for bit
  for (const auto& [name, p] : a.params) EXPECT_TRUE(at::equal(p, b.params.at(name))) << name;
  Trained d = run_mutwo(c, oc, 3, 12);
  EXPECT_NE(a.losses, d.losses);
}

TEST(Determinism, ScopeTurnsDeterministicKernelsOnAndRestoresTheSetting) {
  ASSERT_FALSE(at::globalContext().deterministicAlgorithms());
  {
    runtime::DeterministicAlgorithms on;
    EXPECT_TRUE(at::globalContext().deterministicAlgorithms());
    EXPECT_TRUE(at::globalContext().deterministicAlgorithmsWarnOnly()) << "an op without one must still run";
    {
      runtime::DeterministicAlgorithms nested;
      EXPECT_TRUE(at::globalContext().deterministicAlgorithms());
    }
    EXPECT_TRUE(at::globalContext().deterministicAlgorithms()) << "the inner scope restores the outer one's setting";
  }
  EXPECT_FALSE(at::globalContext().deterministicAlgorithms());
}

}  // namespace
}  // namespace mutwo

// max-batch reads out-of-memory as "does not fit" and every other failure as an error.
TEST(Memory, OutOfMemoryIsToldApartFromOtherErrors) {
  EXPECT_TRUE(mutwo::runtime::is_out_of_memory(std::bad_alloc()));
  EXPECT_TRUE(mutwo::runtime::is_out_of_memory(c10::Error({"f", "file", 1}, "CUDA out of memory. Tried to allocate 2.00 GiB")));
  EXPECT_TRUE(mutwo::runtime::is_out_of_memory(c10::Error({"f", "file", 1}, "DefaultCPUAllocator: can't allocate memory")));
  EXPECT_FALSE(mutwo::runtime::is_out_of_memory(c10::Error({"f", "file", 1}, "mat1 and mat2 shapes cannot be multiplied")));
  EXPECT_FALSE(mutwo::runtime::is_out_of_memory(std::runtime_error("index out of range")));
}
