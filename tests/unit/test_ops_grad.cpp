// Op derivatives, driven by one table (op_cases(): op, input shapes,
// attributes, the ATen reference, whether finite differences apply): every
// row is checked against libtorch autograd, and every smooth row against f64
// finite differences of mutwo's own forward, each with its own generator
// seeded from the row's name. The table is also the coverage check: the ops
// it names are exactly the op table's differentiable ones. Then what a row
// cannot say (structure of the backward graph, kernels run alone), and
// build-time shape/dtype rejection.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/variable.h>

#include <functional>
#include <limits>
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

using namespace grad_check;  // GradGraph, Runner, check_grads, randn, ... (tests/unit/grad_check.h)
using ir::ValueId;

at::Tensor mask(at::IntArrayRef shape, double keep, at::Generator& gen = rng()) {
  return at::empty(shape, at::TensorOptions().dtype(at::kBool)).bernoulli_(keep, gen);
}
at::Tensor labels(int64_t n, int64_t classes, at::Generator& gen = rng()) {
  return at::randint(classes, {n}, gen, at::kLong);
}

// Finite differences of L = sum(seed * out) through mutwo's own forward, in
// f64, against mutwo's gradient (every floating input, every element): the
// five-point stencil at h = 1e-3, whose error (h^4 terms, and rounding of L
// over h: about 1e-13 |L|) is far below the tolerance. The two-point central
// difference at h = 1e-6 it replaces erred by up to 2e-16 |L| / 1e-6, about
// 1e-8 on conv2d_dilation2_groups2 with torch 2.11's f64 convolution, which is
// the tolerance's own size.
void check_finite_differences(const std::string& what, Tensors xs, const BuildFn& build, at::Generator& gen) {
  SCOPED_TRACE(what);
  for (at::Tensor& x : xs)
    if (x.is_floating_point()) x = x.to(at::kDouble);
  GradGraph gg = build_grad_graph(xs, build);
  at::Tensor seed = randn(gg.g.type(gg.out).shape, at::kDouble, gen);
  Runner run(gg);
  run.feed(xs, seed);
  Tensors outs = run.step();
  const double h = 1e-3;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].is_floating_point()) continue;
    auto loss_at = [&](int64_t j, double delta) {
      at::Tensor x = xs[i].clone();
      x.view(-1)[j].add_(delta);
      run.set(gg.in[i], x);
      return (run.step()[0] * seed).sum().item<double>();
    };
    at::Tensor fd = at::empty_like(xs[i]);
    for (int64_t j = 0; j < xs[i].numel(); ++j)
      fd.view(-1)[j] = (8 * (loss_at(j, h) - loss_at(j, -h)) - (loss_at(j, 2 * h) - loss_at(j, -2 * h))) / (12 * h);
    run.set(gg.in[i], xs[i]);
    at::Tensor g = run.grad(outs, i);
    ASSERT_TRUE(g.defined()) << "input " << i << " has no gradient";
    EXPECT_TRUE(at::allclose(g, fd, 1e-6, 1e-8))
        << "input " << i << ": max |mutwo - fd| = " << (g - fd).abs().max().item<double>() << "\nmutwo\n"
        << g << "\nfinite differences\n"
        << fd;
  }
}

int count_ops(const ir::Graph& g, const std::string& op) {
  int n = 0;
  for (const ir::Node& node : g.nodes()) n += node.op == op;
  return n;
}
BuildFn binary(const std::string& op) {
  return [=](ops::Builder& b, const std::vector<ValueId>& in) { return b.op(op, {in[0], in[1]}); };
}
BuildFn op_on_all(const std::string& op, ir::Attrs attrs = {}) {
  return [=](ops::Builder& b, const std::vector<ValueId>& in) { return b.call(op, in, attrs)[0]; };
}
BuildFn linear() {
  return [](ops::Builder& b, const std::vector<ValueId>& in) { return b.op("linear", in); };
}

// --- The op table's derivatives, one row per case -----------------------------

// One input of a case, drawn from the case's generator.
struct In {
  enum Kind { normal, ints, mask, log_probs } kind = normal;
  ir::Shape shape;
  double arg = 1;  // normal: scale; ints: bound (exclusive); mask: probability of true
};
In F(ir::Shape s, double scale = 1) { return {In::normal, std::move(s), scale}; }
In Ints(int64_t high, ir::Shape s) { return {In::ints, std::move(s), static_cast<double>(high)}; }
In Mask(ir::Shape s, double keep) { return {In::mask, std::move(s), keep}; }
In LogProbs(ir::Shape s) { return {In::log_probs, std::move(s)}; }

