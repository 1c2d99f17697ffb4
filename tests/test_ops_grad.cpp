// Op derivatives vs libtorch autograd and f64 finite differences, plus build-time shape/dtype rejection.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/variable.h>

#include <functional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "autodiff/autodiff.h"
#include "build_errors.h"
#include "grad_check.h"
#include "ir/graph.h"
#include "kernels/kernel.h"
#include "kernels/kernels.h"
#include "ops/builder.h"
#include "ops/op.h"
#include "runtime/executor.h"
#include "support/error.h"

namespace mutwo {
namespace {

using namespace grad_check;  // GradGraph, Runner, check_grads, randn, ... (tests/grad_check.h)
using ir::ValueId;

// Every comparison with autograd is BIT-EXACT (at::equal), not a tolerance:
// each derivative rule emits the very ATen kernel that autograd's formula
// (derivatives.yaml, libtorch 1.13) calls on the same operands, so any
// difference is a changed formula, not rounding:
//   add/mul       g itself, at::mul(g, other); broadcast operands reduced by
//                 sum_to (Tensor::sum_to_size = at::sum_to, as autograd's engine)
//   relu          threshold_backward(g, out, 0);  gelu: gelu_backward(g, x, mode)
//   dropout_apply native_dropout_backward(g, mask, scale) (autograd's formula
//                 when not building a double-backward graph)
//   reshape       reshape of g;  sum/mean: expand of g (mean: divided by the
//                 element count, the same at::div by an integer scalar)
//   linear        mm(g, w) and mm(g^T, x): what addmm/matmul's mm backward does
//                 for the transposed weight; bias: sum_to
//   log_softmax   _log_softmax_backward_data;  nll_loss: nll_loss_backward
// A rule that computed the same math through other kernels would need
// at::allclose (rtol 1e-6, atol 1e-7 in f32) instead. The f64 finite
// differences (FiniteDiff) use a tolerance: they are an independent check of
// the math, accurate to about 1e-9 here.

at::Tensor mask(at::IntArrayRef shape, double keep) {
  return at::empty(shape, at::TensorOptions().dtype(at::kBool)).bernoulli_(keep, rng());
}
at::Tensor labels(int64_t n, int64_t classes) { return at::randint(classes, {n}, rng(), at::kLong); }


// Central differences of L = sum(seed * out) through mutwo's own forward, in
// f64, against mutwo's gradient (every floating input, every element).
void check_finite_differences(const std::string& what, Tensors xs, const BuildFn& build) {
  SCOPED_TRACE(what);
  for (at::Tensor& x : xs)
    if (x.is_floating_point()) x = x.to(at::kDouble);
  GradGraph gg = build_grad_graph(xs, build);
  at::Tensor seed = randn(gg.g.type(gg.out).shape, at::kDouble);
  Runner run(gg);
  run.feed(xs, seed);
  Tensors outs = run.step();
  const double eps = 1e-6;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].is_floating_point()) continue;
    auto loss_at = [&](int64_t j, double delta) {
      at::Tensor x = xs[i].clone();
      x.view(-1)[j].add_(delta);
      run.set(gg.in[i], x);
      return (run.step()[0] * seed).sum().item<double>();
    };
    at::Tensor fd = at::empty_like(xs[i]);
    for (int64_t j = 0; j < xs[i].numel(); ++j) fd.view(-1)[j] = (loss_at(j, eps) - loss_at(j, -eps)) / (2 * eps);
    run.set(gg.in[i], xs[i]);
    at::Tensor g = run.grad(outs, i);
    ASSERT_TRUE(g.defined()) << "input " << i << " has no gradient";
    EXPECT_TRUE(at::allclose(g, fd, 1e-6, 1e-8))
        << "input " << i << ": max |mutwo - fd| = " << (g - fd).abs().max().item<double>() << "\nmutwo\n"
        << g << "\nfinite differences\n"
        << fd;
  }
}

