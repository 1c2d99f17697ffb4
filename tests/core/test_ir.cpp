// IR tests: the text form's round trip, the verifier's rejections (message
// text checked), and liveness on small hand-made graphs.
#include <gtest/gtest.h>

#include <stdexcept>

#include "analysis/liveness.h"
#include "analysis/reinplace.h"
#include "autodiff/autodiff.h"
#include "ir/text.h"
#include "models/model.h"
#include "ops/builder.h"
#include "ops/op.h"
#include "support/error.h"

namespace mutwo {
namespace {

using ir::Role;
using ir::TensorType;

ir::Graph mlp_step(autodiff::Optimizer opt) {
  models::MlpConfig c;
  c.batch = 8;
  c.in_features = 12;
  c.hidden = 16;
  models::Model m = models::build_mlp(c);
  autodiff::OptimizerConfig oc;
  oc.kind = opt;
  return autodiff::build_training_step(std::move(m.graph), m.loss, oc);
}

// Runs `f`, expecting a UserError whose message contains `needle`.
template <class F>
void expect_user_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << needle;
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message was: " << e.what();
  }
}

TEST(TextForm, RoundTripOfTrainingSteps) {
  for (auto opt : {autodiff::Optimizer::sgd, autodiff::Optimizer::adam, autodiff::Optimizer::adamw}) {
    ir::Graph g = mlp_step(opt);
    std::string text = ir::print(g);
    ir::Graph back = ir::parse(text);
    EXPECT_EQ(ir::print(back), text);
    EXPECT_NO_THROW(ops::verify(back));
    ASSERT_EQ(back.nodes().size(), g.nodes().size());
    for (size_t n = 0; n < g.nodes().size(); ++n) {
      EXPECT_EQ(back.nodes()[n].attrs, g.nodes()[n].attrs);
      EXPECT_EQ(back.nodes()[n].phase, g.nodes()[n].phase);
    }
    for (const ir::Value& v : g.values()) {
      ir::ValueId b = back.find(v.name);
      ASSERT_NE(b, ir::kNoValue) << v.name;
      EXPECT_EQ(back.value(b).type, v.type);
      EXPECT_EQ(back.value(b).role, v.role);
      EXPECT_EQ(back.value(b).init, v.init) << v.name;
    }
  }
}

TEST(TextForm, ParsesAttributesOfEveryKind) {
  const char* text = R"(graph t
%x : f64[2,3] input init=uniform(-0.5,0.001)
%y : f64[6] other = reshape(%x) {shape=[-1]} fwd scope=a.b
%z : f64[] other = sum(%y) {dims=[], keepdim=0, note="hi", scale=2.5} fwd
outputs %z
)";
  ir::Graph g = ir::parse(text);
  EXPECT_EQ(ir::print(g), text);
  EXPECT_EQ(g.nodes()[0].scope, "a.b");
  EXPECT_EQ(ir::parse("graph u\n%x : f32[1] input init=normal(1e-3,2)\n").value(0).init.a, 0.001);
  EXPECT_DOUBLE_EQ(g.nodes()[1].attrs.f("scale"), 2.5);
  EXPECT_EQ(g.nodes()[1].attrs.s("note"), "hi");
}

TEST(TextForm, ParseErrorsNameTheLine) {
  expect_user_error([] { ir::parse("graph t\n%x : f32[2] input\n%y : f32[2] other = relu(%q) fwd\n"); },
                    "line 3");
  expect_user_error([] { ir::parse("graph t\n%x : q32[2] input\n"); }, "unknown element type 'q32'");
  expect_user_error([] { ir::parse("graph t\n%x : f32[2] input\n%x : f32[2] input\n"); }, "defined twice");
  expect_user_error([] { ir::parse("graph t\n%x : f32[2] input\n%y : f32[2] other = relu(%x) later\n"); },
                    "unknown phase 'later'");
  expect_user_error([] { ir::parse("%x : f32[2] input\n"); }, "graph NAME");
}

// The verifier's rejections, one per kind of malformed graph.
TEST(Verifier, RejectsUseBeforeDefinition) {
  ir::Graph g = ir::parse(
      "graph t\n%x : f32[4] input\n%a : f32[4] other = relu(%x) fwd\n%b : f32[4] other = relu(%a) fwd\n");
  std::swap(g.nodes()[0], g.nodes()[1]);
  expect_user_error([&] { ops::verify(g); }, "%a is used before it is defined");
}