constexpr bool kSmooth = true;    // finite differences apply
constexpr bool kNoFiniteDiff = false;

struct OpCase {
  std::string name;  // the test's name (letters, digits, _); seeds its generator
  std::string op;    // the op row whose derivative is under test
  std::vector<In> in;
  ir::Attrs attrs;
  AtenFn reference;  // the same computation in ATen, which autograd differentiates
  bool smooth = kSmooth;  // kNoFiniteDiff where f64 finite differences do not measure the rule (kinks,
                          // ties, a gradient convention such as a padding row, a fill they cannot difference)
  double rtol = 0;        // 0: bit-exact against autograd
  BuildFn build = {};     // default: `op` on every input with `attrs`, its output 0
  std::function<void(Tensors&)> pin = {};  // fixes entries of the drawn inputs
};

void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

BuildFn build_of(const OpCase& c) {
  if (c.build) return c.build;
  return [op = c.op, attrs = c.attrs](ops::Builder& b, const std::vector<ValueId>& in) {
    return b.call(op, in, attrs)[0];
  };
}

Tensors draw(const OpCase& c, at::Generator& gen) {
  Tensors xs;
  for (const In& i : c.in) {
    switch (i.kind) {
      case In::normal: xs.push_back(randn(i.shape, at::kFloat, gen) * i.arg); break;
      case In::ints: xs.push_back(randint(static_cast<int64_t>(i.arg), i.shape, gen)); break;
      case In::mask: xs.push_back(mask(i.shape, i.arg, gen)); break;
      case In::log_probs: xs.push_back(at::log_softmax(randn(i.shape, at::kFloat, gen), -1)); break;
    }
  }
  if (c.pin) c.pin(xs);
  return xs;
}

ir::Attrs reduce_attrs(const std::vector<int64_t>& dims, bool keepdim) {
  return {{"dims", dims}, {"keepdim", int64_t{keepdim}}};
}
AtenFn aten_conv(int64_t stride, int64_t pad, int64_t dil = 1, int64_t groups = 1) {
  return [=](const Tensors& t) {
    c10::optional<at::Tensor> bias;
    if (t.size() > 2) bias = t[2];
    return at::convolution(t[0], t[1], bias, {stride, stride}, {pad, pad}, {dil, dil}, false, {0, 0}, groups);
  };
}
AtenFn aten_linear() {
  return [](const Tensors& t) { return t.size() > 2 ? at::linear(t[0], t[1], t[2]) : at::linear(t[0], t[1]); };
}
AtenFn aten_reduce(bool mean, std::vector<int64_t> dims, bool keepdim) {
  // dims=[] means all dims; autograd's sum()/mean() without dims is the keepdim=false case.
  return [=](const Tensors& t) {
    if (dims.empty() && !keepdim) return mean ? at::mean(t[0]) : at::sum(t[0]);
    std::vector<int64_t> d = dims.empty() ? std::vector<int64_t>{0, 1, 2} : dims;
    return mean ? at::mean(t[0], d, keepdim) : at::sum(t[0], d, keepdim);
  };
}
AtenFn aten_nll(int64_t reduction, int64_t ignore) {
  return [=](const Tensors& t) { return std::get<0>(at::nll_loss_forward(t[0], t[1], c10::nullopt, reduction, ignore)); };
}
AtenFn aten_batch_norm(double eps) {
  return [=](const Tensors& t) {
    c10::optional<at::Tensor> w, b;
    if (t.size() > 1) w = t[1];
    if (t.size() > 2) b = t[2];
    return std::get<0>(at::native_batch_norm(t[0], w, b, {}, {}, true, 0.1, eps));
  };
}
AtenFn aten_max_pool(ir::Shape k, ir::Shape s, ir::Shape p, ir::Shape d, bool ceil) {
  return [=](const Tensors& t) { return std::get<0>(at::max_pool2d_with_indices(t[0], k, s, p, d, ceil)); };
}
ir::Attrs pool_attrs(ir::Shape k, ir::Shape s, ir::Shape p, ir::Shape d, int64_t ceil) {
  return {{"kernel", k}, {"stride", s}, {"padding", p}, {"dilation", d}, {"ceil_mode", ceil}};
}
// matmul with transpose flags: op(a) (..., 3, 5) times op(b) (..., 5, 4).
OpCase matmul_case(int rank, bool ta, bool tb) {
  ir::Shape lead(static_cast<size_t>(rank - 2), 2);
  auto shape = [&](int64_t r, int64_t c) {
    ir::Shape s = lead;
    s.push_back(r);
    s.push_back(c);
    return s;
  };
  return {fmt::format("matmul_rank{}_ta{}_tb{}", rank, int{ta}, int{tb}), "matmul",
          {F(ta ? shape(5, 3) : shape(3, 5)), F(tb ? shape(4, 5) : shape(5, 4))},
          {{"transpose_a", int64_t{ta}}, {"transpose_b", int64_t{tb}}},
          [=](const Tensors& t) {
            return at::matmul(ta ? t[0].transpose(-1, -2) : t[0], tb ? t[1].transpose(-1, -2) : t[1]);
          },
          kSmooth, 1e-6};
}
// As Hugging Face's eager GPT-2: torch.where(causal, w, fill); more keys than queries too.
AtenFn aten_causal_fill(double fill) {
  return [=](const Tensors& t) {
    int64_t q = t[0].size(-2), k = t[0].size(-1);
    at::Tensor causal = at::ones({q, k}, at::kBool).tril(k - q);
    return at::where(causal, t[0], at::full({}, fill, t[0].options()));
  };
}