// Builders and ATen forwards for the ops used more than once.
BuildFn unary(const std::string& op, ir::Attrs attrs = {}) {
  return [=](ops::Builder& b, const std::vector<ValueId>& in) { return b.op(op, {in[0]}, attrs); };
}
BuildFn binary(const std::string& op) {
  return [=](ops::Builder& b, const std::vector<ValueId>& in) { return b.op(op, {in[0], in[1]}); };
}
BuildFn linear() {
  return [](ops::Builder& b, const std::vector<ValueId>& in) { return b.op("linear", in); };
}
AtenFn aten_linear() {
  return [](const Tensors& t) { return t.size() > 2 ? at::linear(t[0], t[1], t[2]) : at::linear(t[0], t[1]); };
}
int count_ops(const ir::Graph& g, const std::string& op) {
  int n = 0;
  for (const ir::Node& node : g.nodes()) n += node.op == op;
  return n;
}
ir::Attrs reduce_attrs(const std::vector<int64_t>& dims, bool keepdim) {
  return {{"dims", dims}, {"keepdim", int64_t{keepdim}}};
}
BuildFn log_softmax_nll(int64_t reduction, int64_t ignore) {
  return [=](ops::Builder& b, const std::vector<ValueId>& in) {
    ValueId logp = b.op("log_softmax", {in[0]}, {{"dim", int64_t{1}}});
    return b.call("nll_loss", {logp, in[1]}, {{"reduction", reduction}, {"ignore_index", ignore}})[0];
  };
}

// --- OpGrad: mutwo's gradients equal libtorch autograd's --------------------

// A derivative added to the table without a case here fails this test.
TEST(OpGrad, EveryDifferentiableOpIsCovered) {
  std::set<std::string> with_grad;
  for (const ops::OpDef& d : ops::all_ops())
    if (d.grad != nullptr) with_grad.emplace(d.name);
  // Every op with a derivative has a gradient test against autograd: here, in
  // test_resnet.cpp (ResnetOpGrad) or in test_transformers.cpp (TransformerOpGrad).
  // A new derivative must be added here, with its test.
  const std::set<std::string> covered{
      "add", "mul", "relu", "gelu", "dropout_apply", "reshape", "sum", "mean", "linear", "log_softmax", "nll_loss",
      "cross_entropy",
      // test_resnet.cpp
      "conv2d", "batch_norm", "max_pool2d", "adaptive_avg_pool2d",
      // test_transformers.cpp
      "embedding", "layer_norm", "softmax", "matmul", "permute", "contiguous", "split", "cat", "causal_mask_fill",
      "scale", "tanh", "padding_mask_fill",
      // test_vocab_loss.cpp
      "linear_cross_entropy"};
  EXPECT_EQ(with_grad, covered);
}

TEST(OpGrad, AddAndMul) {
  check_grads("add", {randn({3, 4}), randn({3, 4})}, binary("add"), [](const Tensors& t) { return t[0] + t[1]; });
  check_grads("mul", {randn({3, 4}), randn({3, 4})}, binary("mul"), [](const Tensors& t) { return t[0] * t[1]; });
  // The same value on both sides: autodiff sums the two contributions (one
  // accumulate node: x is a parameter; an activation's are summed by add).
  GradGraph sq = check_grads(
      "x * x", {randn({5})},
      [](ops::Builder& b, const std::vector<ValueId>& in) {
        return b.op("mul", {in[0], in[0]});
      },
      [](const Tensors& t) { return t[0] * t[0]; });
  EXPECT_EQ(count_ops(sq.g, "accumulate"), 1);
}

// Broadcast operands: the gradient is reduced to each operand's own shape by a
// sum_to node (autograd's engine reduces with at::sum_to: bit-exact).
TEST(OpGrad, BroadcastGradientsAreReducedToOperandShapes) {
  GradGraph add = check_grads("add [4,3] + [3]", {randn({4, 3}), randn({3})}, binary("add"),
                              [](const Tensors& t) { return t[0] + t[1]; });
  EXPECT_EQ(count_ops(add.g, "sum_to"), 1);
  EXPECT_EQ(add.g.type(add.grad[1]).shape, ir::Shape{3});
  GradGraph mul = check_grads("mul [2,1,5] * [3,1]", {randn({2, 1, 5}), randn({3, 1})}, binary("mul"),
                              [](const Tensors& t) { return t[0] * t[1]; });
  EXPECT_EQ(count_ops(mul.g, "sum_to"), 2);
  EXPECT_EQ(mul.g.type(mul.grad[0]).shape, (ir::Shape{2, 1, 5}));
  EXPECT_EQ(mul.g.type(mul.grad[1]).shape, (ir::Shape{3, 1}));
}

