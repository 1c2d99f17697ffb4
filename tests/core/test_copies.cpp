// The copies of a training step as one graph (models/copies.h, `mutwo many`):
// each copy an independent sub-graph under its own names, the copies in
// order, random nodes and the recomputation's rng_save carrying the copy's
// seed offset.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autodiff/autodiff.h"
#include "ir/text.h"
#include "models/copies.h"
#include "models/model.h"
#include "ops/op.h"
#include "rewrite/recompute.h"
#include "support/error.h"

namespace mutwo {
namespace {

ir::Graph mlp_training_step(double lr) {
  models::MlpConfig c;
  c.batch = 4;
  models::Model m = models::build_mlp(c);
  autodiff::OptimizerConfig oc;
  oc.lr = lr;
  return autodiff::build_training_step(std::move(m.graph), m.loss, oc);
}

TEST(Copies, EachCopyIsItsStepUnderItsOwnNames) {
  const std::vector<ir::Graph> steps = {mlp_training_step(0.01), mlp_training_step(0.1), mlp_training_step(0.5)};
  const models::Copies c = models::compose_copies(steps);
  const ir::Graph& one = steps[0];
  ASSERT_EQ(c.graph.nodes().size(), 3 * one.nodes().size());
  ASSERT_EQ(c.graph.num_values(), 3 * one.num_values());
  ASSERT_EQ(c.loss_output, (std::vector<size_t>{0, one.outputs.size(), 2 * one.outputs.size()}));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(c.graph.outputs[c.loss_output[i]], c.value_of[i][static_cast<size_t>(steps[i].outputs[0])]);
    for (const ir::Value& v : steps[i].values()) {
      const ir::Value& mine = c.graph.value(c.value_of[i][static_cast<size_t>(v.id)]);
      EXPECT_EQ(mine.name, "copy" + std::to_string(i) + "." + v.name);
      EXPECT_EQ(mine.type, v.type);
      EXPECT_EQ(mine.role, v.role);
      EXPECT_EQ(mine.init, v.init);
    }
    // Copy i's nodes are its step's, in its order; its own learning rate; its
    // random nodes draw from seed + i.
    const std::string scope = "copy" + std::to_string(i);
    std::vector<const ir::Node*> of_copy;
    for (const ir::Node& n : c.graph.nodes())
      if (n.scope == scope || n.scope.rfind(scope + ".", 0) == 0) of_copy.push_back(&n);
    ASSERT_EQ(of_copy.size(), one.nodes().size());
    for (size_t n = 0; n < one.nodes().size(); ++n) {
      const ir::Node& mine = *of_copy[n];
      const ir::Node& theirs = steps[i].nodes()[n];
      EXPECT_EQ(mine.op, theirs.op);
      EXPECT_EQ(mine.phase, theirs.phase);
      EXPECT_EQ(mine.attrs.has(ops::kSeedOffsetAttr), ops::has(theirs, ops::kRandom)) << mine.op;
      if (ops::has(theirs, ops::kRandom)) EXPECT_EQ(ops::seed_offset(mine), static_cast<int64_t>(i));
      if (mine.op == "sgd_step") EXPECT_EQ(mine.attrs.f("lr"), theirs.attrs.f("lr"));
      ASSERT_EQ(mine.inputs.size(), theirs.inputs.size());
      for (size_t k = 0; k < mine.inputs.size(); ++k)
        if (theirs.inputs[k] != ir::kNoValue)
          EXPECT_EQ(mine.inputs[k], c.value_of[i][static_cast<size_t>(theirs.inputs[k])]);
    }
  }
  // Phase by phase: every copy's forward before any copy's loss, and so on.
  for (size_t n = 1; n < c.graph.nodes().size(); ++n)
    EXPECT_LE(c.graph.nodes()[n - 1].phase, c.graph.nodes()[n].phase) << n;
}

// A dropped dropout mask of copy 1 is recomputed by replaying copy 1's
// generator: the rng_save before its forward node keeps the seed offset.
TEST(Copies, RecomputedRandomNodeSavesItsCopysGenerator) {
  const models::Copies c = models::compose_copies({mlp_training_step(0.01), mlp_training_step(0.01)});
  const ir::ValueId mask = c.graph.find("copy1.fc1.dropout_mask");
  ASSERT_NE(mask, ir::kNoValue) << ir::print(c.graph);
  const rewrite::Rewritten r = rewrite::insert_recomputation(c.graph, {mask});
  int saves = 0;
  for (const ir::Node& n : r.graph.nodes())
    if (n.op == "rng_save") {
      ++saves;
      EXPECT_EQ(ops::seed_offset(n), 1) << ir::print(r.graph);
      EXPECT_EQ(n.scope, "copy1.fc1");
    }
  EXPECT_EQ(saves, 1);
  EXPECT_NO_THROW(ops::verify(r.graph));
}

TEST(Copies, NoCopiesIsRefused) { EXPECT_THROW(models::compose_copies({}), UserError); }

}  // namespace
}  // namespace mutwo