// Scores (B, H, T, S), HF's attention_mask (B, S): 0 marks a padded key, filled as torch.where does.
AtenFn aten_padding_fill(double fill) {
  return [=](const Tensors& t) {
    at::Tensor keep = t[1].ne(0).view({t[1].size(0), 1, 1, t[1].size(1)});
    return at::where(keep, t[0], at::full({}, fill, t[0].options()));
  };
}
// A mask with padding in both rows, one more in the second.
void pin_padding(Tensors& x) { x[1].copy_(at::tensor({1, 1, 1, 0, 1, 1, 0, 0}, x[1].options()).view({2, 4})); }

// Every comparison with autograd is BIT-EXACT (rtol 0) unless the row says
// otherwise: each derivative rule emits the very ATen kernel that autograd's
// formula (derivatives.yaml, libtorch 1.13) calls on the same operands, so any
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
//   conv family   the ATen backward kernel autograd's formula calls
// Within a tolerance: matmul (1e-6 of the largest magnitude: autograd copies a
// transposed operand before bmm, mutwo hands bmm the transposed view) and the
// fused cross_entropy (1e-6: its backward computes softmax - onehot itself).
// The f64 finite differences are an independent check of the math, accurate
// to about 1e-9 here. Adding an op's test is adding a row.
// Rows are: name, op, inputs, attributes, reference[, smooth, rtol, build, pin].
// elementwise.cpp's, shape.cpp's and nn.cpp's rows.
std::vector<OpCase> elementwise_and_loss_cases() {
  return {
    {"add", "add", {F({3, 4}), F({3, 4})}, {}, [](const Tensors& x) { return x[0] + x[1]; }},
    {"add_broadcast", "add", {F({4, 3}), F({3})}, {}, [](const Tensors& x) { return x[0] + x[1]; }},
    {"mul", "mul", {F({3, 4}), F({3, 4})}, {}, [](const Tensors& x) { return x[0] * x[1]; }},
    {"mul_broadcast", "mul", {F({2, 1, 5}), F({3, 1})}, {}, [](const Tensors& x) { return x[0] * x[1]; }},
    {"relu", "relu", {F({4, 5})}, {}, [](const Tensors& x) { return at::relu(x[0]); }, kNoFiniteDiff},
    {"gelu", "gelu", {F({4, 5})}, {{"approximate", std::string("none")}},
     [](const Tensors& x) { return at::gelu(x[0], "none"); }},
    {"gelu_tanh", "gelu", {F({4, 5})}, {{"approximate", std::string("tanh")}},
     [](const Tensors& x) { return at::gelu(x[0], "tanh"); }},
    {"dropout_apply", "dropout_apply", {F({4, 6}), Mask({4, 6}, 0.7)}, {{"p", 0.3}},
     [](const Tensors& x) { return at::native_dropout_backward(x[0], x[1], 1.0 / 0.7); }},
    {"reshape_4_x", "reshape", {F({2, 3, 4})}, {{"shape", ir::Shape{4, -1}}},
     [](const Tensors& x) { return x[0].reshape({4, -1}); }},
    {"reshape_flat", "reshape", {F({2, 3, 4})}, {{"shape", ir::Shape{24}}},
     [](const Tensors& x) { return x[0].reshape({24}); }},
    {"reshape_2_12_1", "reshape", {F({2, 3, 4})}, {{"shape", ir::Shape{2, 12, 1}}},
     [](const Tensors& x) { return x[0].reshape({2, 12, 1}); }},
    {"linear_2d_bias", "linear", {F({3, 4}), F({5, 4}), F({5})}, {}, aten_linear()},
    {"linear_2d", "linear", {F({3, 4}), F({5, 4})}, {}, aten_linear()},
    {"linear_3d_bias", "linear", {F({2, 3, 4}), F({5, 4}), F({5})}, {}, aten_linear()},
    {"linear_3d", "linear", {F({2, 3, 4}), F({5, 4})}, {}, aten_linear()},
    {"log_softmax_dim0", "log_softmax", {F({2, 3, 4})}, {{"dim", int64_t{0}}},
     [](const Tensors& x) { return at::_log_softmax(x[0], 0, false); }},
    {"log_softmax_dim1", "log_softmax", {F({2, 3, 4})}, {{"dim", int64_t{1}}},
     [](const Tensors& x) { return at::_log_softmax(x[0], 1, false); }},
    {"log_softmax_last", "log_softmax", {F({2, 3, 4})}, {{"dim", int64_t{-1}}},
     [](const Tensors& x) { return at::_log_softmax(x[0], -1, false); }},
    {"log_softmax_nll_loss", "log_softmax", {F({5, 7}), Ints(7, {5})}, {},
     [](const Tensors& x) { return aten_nll(1, -100)({at::_log_softmax(x[0], 1, false), x[1]}); }, kSmooth, 0,
     [](ops::Builder& b, const std::vector<ValueId>& in) {
       ValueId logp = b.op("log_softmax", {in[0]}, {{"dim", int64_t{1}}});
       return b.call("nll_loss", {logp, in[1]}, {{"reduction", int64_t{1}}, {"ignore_index", int64_t{-100}}})[0];
     }},
    {"cross_entropy", "cross_entropy", {F({9, 11}, 3), Ints(11, {9})}, {{"ignore_index", int64_t{-100}}},
     [](const Tensors& x) { return aten_nll(1, -100)({at::_log_softmax(x[0], 1, false), x[1]}); }, kSmooth, 1e-6},
    {"cross_entropy_ignore3", "cross_entropy", {F({9, 11}, 3), Ints(11, {9})}, {{"ignore_index", int64_t{3}}},
     [](const Tensors& x) { return aten_nll(1, 3)({at::_log_softmax(x[0], 1, false), x[1]}); }, kSmooth, 1e-6, {},
     [](Tensors& x) {
       x[1][0] = 3;  // one ignored row
       x[1][1] = 0;
     }},
  };
}

