// The swap side of the simulator and the greedy, on plain data (no ATen):
// the time model with copies on their own streams or in line, checked
// against times worked out by hand on a step whose nodes all take 1 ms; the
// storage held until its copy out is done; the greedy's choice to swap where
// copies hide, and never past --no-swap or --host-memory.
#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "analysis/liveness.h"
#include "autodiff/autodiff.h"
#include "models/model.h"
#include "plan/plan.h"
#include "plan_inputs.h"
#include "rewrite/swap.h"

namespace mutwo {
namespace {

// The MLP's step, every node 1 ms, copies at `bytes_per_ms` each way. At
// batch 2048 activations outweigh the parameters and the step peaks in the
// backward pass; at 64 it peaks at the optimizer node.
plan::PlanInput mlp_input(double bytes_per_ms, bool overlap, int64_t batch = 2048) {
  models::ModelOptions o;
  o.name = "mlp";
  o.batch = batch;
  models::Model m = models::build_model(o);
  plan::PlanInput in = testing::input_of(autodiff::build_training_step(std::move(m.graph), m.loss, {}));
  std::fill(in.node_ms.begin(), in.node_ms.end(), 1.0);
  in.h2d_bytes_per_ms = in.d2h_bytes_per_ms = bytes_per_ms;
  in.copies_overlap = overlap;
  in.host_limit_bytes = int64_t{1} << 40;
  return in;
}

// The largest swappable activation and its gap (nothing recomputed: the
// rewritten graph before swapping is the input graph).
std::pair<ir::ValueId, rewrite::Gap> largest_activation(const plan::PlanInput& in) {
  const analysis::Liveness L = analysis::analyze_liveness(in.graph);
  const std::vector<rewrite::Gap> gaps = rewrite::swap_gaps(in.graph, L);
  ir::ValueId best = ir::kNoValue;
  for (ir::ValueId v : plan::swap_candidates(in))
    if (in.graph.value(v).role == ir::Role::activation &&
        (best == ir::kNoValue || in.graph.type(v).bytes() > in.graph.type(best).bytes()))
      best = v;
  return {best, gaps[static_cast<size_t>(best)]};
}

TEST(SwapTime, InLineCopiesCostTheirWholeTime) {
  const plan::PlanInput in = mlp_input(1e6, /*overlap=*/false);
  const auto [x, gap] = largest_activation(in);
  ASSERT_NE(x, ir::kNoValue);
  const double bytes = static_cast<double>(in.graph.type(x).bytes());
  const plan::Simulation s = plan::simulate(in, {}, {x});
  const double nodes = static_cast<double>(in.graph.nodes().size());
  EXPECT_DOUBLE_EQ(s.swap_ms, 2 * bytes / 1e6);
  EXPECT_DOUBLE_EQ(s.step_ms, nodes + 2 * bytes / 1e6);
  EXPECT_DOUBLE_EQ(s.extra_ms, s.swap_ms);
  EXPECT_EQ(s.swapped, 1);
  EXPECT_EQ(s.host_peak_bytes, in.graph.type(x).bytes());
}

TEST(SwapTime, CopiesThatFitTheGapAreHidden) {
  const plan::PlanInput in = mlp_input(1e12, /*overlap=*/true);
  const auto [x, gap] = largest_activation(in);
  const plan::Simulation s = plan::simulate(in, {}, {x});
  EXPECT_NEAR(s.swap_ms, 0, 1e-6);
  EXPECT_NEAR(s.step_ms, static_cast<double>(in.graph.nodes().size()), 1e-6);
  EXPECT_LT(s.peak_bytes, plan::simulate(in, {}).peak_bytes) << "the MLP peaks inside the gap of its largest activation";
}

TEST(SwapTime, ACopyLongerThanItsGapStallsCompute) {
  // Copies each as long as the gap's g nodes: the copy out ends g ms into
  // the gap, the copy back (which must wait for it) g ms later, at g ms past
  // the first read after the gap. Compute stalls g ms there.
  plan::PlanInput in = mlp_input(1, /*overlap=*/true);
  const auto [x, gap] = largest_activation(in);
  const double g = gap.after - gap.before - 1;
  ASSERT_GT(g, 0);
  in.h2d_bytes_per_ms = in.d2h_bytes_per_ms = static_cast<double>(in.graph.type(x).bytes()) / g;
  const plan::Simulation s = plan::simulate(in, {}, {x});
  EXPECT_NEAR(s.swap_ms, g, 1e-9);
  EXPECT_NEAR(s.step_ms, static_cast<double>(in.graph.nodes().size()) + g, 1e-9);
}

TEST(SwapTime, AStorageIsHeldUntilItsCopyOutIsDone) {
  // In line, the copy out frees the storage at once; on a stream as slow as
  // the whole step, the storage is held to the end and swapping frees nothing.
  plan::PlanInput in = mlp_input(1e12, /*overlap=*/false);
  const auto [x, gap] = largest_activation(in);
  const int64_t unswapped = plan::simulate(in, {}).peak_bytes;
  EXPECT_LT(plan::simulate(in, {}, {x}).peak_bytes, unswapped);
  in.copies_overlap = true;
  in.d2h_bytes_per_ms = static_cast<double>(in.graph.type(x).bytes()) / (10.0 * static_cast<double>(in.graph.nodes().size()));
  EXPECT_GE(plan::simulate(in, {}, {x}).peak_bytes, unswapped);
}

TEST(SwapGreedy, SwapsWhereCopiesHideAndHonoursItsLimits) {
  plan::PlanInput in = mlp_input(1e12, /*overlap=*/true);
  in.swap = false;
  const plan::Plan recompute_only = plan::plan_mutwo(in, 0);
  EXPECT_TRUE(recompute_only.swap.empty()) << "--no-swap";
  in.swap = true;
  const plan::Plan hybrid = plan::plan_mutwo(in, 0);
  EXPECT_FALSE(hybrid.swap.empty());
  EXPECT_LT(hybrid.predicted.peak_bytes, recompute_only.predicted.peak_bytes) << "below the recompute floor";
  // Hidden copies cost less than recomputation.
  const int64_t budget = recompute_only.predicted.peak_bytes;
  const plan::Plan at_floor = plan::plan_mutwo(in, budget);
  EXPECT_TRUE(at_floor.feasible);
  EXPECT_LT(at_floor.predicted.extra_ms, recompute_only.predicted.extra_ms);
  // --host-memory: never more swapped than the host may hold.
  in.host_limit_bytes = in.graph.type(hybrid.swap.front()).bytes();
  const plan::Plan limited = plan::plan_mutwo(in, 0);
  int64_t swapped = 0;
  for (ir::ValueId v : limited.swap) swapped += in.graph.type(v).bytes();
  EXPECT_LE(swapped, in.host_limit_bytes);
  EXPECT_LE(limited.predicted.host_peak_bytes, in.host_limit_bytes);
  // No copy speed (a profile from before swapping): recomputation only.
  in.host_limit_bytes = int64_t{1} << 40;
  in.h2d_bytes_per_ms = 0;
  EXPECT_TRUE(plan::plan_mutwo(in, 0).swap.empty());
}

// Where persistent state and gradients make the floor (the MLP at batch 64
// peaks at its optimizer node), the greedy swaps gradients and momentum: the
// optimizer node is split and the state kept in host memory between steps.
TEST(SwapGreedy, GoesBelowThePersistentFloorWithGradientsAndState) {
  plan::PlanInput in = mlp_input(1e9, /*overlap=*/true, 64);
  in.swap = false;
  const plan::Plan recompute_only = plan::plan_mutwo(in, 0);
  in.swap = true;
  const plan::Plan hybrid = plan::plan_mutwo(in, 0);
  EXPECT_LT(hybrid.predicted.peak_bytes, recompute_only.predicted.peak_bytes);
  std::set<ir::Role> roles;
  for (ir::ValueId v : hybrid.swap) roles.insert(in.graph.value(v).role);
  EXPECT_TRUE(roles.count(ir::Role::optimizer_state)) << "momentum swapped";
  const rewrite::Rewritten r = plan::rewrite_plan(in, hybrid);
  const analysis::Liveness L = analysis::analyze_liveness(r.graph);
  EXPECT_LT(L.persistent_bytes, analysis::analyze_liveness(in.graph).persistent_bytes) << "state kept in host memory";
  EXPECT_GT(L.host_persistent_bytes, 0);
  int optimizer_nodes = 0, writes_back = 0;
  for (const ir::Node& n : r.graph.nodes()) {
    optimizer_nodes += n.op == "sgd_step";
    writes_back += n.op == "swap_into";
  }
  EXPECT_GT(optimizer_nodes, 1) << "the multi-tensor optimizer node is split";
  EXPECT_GT(writes_back, 0);
}

}  // namespace
}  // namespace mutwo