TEST(OpGrad, Relu) {
  check_grads("relu", {randn({4, 5})}, unary("relu"), [](const Tensors& t) { return at::relu(t[0]); });
}

TEST(OpGrad, Gelu) {
  for (std::string mode : {"none", "tanh"})
    check_grads("gelu " + mode, {randn({4, 5})}, unary("gelu", {{"approximate", mode}}),
                [=](const Tensors& t) { return at::gelu(t[0], mode); });
}

TEST(OpGrad, DropoutApply) {
  const double p = 0.3;
  check_grads(
      "dropout_apply", {randn({4, 6}), mask({4, 6}, 1 - p)},
      [=](ops::Builder& b, const std::vector<ValueId>& in) {
        return b.op("dropout_apply", in, {{"p", p}});
      },
      [=](const Tensors& t) { return at::native_dropout_backward(t[0], t[1], 1.0 / (1.0 - p)); });
}

TEST(OpGrad, Reshape) {
  for (ir::Shape s : {ir::Shape{4, -1}, ir::Shape{24}, ir::Shape{2, 12, 1}})
    check_grads("reshape to " + ir::shape_string(s), {randn({2, 3, 4})}, unary("reshape", {{"shape", s}}),
                [=](const Tensors& t) { return t[0].reshape(s); });
}

TEST(OpGrad, SumAndMean) {
  struct Variant {
    std::vector<int64_t> dims;
    bool keepdim;
  };
  for (const Variant& v : {Variant{{}, false}, Variant{{}, true}, Variant{{1}, false}, Variant{{0, 2}, true},
                           Variant{{-1}, true}, Variant{{2, 0}, false}}) {
    std::string tag = fmt::format("dims=[{}] keepdim={}", fmt::join(v.dims, ","), v.keepdim);
    // dims=[] means all dims; autograd's sum()/mean() without dims is the keepdim=false case.
    std::vector<int64_t> dims = v.dims.empty() ? std::vector<int64_t>{0, 1, 2} : v.dims;
    bool all = v.dims.empty() && !v.keepdim;
    check_grads("sum " + tag, {randn({2, 3, 4})}, unary("sum", reduce_attrs(v.dims, v.keepdim)),
                [=](const Tensors& t) { return all ? at::sum(t[0]) : at::sum(t[0], dims, v.keepdim); });
    check_grads("mean " + tag, {randn({2, 3, 4})}, unary("mean", reduce_attrs(v.dims, v.keepdim)),
                [=](const Tensors& t) { return all ? at::mean(t[0]) : at::mean(t[0], dims, v.keepdim); });
  }
}

TEST(OpGrad, Linear) {
  check_grads("linear 2-D, bias", {randn({3, 4}), randn({5, 4}), randn({5})}, linear(), aten_linear());
  check_grads("linear 2-D, no bias", {randn({3, 4}), randn({5, 4})}, linear(), aten_linear());
  check_grads("linear 3-D, bias", {randn({2, 3, 4}), randn({5, 4}), randn({5})}, linear(), aten_linear());
  check_grads("linear 3-D, no bias", {randn({2, 3, 4}), randn({5, 4})}, linear(), aten_linear());
}