// conv.cpp's rows.
std::vector<OpCase> conv_cases() {
  return {
    {"conv2d_3x3_pad1_bias", "conv2d", {F({2, 3, 7, 6}), F({4, 3, 3, 3}), F({4})}, conv_attrs(1, 1), aten_conv(1, 1)},
    {"conv2d_3x3_stride2", "conv2d", {F({2, 3, 9, 8}), F({5, 3, 3, 3})}, conv_attrs(2, 1), aten_conv(2, 1)},
    {"conv2d_7x7_stem", "conv2d", {F({1, 3, 16, 16}), F({4, 3, 7, 7})}, conv_attrs(2, 3), aten_conv(2, 3)},
    {"conv2d_1x1_downsample", "conv2d", {F({2, 4, 6, 6}), F({8, 4, 1, 1})}, conv_attrs(2, 0), aten_conv(2, 0)},
    {"conv2d_dilation2_groups2", "conv2d", {F({2, 4, 9, 9}), F({6, 2, 3, 3}), F({6})}, conv_attrs(1, 2, 2, 2),
     aten_conv(1, 2, 2, 2)},
    {"batch_norm_4d_affine", "batch_norm", {F({3, 4, 5, 6}), F({4}), F({4})}, {{"eps", 1e-5}}, aten_batch_norm(1e-5)},
    {"batch_norm_4d", "batch_norm", {F({2, 3, 4, 4})}, {{"eps", 1e-5}}, aten_batch_norm(1e-5)},
    {"batch_norm_2d_affine", "batch_norm", {F({8, 5}), F({5}), F({5})}, {{"eps", 1e-3}}, aten_batch_norm(1e-3)},
    {"max_pool2d_stem", "max_pool2d", {F({2, 3, 9, 8})}, pool_attrs({3, 3}, {2, 2}, {1, 1}, {1, 1}, 0),
     aten_max_pool({3, 3}, {2, 2}, {1, 1}, {1, 1}, false), kNoFiniteDiff},
    {"max_pool2d_ceil", "max_pool2d", {F({1, 2, 7, 5})}, pool_attrs({2, 2}, {2, 2}, {0, 0}, {1, 1}, 1),
     aten_max_pool({2, 2}, {2, 2}, {0, 0}, {1, 1}, true), kNoFiniteDiff},
    {"max_pool2d_dilation2", "max_pool2d", {F({2, 2, 8, 8})}, pool_attrs({3, 2}, {1, 1}, {1, 1}, {2, 2}, 0),
     aten_max_pool({3, 2}, {1, 1}, {1, 1}, {2, 2}, false), kNoFiniteDiff},
    {"adaptive_avg_pool2d_1x1", "adaptive_avg_pool2d", {F({2, 3, 5, 7})}, {{"output_size", ir::Shape{1, 1}}},
     [](const Tensors& x) { return at::_adaptive_avg_pool2d(x[0], {1, 1}); }},
    {"adaptive_avg_pool2d_3x2", "adaptive_avg_pool2d", {F({2, 3, 5, 7})}, {{"output_size", ir::Shape{3, 2}}},
     [](const Tensors& x) { return at::_adaptive_avg_pool2d(x[0], {3, 2}); }},
    {"adaptive_avg_pool2d_5x7", "adaptive_avg_pool2d", {F({2, 3, 5, 7})}, {{"output_size", ir::Shape{5, 7}}},
     [](const Tensors& x) { return at::_adaptive_avg_pool2d(x[0], {5, 7}); }},
    {"adaptive_avg_pool2d_3d", "adaptive_avg_pool2d", {F({3, 6, 4})}, {{"output_size", ir::Shape{2, 2}}},
     [](const Tensors& x) { return at::_adaptive_avg_pool2d(x[0], {2, 2}); }},
  };
}

