// max-batch's model of how a step grows with the batch
// (profile/batch_model.h), on bert-tiny's steps, with estimated profiles
// standing in for measured ones (nothing runs): a measured batch comes back as
// measured; bytes at any batch are that batch's step's; times lie on the line
// through the two nearest measured batches, or grow with the batch from one.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "autodiff/autodiff.h"
#include "models/model.h"
#include "profile/batch_model.h"
#include "profile/profile.h"

namespace mutwo {
namespace {

ir::Graph step(const std::string& model, int64_t batch) {
  models::ModelOptions o;
  o.name = model;
  o.batch = batch;
  if (model == "bert-tiny") o.seq = 16;
  models::Model m = models::build_model(o);
  return autodiff::build_training_step(std::move(m.graph), m.loss, {});
}

// A "measured" profile: the estimate at `batch` with node n taking base + n
// ms, and `beyond` bytes held beyond the graph's tensors throughout.
profile::Profile measured(const ir::Graph& g, int64_t batch, double base, int64_t beyond) {
  profile::Profile p = profile::estimate_profile(g, "cpu");
  p.batch = batch;
  for (size_t n = 0; n < p.nodes.size(); ++n) {
    p.nodes[n].ms = base + static_cast<double>(n);
    p.nodes[n].live_before += beyond;
    p.nodes[n].live_after += beyond;
    p.nodes[n].peak_during += beyond;
  }
  profile::summarize(p);
  return p;
}

TEST(BatchModel, BytesFromTheStepTimesOnTheLine) {
  const ir::Graph g8 = step("bert-tiny", 8), g16 = step("bert-tiny", 16), g32 = step("bert-tiny", 32);
  profile::BatchModel m("cpu");
  // Nothing measured: the roofline estimate.
  EXPECT_EQ(m.at(g16, 16).nodes[3].ms, profile::estimate_profile(g16, "cpu").nodes[3].ms);
  const profile::Profile p8 = measured(g8, 8, 1.0, 1000), p32 = measured(g32, 32, 4.0, 1000);
  m.add(g8, p8);
  // One batch measured: times grow with the batch, from it.
  const profile::Profile one = m.at(g16, 16);
  EXPECT_DOUBLE_EQ(one.nodes[5].ms, 2 * p8.nodes[5].ms);
  m.add(g32, p32);
  EXPECT_EQ(m.points(), 2u);
  EXPECT_TRUE(m.has(32) && !m.has(16));
  // A measured batch comes back as measured.
  const profile::Profile at8 = m.at(g8, 8);
  EXPECT_EQ(at8.peak_bytes, p8.peak_bytes);
  EXPECT_DOUBLE_EQ(at8.nodes[7].ms, p8.nodes[7].ms);
  // Between them: the bytes of the step at 16 (plus what was held beyond it),
  // times a third of the way from 8's to 32's.
  const profile::Profile at16 = m.at(g16, 16);
  EXPECT_EQ(at16.peak_bytes, profile::estimate_profile(g16, "cpu").peak_bytes + 1000);
  EXPECT_GT(at16.peak_bytes, at8.peak_bytes);
  EXPECT_DOUBLE_EQ(at16.nodes[7].ms, p8.nodes[7].ms + (p32.nodes[7].ms - p8.nodes[7].ms) / 3);
  EXPECT_EQ(at16.batch, 16);
  // Past them, on the same line.
  EXPECT_DOUBLE_EQ(m.at(step("bert-tiny", 56), 56).nodes[7].ms, p8.nodes[7].ms + 2 * (p32.nodes[7].ms - p8.nodes[7].ms));
  // Another step's nodes: the estimate, not the measured times.
  const ir::Graph mlp = step("mlp", 16);
  EXPECT_EQ(m.at(mlp, 16).nodes[3].ms, profile::estimate_profile(mlp, "cpu").nodes[3].ms);
}

}  // namespace
}  // namespace mutwo
