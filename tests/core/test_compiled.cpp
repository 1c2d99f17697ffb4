// The compiled route's decisions on plain data (src/plan/compiled.h): the
// solve across layers against every assignment of options, μ-TWO's order,
// the choice among priced candidates on a decoder's recorded candidate table
// (data/decoder_candidates.json, from the Python frontier on the CPU), the
// refusal text; the floor, a property of the graph: the same step's lowest
// peak whatever its measured times; and PyTorch's min-cut on edge lists.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "autodiff/autodiff.h"
#include "models/model.h"
#include "plan/compiled.h"
#include "plan/min_cut.h"
#include "profile/rates.h"
#include "plan/pipeline.h"
#include "plan/plan.h"
#include "profile/profile.h"
#include "support/files.h"
#include "support/json_input.h"

namespace mutwo {
namespace {

using plan::compiled::LayerOption;
using plan::compiled::Priced;

double brute(const std::vector<LayerOption>& options, int count, int64_t need) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<size_t> pick(static_cast<size_t>(count), 0);
  for (;;) {
    int64_t freed = 0;
    double ms = 0;
    for (size_t i : pick) freed += options[i].freed, ms += options[i].extra_ms;
    if (freed >= need) best = std::min(best, ms);
    size_t d = 0;
    while (d < pick.size() && ++pick[d] == options.size()) pick[d++] = 0;
    if (d == pick.size()) return best;
  }
}

TEST(Compiled, TheLayerSolveIsTheLeastTimeThatFreesTheNeed) {
  std::mt19937 rng(0);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<LayerOption> options{{0, 0, 0.0}};
    for (int k = 1, n = uniform(2, 5); k < n; ++k) options.push_back({k, uniform(1, 40), uniform(100, 5000) / 1000.0});
    const int count = uniform(1, 4);
    const int64_t need = uniform(0, 120);  // under 4096 bytes: a step of one byte, exact
    const double want = brute(options, count, need);
    const auto ks = plan::compiled::solve_layers(options, count, need);
    SCOPED_TRACE(fmt::format("trial {}: {} layers, need {}", trial, count, need));
    if (std::isinf(want)) {
      EXPECT_FALSE(ks);
      continue;
    }
    ASSERT_TRUE(ks);
    ASSERT_EQ(ks->size(), static_cast<size_t>(count));
    int64_t freed = 0;
    double ms = 0;
    for (int32_t k : *ks) freed += options[static_cast<size_t>(k)].freed, ms += options[static_cast<size_t>(k)].extra_ms;
    EXPECT_GE(freed, need);
    EXPECT_NEAR(ms, want, 1e-9);
  }
}

TEST(Compiled, QuantisedTheLayerSolveStillFreesTheNeed) {
  const std::vector<LayerOption> options{{0, 0, 0.0}, {1, 1'000'003, 1.0}, {2, 2'500'001, 2.2}};
  const auto ks = plan::compiled::solve_layers(options, 8, 9'000'000);
  ASSERT_TRUE(ks);
  int64_t freed = 0;
  for (int32_t k : *ks) freed += options[static_cast<size_t>(k)].freed;
  EXPECT_GE(freed, 9'000'000);
  EXPECT_FALSE(plan::compiled::solve_layers(options, 3, 9'000'000)) << "3 layers free at most 7.5 MB";
  // A dominated option (frees less for more time) is never taken.
  const auto d = plan::compiled::solve_layers({{0, 0, 0.0}, {1, 10, 1.0}, {2, 8, 2.0}, {3, 30, 2.5}}, 2, 18);
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, (std::vector<int32_t>{1, 1}));
}