// attention.cpp's and layout.cpp's rows.
std::vector<OpCase> attention_and_layout_cases() {
  return {
    {"embedding", "embedding", {F({7, 4}), Ints(7, {3, 5})}, {{"padding_idx", int64_t{-1}}},
     [](const Tensors& x) { return at::embedding(x[0], x[1], -1); }},
    // padding_idx is a convention, not a derivative: the forward reads the padding row, which gets no gradient.
    {"embedding_padding_idx", "embedding", {F({7, 4}), Ints(7, {3, 5})}, {{"padding_idx", int64_t{2}}},
     [](const Tensors& x) { return at::embedding(x[0], x[1], 2); }, kNoFiniteDiff, 0, {},
     [](Tensors& x) {
       x[1][0][0] = 2;  // the padding row is used, and gets no gradient
       x[1][1][1] = 4;
       x[1][2][2] = 4;  // a repeated id: its gradients are summed
     }},
    {"layer_norm", "layer_norm", {F({2, 3, 6}), F({6}), F({6})}, {{"eps", 1e-5}},
     [](const Tensors& x) { return at::layer_norm(x[0], {6}, x[1], x[2], 1e-5); }},
    {"layer_norm_eps1e12", "layer_norm", {F({2, 3, 6}), F({6}), F({6})}, {{"eps", 1e-12}},
     [](const Tensors& x) { return at::layer_norm(x[0], {6}, x[1], x[2], 1e-12); }},
    {"softmax_dim0", "softmax", {F({2, 3, 4})}, {{"dim", int64_t{0}}},
     [](const Tensors& x) { return at::_softmax(x[0], 0, false); }},
    {"softmax_dim2", "softmax", {F({2, 3, 4})}, {{"dim", int64_t{2}}},
     [](const Tensors& x) { return at::_softmax(x[0], 2, false); }},
    {"softmax_last", "softmax", {F({2, 3, 4})}, {{"dim", int64_t{-1}}},
     [](const Tensors& x) { return at::_softmax(x[0], -1, false); }},
    // As attention splits heads: (B, T, H, D) -> (B, H, T, D).
    {"permute", "permute", {F({2, 3, 2, 4})}, {{"dims", ir::Shape{0, 2, 1, 3}}},
     [](const Tensors& x) { return x[0].permute({0, 2, 1, 3}); }},
    {"contiguous_after_permute", "contiguous", {F({2, 3, 4})}, {},
     [](const Tensors& x) { return x[0].permute({2, 0, 1}).contiguous().view({4, 6}); }, kSmooth, 0,
     [](ops::Builder& b, const std::vector<ValueId>& in) {
       ValueId p = b.op("permute", in, {{"dims", ir::Shape{2, 0, 1}}});
       ValueId c = b.op("contiguous", {p});
       return b.op("reshape", {c}, {{"shape", ir::Shape{4, 6}}});
     }},
    // Parts 0 and 2 of a split, concatenated in reverse: part 1 gets a zero gradient.
    {"split_then_cat", "split", {F({2, 3, 9})}, {},
     [](const Tensors& x) {
       auto parts = x[0].split_with_sizes({3, 2, 4}, 2);
       return at::cat({parts[2], parts[0]}, -1);
     },
     kSmooth, 0,
     [](ops::Builder& b, const std::vector<ValueId>& in) {
       auto parts = b.call("split", in, {{"dim", int64_t{2}}, {"sizes", ir::Shape{3, 2, 4}}});
       return b.op("cat", {parts[2], parts[0]}, {{"dim", int64_t{-1}}});
     }},
    {"cat_of_three", "cat", {F({2, 3}), F({1, 3}), F({4, 3})}, {{"dim", int64_t{0}}},
     [](const Tensors& x) { return at::cat({x[0], x[1], x[2]}, 0); }},
    // The default fill is the lowest finite float, whose f64 differences overflow: a small fill for those.
    {"causal_mask_fill", "causal_mask_fill", {F({2, 2, 4, 4})}, {},
     aten_causal_fill(std::numeric_limits<float>::lowest()), kNoFiniteDiff},
    {"causal_mask_fill_more_keys", "causal_mask_fill", {F({3, 5})}, {},
     aten_causal_fill(std::numeric_limits<float>::lowest()), kNoFiniteDiff},
    {"causal_mask_fill_value", "causal_mask_fill", {F({3, 5})}, {{"value", -3.0}}, aten_causal_fill(-3.0)},
    {"scale", "scale", {F({3, 4})}, {{"alpha", 0.125}}, [](const Tensors& x) { return at::mul(x[0], 0.125); }},
    {"tanh", "tanh", {F({3, 4})}, {}, [](const Tensors& x) { return at::tanh(x[0]); }},
    // Scores (B, H, T, S) and HF's attention_mask (B, S): padded keys filled, as HF's additive finfo.min mask.
    {"padding_mask_fill", "padding_mask_fill", {F({2, 2, 3, 4}), Ints(2, {2, 4})}, {},
     aten_padding_fill(std::numeric_limits<float>::lowest()), kNoFiniteDiff, 0, {}, pin_padding},
    {"padding_mask_fill_value", "padding_mask_fill", {F({2, 2, 3, 4}), Ints(2, {2, 4})}, {{"value", -3.0}},
     aten_padding_fill(-3.0), kSmooth, 0, {}, pin_padding},
    // The vocabulary head in row chunks (test_vocab_loss.cpp checks chunk sizes, bias and memory): 2 chunks of 32 rows.
    {"linear_cross_entropy", "linear_cross_entropy", {F({40, 6}), F({9, 6}), Ints(9, {40})},
     {{"chunk_rows", int64_t{32}}, {"ignore_index", int64_t{-100}}},
     [](const Tensors& x) {
       return std::get<0>(at::nll_loss_forward(at::_log_softmax(at::linear(x[0], x[1]), 1, false), x[2],
                                               c10::nullopt, 1, -100));
     },
     kSmooth, 1e-6},
  };
}

