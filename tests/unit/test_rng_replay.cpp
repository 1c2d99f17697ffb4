// Generator replay (so that dropout's outputs are candidates too): random nodes recomputed from the
// generator state an rng_save node took in the forward pass. On the CPU:
// planned steps with the dropout masks dropped equal the unplanned step bit for
// bit over three steps (losses, every gradient, the generator's state after
// each step); a node replayed twice in one backward pass draws the same mask;
// the rewritten step round-trips through IR text and runs the same; the
// verifier refuses a recomputed random node without its state; plan.json
// lists the replayed nodes; the greedy's lowest peak falls.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "autodiff/autodiff.h"
#include "ir/text.h"
#include "kernels/rng_state.h"
#include "models/model.h"
#include "ops/op.h"
#include "plan/plan.h"
#include "plan/plan_file.h"
#include "profile/profile.h"
#include "rewrite/recompute.h"
#include "runtime/executor.h"
#include "support/error.h"
#include "tiny_transformers.h"

namespace mutwo {
namespace {

// The zoo's transformers at small sizes, dropout 0.1 everywhere.
ir::Graph step_of(const std::string& model, int64_t batch = 2, int64_t seq = 16) {
  models::Model m;
  if (model == "gpt2") {  // GPT-2's structure at toy width (gpt2-small itself is 124M parameters)
    models::GptConfig c = testing::tiny_gpt(0.1);
    c.batch = batch;
    m = models::build_gpt(c);
  } else {
    models::ModelOptions o;
    o.name = model;
    o.batch = batch;
    o.seq = seq;
    o.dropout = 0.1;
    m = models::build_model(o);
  }
  return autodiff::build_training_step(std::move(m.graph), m.loss, {});
}

plan::PlanInput input_of(const ir::Graph& g) { return plan::make_input(profile::estimate_profile(g, "cpu")); }

bool made_by_random(const ir::Graph& g, ir::ValueId v) {
  ir::UseIndex uses(g);
  const int32_t p = uses.producer[static_cast<size_t>(v)];
  return p >= 0 && ops::has(g.nodes()[static_cast<size_t>(p)], ops::kRandom);
}

// Every candidate (masks = true: only those a random node makes).
std::vector<ir::ValueId> droppable(const plan::PlanInput& in, bool masks) {
  std::vector<ir::ValueId> drop;
  for (const plan::Candidate& c : plan::candidates(in))
    if (!masks || made_by_random(in.graph, c.owner)) drop.insert(drop.end(), c.members.begin(), c.members.end());
  return drop;
}

int count_op(const ir::Graph& g, const std::string& op) {
  int n = 0;
  for (const ir::Node& node : g.nodes()) n += node.op == op;
  return n;
}

// Three steps from one seed, drawing from ATen's default CPU generator.
struct Trace {
  std::vector<double> losses;
  std::map<std::string, std::vector<at::Tensor>> grads;  // per gradient: one per step
  std::vector<at::Tensor> rng;                            // the generator's state after each step
  std::vector<at::Tensor> params;
};

struct GradientWatch : runtime::NodeObserver {
  runtime::Executor* ex = nullptr;
  Trace* t = nullptr;
  void after(size_t n) override {
    for (ir::ValueId v : ex->graph().nodes()[n].outputs)
      if (ex->graph().value(v).role == ir::Role::gradient) t->grads[ex->graph().value(v).name].push_back(ex->value(v).clone());
  }
};

Trace run(const ir::Graph& g, int steps = 3) {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(29);
  }
  runtime::ExecutorOptions o;
  o.seed = 3;
  o.default_generator = true;
  runtime::Executor ex(g, o);
  Trace t;
  GradientWatch watch;
  watch.ex = &ex;
  watch.t = &t;
  ex.set_observer(&watch);
  ex.initialize();
  for (int s = 0; s < steps; ++s) {
    t.losses.push_back(ex.step().outputs.at(0));
    std::lock_guard<std::mutex> lock(gen.mutex());
    t.rng.push_back(gen.get_state());
  }
  for (const ir::Value& v : g.values())
    if (v.role == ir::Role::parameter) t.params.push_back(ex.value(v.id).clone());
  return t;
}

void expect_same(const Trace& a, const Trace& b) {
  EXPECT_EQ(a.losses, b.losses);  // bit for bit
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (const auto& [name, steps] : a.grads) {
    ASSERT_EQ(b.grads.count(name), 1u) << name;
    ASSERT_EQ(steps.size(), b.grads.at(name).size()) << name;
    for (size_t s = 0; s < steps.size(); ++s) EXPECT_TRUE(at::equal(steps[s], b.grads.at(name)[s])) << name << " step " << s;
  }
  ASSERT_EQ(a.rng.size(), b.rng.size());
  for (size_t s = 0; s < a.rng.size(); ++s) EXPECT_TRUE(at::equal(a.rng[s], b.rng[s])) << "generator after step " << s;
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) EXPECT_TRUE(at::equal(a.params[i], b.params[i])) << "parameter " << i;
}

