// Planning from plain data on the ATen-free core: the simulator and the
// planners on a small training step, plan.json's record of the planner's
// reasoning read back, one rule of which role a storage is charged to, and
// the planning request's JSON form.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "analysis/liveness.h"
#include "mlp_step.h"
#include "plan/pipeline.h"
#include "plan/plan.h"
#include "plan/plan_file.h"
#include "plan_inputs.h"
#include "profile/profile.h"
#include "rewrite/recompute.h"
#include "support/error.h"
#include "support/units.h"

namespace mutwo {
namespace {

using namespace core_test;

TEST(Planning, SimulatorAndPlannersOnPlainData) {
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
      if (d) {
        EXPECT_GT(r.rank, 0) << r.name << " was dropped without being picked";
      }
      if (r.rank > 0) {
        EXPECT_GT(r.score, 0) << r.name;
      }
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

TEST(Planning, PlanFilesRecordThePlannersReasoning) {
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

// One rule charges a storage to a role (analysis::charged_roles): the profile
// of a rewritten step and the simulator's peak breakdown agree, clones
// counting as activation in both (the profile charged them to other).
TEST(Planning, ProfileAndSimulatorChargeStoragesAlike) {
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

// The planning request's JSON form (plan/pipeline.h), as mutwo.torch writes
// it: every key optional with the struct's default, the session's own keys
// left alone, a mistyped value or a bad budget refused as the user's error.
TEST(Planning, RequestReadFromItsJsonForm) {
  const plan::PlanOptions defaults;
  const plan::PlanOptions none = plan::read_plan_options(nlohmann::json::object(), "options");
  EXPECT_EQ(none.planner, defaults.planner);
  EXPECT_EQ(none.budget, defaults.budget);
  EXPECT_EQ(none.budget.kind, Budget::Kind::none);
  EXPECT_TRUE(none.swap);
  EXPECT_FALSE(none.host_limit_bytes.has_value());
  EXPECT_TRUE(none.replay_random);
  EXPECT_EQ(none.at_least_bytes, 0);
  EXPECT_EQ(none.exempt_bytes, 0);
  const auto j = nlohmann::json::parse(R"({"planner": "sqrt-n", "budget": "60%", "at_least_bytes": 1024,
      "exempt_bytes": 64, "swap": false, "host_limit_bytes": 4096, "replay_random": false, "progress": true,
      "profile": "flops", "label": "Net", "report": "/tmp/r"})");
  const plan::PlanOptions o = plan::read_plan_options(j, "options");
  EXPECT_EQ(o.planner, "sqrt-n");
  EXPECT_EQ(o.budget, Budget::of_fraction(0.6));
  EXPECT_EQ(o.at_least_bytes, 1024);
  EXPECT_EQ(o.exempt_bytes, 64);
  EXPECT_FALSE(o.swap);
  EXPECT_EQ(o.host_limit_bytes, std::optional<int64_t>(4096));
  EXPECT_FALSE(o.replay_random);
  EXPECT_TRUE(o.progress);
  EXPECT_EQ(plan::read_plan_options(nlohmann::json::parse(R"({"budget": null})"), "options").budget.kind,
            Budget::Kind::none);
  EXPECT_EQ(plan::read_plan_options(nlohmann::json::parse(R"({"budget": "lowest"})"), "options").budget,
            Budget::lowest());
  for (const char* bad : {R"({"budget": 60})", R"({"budget": "60"})", R"({"swap": "no"})",
                          R"({"at_least_bytes": -1})", R"({"planner": 3})", "[]"})
    EXPECT_THROW(plan::read_plan_options(nlohmann::json::parse(bad), "options"), UserError) << bad;
}

}  // namespace
}  // namespace mutwo