// Rows made in loops: sum and mean over dims, nll_loss's reductions, matmul's transposes.
std::vector<OpCase> generated_cases() {
  std::vector<OpCase> t;
  for (bool mean : {false, true})
    for (auto [dims, keepdim] : std::vector<std::pair<std::vector<int64_t>, bool>>{
             {{}, false}, {{}, true}, {{1}, false}, {{0, 2}, true}, {{-1}, true}, {{2, 0}, false}}) {
      std::string name = fmt::format("{}_dims{}_keepdim{}", mean ? "mean" : "sum", fmt::join(dims, "_"), int{keepdim});
      for (char& ch : name)
        if (ch == '-') ch = 'm';
      t.push_back({name, mean ? "mean" : "sum", {F({2, 3, 4})}, reduce_attrs(dims, keepdim),
                   aten_reduce(mean, dims, keepdim)});
    }
  for (int64_t reduction : {0, 1, 2})
    for (int64_t ignore : {int64_t{-100}, int64_t{2}})
      t.push_back({fmt::format("nll_loss_reduction{}_ignore{}", reduction, ignore < 0 ? "none" : "2"), "nll_loss",
                   {LogProbs({6, 4}), Ints(4, {6})}, {{"reduction", reduction}, {"ignore_index", ignore}},
                   aten_nll(reduction, ignore), kSmooth, 0, {}, [](Tensors& x) {
                     x[1][0] = 2;  // at least one ignored row when ignore_index is 2
                     x[1][1] = 0;  // and at least one counted
                   }});
  for (int rank : {2, 3, 4})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) t.push_back(matmul_case(rank, ta, tb));
  return t;
}

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> t;
    for (std::vector<OpCase> (*part)() : {elementwise_and_loss_cases, conv_cases, attention_and_layout_cases, generated_cases})
      for (OpCase& c : part()) t.push_back(std::move(c));
    return t;
  }();
  return cases;
}

