// Golden IR tests for the passes. Each input graph tests/golden/<name>.ir
// (forward and loss, as IR text) states on a header line the passes it goes
// through, in order, with their arguments:
//
//   # passes: autodiff reinplace data-parallel(world=2 shard) recompute(fc1.relu) update-early swap(fc1.out)
//
// autodiff (optionally autodiff(adam): the optimizer) and reinplace come
// first, as every step is built; then any of data-parallel(world=N [shard]),
// recompute(VALUE ...), update-early and swap(STORAGE ...), the names
// --dump-ir-after knows. The graph after each pass must verify and equal
// tests/golden/<name>.<pass>.ir line for line. Adding a golden input is
// adding a file: every *.ir in the folder without a pass in its name is one.
// The fused loss has its own case: its input is a captured step file
// (tests/common/captured_head.h), and its expected graphs are the loaded step with
// and without fuse-loss. A change to a pass that moves its output shows up
// here as a diff to review; MUTWO_REGENERATE_GOLDEN=1 writes the expected
// files from the passes instead (then read the diff with git before
// committing it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "autodiff/autodiff.h"
#include "captured_head.h"
#include "dist/data_parallel.h"
#include "ir/text.h"
#include "ops/op.h"
#include "rewrite/recompute.h"
#include "rewrite/swap.h"
#include "rewrite/update_early.h"
#include "stepfile/step_file.h"
#include "support/error.h"
#include "support/files.h"