// Rules emit backward nodes only for the inputs asked for (GradArgs::needs).
TEST(OpGrad, OnlyRequestedGradientsAreBuilt) {
  Tensors xs{randn({3, 4}), randn({5, 4}), randn({5})};
  GradGraph gg = build_grad_graph(xs, linear(), {1});
  ValueId w = gg.in[1];
  EXPECT_EQ(count_ops(gg.g, "linear_backward_weight"), 1);
  EXPECT_EQ(count_ops(gg.g, "linear_backward_input"), 0);
  EXPECT_EQ(count_ops(gg.g, "sum_to"), 0) << "no bias gradient was asked for";
  EXPECT_EQ(gg.grad[0], ir::kNoValue);
  EXPECT_EQ(gg.grad[2], ir::kNoValue);
  ASSERT_NE(gg.grad[1], ir::kNoValue);
  EXPECT_EQ(gg.g.value(gg.grad[1]).name, gg.g.value(w).name + ".grad");

  GradGraph m = build_grad_graph({randn({3}), randn({3})}, binary("mul"), {0});
  EXPECT_EQ(count_ops(m.g, "mul"), 2) << "forward mul and one backward mul";
}

TEST(OpGrad, LogSoftmax) {
  for (int64_t dim : {0, 1, -1})
    check_grads("log_softmax dim " + std::to_string(dim), {randn({2, 3, 4})}, unary("log_softmax", {{"dim", dim}}),
                [=](const Tensors& t) { return at::_log_softmax(t[0], dim, false); });
}

TEST(OpGrad, NllLoss) {
  for (int64_t reduction : {0, 1, 2}) {
    for (int64_t ignore : {int64_t{-100}, int64_t{2}}) {
      at::Tensor target = labels(6, 4);
      target[0] = 2;  // at least one ignored row when ignore_index is 2
      target[1] = 0;  // and at least one counted
      at::Tensor logp = at::log_softmax(randn({6, 4}), 1);
      check_grads(
          fmt::format("nll_loss reduction {} ignore_index {}", reduction, ignore), {logp, target},
          [=](ops::Builder& b, const std::vector<ValueId>& in) {
            return b.call("nll_loss", in, {{"reduction", reduction}, {"ignore_index", ignore}})[0];
          },
          [=](const Tensors& t) {
            return std::get<0>(at::nll_loss_forward(t[0], t[1], c10::nullopt, reduction, ignore));
          });
    }
  }
}

TEST(OpGrad, CrossEntropyChain) {
  check_grads("log_softmax + nll_loss", {randn({5, 7}), labels(5, 7)}, log_softmax_nll(1, -100), [](const Tensors& t) {
    return std::get<0>(at::nll_loss_forward(at::_log_softmax(t[0], 1, false), t[1], c10::nullopt, 1, -100));
  });
}

// The fused op against autograd through log_softmax + nll_loss (mean): equal
// within rounding (1e-6 of the largest value), not bit for bit, as its
// backward computes softmax - onehot itself; ignored rows get no gradient.
TEST(OpGrad, CrossEntropyFused) {
  for (int64_t ignore : {int64_t{-100}, int64_t{3}}) {
    at::Tensor target = labels(9, 11);
    target[0] = 3;  // one ignored row when ignore_index is 3
    target[1] = 0;
    check_grads(
        fmt::format("cross_entropy ignore_index {}", ignore), {randn({9, 11}) * 3, target},
        [=](ops::Builder& b, const std::vector<ValueId>& in) {
          return b.call("cross_entropy", in, {{"ignore_index", ignore}})[0];
        },
        [=](const Tensors& t) {
          return std::get<0>(at::nll_loss_forward(at::_log_softmax(t[0], 1, false), t[1], c10::nullopt, 1, ignore));
        },
        1e-6);
  }
}

// Runs one op's kernel on `inputs` (no graph, no executor); returns its outputs.
std::vector<at::Tensor> run_kernel(const std::string& op, ir::Attrs attrs, const std::vector<at::Tensor>& inputs,
                                   size_t outputs) {
  ir::Node node;
  node.op = op;
  node.attrs = std::move(attrs);
  std::vector<const at::Tensor*> in;
  for (const at::Tensor& t : inputs) in.push_back(&t);
  std::vector<at::Tensor> out(outputs);
  std::vector<at::Tensor*> out_ptrs;
  for (at::Tensor& t : out) out_ptrs.push_back(&t);
  kernels::KernelCall call{node, in.data(), out_ptrs.data(), inputs.at(0).options(), 1, {}};
  kernels::kernel(op).run(call);
  return out;
}