TEST(RngReplay, MasksDroppedGiveTheUnplannedStepBitForBit) {
  for (const char* model : {"bert-tiny", "gpt2", "transformer-lm"}) {
    SCOPED_TRACE(model);
    plan::PlanInput in = input_of(step_of(model));
    const Trace base = run(in.graph);
    for (bool masks_only : {true, false}) {
      SCOPED_TRACE(masks_only ? "masks dropped" : "every candidate dropped");
      const std::vector<ir::ValueId> drop = droppable(in, masks_only);
      rewrite::Rewritten r = rewrite::insert_recomputation(in.graph, drop);
      ASSERT_NO_THROW(ops::verify(r.graph));
      int masks = 0;
      for (ir::ValueId v : drop) masks += made_by_random(in.graph, v);
      ASSERT_GT(masks, 0);
      EXPECT_EQ(count_op(r.graph, "rng_save"), masks) << "one saved state per recomputed mask";
      expect_same(base, run(r.graph));
    }
  }
}

// Sizes at which masks are idle at the greedy's peaks (at batch 2 and
// sequence 16 the parameters' side of the step peaks, where no mask is live).
ir::Graph planning_step(const std::string& model) {
  return model == "bert-tiny" ? step_of(model, 16, 128) : step_of(model, 32);
}

// The greedy's lowest-peak plan (budget 0) drops masks, and its step (the
// vocabulary loss in the plan's chunks) is the unplanned one's.
TEST(RngReplay, GreedysLowestPlanReplaysAndTrainsAsUnplanned) {
  for (const char* model : {"transformer-lm"}) {
    SCOPED_TRACE(model);
    plan::PlanInput in = input_of(planning_step(model));
    in.swap = false;
    const plan::Plan p = plan::run_planner("mutwo", in, 0);
    EXPECT_FALSE(plan::replayed_random(in, p).empty());
    expect_same(run(plan::chunked_graph(in.graph, p)), run(plan::rewrite_plan(in, p).graph));
  }
}

// The lowest peak the greedy reaches falls once masks may be dropped.
TEST(RngReplay, LowestPeakFallsWhenMasksMayBeDropped) {
  for (const char* model : {"bert-tiny", "transformer-lm"}) {
    plan::PlanInput in = input_of(planning_step(model));
    in.swap = false;
    in.replay_random = false;
    const int64_t kept = plan::run_planner("mutwo", in, 0).predicted.peak_bytes;
    in.replay_random = true;
    const int64_t replayed = plan::run_planner("mutwo", in, 0).predicted.peak_bytes;
    std::printf("[ %s ] lowest peak %lld B with masks kept, %lld B with masks replayed\n", model,
                static_cast<long long>(kept), static_cast<long long>(replayed));
    EXPECT_LT(replayed, kept) << model;
  }
}

// Records every output of the watched nodes, in order.
struct NodeWatch : runtime::NodeObserver {
  runtime::Executor* ex = nullptr;
  std::set<size_t> nodes;
  std::vector<at::Tensor> got;
  void after(size_t n) override {
    if (nodes.count(n)) got.push_back(ex->value(ex->graph().nodes()[n].outputs.at(0)).clone());
  }
};

