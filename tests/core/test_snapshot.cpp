// PyTorch's memory snapshot from plain data (report/snapshot.h): the pickle
// writer's bytes, worked out by hand from CPython's opcodes; and each step's
// allocations and frees, replayed, give the simulator's peak to the byte:
// the unplanned step, a plan's step with recomputation, and one whose copies
// to host memory hold their storages, with workspaces and bytes beyond the
// graph's tensors. (tests/e2e/test_memory_snapshot.py loads what the CLI
// writes with Python's pickle and PyTorch's viewer.)
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "autodiff/autodiff.h"
#include "models/model.h"
#include "plan/plan.h"
#include "plan_inputs.h"
#include "report/pickle.h"
#include "report/snapshot.h"

namespace mutwo {
namespace {

using nlohmann::json;
using namespace std::string_literals;

std::string pickled(const json& v) { return report::to_pickle(v); }

TEST(Pickle, ScalarsAsCPythonWritesThem) {
  EXPECT_EQ(pickled(nullptr), "\x80\x02N."s);
  EXPECT_EQ(pickled(true), "\x80\x02\x88."s);
  EXPECT_EQ(pickled(false), "\x80\x02\x89."s);
  EXPECT_EQ(pickled(0), "\x80\x02K\x00."s);
  EXPECT_EQ(pickled(255), "\x80\x02K\xff."s);
  EXPECT_EQ(pickled(256), "\x80\x02M\x00\x01."s);
  EXPECT_EQ(pickled(65536), "\x80\x02J\x00\x00\x01\x00."s);
  EXPECT_EQ(pickled(-1), "\x80\x02J\xff\xff\xff\xff."s);
  EXPECT_EQ(pickled(INT32_MIN), "\x80\x02J\x00\x00\x00\x80."s);
  // Past 32 bits: LONG1, the fewest two's-complement bytes, least significant first.
  EXPECT_EQ(pickled(int64_t{1} << 31), "\x80\x02\x8a\x05\x00\x00\x00\x80\x00."s);
  EXPECT_EQ(pickled(-(int64_t{1} << 31) - 1), "\x80\x02\x8a\x05\xff\xff\xff\x7f\xff."s);
  EXPECT_EQ(pickled(int64_t{0x7f} << 40), "\x80\x02\x8a\x06\x00\x00\x00\x00\x00\x7f."s);
  EXPECT_EQ(pickled(INT64_MAX), "\x80\x02\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f."s);
  EXPECT_EQ(pickled(UINT64_MAX), "\x80\x02\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00."s);
  EXPECT_EQ(pickled(1.5), "\x80\x02G\x3f\xf8\x00\x00\x00\x00\x00\x00."s);  // big-endian double
  EXPECT_EQ(pickled("\xc3\xa9"), "\x80\x02X\x02\x00\x00\x00\xc3\xa9."s);  // UTF-8 bytes, 4-byte length
}

TEST(Pickle, ListsAndDicts) {
  EXPECT_EQ(pickled(json::array()), "\x80\x02]."s);
  EXPECT_EQ(pickled(json::object()), "\x80\x02}."s);
  EXPECT_EQ(pickled(json::array({1, "a"})), "\x80\x02](K\x01X\x01\x00\x00\x00" "ae."s);
  EXPECT_EQ(pickled(json{{"k", json::array({nullptr})}}), "\x80\x02}(X\x01\x00\x00\x00k](Neu."s);
}

// The most bytes live at once over a step's events; each free names a live
// block of its size, and the step ends with nothing live.
int64_t replay_peak(const report::StepMemory& s) {
  std::map<int64_t, int64_t> live;
  int64_t now = 0, peak = 0;
  for (const report::MemoryEvent& e : s.events) {
    if (e.alloc) {
      EXPECT_TRUE(live.emplace(e.block, e.bytes).second) << s.label << ": block " << e.block << " allocated twice";
      EXPECT_GT(e.bytes, 0);
      EXPECT_FALSE(e.category.empty());
      now += e.bytes;
      peak = std::max(peak, now);
    } else {
      auto it = live.find(e.block);
      EXPECT_TRUE(it != live.end() && it->second == e.bytes) << s.label << ": a free of no live block " << e.block;
      if (it == live.end()) continue;
      now -= it->second;
      live.erase(it);
    }
  }
  EXPECT_TRUE(live.empty()) << s.label << ": " << live.size() << " blocks live at the end";
  return peak;
}

int count(const report::StepMemory& s, const std::string& category) {
  int n = 0;
  for (const report::MemoryEvent& e : s.events) n += e.alloc && e.category == category;
  return n;
}

plan::PlanInput mlp_input(int64_t batch) {
  models::ModelOptions o;
  o.name = "mlp";
  o.batch = batch;
  models::Model m = models::build_model(o);
  plan::PlanInput in = testing::input_of(autodiff::build_training_step(std::move(m.graph), m.loss, {}));
  // Workspaces on some nodes and bytes beyond the graph's tensors, as a CUDA profile has.
  for (size_t n = 0; n < in.workspace.size(); n += 3) in.workspace[n] = 4096 * static_cast<int64_t>(n + 1);
  in.start_extra_bytes = 12345;
  return in;
}

TEST(MemorySnapshot, StepsReplayToTheSimulatorsPeaks) {
  const plan::PlanInput in = mlp_input(2048);
  const int64_t unplanned = plan::simulate(in, {}).peak_bytes;
  const plan::Plan p = plan::plan_mutwo(in, unplanned * 6 / 10);
  ASSERT_FALSE(p.drop.empty());
  const std::vector<report::StepMemory> steps = report::plan_memory(in, p);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(replay_peak(steps[0]), unplanned);
  EXPECT_EQ(replay_peak(steps[1]), p.predicted.peak_bytes);
  EXPECT_LT(p.predicted.peak_bytes, unplanned);
  // The activations the plan drops, in their own category before; recomputed ones after.
  EXPECT_GE(count(steps[0], "activation, dropped by the plan"), 1);
  EXPECT_EQ(count(steps[0], "activation, recomputed"), 0);
  EXPECT_EQ(count(steps[1], "activation, dropped by the plan"), 0);
  EXPECT_EQ(count(steps[1], "activation, recomputed"), p.predicted.recompute_nodes);
  EXPECT_GE(count(steps[0], "workspace"), 1);
  int beyond = 0;  // the bytes beyond the graph's tensors, held all through the step
  for (const report::MemoryEvent& e : steps[0].events)
    beyond += e.alloc && e.what == "held beyond the graph's tensors" && e.bytes == in.start_extra_bytes && e.node == -1;
  EXPECT_EQ(beyond, 1);
  // Every node's allocation names it.
  for (const report::MemoryEvent& e : steps[1].events) {
    if (e.alloc && e.node >= 0) {
      EXPECT_NE(e.what.find(" -> %"), std::string::npos) << e.what;
    }
  }
}

TEST(MemorySnapshot, ACopyHoldsItsStorageUntilItIsDone) {
  plan::PlanInput in = mlp_input(2048);
  std::fill(in.node_ms.begin(), in.node_ms.end(), 1.0);
  in.copies_overlap = true;
  in.host_limit_bytes = int64_t{1} << 40;
  std::vector<ir::ValueId> swap;
  for (ir::ValueId v : plan::swap_candidates(in))
    if (in.graph.value(v).role == ir::Role::activation) swap.push_back(v);
  ASSERT_FALSE(swap.empty());
  // Copies out that take three nodes' time: each storage is held past its last use.
  in.h2d_bytes_per_ms = in.d2h_bytes_per_ms = static_cast<double>(in.graph.type(swap[0]).bytes()) / 3.0;
  const plan::Plan p = plan::finish(in, "test", 0, {}, swap);
  const plan::PredictedStep step = plan::predicted_step(in, p);
  ASSERT_FALSE(step.held.empty());
  bool past = false;
  for (const plan::HeldCopy& h : step.held) past |= h.until > h.from + 1;
  EXPECT_TRUE(past) << "no copy outlasts the node after it";
  const std::vector<report::StepMemory> steps = report::plan_memory(in, p);
  EXPECT_EQ(replay_peak(steps[1]), p.predicted.peak_bytes);
  EXPECT_EQ(replay_peak(steps[0]), plan::simulate(in, {}).peak_bytes);
}

TEST(MemorySnapshot, IsAPickleOfTheSteps) {
  const plan::PlanInput in = mlp_input(64);
  const std::string bytes = report::memory_snapshot(report::plan_memory(in, plan::plan_none(in, 0)));
  ASSERT_GT(bytes.size(), 4u);
  EXPECT_EQ(bytes.substr(0, 3), "\x80\x02}"s);
  EXPECT_EQ(bytes.back(), '.');
  for (const char* key : {"segments", "device_traces", "free_completed", "category", "frames", "unknown"})
    EXPECT_NE(bytes.find(key), std::string::npos) << key;
}

}  // namespace
}  // namespace mutwo
