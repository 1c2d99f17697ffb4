// The arena's offsets (analysis/arena.h) over the zoo's steps and a captured
// step (tests/common/captured_head.h), unplanned and planned (mutwo at half
// the activations; on a CUDA profile with swaps and early updates): no two
// blocks live at one node overlap, views share their storage's offset, and
// the blocks live at once are the simulator's planned peak, byte for byte, and
// the arena is that size or within the bound the test states, measured.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <string>
#include <tuple>
#include <vector>

#include "analysis/arena.h"
#include "autodiff/autodiff.h"
#include "captured_head.h"
#include "models/model.h"
#include "plan/plan.h"
#include "profile/profile.h"

namespace mutwo {
namespace {

struct Step {
  std::string what;
  plan::PlanInput input;
};

std::vector<Step> steps() {
  std::vector<Step> out;
  for (const auto& [model, batch, device] : std::vector<std::tuple<std::string, int64_t, std::string>>{
           {"mlp", 64, "cpu"}, {"resnet-18", 4, "cpu"}, {"resnet-50", 2, "cuda"}, {"bert-tiny", 4, "cpu"},
           {"bert-tiny", 4, "cuda"}, {"transformer-lm", 16, "cpu"}, {"gpt2-small", 1, "cuda"}}) {
    models::ModelOptions o;
    o.name = model;
    o.batch = batch;
    if (model.rfind("resnet", 0) == 0) {
      o.image_size = 32;
      o.classes = 10;
    }
    if (model == "bert-tiny") o.seq = 16;
    if (model == "gpt2-small") o.seq = 64;
    models::Model m = models::build_model(o);
    ir::Graph g = autodiff::build_training_step(std::move(m.graph), m.loss, {});
    out.push_back({fmt::format("{} batch {} on {}", model, batch, device),
                   plan::make_input(profile::estimate_profile(std::move(g), device))});
  }
  captured_head::Options o;
  o.ignore_rows = true;
  ir::Graph head = stepfile::load_step(captured_head::write(::testing::TempDir(), o), {});
  out.push_back({"captured head", plan::make_input(profile::estimate_profile(std::move(head), "cpu"))});
  return out;
}

// The plans each step is checked under: none, and mutwo at the unplanned
// peak's persistent part plus half the rest.
std::vector<plan::Plan> plans_of(const plan::PlanInput& in) {
  const plan::Plan none = plan::run_planner("none", in, INT64_MAX);
  const int64_t persistent = analysis::analyze_liveness(in.graph).persistent_bytes;
  const int64_t half = persistent + (none.predicted.peak_bytes - persistent) / 2;
  return {none, plan::run_planner("mutwo", in, half)};
}

TEST(Arena, NoTwoLiveBlocksOverlapAndTheSizeIsThePlannedPeak) {
  int64_t worst_excess_permille = 0;
  int exact = 0, placed = 0;
  for (const Step& s : steps()) {
    for (const plan::Plan& p : plans_of(s.input)) {
      SCOPED_TRACE(fmt::format("{}, planner {}, {} dropped, {} swapped", s.what, p.planner, p.drop.size(), p.swap.size()));
      const plan::PredictedStep step = plan::predicted_step(s.input, p);
      const ir::Graph& g = step.rewritten.graph;
      const analysis::Liveness L = analysis::analyze_liveness(g);
      for (int64_t alignment : {int64_t{1}, int64_t{512}}) {
        const analysis::ArenaPlan a = analysis::plan_arena(g, L, {alignment, step.workspace});
        EXPECT_EQ(analysis::arena_conflict(a), "");
        EXPECT_GE(a.bytes, a.live_peak_bytes);
        for (const ir::Value& v : g.values())  // a view at its storage's offset
          EXPECT_EQ(a.offset[static_cast<size_t>(v.id)], a.offset[static_cast<size_t>(L.storage[static_cast<size_t>(v.id)])]);
        // Byte for byte, without swaps (whose copied storages stay outside),
        // the blocks live at once are the simulator's peak: persistent state
        // and what the device holds beyond the graph are outside the arena.
        if (alignment == 1 && p.swap.empty()) {
          EXPECT_EQ(L.persistent_bytes + a.live_peak_bytes + step.extra_bytes, p.predicted.peak_bytes);
        }
        if (alignment == 1) continue;
        const int64_t excess = (a.bytes - a.live_peak_bytes) * 1000 / std::max<int64_t>(1, a.live_peak_bytes);
        worst_excess_permille = std::max(worst_excess_permille, excess);
        exact += a.bytes == a.live_peak_bytes;
        ++placed;
        std::cout << fmt::format("arena {} {} align {}: {} bytes, live peak {}, order {}, {} blocks, {} left out\n", s.what,
                                 p.planner, alignment, a.bytes, a.live_peak_bytes, a.order, a.blocks.size(), a.left_out);
      }
    }
  }
  // Best fit is a heuristic (placing blocks of known lifetimes in the least
  // space is NP-hard): no bound holds in general. Measured here: 13 of 16
  // steps exact, the worst 4.9% over (transformer-lm's mutwo plan, 51 KB
  // over 1.04 MB), the others under 0.06%.
  EXPECT_LE(worst_excess_permille, 50);
  EXPECT_GE(exact, 13) << "of " << placed;
}

}  // namespace
}  // namespace mutwo

namespace mutwo {
namespace {

// The check itself finds a planted overlap: two blocks live at one node moved
// onto each other, and a block moved past the arena's end.
TEST(Arena, ConflictCheckFindsAPlantedOverlap) {
  const plan::PlanInput in = steps().front().input;
  const analysis::Liveness L = analysis::analyze_liveness(in.graph);
  analysis::ArenaPlan a = analysis::plan_arena(in.graph, L, {});
  ASSERT_EQ(analysis::arena_conflict(a), "");
  analysis::ArenaPlan moved = a;
  for (size_t i = 0; i < moved.blocks.size() && analysis::arena_conflict(moved).empty(); ++i)
    for (size_t j = 0; j < moved.blocks.size(); ++j)
      if (i != j && moved.blocks[i].first <= moved.blocks[j].last && moved.blocks[j].first <= moved.blocks[i].last) {
        moved.blocks[j].offset = moved.blocks[i].offset;
        break;
      }
  EXPECT_NE(analysis::arena_conflict(moved).find("overlap"), std::string::npos);
  moved = a;
  moved.blocks.back().offset = a.bytes;
  EXPECT_NE(analysis::arena_conflict(moved).find("outside the arena"), std::string::npos);
}

}  // namespace
}  // namespace mutwo