// One random node recomputed twice in one backward pass (the second clone made
// by hand before the mask's last reader, other masks replayed in between)
// draws the forward pass's mask both times.
TEST(RngReplay, ARandomNodeRecomputedTwiceDrawsTheSameMask) {
  plan::PlanInput in = input_of(step_of("gpt2"));
  rewrite::Rewritten r = rewrite::insert_recomputation(in.graph, droppable(in, false));
  ir::Graph& g = r.graph;
  ir::UseIndex uses(g);
  // The first replayed clone whose mask two later nodes read.
  size_t clone = 0;
  for (size_t n = 0; n < g.nodes().size() && !clone; ++n)
    if (ops::replays_rng(g.nodes()[n]) && uses.users[static_cast<size_t>(g.nodes()[n].outputs[0])].size() >= 2) clone = n;
  ASSERT_GT(clone, 0u);
  const ir::ValueId mask = g.nodes()[clone].outputs[0];
  const auto last = static_cast<size_t>(uses.users[static_cast<size_t>(mask)].back());
  ir::Node again = g.nodes()[clone];
  again.outputs = {g.add_value(g.unique_name(g.value(mask).name), g.type(mask), ir::Role::other)};
  for (ir::ValueId& v : g.nodes()[last].inputs)
    if (v == mask) v = again.outputs[0];
  const auto forward = static_cast<size_t>(r.origin[clone]);
  size_t fwd_rank = 0;  // the forward node's rank in the rewritten step (rng_save nodes come before it)
  for (size_t n = 0; n < g.nodes().size(); ++n)
    if (r.origin[n] == static_cast<int32_t>(forward) && g.nodes()[n].phase != ir::Phase::recompute) fwd_rank = n;
  g.nodes().insert(g.nodes().begin() + static_cast<std::ptrdiff_t>(last), again);
  ASSERT_NO_THROW(ops::verify(g));
  int between = 0;
  for (size_t n = clone + 1; n < last; ++n) between += ops::replays_rng(g.nodes()[n]);
  EXPECT_GT(between, 0) << "another replay runs between the two";

  runtime::ExecutorOptions o;
  o.default_generator = true;
  runtime::Executor ex(g, o);
  NodeWatch watch;
  watch.ex = &ex;
  watch.nodes = {fwd_rank, clone, last};  // `last` is now the second clone, just before the mask's last reader
  ex.set_observer(&watch);
  ex.initialize();
  ex.step();
  ASSERT_EQ(watch.got.size(), 3u);
  EXPECT_TRUE(at::equal(watch.got[0], watch.got[1])) << "first recomputation";
  EXPECT_TRUE(at::equal(watch.got[0], watch.got[2])) << "second recomputation";
  EXPECT_GT(watch.got[0].numel() - watch.got[0].sum().item<int64_t>(), 0) << "the mask drops something";
}

// The rewritten step printed as IR, parsed back and run, trains as before.
TEST(RngReplay, RewrittenStepRoundTripsThroughIrText) {
  plan::PlanInput in = input_of(step_of("transformer-lm"));
  rewrite::Rewritten r = rewrite::insert_recomputation(in.graph, droppable(in, true));
  const std::string text = ir::print(r.graph);
  EXPECT_NE(text.find(" = rng_save() fwd"), std::string::npos);
  EXPECT_NE(text.find("rng_replay=1} recompute"), std::string::npos);
  ir::Graph back = ir::parse(text);
  ASSERT_NO_THROW(ops::verify(back));
  EXPECT_EQ(ir::print(back), text);
  expect_same(run(in.graph), run(back));
}

// A recomputed random node without its state is refused on load, naming it.
TEST(RngReplay, VerifierRefusesARecomputedRandomNodeWithoutItsState) {
  plan::PlanInput in = input_of(step_of("transformer-lm"));
  const std::string text = ir::print(rewrite::insert_recomputation(in.graph, droppable(in, true)).graph);
  const std::string line_end = ", rng_replay=1} recompute";
  const size_t pos = text.find(line_end);
  ASSERT_NE(pos, std::string::npos);
  const size_t open = text.rfind("(", pos), close = text.rfind(")", pos);
  const size_t comma = text.rfind(", %", close);
  ASSERT_TRUE(open < comma && comma < close);
  std::string stateless = text;  // the attribute and the state input gone
  stateless.erase(pos, std::string(", rng_replay=1").size());
  stateless.erase(comma, close - comma);
  try {
    ops::verify(ir::parse(stateless));
    ADD_FAILURE() << "a recomputed random node without its state was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("may not be recomputed without its generator state"), std::string::npos)
        << e.what();
  }
  std::string no_input = text;  // the attribute kept, the state input gone
  no_input.erase(comma, close - comma);
  EXPECT_THROW(ops::verify(ir::parse(no_input)), UserError);
}

// plan.json (version 4) lists the replayed nodes; applying it checks them.
TEST(RngReplay, PlanJsonListsTheReplayedNodes) {
  plan::PlanInput in = input_of(planning_step("transformer-lm"));
  in.swap = false;
  const plan::Plan p = plan::run_planner("mutwo", in, 0);
  const std::vector<plan::ReplayedNode> replayed = plan::replayed_random(in, p);
  ASSERT_FALSE(replayed.empty());
  EXPECT_EQ(replayed[0].state, replayed[0].node + ".rng_state");
  EXPECT_EQ(replayed[0].state_bytes, ops::kRngStateWords * 8);
  const std::string path = (std::filesystem::temp_directory_path() / "mutwo_rng_plan.json").string();
  plan::write_plan_json(in, p, 0, path);
  plan::SavedPlan s = plan::read_plan(path);
  ASSERT_TRUE(s.replayed.has_value());
  EXPECT_EQ(s.replayed->size(), replayed.size());
  EXPECT_EQ(plan::apply_plan(in, s).drop.size(), p.drop.size());
  s.replayed->pop_back();
  EXPECT_THROW(plan::apply_plan(in, s), UserError);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace mutwo
