// ResNet tests: torchvision's parameter counts and names; the conv family's
// rows (their derivatives are rows of test_ops_grad.cpp's table) and its
// build-time errors; batch-norm
// running statistics as PyTorch updates them; resnet18/resnet50's loss and
// every gradient against torchvision itself (tests/unit/resnet_oracle.py, run by
// the Python of mutwo's torch wheel); a ResNet-18 step's measured CPU peak against
// the liveness prediction.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "autodiff/autodiff.h"
#include "build_errors.h"
#include "grad_check.h"
#include "ir/text.h"
#include "models/model.h"
#include "node_peaks.h"
#include "ops/builder.h"
#include "ops/op.h"
#include "rewrite/recompute.h"
#include "runtime/executor.h"
#include "runtime/memory.h"
#include "support/error.h"

namespace mutwo {
namespace {

using ir::Shape;
using ir::ValueId;
using Tensors = std::vector<at::Tensor>;

// --- the conv family's rows ----------------------------------------------------
// Their derivatives against libtorch autograd and finite differences are rows
// of test_ops_grad.cpp's table, with what a row cannot say about them.

using grad_check::conv_attrs;
using grad_check::randn;


// Reads every graph output right after the last node (step() drops non-persistent outputs at its end).
struct OutputReader : runtime::NodeObserver {
  explicit OutputReader(runtime::Executor& e) : ex(e) { ex.set_observer(this); }
  ~OutputReader() override { ex.set_observer(nullptr); }
  void after(size_t node) override {
    if (node + 1 != ex.graph().nodes().size()) return;
    for (ValueId v : ex.graph().outputs) got.push_back(ex.value(v));
  }
  runtime::Executor& ex;
  Tensors got;
};

int count_ops(const ir::Graph& g, const std::string& op) {
  int n = 0;
  for (const ir::Node& node : g.nodes()) n += node.op == op;
  return n;
}



TEST(ResnetOpGrad, EveryConvFamilyOpIsCovered) {
  // conv.cpp's rows with a derivative (checked in test_ops_grad.cpp's table).
  for (const char* name : {"conv2d", "batch_norm", "max_pool2d", "adaptive_avg_pool2d"})
    EXPECT_NE(ops::op(name).grad, nullptr) << name;
  for (const char* name : {"conv2d_backward", "batch_norm_backward", "max_pool2d_backward",
                           "adaptive_avg_pool2d_backward"})
    EXPECT_EQ(ops::op(name).grad, nullptr) << name << " is not differentiated twice";
  EXPECT_EQ(ops::op("batch_norm").mutates, (std::vector<int>{3, 4})) << "the running statistics, updated in place";
  EXPECT_TRUE(ops::op("conv2d").has(ops::kHeavy));
  EXPECT_FALSE(ops::op("batch_norm").has(ops::kInplace)) << "batch_norm must stay recomputable";
}

// Running statistics: PyTorch's in-place update, bit for bit, over two steps;
// a recomputed clone of the node leaves them alone.
TEST(ResnetBatchNorm, RunningStatisticsMatchPyTorchAndRecomputationLeavesThemAlone) {
  ir::Graph g;
  ops::Builder b(g);
  ValueId x = b.input("x", {{4, 3, 5, 5}, ir::DType::f32}, ir::Role::input, {ir::Init::normal, 1.0, 2.0});
  ValueId mean = b.input("bn.running_mean", {{3}, ir::DType::f32}, ir::Role::buffer, {ir::Init::zeros});
  ValueId var = b.input("bn.running_var", {{3}, ir::DType::f32}, ir::Role::buffer, {ir::Init::ones});
  ValueId w = b.input("bn.weight", {{3}, ir::DType::f32}, ir::Role::parameter, {ir::Init::ones});
  ValueId bias = b.input("bn.bias", {{3}, ir::DType::f32}, ir::Role::parameter, {ir::Init::zeros});
  std::vector<ValueId> outs = b.call("batch_norm", {x, w, bias, mean, var}, {{"eps", 1e-5}, {"momentum", 0.1}});
  b.phase = ir::Phase::loss;
  b.op("sum", {b.op("mul", {outs[0], outs[0]})}, {}, "loss");
  ops::verify(g);
  runtime::Executor ex(g, {});
  ex.initialize();
  at::Tensor ref_mean = at::zeros({3}), ref_var = at::ones({3});
  for (int step = 0; step < 2; ++step) {
    ex.value(x) = randn({4, 3, 5, 5}) * 2 + 1;
    at::native_batch_norm(ex.value(x), {}, {}, ref_mean, ref_var, /*training=*/true, 0.1, 1e-5);
    ex.step();
  }
  EXPECT_TRUE(at::equal(ex.value(mean), ref_mean)) << ex.value(mean) << ref_mean;
  EXPECT_TRUE(at::equal(ex.value(var), ref_var)) << ex.value(var) << ref_var;
  EXPECT_FALSE(at::equal(ref_var, at::ones({3}))) << "the update must have happened";

  // Recomputing its outputs clones the node without the running statistics.
  ir::Graph step = autodiff::build_training_step(g, g.find("loss"), {});
  ASSERT_EQ(step.value(outs[0]).role, ir::Role::activation);
  rewrite::Rewritten r = rewrite::insert_recomputation(step, {outs[0]});
  int clones = 0;
  for (const ir::Node& n : r.graph.nodes())
    if (n.phase == ir::Phase::recompute && n.op == "batch_norm") {
      ++clones;
      EXPECT_EQ(n.inputs[3], ir::kNoValue);
      EXPECT_EQ(n.inputs[4], ir::kNoValue);
    }
  EXPECT_EQ(clones, 1);
  // Executed, both steps update the running statistics once per step, alike.
  auto stats_after_two_steps = [&](const ir::Graph& graph) {
    runtime::Executor e(graph, {c10::Device(c10::kCPU), 3});
    e.initialize();
    e.step();
    e.step();
    return std::make_pair(e.value(mean).clone(), e.value(var).clone());
  };
  auto [mean_a, var_a] = stats_after_two_steps(step);
  auto [mean_b, var_b] = stats_after_two_steps(r.graph);
  EXPECT_TRUE(at::equal(mean_a, mean_b)) << mean_a << mean_b;
  EXPECT_TRUE(at::equal(var_a, var_b)) << var_a << var_b;
}

// --- build-time errors ---------------------------------------------------------

std::string build_error(const std::vector<ir::TensorType>& ins, const std::string& op, ir::Attrs attrs = {}) {
  return testing::build_error_in("layer2.0", ins, op, std::move(attrs));
}
using testing::expect_substrings;
ir::TensorType f32(Shape s) { return {std::move(s), ir::DType::f32}; }

TEST(ResnetBuildErrors, Conv2d) {
  expect_substrings(build_error({f32({2, 3, 8, 8}), f32({4, 5, 3, 3})}, "conv2d", conv_attrs(1, 1)),
                    {"cannot build conv2d(%in0: f32[2,3,8,8], %in1: f32[4,5,3,3]) in layer2.0",
                     "input has 3 channels but the weight [4,5,3,3] with groups=1 expects 5"});
  expect_substrings(build_error({f32({2, 3, 8}), f32({4, 3, 3, 3})}, "conv2d"),
                    {"conv2d input (N, C, H, W) must have 4 dimensions, got f32[2,3,8]"});
  expect_substrings(build_error({f32({1, 3, 2, 2}), f32({4, 3, 7, 7})}, "conv2d", conv_attrs(2, 1)),
                    {"input [1,3,2,2] is smaller than the kernel 7x7"});
  expect_substrings(build_error({f32({1, 3, 8, 8}), {{4, 3, 3, 3}, ir::DType::f64}}, "conv2d"),
                    {"element types differ"});
  expect_substrings(build_error({f32({1, 3, 8, 8}), f32({4, 3, 3, 3}), f32({3})}, "conv2d"),
                    {"conv2d bias must have shape [4]"});
  expect_substrings(build_error({f32({1, 3, 8, 8}), f32({4, 3, 3, 3})}, "conv2d", {{"stride", Shape{0, 1}}}),
                    {"stride entries must be >= 1"});
  expect_substrings(build_error({{{1, 3, 8, 8}, ir::DType::i64}, f32({4, 3, 3, 3})}, "conv2d"),
                    {"conv2d input must be a floating-point tensor"});
}

TEST(ResnetBuildErrors, BatchNormAndPooling) {
  expect_substrings(build_error({f32({1, 512, 1, 1}), f32({512}), f32({512})}, "batch_norm", {{"eps", 1e-5}}),
                    {"cannot build batch_norm", "more than one value per channel", "use a larger batch or image"});
  expect_substrings(build_error({f32({2, 4, 3, 3}), f32({3})}, "batch_norm", {{"eps", 1e-5}}),
                    {"batch_norm weight must have shape [4]"});
  expect_substrings(build_error({f32({2, 4, 3, 3}), f32({4}), f32({4}), {{4}, ir::DType::i64}, {{4}, ir::DType::i64}},
                                "batch_norm", {{"eps", 1e-5}, {"momentum", 0.1}}),
                    {"running_mean must have element type f32"});
  expect_substrings(build_error({f32({2, 4, 3, 3}), f32({4}), f32({4}), f32({4}), f32({4})}, "batch_norm",
                                {{"eps", 1e-5}, {"momentum", 1.5}}),
                    {"momentum must be in [0, 1]"});
  expect_substrings(build_error({f32({2, 4, 3, 3}), f32({4}), f32({4}), f32({4})}, "batch_norm", {{"eps", 1e-5}}),
                    {"give both running_mean and running_var, or neither"});
  expect_substrings(build_error({f32({1, 3, 8, 8})}, "max_pool2d", {{"kernel", Shape{3, 3}}, {"padding", Shape{2, 2}}}),
                    {"padding [2,2] must be at most half the kernel [3,3]"});
  expect_substrings(build_error({f32({1, 3, 2, 2})}, "max_pool2d", {{"kernel", Shape{3, 3}}}),
                    {"too small for kernel"});
  expect_substrings(build_error({f32({1, 3, 8, 8})}, "max_pool2d"), {"op max_pool2d needs the attribute 'kernel' (a list of integers)"});
  expect_substrings(build_error({f32({3, 8})}, "adaptive_avg_pool2d", {{"output_size", Shape{1, 1}}}),
                    {"must be (N, C, H, W) or (C, H, W)"});
  expect_substrings(build_error({f32({1, 3, 8, 8})}, "adaptive_avg_pool2d", {{"output_size", Shape{0, 1}}}),
                    {"output_size entries must be >= 1"});
}

// --- the models ------------------------------------------------------------------

int64_t count_role(const ir::Graph& g, ir::Role role) {
  int64_t n = 0;
  for (const ir::Value& v : g.values())
    if (v.role == role) n += v.type.numel();
  return n;
}

// torchvision.models.resnetNN(): sum(p.numel() for p in model.parameters()).
TEST(ResnetParams, CountsEqualTorchvision) {
  const std::map<int64_t, int64_t> expected{
      {18, 11689512}, {34, 21797672}, {50, 25557032}, {101, 44549160}, {152, 60192808}};
  for (auto [depth, count] : expected) {
    models::ResnetConfig c;
    c.depth = depth;
    c.batch = 1;
    models::Model m = models::build_resnet(c);
    EXPECT_EQ(count_role(m.graph, ir::Role::parameter), count) << "resnet-" << depth;
    ops::verify(m.graph);
  }
}

TEST(ResnetParams, NamesAreTorchvisionStateDictKeys) {
  models::ResnetConfig c;
  c.depth = 50;
  c.batch = 1;
  models::Model m = models::build_resnet(c);
  const ir::Graph& g = m.graph;
  auto role_of = [&](const std::string& name) {
    ValueId v = g.find(name);
    EXPECT_NE(v, ir::kNoValue) << name;
    return v == ir::kNoValue ? ir::Role::other : g.value(v).role;
  };
  for (const char* p : {"conv1.weight", "bn1.weight", "bn1.bias", "layer1.0.conv1.weight", "layer1.0.bn1.weight",
                        "layer1.0.conv3.weight", "layer1.0.downsample.0.weight", "layer1.0.downsample.1.weight",
                        "layer3.5.bn3.bias", "layer4.2.conv2.weight", "fc.weight", "fc.bias"})
    EXPECT_EQ(role_of(p), ir::Role::parameter) << p;
  for (const char* p : {"bn1.running_mean", "bn1.running_var", "layer1.0.downsample.1.running_mean",
                        "layer4.2.bn3.running_var"})
    EXPECT_EQ(role_of(p), ir::Role::buffer) << p;
  EXPECT_EQ(g.find("layer1.1.downsample.0.weight"), ir::kNoValue);
  EXPECT_EQ(g.type(g.find("layer4.2.conv3.weight")).shape, (Shape{2048, 512, 1, 1}));
  EXPECT_EQ(g.type(g.find("layer2.0.conv2.out")).shape, (Shape{1, 128, 28, 28}));  // the stride is on the 3x3 conv
  EXPECT_EQ(g.type(g.find("fc.out")).shape, (Shape{1, 1000}));
  // 53 batch norms, each with running_mean and running_var.
  EXPECT_EQ(count_ops(g, "batch_norm"), 53);
  // Scopes: the stem, each block as "layerK.i", the head and the loss.
  std::set<std::string> scopes;
  for (const ir::Node& n : g.nodes()) scopes.insert(n.scope);
  EXPECT_EQ(scopes.size(), 3u + 3 + 4 + 6 + 3);
  for (const char* s : {"stem", "layer1.0", "layer3.5", "layer4.2", "head", "loss"}) EXPECT_TRUE(scopes.count(s)) << s;
}

TEST(ResnetParams, RegistryBuildsEveryDepthAndRejectsBadOptions) {
  for (const char* name : {"resnet-18", "resnet-34", "resnet-50", "resnet-101", "resnet-152"}) {
    models::ModelOptions o;
    o.name = name;
    o.batch = 2;
    o.image_size = 64;
    o.classes = 10;
    models::Model m = models::build_model(o);
    EXPECT_EQ(m.graph.type(m.graph.find("images")).shape, (Shape{2, 3, 64, 64})) << name;
    EXPECT_EQ(m.graph.type(m.graph.find("fc.bias")).shape, (Shape{10})) << name;
    bool listed = false;
    for (const auto& info : models::model_list()) listed |= info.name == name;
    EXPECT_TRUE(listed) << name;
  }
  auto error = [](models::ModelOptions o) -> std::string {
    try {
      models::build_model(o);
    } catch (const UserError& e) {
      return e.what();
    }
    return "accepted";
  };
  models::ModelOptions o;
  o.name = "resnet-20";
  expect_substrings(error(o), {"unknown model 'resnet-20'", "resnet-152"});
  o.name = "resnet-18";
  o.dropout = 0.1;
  expect_substrings(error(o), {"resnet-18 has no dropout"});
  o.dropout.reset();
  o.batch = 1;
  o.image_size = 32;  // layer4 is 1x1: one value per channel at batch 1
  expect_substrings(error(o), {"cannot build batch_norm", "in layer4.0", "more than one value per channel"});
}

// Every depth's training step is built and verified (cheap: no tensors).
TEST(ResnetParams, TrainingStepsVerify) {
  for (int64_t depth : {18, 34, 50, 101, 152}) {
    models::ResnetConfig c;
    c.depth = depth;
    c.batch = 2;
    c.image_size = 64;
    models::Model m = models::build_resnet(c);
    ir::Graph g = autodiff::build_training_step(std::move(m.graph), m.loss, {});
    // Every parameter gets exactly one optimizer update; buffers are never a gradient's target.
    int64_t params = 0;
    for (const ir::Value& v : g.values()) params += v.role == ir::Role::parameter;
    EXPECT_EQ(count_ops(g, "sgd_step"), 1) << "resnet-" << depth << ": one multi-tensor sgd_step";
    EXPECT_EQ(g.nodes().back().op == "sgd_step" ? g.nodes().back().inputs.size() : 0, static_cast<size_t>(3 * params))
        << "resnet-" << depth << ": sgd_step takes every parameter, its gradient and its momentum buffer";
    EXPECT_EQ(g.find("bn1.running_mean.grad"), ir::kNoValue);
    if (depth == 18) {  // the text form round-trips (absent inputs, in-place nodes, int-list attributes)
      std::string text = ir::print(g);
      EXPECT_EQ(ir::print(ir::parse(text)), text);
    }
    // The stem conv's input is data: its backward makes the weight gradient only.
    for (const ir::Node& n : g.nodes()) {
      if (n.op == "conv2d_backward" && n.inputs[1] == g.find("images")) {
        EXPECT_EQ(n.attrs.ints("output_mask"), (Shape{0, 1, 0}));
      }
    }
  }
}

// --- the oracle: torchvision itself ---------------------------------------------------

// The Python whose torch wheel mutwo links (CMake's MUTWO_PYTHON: .venv/ or the GPU machine's python3).
constexpr const char* kPython = MUTWO_PYTHON_EXE;

bool oracle_available() {
  std::string cmd = std::string(kPython) + " -c 'import numpy, torch, torchvision' >/dev/null 2>&1";
  return std::filesystem::exists(kPython) && std::system(cmd.c_str()) == 0;
}
#define SKIP_WITHOUT_ORACLE()                                                                               \
  if (!oracle_available())                                                                                  \
  GTEST_SKIP() << kPython << " cannot import torch and torchvision: install requirements.txt "           \
                                "(scripts/install-deps.sh) to compare with torchvision"

// A fresh directory under $TMPDIR, removed with everything in it at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mutwo-resnet-oracle-XXXXXX").string();
    if (mkdtemp(tmpl.data())) path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// One tensor of the fixture: raw little-endian float32 or int64, as the manifest says.
at::Tensor read_raw(const std::filesystem::path& file, const std::string& dtype, const Shape& shape) {
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(dtype == "i64" ? at::kLong : at::kFloat));
  std::ifstream f(file, std::ios::binary);
  f.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  EXPECT_EQ(static_cast<size_t>(f.gcount()), t.nbytes()) << file;
  return t;
}

struct Fixture {
  double loss = 0;
  std::map<std::string, std::map<std::string, at::Tensor>> by_kind;  // kind -> name -> tensor
};

// Runs tests/unit/resnet_oracle.py into `dir` and reads what it wrote.
Fixture run_oracle(const std::string& arch, const TempDir& dir, int64_t batch, int64_t image) {
  Fixture fx;
  std::string cmd = fmt::format("{} '{}' --arch {} --batch {} --image-size {} --out '{}' > '{}/log.txt' 2>&1", kPython,
                                MUTWO_RESNET_ORACLE, arch, batch, image, dir.path.string(), dir.path.string());
  int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << cmd << "\n" << read_text(dir.path / "log.txt");
  if (rc != 0) return fx;
  nlohmann::json manifest = nlohmann::json::parse(read_text(dir.path / "manifest.json"));
  fx.loss = manifest.at("loss").get<double>();
  for (const auto& t : manifest.at("tensors"))
    fx.by_kind[t.at("kind").get<std::string>()][t.at("name").get<std::string>()] =
        read_raw(dir.path / t.at("file").get<std::string>(), t.at("dtype").get<std::string>(),
                 t.at("shape").get<Shape>());
  return fx;
}

// mutwo's ResNet with torchvision's weights and data: forward, loss and
// backward (autodiff::append_backward only, no optimizer, so the gradients
// stay as they are made; they are graph outputs, read after the last node),
// then the loss, every parameter's gradient and every running statistic against torchvision's.
void expect_matches_torchvision(int64_t depth, double tolerance) {
  const int64_t batch = 2, image = 64;
  TempDir dir;
  ASSERT_FALSE(dir.path.empty()) << "cannot make a temporary directory";
  Fixture fx = run_oracle(fmt::format("resnet{}", depth), dir, batch, image);
  ASSERT_FALSE(fx.by_kind["parameter"].empty());

  models::ResnetConfig c;
  c.depth = depth;
  c.batch = batch;
  c.image_size = image;
  models::Model m = models::build_resnet(c);
  ir::Graph g = std::move(m.graph);
  auto grads = autodiff::append_backward(g, m.loss);
  g.outputs = {m.loss};
  for (auto [p, gv] : grads) g.outputs.push_back(gv);
  autodiff::assign_roles(g);
  ops::verify(g);

  runtime::Executor ex(g, {});
  ex.initialize();
  // The weights map 1:1: every torchvision parameter is a mutwo parameter of the same name and shape, and back.
  size_t loaded = 0;
  for (const char* kind : {"parameter", "input"}) {
    for (const auto& [name, t] : fx.by_kind[kind]) {
      ValueId v = g.find(name);
      ASSERT_NE(v, ir::kNoValue) << "torchvision's " << name << " has no mutwo value";
      EXPECT_EQ(g.value(v).role, std::string(kind) == "input" ? ir::Role::input : ir::Role::parameter) << name;
      ASSERT_EQ(g.type(v).shape, t.sizes().vec()) << name;
      ex.value(v) = t;
      loaded += std::string(kind) == "parameter";
    }
  }
  EXPECT_EQ(loaded, grads.size()) << "mutwo has parameters torchvision lacks";

  OutputReader reader(ex);
  runtime::StepResult r = ex.step();
  ASSERT_EQ(reader.got.size(), g.outputs.size());

  double loss_diff = std::abs(r.outputs.at(0) - fx.loss) / std::abs(fx.loss);
  EXPECT_LE(loss_diff, tolerance) << "loss " << r.outputs.at(0) << " vs torchvision " << fx.loss;
  double worst = 0;
  std::string worst_name;
  for (size_t i = 0; i < grads.size(); ++i) {
    const std::string& name = g.value(grads[i].first).name;
    const at::Tensor& ref = fx.by_kind["gradient"].at(name);
    double d = grad_check::rel_diff(reader.got[i + 1], ref);
    EXPECT_LE(d, tolerance) << name << ".grad";
    if (worst_name.empty() || d > worst) worst = d, worst_name = name;
  }
  double worst_buffer = 0;
  for (const auto& [name, ref] : fx.by_kind["buffer"]) {
    ValueId v = g.find(name);
    ASSERT_NE(v, ir::kNoValue) << name;
    double d = grad_check::rel_diff(ex.value(v), ref);
    EXPECT_LE(d, tolerance) << name;
    worst_buffer = std::max(worst_buffer, d);
  }
  EXPECT_EQ(fx.by_kind["buffer"].size(), static_cast<size_t>(2 * count_ops(g, "batch_norm")));
  std::cout << fmt::format(
      "[ resnet{} vs torchvision ] loss {:.9g} vs {:.9g} (rel {:.3g}); {} gradients, max rel {:.3g} "
      "({}.grad); {} running statistics, max rel {:.3g}\n",
      depth, r.outputs.at(0), fx.loss, loss_diff, grads.size(), worst, worst_name, fx.by_kind["buffer"].size(),
      worst_buffer);
}

// Tolerance: 1e-4 relative to each tensor's largest element (float32 sums in another order stay far inside it).
// Measured here (the same torch 2.11 wheel for both, CPU): 0, i.e.
// loss, gradients and running statistics are bit-identical, since every node
// calls the kernel autograd calls on the same operands. The bound leaves room
// for what may round differently elsewhere: the global average pool
// (torchvision: mean(-1, -2); mutwo: _adaptive_avg_pool2d: the same 4-term
// sums at image 64, not necessarily at 7x7), linear's weight gradient (g^T x
// vs autograd's (x^T g)^T), or a python torch built unlike the C++ libtorch
// (another oneDNN, thread count); float32 rounding grows through 50 batch norms.
TEST(ResnetOracle, Resnet18MatchesTorchvision) {
  SKIP_WITHOUT_ORACLE();
  expect_matches_torchvision(18, 1e-4);
}

TEST(ResnetOracle, Resnet50MatchesTorchvision) {
  SKIP_WITHOUT_ORACLE();
  expect_matches_torchvision(50, 1e-4);
}

// --- memory ------------------------------------------------------------------------

using testing::NodePeaks;

// What a node may allocate beyond its outputs (its workspace) on the CPU, as
// measured with Debian's libtorch 1.13 (oneDNN convolutions). Observed on
// ResNet-18, batch 2, image 32 (C = channels):
//   conv2d, conv2d_backward   oneDNN reorders operands into its blocked layouts
//                             and back: a weight-sized copy (9,437,184 bytes for
//                             512x512x3x3) plus an output-sized buffer (conv2d),
//                             or the weight or gradient size (backward); bound:
//                             one copy of every operand. On an AVX2-only CPU
//                             (AMD EPYC, no AVX-512) oneDNN's backward takes
//                             4 weight sizes (37,767,424 bytes for 512x512x3x3,
//                             twice its operands); backward bound: two copies
//                             of every operand.
//   batch_norm                2 per-channel float vectors (8 C bytes); with
//                             the running statistics up to 8 (measured after
//                             the fused update; bound 8 vectors).
//   batch_norm_backward       one buffer of x's size (bytes(x)); bound bytes(x) + 8 vectors
//   sgd_step                  12: ATen's 0-dim tensor for a Scalar operand
//   everything else           0
int64_t workspace_bound(const ir::Graph& g, const ir::Node& n) {
  auto bytes = [&](ValueId v) { return v == ir::kNoValue ? int64_t{0} : g.type(v).bytes(); };
  int64_t operands = 0;
  for (ValueId v : n.inputs) operands += bytes(v);
  for (ValueId v : n.outputs) operands += bytes(v);
  ValueId x = n.op == "batch_norm_backward" ? n.inputs[1] : n.inputs.empty() ? ir::kNoValue : n.inputs[0];
  int64_t vectors = x == ir::kNoValue || g.type(x).rank() < 2 ? 0 : 8 * g.type(x).shape[1] * int64_t{sizeof(float)};
  if (n.op == "conv2d") return operands;
  if (n.op == "conv2d_backward") return 2 * operands;
  if (n.op == "batch_norm") return vectors;
  if (n.op == "batch_norm_backward") return bytes(x) + vectors;
  if (n.op == "sgd_step") return 12;
  return 0;
}

// The measured peak is the liveness prediction plus kernel workspace, and
// every node's workspace is within the bound above. How far above depends on
// the CPU's oneDNN path: 81,920 bytes on an AVX-512 Intel Xeon (at a layer1.0
// conv2d_backward, whose 147,456-byte weight reorder outweighs the 65,536 bytes
// by which that node is below the predicted peak node); 22,317,312 bytes on an
// AVX2 AMD EPYC (layer4.0's conv2d_backward and its per-thread gradient copies).
TEST(ResnetMemory, Resnet18StepPeakEqualsLivenessPlusWorkspace) {
  runtime::track_cpu_memory();
  models::ResnetConfig c;
  c.depth = 18;
  c.batch = 2;
  c.image_size = 32;
  models::Model m = models::build_resnet(c);
  ir::Graph g = autodiff::build_training_step(std::move(m.graph), m.loss, {});
  runtime::Executor ex(g, {c10::Device(c10::kCPU), 0});
  ex.initialize();
  ex.step();  // warm-up
  runtime::StepResult r = ex.step();
  const analysis::Liveness& L = ex.liveness();
  EXPECT_EQ(r.start_bytes, L.persistent_bytes);

  NodePeaks peaks;
  ex.set_observer(&peaks);
  ex.step();
  ex.set_observer(nullptr);
  ASSERT_EQ(peaks.peak.size(), g.nodes().size());
  std::map<std::string, std::pair<int64_t, int64_t>> per_op;  // op -> (min, max) workspace
  int64_t max_workspace = 0, peak_with_workspace = 0;
  size_t peak_node = 0;
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    const ir::Node& node = g.nodes()[n];
    int64_t ws = peaks.peak[n] - L.live_during[n];
    auto [it, fresh] = per_op.emplace(node.op, std::make_pair(ws, ws));
    it->second.first = std::min(it->second.first, ws);
    it->second.second = std::max(it->second.second, ws);
    max_workspace = std::max(max_workspace, ws);
    if (peaks.peak[n] > peak_with_workspace) peak_with_workspace = peaks.peak[n], peak_node = n;
    EXPECT_GE(ws, 0) << "node " << n << " " << node.op << " allocated less than its outputs";
    EXPECT_LE(ws, workspace_bound(g, node)) << "node " << n << " " << node.op << " in " << node.scope;
  }
  std::string table;
  for (const auto& [op, mm] : per_op)
    if (mm.second > 0) table += fmt::format("  {:<26} {:>9} .. {:>9} bytes\n", op, mm.first, mm.second);
  const ir::Node& at_peak = g.nodes()[peak_node];
  std::cout << fmt::format("[ resnet-18 batch 2 image 32, CPU ] peak measured {} = predicted {} + {}, at node {} "
                           "({} in {}, predicted peak node {}); workspace per node (others 0):\n{}",
                           r.peak_bytes, L.peak_bytes, r.peak_bytes - L.peak_bytes, peak_node, at_peak.op,
                           at_peak.scope, L.peak_node, table);
  EXPECT_GE(r.peak_bytes, L.peak_bytes);
  EXPECT_LE(r.peak_bytes, L.peak_bytes + max_workspace);
  EXPECT_EQ(r.peak_bytes, peak_with_workspace) << "the step's peak is some node's outputs plus its workspace";
  EXPECT_EQ(runtime::memory_stats(c10::Device(c10::kCPU)).current, L.persistent_bytes)
      << "everything made during the step is freed by its end";
}

}  // namespace
}  // namespace mutwo