TEST(Verifier, RejectsTwoProducers) {
  ir::Graph g = ir::parse("graph t\n%x : f32[4] input\n%a : f32[4] other = relu(%x) fwd\n");
  ir::Node again = g.nodes()[0];
  g.append(again);
  expect_user_error([&] { ops::verify(g); }, "%a already has a producer, node 0");
}

TEST(Verifier, RejectsWrongDeclaredType) {
  ir::Graph g = ir::parse("graph t\n%x : f32[4] input\n%a : f32[5] other = relu(%x) fwd\n");
  expect_user_error([&] { ops::verify(g); }, "%a is declared f32[5] but relu makes f32[4]");
}

TEST(Verifier, RejectsBadInputsToAnOp) {
  ir::Graph g = ir::parse(
      "graph t\n%x : f32[4,3] input\n%w : f32[2,5] parameter\n%a : f32[4,2] other = linear(%x, %w) fwd\n");
  expect_user_error([&] { ops::verify(g); }, "linear: input has 3 features");
}

TEST(Verifier, RejectsUnknownOp) {
  ir::Graph g = ir::parse("graph t\n%x : f32[4] input\n%a : f32[4] other = frobnicate(%x) fwd\n");
  expect_user_error([&] { ops::verify(g); }, "unknown op 'frobnicate'");
}

TEST(Verifier, RejectsInconsistentRoles) {
  // A parameter made by a node.
  expect_user_error([] { ops::verify(ir::parse("graph t\n%x : f32[4] input\n%a : f32[4] parameter = relu(%x) fwd\n")); },
                    "has role parameter, which no node may produce");
  // A gradient made in the forward pass.
  expect_user_error([] { ops::verify(ir::parse("graph t\n%x : f32[4] input\n%a : f32[4] gradient = relu(%x) fwd\n")); },
                    "gradient %a is made in phase fwd");
  // An activation that no backward node uses.
  expect_user_error(
      [] { ops::verify(ir::parse("graph t\n%x : f32[4] input\n%a : f32[4] activation = relu(%x) fwd\n")); },
      "%a has role activation but no backward node uses it");
  // A temporary that no node makes.
  expect_user_error(
      [] { ops::verify(ir::parse("graph t\n%x : f32[4] other\n%a : f32[4] other = relu(%x) fwd\n")); },
      "%x is used before it is defined");
}

TEST(Verifier, RejectsPhasesOutOfOrder) {
  ir::Graph g = ir::parse(
      "graph t\n%x : f32[4] input\n%a : f32[4] other = relu(%x) bwd\n%b : f32[4] other = relu(%a) fwd\n");
  expect_user_error([&] { ops::verify(g); }, "phase fwd comes after a later phase");
}

TEST(Verifier, RejectsInPlaceWriteIntoATemporary) {
  ir::Graph g = ir::parse(
      "graph t\n%x : f32[4] input\n%w : f32[4] parameter\n%a : f32[4] other = relu(%x) fwd\n"
      "_ = sgd_step(%a, %x) {lr=0.1} optim\n");
  expect_user_error([&] { ops::verify(g); }, "sgd_step writes into %a, which is not a parameter");
}

TEST(Liveness, ChainFreesAtLastUseAndViewsKeepTheirBase) {
  ir::Graph g;
  ops::Builder b(g);
  auto x = b.input("x", TensorType{{4, 8}}, Role::input);             // 128 B, persistent
  auto a = b.op("relu", {x}, {}, "a");                                // node 0: +128
  auto v = b.op("reshape", {a}, {{"shape", ir::Shape{32}}}, "v");     // node 1: a view of a
  auto c = b.op("relu", {v}, {}, "c");                                // node 2: +128, a and v die after
  auto d = b.op("sum", {c}, {}, "d");                                 // node 3: +4, c dies
  g.outputs = {d};
  analysis::Liveness L = analysis::analyze_liveness(g);
  EXPECT_EQ(L.persistent_bytes, 128);
  EXPECT_EQ(L.storage[static_cast<size_t>(v)], a);
  EXPECT_EQ(L.last_use[static_cast<size_t>(a)], 1);
  EXPECT_EQ(L.storage_end[static_cast<size_t>(a)], 2);  // v's last use keeps a's storage
  EXPECT_EQ(L.live_during, (std::vector<int64_t>{256, 256, 384, 260}));
  EXPECT_EQ(L.live_after, (std::vector<int64_t>{256, 256, 256, 132}));
  EXPECT_EQ(L.peak_bytes, 384);
  EXPECT_EQ(L.peak_node, 2);
  EXPECT_EQ(L.last_use[static_cast<size_t>(d)], analysis::kForever);
  (void)c;
}

