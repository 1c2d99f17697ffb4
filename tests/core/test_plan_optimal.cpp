// The optimal planner (Checkmate's MILP on mu-TWO's decisions, CBC): its plans
// fit the budget in simulation, never cost more than the greedy's, drop nothing
// when nothing is needed, say why when no plan fits, report the time limit and
// gap. PlanInputs come from graphs alone (profile::describe, synthetic times).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "autodiff/autodiff.h"
#include "plan_inputs.h"
#include "models/model.h"
#include "ops/builder.h"
#include "ops/op.h"
#include "plan/optimal.h"
#include "profile/profile.h"
#include "support/error.h"

namespace mutwo {
namespace {

using testing::input_of;
using testing::with_random_times;

plan::PlanInput mlp(int64_t depth, double dropout = 0.1) {
  models::MlpConfig c;
  c.batch = 64;
  c.in_features = 32;
  c.hidden = 24;
  c.depth = depth;
  c.dropout = dropout;
  models::Model m = models::build_mlp(c);
  return input_of(autodiff::build_training_step(std::move(m.graph), m.loss, {}));
}

// A hand-built chain: linear then `n` blocks of tanh (or, with `residual`, h + tanh(linear(h))), mean as the loss.
plan::PlanInput chain(int n, bool residual) {
  ir::Graph g;
  g.name = residual ? "residual_chain" : "chain";
  ops::Builder b(g);
  const int64_t B = 64, H = 16;
  ir::ValueId x = b.input("x", {{B, H}, ir::DType::f32}, ir::Role::input, {ir::Init::normal, 0, 1});
  auto linear = [&](ir::ValueId h, const std::string& name) {
    ir::ValueId w = b.input(name + ".weight", {{H, H}, ir::DType::f32}, ir::Role::parameter, {ir::Init::uniform, -0.2, 0.2});
    ir::ValueId bias = b.input(name + ".bias", {{H}, ir::DType::f32}, ir::Role::parameter, {ir::Init::zeros});
    return b.op("linear", {h, w, bias}, {}, name + ".out");  // (B, H)
  };
  ir::ValueId h = linear(x, "in");
  for (int i = 0; i < n; ++i) {
    std::string s = fmt::format("block{}", i);
    if (residual) h = b.op("add", {h, b.op("tanh", {linear(h, s)}, {}, s + ".tanh")}, {}, s + ".add");
    else h = b.op("tanh", {h}, {}, s + ".tanh");
  }
  b.phase = ir::Phase::loss;
  ir::ValueId loss = b.op("mean", {h}, {}, "loss");  // ()
  return input_of(autodiff::build_training_step(std::move(g), loss, {}));
}

std::vector<plan::PlanInput> small_graphs() { return {mlp(3), mlp(4, 0.0), chain(8, false), chain(4, true)}; }

int64_t unplanned(const plan::PlanInput& in) { return plan::simulate(in, {}).peak_bytes; }

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

#define SKIP_WITHOUT_CBC() \
  if (!plan::optimal_planner_built()) GTEST_SKIP() << "built with -DMUTWO_WITH_CBC=OFF"

// Budgets in steps from the unplanned peak down to the lowest peak the greedy
// reaches. Returns how many budgets the optimum beats the greedy at.
int expect_fits_and_beats_greedy(const plan::PlanInput& in, const std::string& what) {
  const int64_t top = unplanned(in), low = plan::plan_mutwo(in, 0).predicted.peak_bytes;
  EXPECT_LT(low, top) << what;
  int compared = 0, better = 0;
  for (int step = 0; step <= 8; ++step) {
    const int64_t budget = low + (top - low) * step / 8;
    plan::Plan o = plan::plan_optimal(in, budget);
    plan::Plan g = plan::plan_mutwo(in, budget);
    SCOPED_TRACE(fmt::format("{} at budget {} (greedy's lowest {}, unplanned {}): {}", what, budget, low, top, o.note));
    EXPECT_EQ(o.planner, "optimal");
    EXPECT_EQ(o.feasible, o.predicted.peak_bytes <= budget);
    if (!g.feasible) continue;
    EXPECT_TRUE(o.feasible) << "the greedy fits, so the optimum must";
    EXPECT_LE(o.predicted.extra_ms, g.predicted.extra_ms + 1e-9);
    EXPECT_TRUE(budget >= top || has(o.note, "proven optimal")) << o.note;
    EXPECT_FALSE(has(o.note, "warning")) << o.note;
    ++compared;
    better += o.predicted.extra_ms < g.predicted.extra_ms - 1e-9;
  }
  EXPECT_GE(compared, 5) << what << ": too few budgets where the greedy fits to compare";
  return better;
}

TEST(Optimal, FitsTheBudgetAndNeverCostsMoreThanTheGreedy) {
  SKIP_WITHOUT_CBC();
  for (const plan::PlanInput& in : small_graphs()) expect_fits_and_beats_greedy(in, in.graph.name + ", FLOP times");
}

TEST(Optimal, BeatsTheGreedyWhereTimesDoNotFollowSizes) {
  SKIP_WITHOUT_CBC();
  int better = 0;
  for (const plan::PlanInput& in : small_graphs())
    for (uint32_t seed : {1u, 5u})
      better += expect_fits_and_beats_greedy(with_random_times(in, seed),
                                             fmt::format("{}, random times seed {}", in.graph.name, seed));
  EXPECT_GT(better, 0) << "the bytes-per-ms greedy was optimal everywhere: the test no longer exercises the solver";
}

// The MILP's memory model never counts more than the simulator: every drop
// list that fits in simulation fits the model (so the optimum cannot miss the
// greedy's plan). And it is tight on these graphs where no mask is replayed:
// it rejects the budget one byte under the simulated peak.
TEST(Optimal, MemoryModelIsARelaxationAndTightOnSmallGraphs) {
  SKIP_WITHOUT_CBC();
  for (const plan::PlanInput& in : small_graphs()) {
    std::vector<plan::Candidate> cands = plan::candidates(in);
    uint32_t r = 7;
    for (int trial = 0; trial < 12; ++trial) {
      std::vector<ir::ValueId> drop;
      for (const plan::Candidate& c : cands) {
        r = r * 1664525u + 1013904223u;
        if ((r >> 28) % 2) drop.insert(drop.end(), c.members.begin(), c.members.end());
      }
      const int64_t peak = plan::simulate(in, drop).peak_bytes;
      SCOPED_TRACE(fmt::format("{}: trial {}, {} of {} dropped", in.graph.name, trial, drop.size(), cands.size()));
      EXPECT_TRUE(plan::optimal_model_fits(in, peak, drop));
      // Tight where no mask is replayed: the model leaves out the generator
      // states replayed masks keep (rng_save's 5 KiB each), counting less.
      const bool replays = std::any_of(drop.begin(), drop.end(), [&](ir::ValueId v) {
        const int32_t p = ir::UseIndex(in.graph).producer[static_cast<size_t>(v)];
        return ops::has(in.graph.nodes()[static_cast<size_t>(p)], ops::kRandom);
      });
      if (!replays) {
        EXPECT_FALSE(plan::optimal_model_fits(in, peak - 1, drop));
      }
    }
  }
}

// On graphs with few candidates the optimum equals brute force over every drop
// set, and it never costs more than per-layer where per-layer fits.
TEST(Optimal, EqualsBruteForceOnTinyGraphsAndNeverCostsMoreThanPerLayer) {
  SKIP_WITHOUT_CBC();
  int compared = 0;
  for (const plan::PlanInput& base : {mlp(2), chain(6, false), chain(3, true)})
    for (uint32_t seed : {0u, 3u}) {
      const plan::PlanInput in = seed ? with_random_times(base, seed) : base;
      const std::vector<plan::Candidate> cands = plan::candidates(in);
      ASSERT_LE(cands.size(), 16u) << in.graph.name << ": too many candidates to enumerate";
      ASSERT_GE(cands.size(), 4u) << in.graph.name << ": too few candidates to be a test";
      std::vector<plan::Simulation> sims;  // one per subset of candidates
      for (uint32_t mask = 0; mask < (1u << cands.size()); ++mask) {
        std::vector<ir::ValueId> drop;
        for (size_t c = 0; c < cands.size(); ++c)
          if (mask >> c & 1) drop.insert(drop.end(), cands[c].members.begin(), cands[c].members.end());
        sims.push_back(plan::simulate(in, drop));
      }
      const int64_t top = unplanned(in), low = plan::plan_mutwo(in, 0).predicted.peak_bytes;
      for (int step = 0; step < 6; ++step) {
        const int64_t budget = low + (top - low) * step / 6;
        double best = 1e30;
        for (const plan::Simulation& s : sims)
          if (s.peak_bytes <= budget) best = std::min(best, s.extra_ms);
        plan::Plan o = plan::plan_optimal(in, budget);
        SCOPED_TRACE(fmt::format("{} seed {} at budget {}: {}", in.graph.name, seed, budget, o.note));
        ASSERT_LT(best, 1e30) << "the greedy's lowest peak is some drop set's";
        EXPECT_TRUE(o.feasible);
        EXPECT_NEAR(o.predicted.extra_ms, best, 1e-9) << cands.size() << " candidates";
        plan::Plan pl = plan::run_planner("per-layer", in, budget);
        if (pl.feasible) {
          EXPECT_LE(o.predicted.extra_ms, pl.predicted.extra_ms + 1e-9);
        }
        ++compared;
      }
    }
  EXPECT_EQ(compared, 36);
}

TEST(Optimal, DropsNothingAtOrAboveTheUnplannedPeak) {
  SKIP_WITHOUT_CBC();
  plan::PlanInput in = mlp(2);
  for (int64_t budget : {unplanned(in), unplanned(in) * 2}) {
    plan::Plan p = plan::plan_optimal(in, budget);
    EXPECT_TRUE(p.feasible);
    EXPECT_TRUE(p.drop.empty());
    EXPECT_EQ(p.predicted.extra_ms, 0);
    EXPECT_EQ(p.predicted.peak_bytes, unplanned(in));
  }
}

TEST(Optimal, SaysWhyWhenNoPlanFits) {
  SKIP_WITHOUT_CBC();
  plan::PlanInput in = mlp(2);
  for (int64_t budget : {int64_t{1}, in.profile.persistent_bytes}) {
    plan::Plan p = plan::plan_optimal(in, budget);
    EXPECT_FALSE(p.feasible);
    EXPECT_GT(p.predicted.peak_bytes, budget);
    EXPECT_TRUE(has(p.note, "no drop set fits")) << p.note;
  }
}

TEST(Optimal, ReportsTheTimeLimitAndTheGap) {
  SKIP_WITHOUT_CBC();
  plan::PlanInput in = mlp(10);
  plan::OptimalOptions o;
  o.time_limit_s = 1e-3;
  plan::Plan p = plan::plan_optimal(in, (unplanned(in) + plan::plan_mutwo(in, 0).predicted.peak_bytes) / 2, o);
  EXPECT_TRUE(has(p.note, "time limit")) << p.note;
  if (p.feasible) {
    EXPECT_TRUE(has(p.note, "gap")) << p.note;
  }
  EXPECT_EQ(p.feasible, p.predicted.peak_bytes <= p.budget_bytes);
}

TEST(Optimal, RefusesLargeGraphsWithAnInstruction) {
  SKIP_WITHOUT_CBC();
  plan::PlanInput in = mlp(3);
  plan::OptimalOptions o;
  o.max_columns = 40;
  try {
    plan::plan_optimal(in, unplanned(in) / 2, o);
    ADD_FAILURE() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_TRUE(has(e.what(), "too large for the optimal planner")) << e.what();
    EXPECT_TRUE(has(e.what(), "--planner mutwo")) << e.what();
  }
}

TEST(Optimal, SaysHowToEnableItWhenBuiltWithoutCbc) {
  if (plan::optimal_planner_built()) GTEST_SKIP() << "built with CBC";
  plan::PlanInput in = mlp(1);
  try {
    plan::plan_optimal(in, unplanned(in));
    ADD_FAILURE() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_TRUE(has(e.what(), "MUTWO_WITH_CBC=ON")) << e.what();
  }
}

// Swapping in the MILP. Copies at `bytes_per_ms` each way, in line
// (the CPU: the simulator's copy time is their whole time, which the model
// counts exactly) or on CUDA's copy streams, the host unlimited.
plan::PlanInput with_copies(plan::PlanInput in, double bytes_per_ms, bool overlap) {
  in.h2d_bytes_per_ms = in.d2h_bytes_per_ms = bytes_per_ms;
  in.copies_overlap = overlap;
  in.host_limit_bytes = int64_t{1} << 40;
  return in;
}

plan::PlanInput without_swaps(plan::PlanInput in) {
  in.swap = false;
  return in;
}

// Copies in line: the model's time is the simulator's, so the optimum over
// drops and swaps never costs more than the greedy's hybrid plan, takes swaps
// somewhere, and reaches below the lowest peak recomputation alone reaches.
TEST(Optimal, SwapsWhereTheyPayAndBelowTheRecomputeFloor) {
  SKIP_WITHOUT_CBC();
  int with_swaps = 0, below_floor = 0;
  for (const plan::PlanInput& base : small_graphs())
    for (double speed : {3e6, 3e7}) {  // bytes per ms: a 6 KiB activation costs about 2 or 0.2 us each way
      const plan::PlanInput in = with_copies(base, speed, false);
      const std::string what = fmt::format("{}, {:g} bytes/ms in line", in.graph.name, speed);
      const int64_t top = unplanned(in), low = plan::plan_mutwo(in, 0).predicted.peak_bytes;
      for (int step = 0; step <= 4; ++step) {
        const int64_t budget = low + (top - low) * step / 4;
        plan::Plan o = plan::plan_optimal(in, budget);
        plan::Plan g = plan::plan_mutwo(in, budget);
        SCOPED_TRACE(fmt::format("{} at budget {}: {}", what, budget, o.note));
        EXPECT_EQ(o.feasible, o.predicted.peak_bytes <= budget);
        if (!g.feasible) continue;
        EXPECT_TRUE(o.feasible) << "the greedy fits, so the optimum must";
        EXPECT_LE(o.predicted.extra_ms, g.predicted.extra_ms + 1e-9);
        EXPECT_TRUE(budget >= top || has(o.note, "proven optimal")) << o.note;
        EXPECT_FALSE(has(o.note, "greedy's plan")) << "copies in line: the model's time is exact";
        with_swaps += !o.swap.empty();
      }
      const int64_t floor = plan::plan_optimal(without_swaps(in), 0).predicted.peak_bytes;
      plan::Plan below = plan::plan_optimal(in, floor - 1);
      SCOPED_TRACE(fmt::format("{}: recomputation's lowest peak {}; {}", what, floor, below.note));
      if (below.feasible) {
        EXPECT_FALSE(below.swap.empty());
        ++below_floor;
      }
    }
  EXPECT_GT(with_swaps, 0) << "no optimal plan swapped: the test no longer exercises the swap columns";
  EXPECT_GE(below_floor, 4) << "swapping should reach below recomputation's floor on most of these graphs";
}

// The memory model stays a relaxation with swaps: plans of random drops and
// swaps, with and without early updates, fit the model at their simulated
// peak, with copies in line and on CUDA's copy streams (queued).
TEST(Optimal, MemoryModelWithSwapsIsARelaxation) {
  SKIP_WITHOUT_CBC();
  for (const plan::PlanInput& base : small_graphs())
  for (bool overlap : {false, true}) {
    const plan::PlanInput in = with_copies(base, 3e6, overlap);
    const std::vector<plan::Candidate> cands = plan::candidates(in);
    const std::vector<ir::ValueId> swappable = plan::swap_candidates(in);
    ASSERT_FALSE(swappable.empty()) << in.graph.name;
    uint32_t r = 11;
    for (int trial = 0; trial < 8; ++trial) {
      std::vector<ir::ValueId> drop, swap;
      for (ir::ValueId o : swappable) {
        r = r * 1664525u + 1013904223u;
        if ((r >> 28) % 3 == 0) swap.push_back(o);
      }
      for (const plan::Candidate& c : cands) {
        r = r * 1664525u + 1013904223u;
        if ((r >> 28) % 2 && std::find(swap.begin(), swap.end(), c.owner) == swap.end())
          drop.insert(drop.end(), c.members.begin(), c.members.end());
      }
      for (bool early : {false, true}) {
        if (early)  // gradients are swappable only where their update waits for the optimizer
          swap.erase(std::remove_if(swap.begin(), swap.end(), [&](ir::ValueId v) { return in.graph.value(v).role == ir::Role::gradient; }),
                     swap.end());
        const int64_t peak = plan::finish(in, "test", 0, drop, swap, early).predicted.peak_bytes;
        SCOPED_TRACE(fmt::format("{}: trial {}, {} dropped, {} swapped, early updates {}, copy streams {}", in.graph.name,
                                 trial, drop.size(), swap.size(), early, overlap));
        EXPECT_TRUE(plan::optimal_model_fits(in, peak, drop, swap, early));
      }
    }
  }
}

// On CUDA's copy streams the model's copy time is an estimate: the plan still
// fits wherever the greedy's does, and the planner says when it shows the
// greedy's plan because that one simulates faster.
TEST(Optimal, WithCopyStreamsFitsWhereTheGreedyDoes) {
  SKIP_WITHOUT_CBC();
  int own = 0;
  for (const plan::PlanInput& base : small_graphs()) {
    const plan::PlanInput in = with_copies(base, 3e6, true);
    const int64_t top = unplanned(in), low = plan::plan_mutwo(in, 0).predicted.peak_bytes;
    for (int step = 0; step <= 3; ++step) {
      const int64_t budget = low + (top - low) * step / 4;
      plan::Plan o = plan::plan_optimal(in, budget);
      plan::Plan g = plan::plan_mutwo(in, budget);
      SCOPED_TRACE(fmt::format("{} at budget {}: {}", in.graph.name, budget, o.note));
      EXPECT_EQ(o.planner, "optimal");
      EXPECT_EQ(o.feasible, o.predicted.peak_bytes <= budget);
      if (!g.feasible) continue;
      EXPECT_TRUE(o.feasible);
      const bool shows_greedy = has(o.note, "shown: the greedy's plan");
      if (!shows_greedy) {
        EXPECT_LE(o.predicted.extra_ms, g.predicted.extra_ms + 1e-9) << "else it would show the greedy's";
      }
      own += !shows_greedy;
    }
  }
  EXPECT_GT(own, 0) << "the MILP's own plan was never the faster one";
}

// Not a unit test: the greedy-versus-optimal table (target T6) on the MLP and
// the small transformers, at budgets from the unplanned peak down to just
// under the greedy's lowest; run with --gtest_also_run_disabled_tests.
TEST(Optimal, DISABLED_GreedyVersusOptimalTable) {
  SKIP_WITHOUT_CBC();
  std::vector<std::pair<std::string, plan::PlanInput>> inputs;
  for (const char* name : {"transformer-lm", "bert-tiny"}) {
    models::ModelOptions mo;
    mo.name = name;
    mo.batch = name == std::string("mlp") ? 512 : 8;
    models::Model m = models::build_model(mo);
    inputs.emplace_back(name, input_of(autodiff::build_training_step(std::move(m.graph), m.loss, {})));
  }
  std::printf("%-15s %5s %6s %10s %10s %10s %8s %8s  %s\n", "model", "step", "nodes", "budget", "greedy_ms",
              "optimal_ms", "excess", "solve_s", "note");
  for (auto& [name, in] : inputs) {
    const int64_t top = unplanned(in), low = plan::plan_mutwo(in, 0).predicted.peak_bytes;
    for (int step : {6, 4, 2, 1, 0}) {
      const int64_t budget = low + (top - low) * step / 8;
      plan::Plan g = plan::plan_mutwo(in, budget);
      auto t0 = std::chrono::steady_clock::now();
      plan::Plan o = plan::plan_optimal(in, budget);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      double excess = g.feasible && o.feasible && o.predicted.extra_ms > 0
                          ? 100 * (g.predicted.extra_ms - o.predicted.extra_ms) / o.predicted.extra_ms
                          : 0;
      std::printf("%-15s %5d %6zu %10lld %10.4f %10.4f %7.1f%% %8.2f  %s\n", name.c_str(), step,
                  in.graph.nodes().size(), static_cast<long long>(budget), g.feasible ? g.predicted.extra_ms : -1.0,
                  o.feasible ? o.predicted.extra_ms : -1.0, excess, s, o.note.c_str());
      std::fflush(stdout);
      if (g.feasible) {
        EXPECT_LE(o.predicted.extra_ms, g.predicted.extra_ms + 1e-9);
      }
    }
  }
}

}  // namespace
}  // namespace mutwo