TEST(Compiled, TheKnapsackIsPyTorchsDp) {
  // Within 0.5: items 1 and 2 (3.5) beat item 0 (3.0); item 3 weighs nothing and is always saved;
  // item 4 weighs more than the limit. PyTorch lists the recomputed items from the last.
  const auto k = plan::compiled::dp_knapsack({0.5, 0.3, 0.2, 0.0, 0.9}, {3.0, 2.0, 1.5, 0.5, 9.0}, 0.5);
  EXPECT_EQ(k.saved, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(k.recomputed, (std::vector<int32_t>{4, 0}));
  EXPECT_DOUBLE_EQ(k.max_runtime, 4.0);
  const auto none = plan::compiled::dp_knapsack({}, {}, 0.3);
  EXPECT_TRUE(none.saved.empty() && none.recomputed.empty());
  EXPECT_THROW(plan::compiled::dp_knapsack({-0.1}, {1.0}, 0.3), UserError);
}

TEST(Compiled, TheOrderIsMuTwosRatioWithTiesInTheCallersOrder) {
  // bytes per ms: 100, 50, 200, 100.
  EXPECT_EQ(plan::compiled::recompute_order({1.0, 2.0, 0.5, 1.0}, {100, 100, 100, 100}),
            (std::vector<int32_t>{2, 0, 3, 1}));
  EXPECT_DOUBLE_EQ(plan::recompute_ratio(100, 0), 100 / 1e-12) << "a free recomputation is not a division by zero";
}

TEST(Compiled, TheFastestThatFitsAndTheLowest) {
  const std::vector<Priced> c{{500, 0.0}, {400, 1.0}, {300, 2.0}, {300, 1.5}, {400, 1.0}};
  EXPECT_EQ(plan::compiled::fastest_within(c, 1000), 0);
  EXPECT_EQ(plan::compiled::fastest_within(c, 450), 1) << "ties on time: the lower peak, then the earlier";
  EXPECT_EQ(plan::compiled::fastest_within(c, 300), 3);
  EXPECT_EQ(plan::compiled::fastest_within(c, 299), -1);
  EXPECT_EQ(plan::compiled::lowest(c), 3);
}

// A decoder's candidates as the Python frontier priced them (tests/python/
// record_candidates.py wrote the table): at each recorded budget the core
// chooses what the frontier chose, and never a candidate slower than the
// fastest of PyTorch's own (compile:X) that fits.
TEST(Compiled, ADecodersRecordedCandidateTableGivesTheSameChoice) {
  const auto table = parse_json_input(read_file(std::string(MUTWO_TEST_DATA) + "/decoder_candidates.json"), "decoder");
  std::vector<Priced> priced;
  std::vector<std::string> names;
  for (const auto& c : table["candidates"]) {
    priced.push_back({c["peak"].get<int64_t>(), c["extra_ms"].get<double>()});
    names.push_back(c["name"].get<std::string>());
  }
  ASSERT_GE(priced.size(), 8u);
  for (const auto& b : table["choices"]) {
    const int32_t i = plan::compiled::fastest_within(priced, b["budget"].get<int64_t>());
    ASSERT_GE(i, 0);
    EXPECT_EQ(names[static_cast<size_t>(i)], b["chosen"].get<std::string>()) << "budget " << b["budget"];
  }
  const int64_t lo = priced[static_cast<size_t>(plan::compiled::lowest(priced))].peak;
  int64_t hi = 0;
  for (const Priced& p : priced) hi = std::max(hi, p.peak);
  for (int64_t budget = lo; budget <= hi; budget += std::max<int64_t>(1, (hi - lo) / 200)) {
    const int32_t i = plan::compiled::fastest_within(priced, budget);
    ASSERT_GE(i, 0) << "the lowest candidate fits every budget above it";
    EXPECT_LE(priced[static_cast<size_t>(i)].peak, budget);
    for (size_t j = 0; j < priced.size(); ++j)
      if (names[j].rfind("compile:", 0) == 0 && priced[j].peak <= budget)
        EXPECT_LE(priced[static_cast<size_t>(i)].extra_ms, priced[j].extra_ms) << names[j] << " at " << budget;
  }
}

TEST(Compiled, ARefusalNamesTheGraphKeepsSizesApartAndOneMeaningOfPercent) {
  const std::string t = plan::compiled::refusal_text(
      {307404, 317440, 330000, "the compiled graph at model.py:12 (layers.0)", 100000, 230000, 0});
  EXPECT_NE(t.find("budget 300.2 KiB"), std::string::npos) << t;
  EXPECT_NE(t.find("lowest predicted added peak is 310.0 KiB"), std::string::npos) << t;
  EXPECT_NE(t.find("model.py:12 (layers.0)"), std::string::npos) << t;
  EXPECT_NE(t.find("try budget=\"95%\""), std::string::npos) << t;  // 100000 + 0.95 * 230000 >= 317440
  EXPECT_EQ(t.find("% of plain"), std::string::npos) << "a percentage means one thing: " << t;
  const std::string m = plan::compiled::refusal_text({1 << 20, 5 << 20, 0, "the 3 compiled graphs of this step", 0, 0, 3});
  EXPECT_NE(m.find("lowest measured added peak is 5.0 MiB after 3 compiles"), std::string::npos) << m;
  EXPECT_NE(m.find("try budget=\"5.0MiB\""), std::string::npos) << m;
  EXPECT_TRUE(plan::compiled::surely_below(1024, 4 << 20));
  EXPECT_FALSE(plan::compiled::surely_below(int64_t{4} << 20, int64_t{5} << 20)) << "within the model's tolerance: measure first";
}

// The floor is a property of the graph: the same step, its node times scaled by
// random factors between 0.5 and 2, plans the same lowest peak (within 0.5%),
// and a budget at the floor found on one timing fits on every other.
TEST(Compiled, TheFloorStaysPutWhateverTheTimings) {
  for (const auto& [model, batch] : std::vector<std::pair<std::string, int64_t>>{
           {"transformer-lm", 16}, {"bert-tiny", 32}, {"resnet-18", 4}}) {
    SCOPED_TRACE(fmt::format("{} batch {}", model, batch));
    models::ModelOptions o;
    o.name = model;
    o.batch = batch;
    if (model == "bert-tiny") o.seq = 16;
    models::Model m = models::build_model(o);
    const plan::PlanInput base = plan::make_input(
        profile::estimate_profile(autodiff::build_training_step(std::move(m.graph), m.loss, {}), "cpu"));
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> scale(0.5, 2.0);
    std::vector<int64_t> floors, lowest;
    for (int run = 0; run < 8; ++run) {
      plan::PlanInput in = base;
      for (double& ms : in.node_ms) ms *= scale(rng);
      floors.push_back(plan::plan_floor("mutwo", in).predicted.peak_bytes);
      plan::PlannedStep p;
      p.input = in;
      plan::PlanOptions po;
      po.budget = Budget::lowest();
      plan::choose_plan(p, po);
      lowest.push_back(p.plan.predicted.peak_bytes);
      // The floor of the first timing, asked for as bytes, fits this one.
      EXPECT_TRUE(plan::run_planner("mutwo", in, floors.front()).feasible) << "run " << run;
    }
    for (size_t i = 0; i < floors.size(); ++i) {
      EXPECT_EQ(floors[i], floors[0]) << "run " << i;
      EXPECT_NEAR(static_cast<double>(lowest[i]), static_cast<double>(floors[0]), 0.005 * floors[0]) << "run " << i;
    }
  }
}

// The one phase walk, by hand: a forward of three nodes (a -> b -> out) and a
// backward given what it returned.
TEST(PhasePeak, ForwardAndBackwardByHand) {
  // Forward: node 0 makes a (100), node 1 makes b (50) and reads a last,
  // node 2 makes out (10, returned) and reads b last; node 1 holds a 30-byte
  // workspace. Peak at node 1: a + b + 30. a is saved (returned to the backward).
  plan::compiled::Phase fwd{{100, 50, 10}, {0, 1, 2}, {3, 2, 3}, {1, 0, 1}, {0, 30, 0}};
  const plan::compiled::PhasePeak f = plan::compiled::phase_peak(fwd);
  EXPECT_EQ(f.peak, 180);
  EXPECT_EQ(f.saved_at_peak, 100);
  EXPECT_EQ(f.retained, 110);
  // Backward: a and out carried; out read last at node 0, a at node 1; node 0
  // makes a gradient of 100 (kept), node 1 one of 40 freed after node 1.
  // A carried storage never read (freed -1) takes nothing.
  plan::compiled::Phase bwd{{100, 10, 100, 40, 999}, {-1, -1, 0, 1, -1}, {1, 0, 2, 1, -1}, {1, 1, 0, 0, 1}, {0, 0}};
  const plan::compiled::PhasePeak b = plan::compiled::phase_peak(bwd);
  EXPECT_EQ(b.peak, 240);  // node 1: a, the first gradient and its own 40; out freed after node 0
  EXPECT_EQ(b.saved_at_peak, 100);
  EXPECT_EQ(b.retained, 100);
}

TEST(PhasePeak, RefusesEventsOutOfOrder) {
  plan::compiled::Phase bad{{8}, {2}, {1}, {0}, {0, 0, 0}};
  EXPECT_THROW(plan::compiled::phase_peak(bad), InternalError);
}

// A node split in two (in -> out, its size) between an unbounded source edge
// and an unbounded sink edge, as min-cut draws a saved value: the cut is the
// cheaper of the two splits on the way.
TEST(MinCut, ByHand) {
  // 0 source, 1 a_in, 2 a_out, 3 b_in, 4 b_out, 5 sink.
  const int64_t inf = plan::kUnboundedCapacity;
  const plan::MinCut cut = plan::min_cut(6, {0, 1, 2, 3, 4}, {1, 2, 3, 4, 5}, {inf, 100, inf, 40, inf}, 0, 5);
  EXPECT_FALSE(cut.unbounded);
  EXPECT_EQ(cut.value, 40);
  EXPECT_EQ(cut.sink, (std::vector<uint8_t>{0, 0, 0, 0, 1, 1}));
  EXPECT_TRUE(plan::min_cut(3, {0, 1}, {1, 2}, {inf, inf}, 0, 2).unbounded);
}

// On random small graphs, against every cut: the least capacity, and the sink
// side networkx gives (the nodes reaching the sink in the residual network:
// the complement of the union of every minimum cut's source side).
TEST(MinCut, MatchesEveryCutOnRandomGraphs) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 7);
    std::vector<int64_t> tail, head, capacity;
    for (int e = 0, m = static_cast<int>(rng() % 16); e < m; ++e) {
      tail.push_back(rng() % n), head.push_back(rng() % n);
      capacity.push_back(rng() % 5 == 0 ? plan::kUnboundedCapacity : static_cast<int64_t>(rng() % 4));
    }
    int64_t best = std::numeric_limits<int64_t>::max();
    uint32_t joined = 0;  // the union of the minimum cuts' source sides
    for (uint32_t side = 1; side < (1u << n); side += 2) {  // node 0 (the source) on the source side
      if (side >> (n - 1) & 1) continue;                    // node n-1 (the sink) on the sink side
      int64_t value = 0;
      for (size_t e = 0; e < tail.size(); ++e)
        if ((side >> tail[e] & 1) && !(side >> head[e] & 1) && tail[e] != head[e])
          value = capacity[e] < 0 || value < 0 ? -1 : value + capacity[e];
      if (value < 0) continue;
      if (value < best) best = value, joined = 0;
      if (value == best) joined |= side;
    }
    const plan::MinCut cut = plan::min_cut(n, tail, head, capacity, 0, n - 1);
    ASSERT_EQ(cut.unbounded, best == std::numeric_limits<int64_t>::max()) << "trial " << trial;
    if (cut.unbounded) continue;
    EXPECT_EQ(cut.value, best) << "trial " << trial;
    for (int v = 0; v < n; ++v) EXPECT_EQ(cut.sink[v], !(joined >> v & 1)) << "trial " << trial << " node " << v;
  }
}

}  // namespace
}  // namespace mutwo