namespace mutwo {
namespace {

const std::string kDir = MUTWO_GOLDEN_DIR;

bool regenerate() {
  const char* v = std::getenv("MUTWO_REGENERATE_GOLDEN");
  return v && std::string(v) == "1";
}

// Compares `actual` with the expected file, naming the first line that differs.
void expect_golden(const std::string& file, const std::string& actual) {
  const std::string path = kDir + "/" + file;
  if (regenerate()) {
    write_file(path, actual);
    return;
  }
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing: run with MUTWO_REGENERATE_GOLDEN=1 to write it";
  const std::string expected = read_file(path);
  if (expected == actual) return;
  std::istringstream e(expected), a(actual);
  std::string le, la;
  int line = 0;
  while (true) {
    ++line;
    const bool more_e = static_cast<bool>(std::getline(e, le)), more_a = static_cast<bool>(std::getline(a, la));
    if (!more_e && !more_a) break;
    if (!more_e || !more_a || le != la) {
      ADD_FAILURE() << file << " line " << line << " differs:\n  expected: " << (more_e ? le : "(end of file)")
                    << "\n  actual:   " << (more_a ? la : "(end of output)")
                    << "\nIf the pass changed on purpose, rerun with MUTWO_REGENERATE_GOLDEN=1 and review the diff.";
      return;
    }
  }
}

// One pass of an input's header line: its name and arguments.
struct PassCall {
  std::string name;
  std::vector<std::string> args;
};

// The "# passes:" line of an input: words, each NAME or NAME(ARG ...).
std::vector<PassCall> passes_of(const std::string& text, const std::string& file) {
  std::istringstream lines(text);
  std::string line;
  const std::string tag = "# passes:";
  while (std::getline(lines, line) && line.rfind(tag, 0) != 0) {
  }
  MUTWO_CHECK(line.rfind(tag, 0) == 0, "{}: no '{}' line naming the passes this input goes through", file, tag);
  std::vector<PassCall> out;
  std::string rest = line.substr(tag.size());
  std::replace(rest.begin(), rest.end(), ',', ' ');
  size_t at = 0;
  while ((at = rest.find_first_not_of(' ', at)) != std::string::npos) {
    const size_t open = rest.find('(', at), space = rest.find(' ', at);
    PassCall call;
    if (open != std::string::npos && open < space) {
      const size_t close = rest.find(')', open);
      MUTWO_CHECK(close != std::string::npos, "{}: '(' without ')' in its passes line", file);
      call.name = rest.substr(at, open - at);
      std::istringstream args(rest.substr(open + 1, close - open - 1));
      for (std::string a; args >> a;) call.args.push_back(a);
      at = close + 1;
    } else {
      call.name = rest.substr(at, space - at);
      at = space;
    }
    out.push_back(std::move(call));
  }
  return out;
}

// The golden inputs: every tests/golden/NAME.ir (no pass in its name).
std::vector<std::string> golden_inputs() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(kDir)) {
    const std::string file = e.path().filename().string();
    if (e.path().extension() == ".ir" && file.find('.') == file.rfind('.')) names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string header(const std::string& name, const std::string& pass) {
  return "# golden: " + name + ".ir after " + pass + " (tests/golden/test_golden.cpp; MUTWO_REGENERATE_GOLDEN=1 rewrites)\n";
}

std::vector<ir::ValueId> values_named(const ir::Graph& g, const PassCall& call) {
  std::vector<ir::ValueId> out;
  for (const std::string& name : call.args) {
    const ir::ValueId v = g.find(name);
    MUTWO_CHECK(v != ir::kNoValue, "{}: the graph has no %{}", call.name, name);
    out.push_back(v);
  }
  return out;
}

// A built step as the rewrite passes take it: each node its own origin.
rewrite::Rewritten start(const ir::Graph& g) { return rewrite::insert_recomputation(g, {}); }

// One pass after autodiff and reinplace, on `r`.
rewrite::Rewritten run_pass(const PassCall& call, const rewrite::Rewritten& r) {
  if (call.name == "data-parallel") {
    dist::DataParallelOptions o;
    for (const std::string& a : call.args) {
      if (a == "shard") o.shard_optimizer = true;
      else if (a.rfind("world=", 0) == 0) o.world = std::stoll(a.substr(6));
      else MUTWO_FAIL("data-parallel: unknown argument '{}' (world=N, shard)", a);
    }
    return start(dist::data_parallel(r.graph, o));
  }
  if (call.name == "recompute") {
    const std::vector<ir::ValueId> drop = values_named(r.graph, call);
    for (ir::ValueId v : drop)
      MUTWO_CHECK(rewrite::droppable(r.graph, v), "%{} is not an activation recomputation may drop",
                  r.graph.value(v).name);
    rewrite::Rewritten out = rewrite::insert_recomputation(r.graph, drop);
    MUTWO_CHECK(out.clones > 0, "recompute inserted no node");
    return out;
  }
  if (call.name == "update-early") return rewrite::update_early(r);
  if (call.name == "swap") {
    // Every node 1 ms and copies of 8 bytes a ms: the copies back start some
    // nodes ahead of their first reads.
    rewrite::SwapTiming timing{std::vector<double>(r.graph.nodes().size(), 1.0), 8.0};
    rewrite::Rewritten out = rewrite::insert_swaps(r, values_named(r.graph, call), timing);
    MUTWO_CHECK(out.swaps == static_cast<int32_t>(call.args.size()), "swap swapped {} of {} storages", out.swaps,
                call.args.size());
    return out;
  }
  MUTWO_FAIL("unknown pass '{}' (data-parallel, recompute, update-early, swap)", call.name);
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, PassesGiveTheExpectedIr) {
  const std::string& name = GetParam();
  const std::string file = kDir + "/" + name + ".ir";
  const std::string text = read_file(file);
  const std::vector<PassCall> calls = passes_of(text, file);
  ASSERT_GE(calls.size(), 2u);
  ASSERT_EQ(calls[0].name, "autodiff") << file << ": a forward input goes through autodiff, then reinplace, first";
  ASSERT_EQ(calls[1].name, "reinplace") << file;
  autodiff::OptimizerConfig optimizer;
  if (!calls[0].args.empty()) {
    ASSERT_EQ(calls[0].args, std::vector<std::string>{"adam"}) << file << ": autodiff takes one optimizer, adam";
    optimizer.kind = autodiff::Optimizer::adam;
  }
  ir::Graph forward = ir::parse(text);
  ASSERT_EQ(forward.outputs.size(), 1u) << "the input names its loss as its one output";
  const ir::ValueId loss = forward.outputs[0];
  std::vector<std::string> seen;
  std::vector<std::string> expected_files;
  auto check = [&](const std::string& pass, const ir::Graph& g) {
    EXPECT_NO_THROW(ops::verify(g)) << pass;
    expect_golden(name + "." + pass + ".ir", header(name, pass) + ir::print(g));
    expected_files.push_back(pass);
  };
  rewrite::Rewritten r = start(autodiff::build_training_step(std::move(forward), loss, optimizer,
                                                              [&](std::string_view pass, const ir::Graph& g) {
                                                                seen.emplace_back(pass);
                                                                check(std::string(pass), g);
                                                              }));
  EXPECT_EQ(seen, (std::vector<std::string>{"autodiff", "reinplace"}));
  for (size_t i = 2; i < calls.size(); ++i) {
    r = run_pass(calls[i], r);
    check(calls[i].name, r.graph);
  }
  // Every expected file is a graph that parses and prints back as written.
  for (const std::string& pass : expected_files) {
    const std::string golden = read_file(kDir + "/" + name + "." + pass + ".ir");
    EXPECT_EQ(header(name, pass) + ir::print(ir::parse(golden)), golden) << pass;
  }
}

INSTANTIATE_TEST_SUITE_P(Passes, Golden, ::testing::ValuesIn(golden_inputs()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The fused loss (stepfile/fuse_loss.h), which runs as a step file loads: the
// captured head of tests/common/captured_head.h loaded as captured and fused.
TEST(GoldenFusedLoss, TheCapturedHeadFusesIntoLinearCrossEntropy) {
  const std::string dir = ::testing::TempDir() + "golden_head";
  std::filesystem::create_directories(dir);
  const std::string path = captured_head::write(dir, {});
  for (const bool fuse : {false, true}) {
    stepfile::LoadOptions o;
    o.fuse_loss = fuse;
    ir::Graph g = stepfile::load_step(path, {}, o);
    g.data_file.clear();  // a temporary folder's path
    const std::string pass = fuse ? "fuse-loss" : "captured";
    const std::string text = "# golden: captured_head.step.json loaded, " + std::string(fuse ? "fused" : "not fused") +
                             " (tests/golden/test_golden.cpp; MUTWO_REGENERATE_GOLDEN=1 rewrites)\n" + ir::print(g);
    expect_golden("captured_head." + pass + ".ir", text);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mutwo