// The table covers exactly the op table's differentiable ops, and every one
// of them but those with kinks or ties gets finite differences.
TEST(OpGrad, TheTableCoversEveryDifferentiableOp) {
  std::set<std::string> with_grad, in_table, with_finite_diff, names;
  for (const ops::OpDef& d : ops::all_ops())
    if (d.grad != nullptr) with_grad.emplace(d.name);
  for (const OpCase& c : op_cases()) {
    in_table.insert(c.op);
    if (c.smooth) with_finite_diff.insert(c.op);
    EXPECT_TRUE(names.insert(c.name).second) << "two rows named " << c.name;
  }
  EXPECT_EQ(in_table, with_grad) << "a derivative added to the op table needs a row in op_cases()";
  std::set<std::string> without;
  for (const std::string& op : in_table)
    if (!with_finite_diff.count(op)) without.insert(op);
  EXPECT_EQ(without, (std::set<std::string>{"max_pool2d", "relu"})) << "ops checked by no finite differences";
}

class OpGradRow : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpGradRow, EqualsAutograd) {
  const OpCase& c = GetParam();
  at::Generator gen = seeded_rng(c.name);
  check_grads(c.name, draw(c, gen), build_of(c), c.reference, c.rtol, gen);
}

TEST_P(OpGradRow, EqualsFiniteDifferencesInF64) {
  const OpCase& c = GetParam();
  if (!c.smooth) GTEST_SKIP() << c.name << ": finite differences do not apply (see its row)";
  at::Generator gen = seeded_rng(c.name);
  check_finite_differences(c.name, draw(c, gen), build_of(c), gen);
}

INSTANTIATE_TEST_SUITE_P(Ops, OpGradRow, ::testing::ValuesIn(op_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; });

// --- What a row cannot say ----------------------------------------------------

// The same value on both sides: autodiff sums the two contributions (one
// accumulate node: x is a parameter; an activation's are summed by add).
TEST(OpGrad, ARepeatedOperandsGradientsAreSummed) {
  at::Generator gen = seeded_rng("x*x");
  GradGraph sq = check_grads(
      "x * x", {randn({5}, at::kFloat, gen)},
      [](ops::Builder& b, const std::vector<ValueId>& in) { return b.op("mul", {in[0], in[0]}); },
      [](const Tensors& t) { return t[0] * t[0]; }, 0, gen);
  EXPECT_EQ(count_ops(sq.g, "accumulate"), 1);
}