// The loss gradient written over the logits (what models run) has the bits of
// the one written into a new buffer (what check_grads above runs on inputs).
TEST(OpGrad, CrossEntropyGradientOverTheLogitsEqualsTheNewBufferBitForBit) {
  at::Tensor x = randn({9, 11}) * 3, target = labels(9, 11);
  target[2] = -100;
  at::Tensor lse = at::logsumexp(x, {1}), g = at::scalar_tensor(0.7), logits = x.clone();
  const ir::Attrs attrs{{"ignore_index", int64_t{-100}}};
  at::Tensor fresh = run_kernel("cross_entropy_backward", attrs, {x, g, target, lse}, 1)[0];
  EXPECT_TRUE(at::equal(x, logits)) << "the plain op leaves the logits as they were";
  at::Tensor over = run_kernel("cross_entropy_backward_", attrs, {logits, g, target, lse}, 1)[0];
  EXPECT_TRUE(over.is_alias_of(logits));
  EXPECT_TRUE(at::equal(fresh, over));
  EXPECT_TRUE(at::equal(over[2], at::zeros({11}))) << "an ignored row gets no gradient";
}

// A vocabulary-sized head: the forward's logsumexp runs in row blocks of about
// 32 MiB (here two and a bit), each row as ATen's whole-tensor logsumexp.
TEST(OpGrad, CrossEntropyOverSeveralRowBlocksEqualsOneLogsumexp) {
  at::Tensor x = randn({300, 30522}), target = labels(300, 30522);
  auto outs = run_kernel("cross_entropy", {{"ignore_index", int64_t{-100}}}, {x, target}, 2);
  const at::Tensor &loss = outs[0], &lse = outs[1];
  EXPECT_TRUE(at::equal(lse, at::logsumexp(x, {1})));
  at::Tensor ref = at::nll_loss(at::log_softmax(x, 1), target);
  EXPECT_NEAR(loss.item<double>(), ref.item<double>(), 1e-6 * std::abs(ref.item<double>()));
}

TEST(FiniteDiff, CrossEntropyFused) {
  check_finite_differences("cross_entropy", {randn({4, 5}), labels(4, 5)},
                           [](ops::Builder& b, const std::vector<ValueId>& in) {
                             return b.call("cross_entropy", in, {{"ignore_index", int64_t{-100}}})[0];
                           });
}

// Asking for the gradient of a non-differentiable input alone yields none.
TEST(OpGrad, NonDifferentiableInputsGetNoGradient) {
  GradGraph nll = build_grad_graph({at::log_softmax(randn({4, 3}), 1), labels(4, 3)},
                                   [](ops::Builder& b, const std::vector<ValueId>& in) {
                                     return b.call("nll_loss", in, {{"reduction", int64_t{1}}})[0];
                                   },
                                   {1});
  EXPECT_EQ(nll.grad, (std::vector<ValueId>{ir::kNoValue, ir::kNoValue}));
  GradGraph drop = build_grad_graph({randn({4}), mask({4}, 0.5)},
                                    [](ops::Builder& b, const std::vector<ValueId>& in) {
                                      return b.op("dropout_apply", in, {{"p", 0.5}});
                                    },
                                    {1});
  EXPECT_EQ(drop.grad, (std::vector<ValueId>{ir::kNoValue, ir::kNoValue}));
}

// --- FiniteDiff: mutwo's gradient is the derivative of mutwo's forward (f64) --

TEST(FiniteDiff, Linear) {
  check_finite_differences("linear 3-D, bias", {randn({2, 3, 4}), randn({5, 4}), randn({5})}, linear());
  check_finite_differences("linear 2-D, no bias", {randn({3, 4}), randn({2, 4})}, linear());
}

TEST(FiniteDiff, Gelu) {
  for (std::string mode : {"none", "tanh"})
    check_finite_differences("gelu " + mode, {randn({3, 5})}, unary("gelu", {{"approximate", mode}}));
}

