// Gradient-check helpers for op tests: build `op(inputs)` plus its autodiff
// backward as a graph, run it on the CPU executor, and compare output and
// gradients with libtorch autograd on the same tensors. The same method as
// Shared by test_ops_grad.cpp, test_resnet.cpp and test_transformers.cpp.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autodiff/autodiff.h"
#include "ir/graph.h"
#include "ops/builder.h"
#include "ops/op.h"
#include "runtime/executor.h"

namespace mutwo::grad_check {

using ir::ValueId;
using Tensors = std::vector<at::Tensor>;
// The op under test, built on the graph inputs that stand for the test tensors.
using BuildFn = std::function<ValueId(ops::Builder&, const std::vector<ValueId>&)>;
// The same op on ATen tensors: the forward that libtorch autograd differentiates.
using AtenFn = std::function<at::Tensor(const Tensors&)>;

// The shared generator of the tests that draw from one stream in order.
inline at::Generator& rng() {
  static at::Generator g = at::detail::createCPUGenerator(20240612);
  return g;
}
// A test's own generator, seeded from its name (64-bit FNV-1a): what it draws
// does not depend on which tests ran before it, or on a filter.
inline at::Generator seeded_rng(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return at::detail::createCPUGenerator(h);
}
inline at::Tensor randn(at::IntArrayRef shape, at::ScalarType dt = at::kFloat, at::Generator& gen = rng()) {
  return at::randn(shape, gen, at::TensorOptions().dtype(dt));
}
inline at::Tensor randint(int64_t high, at::IntArrayRef shape, at::Generator& gen = rng()) {
  return at::randint(high, shape, gen, at::TensorOptions().dtype(at::kLong));
}

inline ir::TensorType type_of(const at::Tensor& t) {
  ir::DType d = ir::DType::f32;
  switch (t.scalar_type()) {
    case at::kFloat: d = ir::DType::f32; break;
    case at::kDouble: d = ir::DType::f64; break;
    case at::kLong: d = ir::DType::i64; break;
    case at::kInt: d = ir::DType::i32; break;
    case at::kBool: d = ir::DType::boolean; break;
    default: ADD_FAILURE() << "unexpected test dtype " << t.scalar_type();
  }
  return ir::TensorType{t.sizes().vec(), d};
}

// conv2d's attributes, square: stride, padding, dilation, groups.
inline ir::Attrs conv_attrs(int64_t stride, int64_t pad, int64_t dil = 1, int64_t groups = 1) {
  return {{"stride", ir::Shape{stride, stride}}, {"padding", ir::Shape{pad, pad}}, {"dilation", ir::Shape{dil, dil}},
          {"groups", groups}};
}

// inputs (floating ones are parameters, the rest plain inputs) -> op -> output;
// a `seed` input holds d(loss)/d(output); autodiff appends the gradients with
// respect to every input.
struct GradGraph {
  ir::Graph g;
  std::vector<ValueId> in;
  ValueId out = ir::kNoValue, seed = ir::kNoValue;
  std::vector<ValueId> grad;  // per input; kNoValue where autodiff gave none
};

// `wrt_inputs`: indices of the inputs to differentiate for (empty: all).
inline GradGraph build_grad_graph(const Tensors& xs, const BuildFn& build, const std::vector<size_t>& wrt_inputs = {}) {
  GradGraph r;
  ops::Builder b(r.g);
  for (size_t i = 0; i < xs.size(); ++i)
    r.in.push_back(b.input("in" + std::to_string(i), type_of(xs[i]),
                           xs[i].is_floating_point() ? ir::Role::parameter : ir::Role::input));
  r.out = build(b, r.in);
  r.seed = b.input("seed", r.g.type(r.out), ir::Role::input);
  std::vector<ValueId> wrt = r.in;
  if (!wrt_inputs.empty()) {
    wrt.clear();
    for (size_t i : wrt_inputs) wrt.push_back(r.in[i]);
  }
  auto grads = autodiff::append_gradients(r.g, r.out, r.seed, wrt);
  r.g.outputs = {r.out};
  for (ValueId v : r.in) {
    auto it = grads.find(v);
    r.grad.push_back(it == grads.end() ? ir::kNoValue : it->second);
    if (it != grads.end()) r.g.outputs.push_back(it->second);
  }
  ops::verify(r.g);
  return r;
}

// Runs a graph on the CPU executor and returns its outputs' tensors, read by a
// NodeObserver after the last node (the executor resets non-persistent graph
// outputs at the end of step()).
class Runner : public runtime::NodeObserver {
 public:
  explicit Runner(const GradGraph& gg) : gg_(gg), ex_(gg.g, runtime::ExecutorOptions{}) {
    ex_.initialize();
    ex_.set_observer(this);
  }
  void set(ValueId v, const at::Tensor& t) { ex_.value(v) = t.clone(); }
  void feed(const Tensors& xs, const at::Tensor& seed) {
    for (size_t i = 0; i < xs.size(); ++i) set(gg_.in[i], xs[i]);
    set(gg_.seed, seed);
  }
  // outputs[0] is the op's output, then the gradients in input order.
  Tensors step() {
    got_.clear();
    ex_.step();
    EXPECT_EQ(got_.size(), ex_.graph().outputs.size());
    return got_;
  }
  at::Tensor grad(const Tensors& outs, size_t input) const {
    size_t k = 1;
    for (size_t i = 0; i < input; ++i) k += gg_.grad[i] != ir::kNoValue;
    return gg_.grad[input] == ir::kNoValue ? at::Tensor() : outs[k];
  }

