// A training step built with ops::Builder on the ATen-free core: verified,
// printed and parsed back, its liveness, and the rewrite passes on it
// (recomputation, the pass manager, what is kept at backward time, which the
// planners model too).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "analysis/liveness.h"
#include "ir/text.h"
#include "mlp_step.h"
#include "ops/op.h"
#include "plan/optimal.h"
#include "plan/plan.h"
#include "plan_inputs.h"
#include "rewrite/passes.h"
#include "rewrite/recompute.h"
#include "support/error.h"

namespace mutwo {
namespace {

using namespace core_test;

TEST(TrainingStep, BuildsAndVerifies) {
  Step s = mlp_step();
  EXPECT_NO_THROW(ops::verify(s.graph));
  EXPECT_EQ(s.graph.type(s.relu[0]), (TensorType{{kBatch, kHidden}}));
  const ir::Node& fc1 = s.graph.nodes()[0];
  ASSERT_EQ(fc1.op, "linear");
  EXPECT_EQ(ops::flops(s.graph, fc1), 2.0 * kBatch * kHidden * kIn);
  EXPECT_EQ(s.graph.nodes().back().op, "sgd_step");
  for (ValueId v : s.relu) EXPECT_EQ(s.graph.value(v).role, Role::activation) << s.graph.value(v).name;
  // The text form parses back to the same graph.
  EXPECT_EQ(ir::print(ir::parse(ir::print(s.graph))), ir::print(s.graph));
  EXPECT_THROW(ops::op("no_such_op"), UserError);
}

TEST(TrainingStep, Liveness) {
  Step s = mlp_step();
  analysis::Liveness L = analysis::analyze_liveness(s.graph);
  // Parameters (fc1 32x8+32, fc2 and fc3 32x32+32, head 4x32+4 floats) twice
  // (their momentum buffers), x (64x8 floats) and labels (64 i64).
  const int64_t params = 4 * (kHidden * kIn + kHidden + 2 * (kHidden * kHidden + kHidden) + kClasses * kHidden + kClasses);
  EXPECT_EQ(L.persistent_bytes, 2 * params + 4 * kBatch * kIn + 8 * kBatch);
  EXPECT_GE(L.peak_bytes, L.persistent_bytes + 4 * kBatch * kHidden * kLayers) << "every relu output is live at once";
  for (ValueId v : s.relu) {
    auto id = static_cast<size_t>(v);
    EXPECT_EQ(L.def[id], node_of(s.graph, v));
    EXPECT_EQ(s.graph.nodes()[static_cast<size_t>(L.last_use[id])].phase, ir::Phase::backward);
    EXPECT_TRUE(L.owns_storage(v));
  }
}

TEST(Rewrite, RecomputationClonesWhatTheDroppedValueNeeds) {
  Step s = mlp_step();
  const ValueId drop = s.relu[1];
  rewrite::Rewritten r = rewrite::insert_recomputation(s.graph, {drop});
  EXPECT_NO_THROW(ops::verify(r.graph));
  // fc2's relu is recomputed from fc2's linear output, which no backward node
  // reads (so is not kept), recomputed in turn from fc1's relu (kept).
  std::vector<std::string> cloned;
  for (size_t n = 0; n < r.graph.nodes().size(); ++n)
    if (r.graph.nodes()[n].phase == ir::Phase::recompute) {
      cloned.push_back(r.graph.nodes()[n].op);
      EXPECT_EQ(r.graph.nodes()[n].scope, "fc2");
      EXPECT_EQ(r.graph.nodes()[static_cast<size_t>(r.origin[n])].op, r.graph.nodes()[n].op);
    }
  EXPECT_EQ(r.clones, 2);
  EXPECT_EQ(cloned, (std::vector<std::string>{"linear", "relu"}));
  for (const ir::Node& node : r.graph.nodes()) {
    if (node.phase != ir::Phase::backward) continue;
    EXPECT_EQ(std::count(node.inputs.begin(), node.inputs.end(), drop), 0) << node.op << " still reads the dropped value";
  }
}

// The pass manager verifies each pass's output, names a pass that breaks the
// graph, and shows every verified graph to its hook (--dump-ir-after).
TEST(Rewrite, PassManagerVerifiesEachPass) {
  Step s = mlp_step();
  std::vector<std::string> seen;
  const rewrite::PassOptions o{true, [&](std::string_view pass, const ir::Graph&) { seen.emplace_back(pass); }};
  const rewrite::Pass recompute{"recompute",
                                [&](const rewrite::Rewritten&) { return rewrite::insert_recomputation(s.graph, {s.relu[1]}); }};
  const rewrite::Pass identity{"identity", [](const rewrite::Rewritten& r) { return r; }};
  EXPECT_EQ(rewrite::run_passes({}, {recompute, identity}, o).clones, 2);
  EXPECT_EQ(seen, (std::vector<std::string>{"recompute", "identity"}));

  const rewrite::Pass reorder{"reorder", [](rewrite::Rewritten r) {  // a consumer before its producer
                                std::swap(r.graph.nodes()[0], r.graph.nodes()[1]);
                                return r;
                              }};
  seen.clear();
  try {
    rewrite::run_passes({}, {recompute, reorder, identity}, o);
    ADD_FAILURE() << "a graph that does not verify went through";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("the reorder pass made a graph that does not verify"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"recompute"})) << "the hook sees verified graphs only";
  EXPECT_NO_THROW(rewrite::run_passes({}, {recompute, reorder}, {false, nullptr}));  // the simulator's hot loop
}

// What is kept at backward time, at its edges (rewrite::kept_at_backward, the
// one rule that the rewrite runs and the greedy, the MILP and plan.json's
// sources model): x -> dropout -> linear, plus a side branch x -> linear ->
// relu, summed -> relu -> linear -> loss. x needs no gradient, so dropout's
// random mask is read by the forward pass alone, and the dropout output (read
// again by linear's weight gradient) is an activation made by a recomputable
// node from that mask.
struct DropoutStep {
  ir::Graph graph;
  ValueId x, mask, dropped, linear_out;
};
DropoutStep dropout_step() {
  ir::Graph g;
  ops::Builder b(g);
  ValueId x = b.input("x", TensorType{{kBatch, kIn}}, Role::input);
  ValueId labels = b.input("labels", TensorType{{kBatch}, ir::DType::i64}, Role::input);
  ValueId mask = b.op("dropout_mask", {x}, {{"p", 0.5}}, "mask");
  ValueId d = b.op("dropout_apply", {x, mask}, {{"p", 0.5}}, "dropped");
  ValueId w0 = b.input("side.weight", TensorType{{kHidden, kIn}}, Role::parameter);
  ValueId side = b.op("relu", {b.op("linear", {x, w0}, {}, "side.out")}, {}, "side.relu");
  ValueId w1 = b.input("fc1.weight", TensorType{{kHidden, kIn}}, Role::parameter);
  ValueId h = b.op("add", {b.op("linear", {d, w1}, {}, "fc1.out"), side}, {}, "fc1.sum");
  ValueId r = b.op("relu", {h}, {}, "fc1.relu");
  ValueId w2 = b.input("head.weight", TensorType{{kClasses, kHidden}}, Role::parameter);
  ValueId logits = b.op("linear", {r, w2}, {}, "logits");
  b.phase = ir::Phase::loss;
  ValueId logp = b.op("log_softmax", {logits}, {{"dim", int64_t{1}}}, "logp");
  ValueId loss = b.call("nll_loss", {logp, labels}, {}, "loss")[0];
  DropoutStep s{autodiff::build_training_step(std::move(g), loss, {}), {}, {}, {}, {}};
  s.x = s.graph.find("x");
  s.mask = s.graph.find("mask");
  s.dropped = s.graph.find("dropped");
  s.linear_out = s.graph.find("fc1.out");
  return s;
}

TEST(Rewrite, KeptAtBackwardTimeAtItsEdges) {
  DropoutStep s = dropout_step();
  const ir::Graph& g = s.graph;
  ASSERT_EQ(g.value(s.mask).role, Role::other) << "the mask is read by the forward pass only";
  ASSERT_EQ(g.value(s.dropped).role, Role::activation);
  ir::UseIndex uses(g);
  const std::vector<bool> kept = rewrite::kept_at_backward(g, uses, {});
  EXPECT_TRUE(kept[size_t(s.x)]) << "persistent";
  EXPECT_TRUE(kept[size_t(s.mask)]) << "random and not dropped: held for a clone that reads it (replayed only when dropped)";
  EXPECT_TRUE(kept[size_t(s.dropped)]) << "read by the backward pass and not dropped";
  EXPECT_FALSE(kept[size_t(s.linear_out)]) << "a forward temporary: relu_backward reads the relu's output";
  for (const ir::Value& v : g.values())
    if (uses.producer[size_t(v.id)] >= 0 && !ir::is_forward(g.nodes()[size_t(uses.producer[size_t(v.id)])].phase)) {
      EXPECT_TRUE(kept[size_t(v.id)]) << "%" << v.name << " is made outside the forward part";
    }
  EXPECT_FALSE(rewrite::kept_at_backward(g, uses, {s.dropped})[size_t(s.dropped)]);

  // The rewrite clones dropout_apply alone, reading the original mask.
  rewrite::Rewritten r = rewrite::insert_recomputation(g, {s.dropped});
  EXPECT_NO_THROW(ops::verify(r.graph));
  ASSERT_EQ(r.clones, 1);
  for (const ir::Node& n : r.graph.nodes())
    if (n.phase == ir::Phase::recompute) {
      EXPECT_EQ(n.inputs, (std::vector<ValueId>{s.x, s.mask}));
    }

  // plan.json names the same sources (it named x alone, recomputing the mask from it).
  plan::PlanInput in = testing::input_of(g);
  std::vector<ValueId> sources = plan::recompute_sources(in, {s.dropped}, s.dropped);
  std::sort(sources.begin(), sources.end());
  EXPECT_EQ(sources, (std::vector<ValueId>{s.x, s.mask}));

  // The greedy prices that drop at dropout_apply's time alone. Every node
  // takes 1 s but dropout_apply (1 us) and the mask's draw (1000 s). Both the
  // dropout output (2 KiB) and the side branch's relu (8 KiB, recomputed by
  // two nodes) are idle at the peak and either lowers it: priced with the draw
  // (as it was), the dropout output looked the worse choice and the greedy
  // recomputed the side branch for 2 s; it is the better one, for 1 us.
  plan::PlanInput slow = in;
  for (double& ms : slow.node_ms) ms = 1e3;
  slow.node_ms[size_t(uses.producer[size_t(s.mask)])] = 1e6;
  slow.node_ms[size_t(uses.producer[size_t(s.dropped)])] = 1e-3;
  const int64_t unplanned = plan::simulate(slow, {}).peak_bytes;
  const ValueId side = g.find("side.relu");
  ASSERT_LT(plan::simulate(slow, {s.dropped}).peak_bytes, unplanned);
  ASSERT_LT(plan::simulate(slow, {side}).peak_bytes, unplanned);
  plan::Plan greedy = plan::plan_mutwo(slow, unplanned - 1);
  EXPECT_TRUE(greedy.feasible);
  EXPECT_EQ(greedy.drop, std::vector<ValueId>{s.dropped});
  EXPECT_DOUBLE_EQ(greedy.predicted.extra_ms, 1e-3);

  // The MILP accepts that plan: the mask is kept, not recomputed (it refused
  // every drop whose recomputation reached the random node).
  if (plan::optimal_planner_built()) {
    EXPECT_TRUE(plan::optimal_model_fits(in, unplanned, {s.dropped}));
  }
}

}  // namespace
}  // namespace mutwo
