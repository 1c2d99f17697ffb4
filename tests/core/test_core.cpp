// The ATen-free core on its own: this binary links ir, ops, analysis,
// autodiff, models, stepfile, rewrite, profile (data), plan and report, never
// libtorch (CTest `core_no_torch` checks with ldd). A training step built
// with ops::Builder is verified, analysed, rewritten and planned from plain data.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "captured_head.h"
#include "analysis/liveness.h"
#include "autodiff/autodiff.h"
#include "ir/text.h"
#include "models/model.h"
#include "ops/builder.h"
#include "ops/op.h"
#include "plan/optimal.h"
#include "plan/plan.h"
#include "plan/plan_file.h"
#include "plan_inputs.h"
#include "profile/profile.h"
#include "report/report.h"
#include "rewrite/passes.h"
#include "rewrite/recompute.h"
#include "stepfile/step_file.h"
#include "support/error.h"

namespace mutwo {
namespace {

using ir::Role;
using ir::TensorType;
using ir::ValueId;

constexpr int64_t kBatch = 64, kIn = 8, kHidden = 32, kClasses = 4, kLayers = 3;

// x (64, 8) -> 3 x (linear to 32, relu) -> linear to 4 -> log_softmax -> nll_loss,
// then the backward pass and SGD with momentum: one training step.
struct Step {
  ir::Graph graph;
  std::vector<ValueId> relu;  // each hidden layer's relu output
};
Step mlp_step() {
  ir::Graph g;
  ops::Builder b(g);
  ValueId h = b.input("x", TensorType{{kBatch, kIn}}, Role::input);
  ValueId labels = b.input("labels", TensorType{{kBatch}, ir::DType::i64}, Role::input);
  std::vector<std::string> relu_names;
  auto linear = [&](ValueId x, int64_t in, int64_t out) {
    ValueId w = b.input(b.scope + ".weight", TensorType{{out, in}}, Role::parameter);
    ValueId bias = b.input(b.scope + ".bias", TensorType{{out}}, Role::parameter);
    return b.op("linear", {x, w, bias}, {}, b.scope + ".out");
  };
  for (int64_t l = 0; l < kLayers; ++l) {
    ops::Builder::Scope s(b, "fc" + std::to_string(l + 1));
    h = b.op("relu", {linear(h, l == 0 ? kIn : kHidden, kHidden)}, {}, b.scope + ".relu");
    relu_names.push_back(b.scope + ".relu");
  }
  ValueId logits;
  {
    ops::Builder::Scope s(b, "head");
    logits = linear(h, kHidden, kClasses);
  }
  b.phase = ir::Phase::loss;
  ValueId logp = b.op("log_softmax", {logits}, {{"dim", int64_t{1}}}, "logp");
  ValueId loss = b.call("nll_loss", {logp, labels}, {}, "loss")[0];
  Step s{autodiff::build_training_step(std::move(g), loss, {}), {}};
  for (const std::string& name : relu_names) s.relu.push_back(s.graph.find(name));
  return s;
}

int32_t node_of(const ir::Graph& g, ValueId v) {
  for (size_t n = 0; n < g.nodes().size(); ++n)
    if (std::count(g.nodes()[n].outputs.begin(), g.nodes()[n].outputs.end(), v)) return static_cast<int32_t>(n);
  return -1;
}

TEST(Core, BuildsAndVerifiesATrainingStep) {
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

TEST(Core, LivenessOfTheStep) {
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

TEST(Core, RecomputationClonesWhatTheDroppedValueNeeds) {
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
TEST(Core, PassManagerVerifiesEachPass) {
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

TEST(Core, SimulatorAndPlannersOnPlainData) {
  Step s = mlp_step();
  plan::PlanInput in = testing::input_of(s.graph);
  const int64_t unplanned = plan::simulate(in, {}).peak_bytes;
  EXPECT_EQ(unplanned, analysis::analyze_liveness(s.graph).peak_bytes);
  // Dropping fc2's relu frees its 64x32 floats once the forward pass is over.
  size_t end_of_forward = 0;
  for (size_t n = 0; n < in.graph.nodes().size(); ++n)
    if (in.graph.nodes()[n].phase == ir::Phase::loss) end_of_forward = n;
  plan::Simulation kept = plan::simulate(in, {}), dropped = plan::simulate(in, {s.relu[1]});
  EXPECT_EQ(kept.live_after[end_of_forward] - dropped.live_after[end_of_forward], 4 * kBatch * kHidden);
  EXPECT_EQ(dropped.recompute_nodes, 2);
  EXPECT_GT(dropped.extra_ms, 0);

  // The step peaks in fc3's relu_backward, with every relu output live;
  // fc1's, read next two layers later, is worth recomputing there.
  EXPECT_EQ(s.graph.nodes()[static_cast<size_t>(kept.peak_node)].op, "relu_backward");
  const int64_t least = plan::simulate(in, {s.relu[0]}).peak_bytes;
  ASSERT_LT(least, unplanned);
  EXPECT_EQ(plan::candidates(in).size(), static_cast<size_t>(kLayers) + 1) << "the relu outputs and log-probabilities";

  plan::Plan none = plan::run_planner("none", in, unplanned);
  EXPECT_TRUE(none.feasible);
  EXPECT_TRUE(none.drop.empty());
  EXPECT_EQ(none.predicted.peak_bytes, unplanned);
  for (const char* name : {"mutwo", "sqrt-n", "per-layer"}) {
    plan::Plan p = plan::run_planner(name, in, least);
    EXPECT_EQ(p.predicted.peak_bytes, plan::simulate(in, p.drop, p.swap).peak_bytes) << name;
    EXPECT_EQ(p.feasible, p.predicted.peak_bytes <= least) << name;
  }
  plan::Plan mutwo = plan::run_planner("mutwo", in, least);
  EXPECT_TRUE(mutwo.feasible) << mutwo.note;
  EXPECT_FALSE(mutwo.drop.empty());
  EXPECT_LE(mutwo.predicted.peak_bytes, least);
  EXPECT_FALSE(plan::run_planner("mutwo", in, in.profile.persistent_bytes).feasible);
}

// plan.json's reasoning: every candidate the greedy picked has a rank (one per
// storage, 1..k in the order picked), decisions match the drop list, the ratio
// is bytes per ms of recomputation; the file reads back as written.
void expect_reasoning(const plan::PlanInput& in, const plan::Plan& p) {
  SCOPED_TRACE(p.planner + " at " + std::to_string(p.budget_bytes));
  const std::set<ValueId> dropped(p.drop.begin(), p.drop.end());
  const std::vector<plan::ActivationRecord> rs = plan::activation_records(in, p);
  const std::vector<ValueId> storage = analysis::analyze_liveness(in.graph).storage;
  std::set<int32_t> ranks;
  size_t candidates = 0;
  for (const plan::ActivationRecord& r : rs) {
    const bool d = dropped.count(in.graph.find(r.name)) > 0;
    EXPECT_EQ(r.decision, d ? "recompute" : "keep") << r.name;
    EXPECT_EQ(in.graph.find(r.storage), storage[static_cast<size_t>(in.graph.find(r.name))]) << r.name;
    if (r.rank > 0) ranks.insert(r.rank);
    if (p.planner == "mutwo") {
      EXPECT_EQ(d, r.reason == "picked") << r.name << ": " << r.reason;
      if (d) EXPECT_GT(r.rank, 0) << r.name << " was dropped without being picked";
      if (r.rank > 0) EXPECT_GT(r.score, 0) << r.name;
    } else {
      EXPECT_EQ(r.rank, 0) << r.name;
    }
    if (!r.candidate) continue;
    ++candidates;
    ASSERT_GT(r.recompute_ms, 0) << r.name << ": every node takes at least 1 us here";
    EXPECT_DOUBLE_EQ(r.ratio(), static_cast<double>(r.bytes) / r.recompute_ms) << r.name;
    EXPECT_DOUBLE_EQ(r.recompute_ms, plan::recompute_ms(in, p.drop, in.graph.find(r.name))) << r.name;
  }
  EXPECT_EQ(candidates, plan::candidates(in).size()) << "the mlp's candidates each own their storage";
  EXPECT_EQ(ranks.size(), p.order.size());
  if (!ranks.empty()) {
    EXPECT_EQ(*ranks.begin(), 1);
    EXPECT_EQ(*ranks.rbegin(), static_cast<int32_t>(ranks.size())) << "ranks are 1..k, each once";
  }
  const std::string path = ::testing::TempDir() + "core_plan.json";
  plan::write_plan_json(in, p, plan::simulate(in, {}).peak_bytes, path);
  const plan::SavedPlan f = plan::read_plan(path);
  ASSERT_EQ(f.activations.size(), rs.size());
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(f.activations[i].name, rs[i].name);
    EXPECT_EQ(f.activations[i].decision, rs[i].decision);
    EXPECT_EQ(f.activations[i].reason, rs[i].reason);
    EXPECT_EQ(f.activations[i].rank, rs[i].rank);
    EXPECT_EQ(f.activations[i].candidate, rs[i].candidate);
    EXPECT_NEAR(f.activations[i].recompute_ms, rs[i].recompute_ms, 1e-12);
    EXPECT_EQ(f.activations[i].sources, rs[i].sources);
  }
  size_t recomputed = 0;
  for (const plan::ActivationRecord& a : f.activations) recomputed += a.recomputed();
  EXPECT_EQ(recomputed, p.drop.size());
  EXPECT_EQ(f.feasible, p.feasible);
  EXPECT_EQ(f.predicted_peak_bytes, p.predicted.peak_bytes);
}

TEST(Core, PlanFilesRecordThePlannersReasoning) {
  Step s = mlp_step();
  plan::PlanInput in = testing::input_of(s.graph);
  const int64_t unplanned = plan::simulate(in, {}).peak_bytes;
  const int64_t least = plan::simulate(in, {s.relu[0]}).peak_bytes;
  plan::Plan fits = plan::run_planner("mutwo", in, least);
  ASSERT_TRUE(fits.feasible);
  ASSERT_FALSE(fits.order.empty());
  EXPECT_EQ(fits.order[0].owner, s.relu[0]) << "fc1's relu frees the most at the peak for its time";
  expect_reasoning(in, fits);
  // A budget the greedy cannot reach: it picks on until nothing idle at the peak is left.
  plan::Plan missed = plan::run_planner("mutwo", in, in.profile.persistent_bytes);
  ASSERT_FALSE(missed.feasible);
  EXPECT_GE(missed.order.size(), fits.order.size());
  expect_reasoning(in, missed);
  plan::Plan unplanned_fits = plan::run_planner("mutwo", in, unplanned);
  EXPECT_TRUE(unplanned_fits.order.empty()) << "nothing to pick when the step fits";
  for (const plan::ActivationRecord& r : plan::activation_records(in, unplanned_fits))
    EXPECT_EQ(r.reason, r.candidate ? "not needed: the step fits unplanned" : "not recomputable") << r.name;
  plan::Plan layers = plan::run_planner("per-layer", in, least);
  EXPECT_TRUE(layers.order.empty());
  expect_reasoning(in, layers);
  // plan.csv: the old columns first, then the reasoning.
  const std::string csv = ::testing::TempDir() + "core_plan.csv";
  plan::write_plan_csv(in, fits, csv);
  std::ifstream f(csv);
  std::string header;
  std::getline(f, header);
  EXPECT_EQ(header, "name,bytes,decision,sources,rank,recompute_ms,ratio,reason,score,module,op");
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

TEST(Core, KeptAtBackwardTimeAtItsEdges) {
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

// One rule charges a storage to a role (analysis::charged_roles): the profile
// of a rewritten step and the simulator's peak breakdown agree, clones
// counting as activation in both (the profile charged them to other).
TEST(Core, ProfileAndSimulatorChargeStoragesAlike) {
  Step s = mlp_step();
  plan::PlanInput in = testing::input_of(s.graph);
  for (const std::vector<ValueId>& drop : {std::vector<ValueId>{}, {s.relu[0]}, {s.relu[1]}, s.relu}) {
    plan::Simulation sim = plan::simulate(in, drop);
    rewrite::Rewritten r = rewrite::insert_recomputation(s.graph, drop);
    profile::LiveByRole by_role = profile::live_by_role(r.graph);
    EXPECT_EQ(sim.peak_by_role, by_role.during[size_t(sim.peak_node)]) << drop.size() << " dropped";
    analysis::Liveness L = analysis::analyze_liveness(r.graph);
    for (size_t n = 0; n < r.graph.nodes().size(); ++n) {
      const ir::Node& node = r.graph.nodes()[n];
      if (node.phase != ir::Phase::recompute) continue;
      const int64_t made = by_role.during[n][size_t(Role::activation)] - by_role.after[n - 1][size_t(Role::activation)];
      EXPECT_EQ(made, r.graph.type(node.outputs[0]).bytes()) << node.op << " clone charged to activation";
      EXPECT_EQ(analysis::charged_roles(r.graph, L)[size_t(node.outputs[0])], Role::activation);
    }
  }
}

// A zoo model's step, its Profile's JSON form and a report from it, and the
// step-file loader's checks: all without ATen.
TEST(Core, ZooModelProfileReportAndStepFileWithoutATen) {
  models::ModelOptions o;
  o.name = "bert-tiny";
  o.batch = 2;
  o.seq = 16;
  models::Model m = models::build_model(o);
  ir::Graph g = autodiff::build_training_step(std::move(m.graph), m.loss, {});
  profile::Profile p = profile::describe(g);
  ASSERT_EQ(p.nodes.size(), g.nodes().size());
  EXPECT_EQ(p.persistent_bytes, analysis::analyze_liveness(g).persistent_bytes);
  profile::Profile back = profile::from_json_text(profile::to_json_text(p), "test");
  EXPECT_EQ(back.graph_text, p.graph_text);
  EXPECT_EQ(back.values.size(), p.values.size());
  plan::PlanInput in = plan::make_input(back);
  EXPECT_EQ(plan::simulate(in, {}).peak_bytes, analysis::analyze_liveness(g).peak_bytes);
  const std::string csv = ::testing::TempDir() + "core_nodes.csv";
  report::write_nodes_csv(p, csv);
  std::ifstream f(csv);
  EXPECT_EQ(std::count(std::istreambuf_iterator<char>(f), {}, '\n'), static_cast<long>(g.nodes().size()) + 1)
      << "a header and one line per node";
  EXPECT_TRUE(stepfile::is_step_file("step.json"));
  EXPECT_THROW(stepfile::load_step("/nonexistent/step.json", {}), UserError);
}

// The vocabulary head of a captured step (tests/common/captured_head.h: torch 1.13's
// form) fused on load into linear_cross_entropy: the nodes that made the
// logits, their log-softmax, the loss and their gradients are gone, the
// gradients keep their names; a near miss (the logits read by another node)
// and --no-fuse-loss leave the captured nodes.
TEST(Core, StepFileFusesTheVocabularyHead) {
  const std::string dir = ::testing::TempDir();
  auto ops_of = [](const ir::Graph& g) {
    std::vector<std::string> out;
    for (const ir::Node& n : g.nodes()) {
      std::string outs;
      for (ir::ValueId v : n.outputs) outs += (outs.empty() ? "" : ",") + g.value(v).name;
      out.push_back(fmt::format("{} {} {}", ir::to_string(n.phase), outs.empty() ? "_" : outs, ops::display_name(n)));
    }
    return out;
  };
  for (bool bias : {true, false}) {
    captured_head::Options o;
    o.bias = bias;
    o.ignore_rows = true;
    o.ignore_index = -1;
    ir::Graph g = stepfile::load_step(captured_head::write(dir, o), {});
    std::vector<std::string> golden = {
        "fwd view aten::view",
        "fwd view_3 aten::view",
        "fwd loss,loss.logsumexp linear_cross_entropy",
        bias ? "bwd mm_1,mm_2,d_b linear_cross_entropy_backward" : "bwd mm_1,mm_2 linear_cross_entropy_backward",
        "bwd t_3 aten::t",  // views of the fused node's d_weight: (d_weightᵀ)ᵀ, the captured gradient
        "bwd d_h aten::_reshape_alias",
        "bwd d_w aten::t",
        "optim _ sgd_step",
    };
    EXPECT_EQ(ops_of(g), golden) << fmt::format("{}", fmt::join(ops_of(g), "\n"));
    for (const ir::Node& n : g.nodes())
      if (n.op == "linear_cross_entropy") {
        EXPECT_EQ(n.attrs.i("ignore_index"), -1);
        EXPECT_EQ(n.inputs.size(), bias ? 4u : 3u);
      }
    EXPECT_EQ(g.value(g.find("d_w")).role, ir::Role::gradient);
    EXPECT_EQ(g.find("logp"), ir::kNoValue) << "values made by nobody are dropped";

    stepfile::LoadOptions off;
    off.fuse_loss = false;
    ir::Graph kept = stepfile::load_step(captured_head::write(dir, o), {}, off);
    EXPECT_EQ(kept.nodes().size(), bias ? 24u : 22u);
    o.logits_read_elsewhere = true;
    ir::Graph near = stepfile::load_step(captured_head::write(dir, o), {});
    EXPECT_EQ(ops_of(near).size(), kept.nodes().size() + 1) << fmt::format("{}", fmt::join(ops_of(near), "\n"));
    for (const ir::Node& n : near.nodes()) EXPECT_EQ(n.op.find("linear_cross_entropy"), std::string::npos);
  }
}

// A bf16 head whose logits are cast to f32 before the loss (captured_head.h's
// `upcast`) is fused with logits_dtype f32, both casts removed; a cast to f64
// (a near miss: linear_cross_entropy reduces bf16 logits in f32 only) is not.
TEST(Core, StepFileFusesAnUpcastVocabularyHead) {
  const std::string dir = ::testing::TempDir();
  captured_head::Options o;
  o.upcast = "f32";
  o.name = "upcast_head";
  ir::Graph g = stepfile::load_step(captured_head::write(dir, o), {});
  int fused = 0;
  for (const ir::Node& n : g.nodes()) {
    EXPECT_NE(n.op == "aten" ? n.attrs.s("target") : "", "aten::_to_copy") << "the casts are part of the fused pair";
    if (n.op != "linear_cross_entropy" && n.op != "linear_cross_entropy_backward") continue;
    ++fused;
    EXPECT_EQ(n.attrs.s("logits_dtype"), "f32");
    EXPECT_EQ(g.type(n.inputs[0]).dtype, ir::DType::bf16);
  }
  EXPECT_EQ(fused, 2);
  EXPECT_EQ(g.type(g.find("loss")).dtype, ir::DType::f32);
  EXPECT_EQ(g.type(g.find("d_w")).dtype, ir::DType::bf16);
  o.upcast = "f64";
  ir::Graph near = stepfile::load_step(captured_head::write(dir, o), {});
  for (const ir::Node& n : near.nodes()) EXPECT_EQ(n.op.find("linear_cross_entropy"), std::string::npos);
}

// A hand-written step file (docs/step-file.md) and its tensor file: the
// loader's rewrites as a golden text. y = dropout(relu(x @ w)); loss = sum(y).
// The joint graph makes a view of the saved relu in the forward part (a detach,
// as torch 1.13 does): on load it waits for its reader in the backward part.
// native_dropout keeps its mask and recomputes its output.
TEST(Core, StepFileLoadGolden) {
  const std::string dir = ::testing::TempDir();
  {
    std::string header =
        R"({"__metadata__":{"format":"mutwo-step-data","version":"1"},)"
        R"("w":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]},"input0":{"dtype":"F32","shape":[2,4],"data_offsets":[64,96]}})";
    std::ofstream f(dir + "golden.safetensors", std::ios::binary);
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
    f << header << std::string(96, '\0');
  }
  auto value = [](const char* name, const char* role, const char* shape, const char* extra = "") {
    return fmt::format(R"({{"name":"{}","role":"{}","dtype":"f32","shape":{},"strides":[]{}}})", name, role, shape, extra);
  };
  auto node = [](const char* target, const char* args, const char* outs, const char* tags = "[]",
                 const char* alias = "null") {
    return fmt::format(R"({{"target":"{}","overload":"default","args":{},"outputs":{},"tags":{},"mutates":[],"alias_of":{},"scope":"","phase":"forward"}})",
                       target, args, outs, tags, alias);
  };
  const std::string doc = fmt::format(
      R"({{"format":"mutwo-step","version":1,"name":"golden","data":"golden.safetensors","loss":"loss","values":[{}],"nodes":[{}]}})",
      fmt::join(std::vector<std::string>{
                    value("p", "parameter", "[4,4]", R"(,"qualname":"w")"), value("x", "input", "[2,4]", R"(,"index":0)"),
                    value("t", "tangent", "[]"), value("mm", "intermediate", "[2,4]"), value("relu", "intermediate", "[2,4]"),
                    value("saved", "intermediate", "[2,4]"), value("y", "intermediate", "[2,4]"),
                    R"({"name":"mask","role":"intermediate","dtype":"bool","shape":[2,4],"strides":[]})",
                    value("loss", "intermediate", "[]"), value("gy", "intermediate", "[2,4]"), value("gr", "intermediate", "[2,4]"),
                    value("gm", "intermediate", "[2,4]"), value("gw", "gradient", "[4,4]", R"(,"of":"p")")},
                ","),
      fmt::join(std::vector<std::string>{
                    node("aten::mm", R"([{"t":"x"},{"t":"p"}])", R"(["mm"])"),
                    node("aten::relu", R"([{"t":"mm"}])", R"(["relu"])"),
                    node("aten::detach", R"([{"t":"relu"}])", R"(["saved"])", R"(["view"])", "0"),
                    node("aten::native_dropout", R"([{"t":"relu"},{"f":0.5},true])", R"(["y","mask"])",
                         R"(["nondeterministic_seeded"])"),
                    node("aten::sum", R"([{"t":"y"},null])", R"(["loss"])"),
                    node("aten::expand", R"([{"t":"t"},[2,4],false])", R"(["gy"])", R"(["view"])", "0"),
                    node("aten::native_dropout_backward", R"([{"t":"gy"},{"t":"mask"},{"f":2.0}])", R"(["gr"])"),
                    node("aten::threshold_backward", R"([{"t":"gr"},{"t":"saved"},0])", R"(["gm"])"),
                    node("aten::mm", R"([{"t":"x"},{"t":"gm"}])", R"(["gw"])")},
                ","));
  std::ofstream(dir + "golden.json") << doc;
  ir::Graph g = stepfile::load_step(dir + "golden.json", {});
  std::vector<std::string> lines;
  for (const ir::Node& n : g.nodes()) {
    std::string outs;
    for (ir::ValueId v : n.outputs) outs += (outs.empty() ? "" : ",") + g.value(v).name;
    lines.push_back(fmt::format("{} {} {} {}", ir::to_string(n.phase), outs.empty() ? "_" : outs,
                                ops::display_name(n),
                                n.attrs.has("tags") ? n.attrs.s("tags") : ""));
  }
  const std::vector<std::string> golden = {
      "fwd mm aten::mm ",
      "fwd relu aten::relu ",
      "fwd y.draw,mask aten::native_dropout random",
      "fwd y aten::native_dropout_backward ",
      "fwd loss aten::sum ",
      "bwd gy aten::expand view",
      "bwd gr aten::native_dropout_backward ",
      "bwd saved aten::detach view",  // sunk from the forward part to its reader
      "bwd gm aten::threshold_backward ",
      "bwd gw aten::mm ",
      "optim _ sgd_step ",
  };
  EXPECT_EQ(lines, golden) << fmt::format("{}", fmt::join(lines, "\n"));
  EXPECT_EQ(g.value(g.find("relu")).role, ir::Role::activation);  // the dropout output's recomputation reads it
  EXPECT_EQ(g.value(g.find("mask")).role, ir::Role::activation);
  EXPECT_EQ(g.value(g.find("y")).role, ir::Role::other);  // read by the sum only
  EXPECT_EQ(g.value(g.find("w")).init.kind, ir::Init::data);
  EXPECT_EQ(ops::bytes_moved(g, g.nodes()[0]), 32 + 64 + 32);  // mm: x and w read, its output written
  EXPECT_EQ(ops::bytes_moved(g, g.nodes()[5]), 4);              // expand: the tangent read, a view written
  EXPECT_EQ(g.value(g.find("input0")).role, ir::Role::input);
  EXPECT_EQ(g.value(g.find("t")).init.kind, ir::Init::ones);
}

}  // namespace
}  // namespace mutwo