TEST(FiniteDiff, LogSoftmaxNllLoss) {
  check_finite_differences("log_softmax + nll_loss mean", {randn({4, 5}), labels(4, 5)}, log_softmax_nll(1, -100));
  check_finite_differences("log_softmax + nll_loss none", {randn({4, 5}), labels(4, 5)}, log_softmax_nll(0, -100));
}

TEST(FiniteDiff, Mean) {
  check_finite_differences("mean all", {randn({3, 4})}, unary("mean", reduce_attrs({}, false)));
  check_finite_differences("mean dims=[1] keepdim", {randn({2, 3, 4})}, unary("mean", reduce_attrs({1}, true)));
}

TEST(FiniteDiff, BroadcastMulAndAdd) {
  check_finite_differences("mul [2,1,5] * [3,1]", {randn({2, 1, 5}), randn({3, 1})}, binary("mul"));
  check_finite_differences("add [4,3] + [3]", {randn({4, 3}), randn({3})}, binary("add"));
}

// --- BuildErrors: bad shapes and dtypes are rejected when the graph is built --

// Builds `op(inputs){attrs}` in scope "block.0" and returns the UserError's
// message; the failed node must not be appended.
std::string build_error(const std::vector<ir::TensorType>& ins, const std::string& op, ir::Attrs attrs = {}) {
  return testing::build_error_in("block.0", ins, op, std::move(attrs));
}
using testing::expect_substrings;

ir::TensorType f32(ir::Shape s) { return {std::move(s), ir::DType::f32}; }

TEST(BuildErrors, LinearFeatureMismatch) {
  expect_substrings(
      build_error({f32({2, 3}), f32({4, 5})}, "linear"),
      {"cannot build linear(%in0: f32[2,3], %in1: f32[4,5]) in block.0", "input has 3 features", "expects 5"});
  expect_substrings(build_error({f32({2, 5}), f32({4, 5}), f32({3})}, "linear"), {"linear bias must have shape [4]"});
  expect_substrings(build_error({f32({2, 5}), {{4, 5}, ir::DType::f64}}, "linear"), {"element types differ"});
}

TEST(BuildErrors, AddNotBroadcastable) {
  expect_substrings(build_error({f32({4, 3}), f32({2})}, "add"),
                    {"cannot build add", "[4,3] and [2] do not broadcast"});
  expect_substrings(build_error({f32({4, 3})}, "add"), {"op add takes 2 inputs, got 1"});
}

TEST(BuildErrors, NllLossTargetDtype) {
  expect_substrings(build_error({f32({4, 3}), f32({4})}, "nll_loss"),
                    {"cannot build nll_loss", "nll_loss target must have element type i64", "got f32[4]"});
  expect_substrings(build_error({f32({4, 3}), {{5}, ir::DType::i64}}, "nll_loss"),
                    {"nll_loss target must have shape [4]"});
}

TEST(BuildErrors, ReshapeElementCount) {
  expect_substrings(build_error({f32({2, 3})}, "reshape", {{"shape", ir::Shape{4, 2}}}),
                    {"cannot build reshape", "[2,3] has 6 elements, [4,2] has 8"});
  expect_substrings(build_error({f32({2, 3})}, "reshape", {{"shape", ir::Shape{4, -1}}}), {"cannot reshape [2,3]"});
}

TEST(BuildErrors, DropoutProbability) {
  expect_substrings(build_error({f32({4})}, "dropout_mask", {{"p", 1.5}}),
                    {"cannot build dropout_mask", "p must be in [0, 1), got 1.5"});
}

TEST(BuildErrors, UnknownOpAndBadAttributes) {
  expect_substrings(build_error({f32({4})}, "relux"), {"unknown op 'relux'", "known ops:", "relu"});
  expect_substrings(build_error({f32({4})}, "gelu", {{"approximate", std::string("fast")}}),
                    {"approximate must be \"none\" or \"tanh\", got \"fast\""});
  expect_substrings(build_error({f32({2, 3})}, "mean", reduce_attrs({2}, false)), {"out of range for rank 2"});
}

}  // namespace
}  // namespace mutwo