TEST(Autodiff, TrainingStepHasRolesAndNoUnneededGradients) {
  ir::Graph g = mlp_step(autodiff::Optimizer::sgd);
  EXPECT_EQ(g.find("x.grad"), ir::kNoValue) << "inputs need no gradient";
  for (const char* p : {"fc1.weight", "fc1.bias", "fc2.weight", "head.weight", "head.bias"}) {
    ir::ValueId grad = g.find(std::string(p) + ".grad");
    ASSERT_NE(grad, ir::kNoValue) << p;
    EXPECT_EQ(g.value(grad).role, Role::gradient);
    EXPECT_EQ(g.value(g.find(std::string(p) + ".momentum")).role, Role::optimizer_state);
  }
  EXPECT_EQ(g.value(g.find("fc1.relu")).role, Role::activation);
  EXPECT_EQ(g.value(g.find("fc1.out")).role, Role::other) << "relu's backward reads its output, not its input";
  // One multi-tensor optimizer node: 6 parameters, their gradients and momentum buffers.
  int optim = 0;
  for (const auto& n : g.nodes()) optim += n.phase == ir::Phase::optimizer;
  EXPECT_EQ(optim, 1);
  EXPECT_EQ(g.nodes().back().op, "sgd_step");
  EXPECT_EQ(g.nodes().back().inputs.size(), 18u);
}

// A linear head and the fused loss: the loss gradient overwrites the logits,
// their last reader, unless something else holds them.
TEST(Reinplace, LossGradientOverwritesTheLogitsWhereTheyDie) {
  ir::Graph fwd;
  ops::Builder b(fwd);
  auto x = b.input("x", TensorType{{6, 4}}, Role::input);
  auto w = b.input("w", TensorType{{5, 4}}, Role::parameter);
  auto t = b.input("t", TensorType{{6}, ir::DType::i64}, Role::input);
  b.phase = ir::Phase::loss;
  auto logits = b.op("linear", {x, w}, {}, "logits");
  auto loss = b.call("cross_entropy", {logits, t}, {{"ignore_index", int64_t{-100}}})[0];
  ir::Graph g = autodiff::build_training_step(std::move(fwd), loss, {});
  auto backward_of_loss = [&]() -> size_t {
    for (size_t n = 0; n < g.nodes().size(); ++n)
      if (g.nodes()[n].op.rfind("cross_entropy_backward", 0) == 0) return n;
    throw std::runtime_error("no cross_entropy_backward node");
  };
  const size_t n = backward_of_loss();
  EXPECT_EQ(g.nodes()[n].op, "cross_entropy_backward_");
  analysis::Liveness L = analysis::analyze_liveness(g);
  EXPECT_EQ(L.storage[static_cast<size_t>(g.nodes()[n].outputs[0])], logits) << "one buffer for logits and gradient";
  EXPECT_EQ(L.live_during[n], L.live_before[n]) << "the gradient takes no new bytes";

  // Held as a graph output, the logits keep their values: the plain op.
  g.outputs.push_back(logits);
  analysis::reinplace(g);
  EXPECT_EQ(g.nodes()[n].op, "cross_entropy_backward");
  EXPECT_GT(analysis::analyze_liveness(g).live_during[n], L.live_before[n]);
  // And back, when they are no longer held.
  g.outputs.pop_back();
  analysis::reinplace(g);
  EXPECT_EQ(g.nodes()[n].op, "cross_entropy_backward_");
}

TEST(Liveness, RejectsAReaderAfterAnOverwrite) {
  ir::Graph g = ir::parse(
      "graph t\n%x : f32[6,5] input\n%t : i64[6] input\n%l : f32[6,5] activation = relu(%x) fwd\n"
      "%loss : f32[] other, %lse : f32[6] other = cross_entropy(%l, %t) {ignore_index=-100} loss\n"
      "%g : f32[] other = full() {shape=[], value=1.0, dtype=\"f32\"} bwd\n"
      "%dl : f32[6,5] other = cross_entropy_backward_(%l, %g, %t, %lse) {ignore_index=-100} bwd\n"
      "%r : f32[6,5] other = relu_backward(%dl, %l) bwd\noutputs %loss, %r\n");
  expect_user_error([&] { analysis::analyze_liveness(g); },
                    "node 3 (cross_entropy_backward_) writes its result over %l, but %l is read by node 4");
  analysis::reinplace(g);
  EXPECT_EQ(g.nodes()[3].op, "cross_entropy_backward") << "reinplace undoes an overwrite that is not the last read";
  EXPECT_NO_THROW(analysis::analyze_liveness(g));
}

}  // namespace
}  // namespace mutwo
