// μ-TWO's scheduler on plain data (plan/orders.h): the candidate orders of
// composed copies (phase by phase, sequential, paired), the phase rule that
// lets independent sub-graphs interleave (ir/verify.h), and the choice of
// the fastest order that fits, ties to the lower peak, as golden cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "autodiff/autodiff.h"
#include "ir/text.h"
#include "ir/verify.h"
#include "models/copies.h"
#include "models/model.h"
#include "ops/op.h"
#include "plan/orders.h"
#include "plan/plan.h"
#include "plan_inputs.h"
#include "support/error.h"

namespace mutwo {
namespace {

ir::Graph mlp_step(int64_t batch) {
  models::ModelOptions o;
  o.name = "mlp";
  o.batch = batch;
  models::Model m = models::build_model(o);
  return autodiff::build_training_step(std::move(m.graph), m.loss, {});
}

models::Copies mlp_copies(size_t n, int64_t batch) { return models::compose_copies(std::vector<ir::Graph>(n, mlp_step(batch))); }

// "c<copy><f|b>" per position: the copy and part (forward: fwd and loss; backward: bwd and optim) of each node.
std::vector<std::string> parts(const ir::Graph& g) {
  const std::vector<int32_t> sub = ir::independent_subgraphs(g);
  std::vector<std::string> out;
  for (size_t n = 0; n < g.nodes().size(); ++n)
    out.push_back("c" + std::to_string(sub[n]) + (ir::is_forward(g.nodes()[n].phase) ? "f" : "b"));
  return out;
}

// The parts collapsed into runs: c0f c0f c1f -> "c0f c1f".
std::string runs(const std::vector<std::string>& p) {
  std::string out;
  for (size_t i = 0; i < p.size(); ++i)
    if (i == 0 || p[i] != p[i - 1]) out += (out.empty() ? "" : " ") + p[i];
  return out;
}

TEST(Subgraphs, EachCopyIsOneSubgraphNumberedByItsFirstNode) {
  const models::Copies c = mlp_copies(3, 4);
  const std::vector<int32_t> sub = ir::independent_subgraphs(c.graph);
  for (size_t n = 0; n < c.graph.nodes().size(); ++n)
    EXPECT_EQ(c.graph.nodes()[n].scope.rfind("copy" + std::to_string(sub[n]), 0), 0u) << n;
  const ir::Graph one = mlp_step(4);
  for (int32_t s : ir::independent_subgraphs(one)) EXPECT_EQ(s, 0) << "one model's step is one sub-graph";
}

TEST(Subgraphs, PhasesOutOfOrderWithinACopyAreRefused) {
  // Two independent chains: b's backward before a's forward passes (they
  // share nothing); a backward node before its own sub-graph's forward does not.
  const ir::Graph apart = ir::parse(
      "graph t\n%x : f32[4] input\n%y : f32[4] input\n%b : f32[4] other = relu(%y) bwd\n"
      "%a : f32[4] other = relu(%x) fwd\n");
  EXPECT_NO_THROW(ops::verify(apart));
  const ir::Graph joined = ir::parse(
      "graph t\n%x : f32[4] input\n%y : f32[4] input\n%b : f32[4] other = relu(%y) bwd\n"
      "%a : f32[4] other = add(%x, %y) fwd\n");
  try {
    ops::verify(joined);
    FAIL() << "verified";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("phase fwd comes after a later phase"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("within each independent sub-graph"), std::string::npos) << e.what();
  }
}

TEST(CopyOrders, GoldenRunsOfThreeCopies) {
  const models::Copies c = mlp_copies(3, 4);
  auto order = [&](plan::CopyOrder o) {
    return plan::reorder(c.graph, plan::copy_schedule(c.graph, o, {}));  // verified
  };
  const ir::Graph by_phase = order(plan::CopyOrder::by_phase);
  EXPECT_EQ(ir::print(by_phase), ir::print(c.graph)) << "by-phase is the order the copies are composed in";
  EXPECT_EQ(runs(parts(by_phase)), "c0f c1f c2f c0f c1f c2f c0b c1b c2b c0b c1b c2b");  // fwd, loss, bwd, optim
  EXPECT_EQ(runs(parts(order(plan::CopyOrder::sequential))), "c0f c0b c1f c1b c2f c2b");
  // Paired: F_0, then B_0 and F_1 interleaved, B_1 and F_2, then B_2; with
  // one weight per node, node by node in proportion.
  EXPECT_EQ(runs(parts(order(plan::CopyOrder::paired))),
            "c0f c0b c1f c0b c1f c0b c1f c0b c1f c0b c1f c0b c1f c0b c1f c0b c1f c0b c1f c0b c1f c0b c1f c0b "
            "c1b c2f c1b c2f c1b c2f c1b c2f c1b c2f c1b c2f c1b c2f c1b c2f c1b c2f c1b c2f c1b c2f c1b c2b");
  // Each copy's own nodes keep their order: the sub-graph of each position is the input's.
  const ir::Graph p = order(plan::CopyOrder::paired);
  for (size_t k = 0; k < 3; ++k) {
    std::vector<std::string> mine, theirs;
    for (const ir::Node& n : p.nodes())
      if (n.scope.rfind("copy" + std::to_string(k), 0) == 0) mine.push_back(ir::print_node(p, n));
    for (const ir::Node& n : c.graph.nodes())
      if (n.scope.rfind("copy" + std::to_string(k), 0) == 0) theirs.push_back(ir::print_node(c.graph, n));
    EXPECT_EQ(mine, theirs) << k;
  }
}

TEST(CopyOrders, PairedInterleavesByTime) {
  // A backward part three times its forward's time: per forward node of the
  // next copy, about three backward nodes of this one.
  const models::Copies c = mlp_copies(2, 4);
  std::vector<double> ms;
  for (const ir::Node& n : c.graph.nodes()) ms.push_back(ir::is_forward(n.phase) ? 1.0 : 3.0);
  const ir::Graph p = plan::reorder(c.graph, plan::copy_schedule(c.graph, plan::CopyOrder::paired, ms));
  const std::vector<std::string> part = parts(p);
  size_t f0 = std::count(part.begin(), part.end(), "c0f"), b0 = std::count(part.begin(), part.end(), "c0b");
  // Where half of copy 0's backward time is done, about half of copy 1's forward nodes are placed.
  size_t seen_b = 0, seen_f = 0;
  for (size_t k = f0; k < part.size() && seen_b < b0 / 2; ++k) {
    seen_b += part[k] == "c0b";
    seen_f += part[k] == "c1f";
  }
  EXPECT_NEAR(static_cast<double>(seen_f) / static_cast<double>(f0), 0.5, 0.2);
}

TEST(CopyOrders, OneCopyKeepsItsOrder) {
  const ir::Graph one = mlp_step(4);
  for (plan::CopyOrder o : plan::copy_orders()) {
    const std::vector<int32_t> s = plan::copy_schedule(one, o, {});
    for (size_t k = 0; k < s.size(); ++k) EXPECT_EQ(s[k], static_cast<int32_t>(k)) << plan::to_string(o);
  }
}

TEST(CopyOrders, ReorderedInputMovesEachNodesRecords) {
  const models::Copies c = mlp_copies(2, 64);
  const plan::PlanInput in = testing::with_random_times(testing::input_of(c.graph), 7);
  const std::vector<int32_t> s = plan::copy_schedule(in.graph, plan::CopyOrder::paired, in.node_ms);
  const plan::PlanInput r = plan::reorder(in, s);
  for (size_t k = 0; k < s.size(); ++k) {
    const auto from = static_cast<size_t>(s[k]);
    EXPECT_EQ(r.node_ms[k], in.node_ms[from]);
    EXPECT_EQ(r.profile.nodes[k].name, in.profile.nodes[from].name);
    EXPECT_EQ(r.profile.nodes[k].rank, static_cast<int32_t>(k));
  }
  EXPECT_EQ(r.profile.values.size(), in.profile.values.size());
  EXPECT_NEAR(plan::simulate(r, {}).step_ms, plan::simulate(in, {}).step_ms, 1e-9);
}

// Paired's interleaving is the step's, not the timing's: profiles of one step
// with different measured times give one paired order (so a budget drops the
// same values in every run).
TEST(ChooseOrder, PairedOrderIsTheSameWhateverTheTimings) {
  const models::Copies c = mlp_copies(2, 64);
  const plan::PlanOptions o;  // no budget
  std::vector<std::vector<int32_t>> schedules;
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    const plan::PlannedStep p = plan::prepare(testing::with_random_times(testing::input_of(c.graph), seed));
    schedules.push_back(plan::choose_order(p, o, {plan::CopyOrder::paired}).best().schedule);
  }
  for (size_t i = 1; i < schedules.size(); ++i) EXPECT_EQ(schedules[i], schedules[0]) << "seed " << i + 1;
}

const plan::OrderCandidate& of(const plan::OrderChoice& c, plan::CopyOrder o) {
  for (const plan::OrderCandidate& k : c.candidates)
    if (k.order == o) return k;
  throw std::runtime_error("no candidate " + plan::to_string(o));
}

int64_t peak(const plan::OrderChoice& c, plan::CopyOrder o) { return of(c, o).step.plan.predicted.peak_bytes; }

// Golden peaks of three MLP copies at batch 2048 (activations outweigh the
// parameters), no plan: every order takes the same time, so the lowest peak
// wins. Sequential holds one copy's activations at a time: its peak is one
// copy's alone plus the other copies' persistent bytes and losses (the
// step's outputs, held to its end). Paired holds one
// copy's draining and the next one's growing; by-phase all three.
TEST(ChooseOrder, UnplannedTheLowerPeakWins) {
  const plan::PlanInput one = testing::input_of(mlp_step(2048));
  const int64_t alone = plan::simulate(one, {}).peak_bytes;
  const plan::PlannedStep p = plan::prepare(testing::input_of(mlp_copies(3, 2048).graph));
  plan::PlanOptions o;  // no budget
  const plan::OrderChoice all = plan::choose_order(p, o, plan::copy_orders());
  EXPECT_EQ(plan::to_string(all.best().order), "sequential");
  const int64_t loss = one.graph.type(one.graph.outputs.at(0)).bytes();
  EXPECT_EQ(peak(all, plan::CopyOrder::sequential), alone + 2 * (one.profile.persistent_bytes + loss));
  EXPECT_LT(peak(all, plan::CopyOrder::paired), peak(all, plan::CopyOrder::by_phase));
  EXPECT_LE(peak(all, plan::CopyOrder::sequential), peak(all, plan::CopyOrder::paired));
  EXPECT_EQ(peak(all, plan::CopyOrder::by_phase), p.unplanned_peak);
  for (const plan::OrderCandidate& k : all.candidates)
    EXPECT_NEAR(k.step.plan.predicted.step_ms, all.best().step.plan.predicted.step_ms, 1e-9) << plan::to_string(k.order);
  // Paired against phase order: the paired order [B_0, F_1] lowers the peak, and is chosen.
  const plan::OrderChoice two = plan::choose_order(p, o, {plan::CopyOrder::by_phase, plan::CopyOrder::paired});
  EXPECT_EQ(plan::to_string(two.best().order), "paired");
}

// Under one byte budget below by-phase's unplanned peak, each order is
// planned: by-phase must recompute, sequential fits as it is: sequential is
// the faster that fits. A fraction is resolved once, on the step as given.
TEST(ChooseOrder, UnderABudgetTheFastestThatFits) {
  const plan::PlannedStep p = plan::prepare(testing::input_of(mlp_copies(3, 2048).graph));
  plan::PlanOptions o;
  o.budget = Budget::of_fraction(0.5);
  const plan::OrderChoice c = plan::choose_order(p, o, plan::copy_orders());
  const int64_t bytes = plan::budget_bytes(p, o);
  for (const plan::OrderCandidate& k : c.candidates) {
    EXPECT_EQ(k.step.plan.budget_bytes, bytes) << plan::to_string(k.order);
    EXPECT_TRUE(k.step.plan.feasible) << plan::to_string(k.order);
    EXPECT_LE(k.step.plan.predicted.peak_bytes, bytes) << plan::to_string(k.order);
  }
  EXPECT_GT(of(c, plan::CopyOrder::by_phase).step.plan.drop.size(), 0u);
  EXPECT_EQ(plan::to_string(c.best().order), "sequential");
  EXPECT_LT(c.best().step.plan.predicted.step_ms, of(c, plan::CopyOrder::by_phase).step.plan.predicted.step_ms);
  // A budget below every order's lowest peak: none fits, the lowest is named.
  o.budget = Budget::of_bytes(1);
  const plan::OrderChoice none = plan::choose_order(p, o, plan::copy_orders());
  EXPECT_FALSE(none.best().step.plan.feasible);
  for (const plan::OrderCandidate& k : none.candidates)
    EXPECT_LE(none.best().step.plan.predicted.peak_bytes, k.step.plan.predicted.peak_bytes);
}

// Swapping on CUDA's terms (copies on their own streams beside compute), on
// three MLP copies at batch 512, every node 1 ms, under 20% (of by-phase's
// activation memory). Each order fits by swapping; what differs is how much
// of the copies' time hides behind compute. Golden, from the greedy's plans
// (plan_mutwo): a change to the greedy may move them.
plan::OrderChoice swapping(double bytes_per_ms) {
  plan::PlanInput in = testing::input_of(mlp_copies(3, 512).graph);
  std::fill(in.node_ms.begin(), in.node_ms.end(), 1.0);
  in.h2d_bytes_per_ms = in.d2h_bytes_per_ms = bytes_per_ms;
  in.copies_overlap = true;
  in.host_limit_bytes = int64_t{1} << 40;
  plan::PlanOptions o;
  o.budget = Budget::of_fraction(0.2);
  return plan::choose_order(plan::prepare(std::move(in)), o, plan::copy_orders());
}

double ms(const plan::OrderChoice& c, plan::CopyOrder o) { return of(c, o).step.plan.predicted.step_ms; }

// At 1 MB/ms, sequential's swaps stall compute (its activations' gaps hold
// one copy's work); paired's gaps hold the next copy's forward too, and hide
// them: paired [B_0, F_1] is the fastest that fits.
TEST(ChooseOrder, PairedWhereItsGapsHideTheSwaps) {
  const plan::OrderChoice c = swapping(1e6);
  for (const plan::OrderCandidate& k : c.candidates) EXPECT_TRUE(k.step.plan.feasible) << plan::to_string(k.order);
  EXPECT_EQ(plan::to_string(c.best().order), "paired");
  EXPECT_GT(of(c, plan::CopyOrder::paired).step.plan.swap.size(), 0u);
  EXPECT_NEAR(ms(c, plan::CopyOrder::paired), 81.0, 1e-6) << "81 nodes of 1 ms, every copy hidden";
  EXPECT_GT(ms(c, plan::CopyOrder::sequential), 81.0 + 1e-3);
  EXPECT_GT(ms(c, plan::CopyOrder::by_phase), 81.0 + 1e-3);
}

// At 10 MB/ms, phase order's longest gaps hide all its swaps and its peak is
// the lowest of the orders that hide theirs: phase order is chosen.
TEST(ChooseOrder, PhaseOrderWhereItIsBetter) {
  const plan::OrderChoice c = swapping(1e7);
  EXPECT_EQ(plan::to_string(c.best().order), "by-phase");
  EXPECT_NEAR(ms(c, plan::CopyOrder::by_phase), 81.0, 1e-6);
  EXPECT_GT(ms(c, plan::CopyOrder::sequential), 81.0 + 1e-3);
  EXPECT_LT(peak(c, plan::CopyOrder::by_phase), peak(c, plan::CopyOrder::paired));
}

}  // namespace
}  // namespace mutwo
