// The compiled route's choice across a step's graphs (src/plan/compiled_step.h)
// on plain data: a hand-checked step of two graphs, and random steps where the
// exhaustive answer is the brute force's and the greedy fits, never beats it,
// and finds no floor below it.
#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "plan/compiled_step.h"

namespace mutwo {
namespace {

using plan::compiled::StepGraph;
using plan::compiled::StepProblem;
using plan::compiled::solve_step;

// Two graphs, two intervals (graph 0's backward, graph 1's backward) at 100 and 90 bytes.
StepProblem two_graphs(int64_t budget) {
  StepProblem p;
  p.base = {100, 90};
  p.graphs.push_back({{0, 2, 5}, {0, 0, -20, -5, -40, -10}, {0, 1, 2}});  // fast and high, to slow and low
  p.graphs.push_back({{0, 1}, {0, 0, -3, -30}, {0, 1}});
  p.budget = budget;
  return p;
}

TEST(CompiledStep, TheFastestThatFitsEveryInterval) {
  // Interval 0 needs graph 0's 2nd or 3rd; with the 2nd, interval 1 needs graph 1's 2nd: 3 ms against 5.
  auto c = solve_step(two_graphs(80));
  EXPECT_EQ(c.method, "exhaustive");
  EXPECT_TRUE(c.feasible);
  EXPECT_EQ(c.choice, (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(c.peak, 77);
  EXPECT_DOUBLE_EQ(c.extra_ms, 3);
  EXPECT_EQ(c.floor, 57);  // 100-40-3 and 90-10-30
  EXPECT_EQ(c.floor_choice, (std::vector<int32_t>{2, 1}));
  auto none = solve_step(two_graphs(56));
  EXPECT_FALSE(none.feasible);
  EXPECT_EQ(none.choice, none.floor_choice);
  auto fixed = two_graphs(80);
  fixed.graphs[0].allowed = {2};
  EXPECT_EQ(solve_step(fixed).choice, (std::vector<int32_t>{2, 0}));
}

TEST(CompiledStep, TheGreedyWalksTheSameStep) {
  auto p = two_graphs(80);
  p.exhaustive = 0;
  auto c = solve_step(p);
  EXPECT_EQ(c.method, "greedy");
  EXPECT_EQ(c.choice, (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(c.floor, 57);
}

StepProblem random_step(std::mt19937& rng) {
  std::uniform_int_distribution<int> graphs(1, 4), candidates(1, 5), intervals(1, 6), bytes(0, 1000);
  std::uniform_real_distribution<double> ms(0, 10);
  StepProblem p;
  const int n = intervals(rng);
  for (int i = 0; i < n; ++i) p.base.push_back(1000 + bytes(rng));
  for (int g = graphs(rng); g-- > 0;) {
    StepGraph graph;
    for (int k = candidates(rng); k-- > 0;) {
      graph.allowed.push_back(static_cast<int32_t>(graph.ms.size()));
      graph.ms.push_back(graph.ms.empty() ? 0 : ms(rng));
      for (int i = 0; i < n; ++i) graph.delta.push_back(graph.ms.size() == 1 ? 0 : -bytes(rng));
    }
    p.graphs.push_back(graph);
  }
  return p;
}

// The least cost among the choices that fit, and the lowest peak of all, by enumeration.
std::pair<double, int64_t> brute(const StepProblem& p) {
  double best = std::numeric_limits<double>::infinity();
  int64_t low = std::numeric_limits<int64_t>::max();
  std::vector<size_t> at(p.graphs.size(), 0);
  for (;;) {
    std::vector<int64_t> peaks = p.base;
    double ms = 0;
    for (size_t g = 0; g < at.size(); ++g) {
      ms += p.graphs[g].ms[at[g]];
      for (size_t i = 0; i < peaks.size(); ++i) peaks[i] += p.graphs[g].delta[at[g] * peaks.size() + i];
    }
    const int64_t peak = std::max<int64_t>(0, *std::max_element(peaks.begin(), peaks.end()));
    low = std::min(low, peak);
    if (peak <= p.budget) best = std::min(best, ms);
    size_t g = 0;
    while (g < at.size() && ++at[g] == p.graphs[g].ms.size()) at[g++] = 0;
    if (g == at.size()) return {best, low};
  }
}

TEST(CompiledStep, ExhaustiveIsTheBruteForceAndTheGreedyNeverBeatsIt) {
  std::mt19937 rng(46);
  for (int trial = 0; trial < 300; ++trial) {
    StepProblem p = random_step(rng);
    p.budget = -1;
    const int64_t floor = solve_step(p).floor, top = *std::max_element(p.base.begin(), p.base.end());
    p.budget = floor + (top - floor) / 2;
    const auto [best, low] = brute(p);
    const auto exact = solve_step(p);
    ASSERT_EQ(exact.floor, low);
    ASSERT_TRUE(exact.feasible);
    ASSERT_DOUBLE_EQ(exact.extra_ms, best);
    p.exhaustive = 0;
    const auto greedy = solve_step(p);
    ASSERT_GE(greedy.floor, exact.floor);
    if (greedy.feasible) {
      ASSERT_LE(greedy.peak, p.budget);
      ASSERT_GE(greedy.extra_ms, exact.extra_ms - 1e-9);
    }
  }
}

}  // namespace
}  // namespace mutwo