 private:
  void after(size_t node) override {
    if (node + 1 != ex_.graph().nodes().size()) return;
    for (ValueId v : ex_.graph().outputs) got_.push_back(ex_.value(v));
  }
  const GradGraph& gg_;
  runtime::Executor ex_;
  Tensors got_;
};

// libtorch autograd's d(out)/d(x) . seed for every floating input (undefined for the others).
inline Tensors autograd_grads(const Tensors& xs, const AtenFn& f, const at::Tensor& seed, at::Tensor* out) {
  Tensors leaves, diff;
  for (const at::Tensor& x : xs) {
    at::Tensor l = x.detach().clone();
    if (x.is_floating_point()) diff.push_back(l.requires_grad_(true));
    leaves.push_back(l);
  }
  *out = f(leaves);
  Tensors g = torch::autograd::grad({*out}, diff, {seed}, /*retain_graph=*/c10::nullopt, /*create_graph=*/false,
                                    /*allow_unused=*/true);
  Tensors r;
  size_t k = 0;
  for (const at::Tensor& x : xs) {
    at::Tensor gi = x.is_floating_point() ? g[k++] : at::Tensor();
    r.push_back(x.is_floating_point() && !gi.defined() ? at::zeros_like(x) : gi);
  }
  return r;
}

// The largest difference relative to the reference's largest magnitude.
inline double rel_diff(const at::Tensor& mine, const at::Tensor& ref) {
  double scale = ref.abs().max().item<double>();
  double diff = (mine.to(at::kDouble) - ref.to(at::kDouble)).abs().max().item<double>();
  return scale > 0 ? diff / scale : diff;
}

// Bit-exact when `rtol` is 0, otherwise within rtol of the reference's scale.
inline ::testing::AssertionResult close(const at::Tensor& mine, const at::Tensor& ref, double rtol) {
  if (!mine.defined()) return ::testing::AssertionFailure() << "mutwo produced no tensor";
  if (mine.sizes() != ref.sizes() || mine.scalar_type() != ref.scalar_type())
    return ::testing::AssertionFailure() << "mutwo " << mine.sizes() << " " << mine.scalar_type() << " vs autograd "
                                         << ref.sizes() << " " << ref.scalar_type();
  if (at::equal(mine, ref)) return ::testing::AssertionSuccess();
  double r = rel_diff(mine, ref);
  if (rtol > 0 && r <= rtol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << (rtol == 0 ? "not bit-exact" : "too far") << ": max |diff| / max |ref| = " << r;
}

// The whole check of one op instance against autograd; returns the graph for extra checks.
// The seed d(loss)/d(output) is drawn from `gen`.
inline GradGraph check_grads(const std::string& what, const Tensors& xs, const BuildFn& build, const AtenFn& f,
                             double rtol = 0, at::Generator& gen = rng()) {
  SCOPED_TRACE(what);
  GradGraph gg = build_grad_graph(xs, build);
  at::Tensor seed = randn(gg.g.type(gg.out).shape, xs[0].scalar_type(), gen);
  Runner run(gg);
  run.feed(xs, seed);
  Tensors outs = run.step();
  if (outs.size() != gg.g.outputs.size()) return gg;  // Runner::step has reported it
  at::Tensor ref_out;
  Tensors ref = autograd_grads(xs, f, seed, &ref_out);
  EXPECT_TRUE(close(outs[0], ref_out.detach(), rtol)) << "forward output";
  for (size_t i = 0; i < xs.size(); ++i) {
    SCOPED_TRACE("input " + std::to_string(i));
    if (!xs[i].is_floating_point()) {
      EXPECT_EQ(gg.grad[i], ir::kNoValue) << "a non-differentiable input got a gradient";
      continue;
    }
    if (gg.grad[i] == ir::kNoValue) {
      ADD_FAILURE() << "no gradient for a floating input";
      continue;
    }
    EXPECT_EQ(ir::to_string(gg.g.type(gg.grad[i])), ir::to_string(type_of(xs[i]))) << "gradient type";
    EXPECT_TRUE(close(run.grad(outs, i), ref[i], rtol));
  }
  return gg;
}

}  // namespace mutwo::grad_check
