// Golden IR tests for the passes: each input graph tests/golden/<name>.ir
// (forward and loss, as IR text) goes through autodiff, reinplace, the
// recompute rewrite and the swap rewrite, and the graph after each pass must equal
// tests/golden/<name>.<pass>.ir line for line. A change to a pass that moves
// its output shows up here as a diff to review; MUTWO_REGENERATE_GOLDEN=1
// writes the expected files from the passes instead (then read the diff
// with git before committing it).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "autodiff/autodiff.h"
#include "ir/text.h"
#include "ops/op.h"
#include "rewrite/recompute.h"
#include "rewrite/swap.h"
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

// An input graph and the activations the rewrite drops in it.
struct Case {
  std::string name;
  std::vector<std::string> drop;
  std::vector<std::string> swap;  // storages the swap rewrite swaps after recomputation
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::string header(const Case& c, const std::string& pass) {
  return "# golden: " + c.name + ".ir after " + pass + " (tests/test_golden.cpp; MUTWO_REGENERATE_GOLDEN=1 rewrites)\n";
}

class Golden : public ::testing::TestWithParam<Case> {};

TEST_P(Golden, PassesGiveTheExpectedIr) {
  const Case& c = GetParam();
  ir::Graph forward = ir::parse(read_file(kDir + "/" + c.name + ".ir"));
  ASSERT_EQ(forward.outputs.size(), 1u) << "the input names its loss as its one output";
  const ir::ValueId loss = forward.outputs[0];
  std::vector<std::string> passes;
  ir::Graph step = autodiff::build_training_step(std::move(forward), loss, {}, [&](std::string_view pass, const ir::Graph& g) {
    passes.emplace_back(pass);
    expect_golden(c.name + "." + std::string(pass) + ".ir", header(c, std::string(pass)) + ir::print(g));
  });
  EXPECT_EQ(passes, (std::vector<std::string>{"autodiff", "reinplace"}));

  std::vector<ir::ValueId> drop;
  for (const std::string& name : c.drop) {
    const ir::ValueId v = step.find(name);
    ASSERT_NE(v, ir::kNoValue) << "%" << name;
    ASSERT_TRUE(rewrite::droppable(step, v)) << "%" << name << " is not an activation recomputation may drop";
    drop.push_back(v);
  }
  rewrite::Rewritten r = rewrite::insert_recomputation(step, drop);
  EXPECT_NO_THROW(ops::verify(r.graph));
  EXPECT_GT(r.clones, 0);
  expect_golden(c.name + ".recompute.ir", header(c, "recompute") + ir::print(r.graph));

  // Swaps, every node 1 ms and copies of 8 bytes a ms: the copies back start
  // some nodes ahead of their first reads.
  std::vector<ir::ValueId> swap;
  for (const std::string& name : c.swap) swap.push_back(r.graph.find(name));
  rewrite::SwapTiming timing{std::vector<double>(r.graph.nodes().size(), 1.0), 8.0};
  rewrite::Rewritten w = rewrite::insert_swaps(r, swap, timing);
  EXPECT_NO_THROW(ops::verify(w.graph));
  EXPECT_EQ(w.swaps, static_cast<int32_t>(c.swap.size()));
  expect_golden(c.name + ".swap.ir", header(c, "swap") + ir::print(w.graph));

  // Every expected file is a graph that parses and prints back as written.
  for (const char* pass : {"autodiff", "reinplace", "recompute", "swap"}) {
    const std::string text = read_file(kDir + "/" + c.name + "." + pass + ".ir");
    EXPECT_EQ(header(c, pass) + ir::print(ir::parse(text)), text) << pass;
  }
}

INSTANTIATE_TEST_SUITE_P(Passes, Golden,
                         ::testing::Values(Case{"mlp", {"fc1.relu", "fc1.dropout"}, {"fc1.dropout_mask", "head.weight.grad"}},
                                           Case{"lm", {"logits", "fc.gelu", "ln.rows"}, {"emb", "fc.out", "wte.grad"}},
                                           Case{"convnet", {"bn.relu", "gap.flat"}, {"conv.out", "logp"}},
                                           Case{"dropout", {"fc1.dropout_mask", "fc1.dropout", "fc2.dropout_mask"},
                                                {"head.weight.grad"}}),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace mutwo