// Broadcast operands: the gradient is reduced to each operand's own shape by a
// sum_to node (the rows add_broadcast and mul_broadcast check the values).
TEST(OpGrad, BroadcastGradientsAreReducedToOperandShapes) {
  GradGraph add = build_grad_graph({randn({4, 3}), randn({3})}, binary("add"));
  EXPECT_EQ(count_ops(add.g, "sum_to"), 1);
  EXPECT_EQ(add.g.type(add.grad[1]).shape, ir::Shape{3});
  GradGraph mul = build_grad_graph({randn({2, 1, 5}), randn({3, 1})}, binary("mul"));
  EXPECT_EQ(count_ops(mul.g, "sum_to"), 2);
  EXPECT_EQ(mul.g.type(mul.grad[0]).shape, (ir::Shape{2, 1, 5}));
  EXPECT_EQ(mul.g.type(mul.grad[1]).shape, (ir::Shape{3, 1}));
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

// A conv on data (the stem) computes only the weight gradient: one output.
TEST(OpGrad, Conv2dBackwardMakesOnlyRequestedGradients) {
  Tensors xs{randn({2, 3, 8, 8}), randn({4, 3, 3, 3}), randn({4})};
  GradGraph w_only = build_grad_graph(xs, op_on_all("conv2d", conv_attrs(1, 1)), {1});
  ASSERT_EQ(count_ops(w_only.g, "conv2d_backward"), 1);
  const ir::Node& bw = w_only.g.nodes().back();
  EXPECT_EQ(bw.attrs.ints("output_mask"), (ir::Shape{0, 1, 0}));
  EXPECT_EQ(bw.outputs.size(), 1u);
  EXPECT_EQ(w_only.g.value(w_only.grad[1]).name, "in1.grad");
  EXPECT_EQ(w_only.grad[0], ir::kNoValue);
  EXPECT_EQ(w_only.grad[2], ir::kNoValue);
  at::Tensor seed = randn({2, 4, 8, 8});
  Runner run(w_only);
  run.feed(xs, seed);
  Tensors outs = run.step();
  Tensors leaves{xs[0], xs[1].clone().requires_grad_(true), xs[2]};
  at::Tensor ref = torch::autograd::grad({aten_conv(1, 1)(leaves)}, {leaves[1]}, {seed})[0];
  EXPECT_TRUE(at::equal(run.grad(outs, 1), ref));

  GradGraph x_and_b = build_grad_graph(xs, op_on_all("conv2d", conv_attrs(1, 1)), {0, 2});
  EXPECT_EQ(x_and_b.g.nodes().back().attrs.ints("output_mask"), (ir::Shape{1, 0, 1}));
  EXPECT_EQ(x_and_b.g.value(x_and_b.grad[2]).name, "in2.grad");
}

// The statistics are activations saved for the backward node, not recomputed
// there (the values: test_ops_grad.cpp's batch_norm rows).
TEST(OpGrad, BatchNormBackwardReadsTheSavedStatistics) {
  GradGraph gg = build_grad_graph({randn({2, 3, 4, 4}), randn({3}), randn({3})},
                                  op_on_all("batch_norm", {{"eps", 1e-5}}));
  ASSERT_EQ(count_ops(gg.g, "batch_norm_backward"), 1);
  const ir::Node& fwd = gg.g.nodes().front();
  const ir::Node& bwd = gg.g.nodes().back();
  EXPECT_EQ(bwd.inputs[3], fwd.outputs[1]);
  EXPECT_EQ(bwd.inputs[4], fwd.outputs[2]);
}

// The indices are an i64 output kept for the backward node; they get no
// gradient (the values: test_ops_grad.cpp's max_pool2d rows).
TEST(OpGrad, MaxPool2dBackwardReadsTheIndices) {
  GradGraph gg = build_grad_graph(
      {randn({1, 1, 4, 4})},
      op_on_all("max_pool2d", {{"kernel", ir::Shape{2, 2}}, {"stride", ir::Shape{2, 2}}, {"padding", ir::Shape{0, 0}},
                               {"dilation", ir::Shape{1, 1}}, {"ceil_mode", int64_t{0}}}));
  EXPECT_EQ(gg.g.type(gg.g.nodes().front().outputs[1]).dtype, ir::DType::i64);
  EXPECT_EQ(gg.g.nodes().back().inputs[2], gg.g.nodes().front().outputs[1]);
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
