// Offloading saved tensors to host memory, the compiled route's third choice
// beside keeping and recomputing (plan::compiled::offload_order), on plain
// data with a given copy window and host limit: golden cases. The rule is the
// CLI route's swap rule (plan/copy_streams.h): what the compute hides is free,
// the rest is the copy's cost, and the most bytes per exposed ms go first.
#include <gtest/gtest.h>

#include "plan/compiled.h"
#include "plan/copy_streams.h"
#include "support/error.h"

namespace mutwo {
namespace {

using plan::compiled::OffloadRequest;
using plan::compiled::Offloaded;

// Copies at 1 GB/s each way: 1e6 bytes take 1 ms. Ten 1 ms nodes of forward, ten of backward.
OffloadRequest request(std::vector<plan::compiled::SavedTensor> saved, int64_t host_limit = 1'000'000'000) {
  return {std::vector<double>(20, 1.0), std::move(saved), "cuda", 1.0, 1.0, true, host_limit};
}

TEST(Offload, WhatTheWindowHidesGoesFirstAndCostsNothing) {
  // a: read last at node 1, first again at 18: 16 ms of compute each way hide its 2 ms copies.
  // b: read last at 8, again at 11: 2 ms of window for 3 ms of copy each way.
  const auto order = plan::compiled::offload_order(request({{3'000'000, 8, 11}, {2'000'000, 1, 18}}));
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0].saved, 1);
  EXPECT_DOUBLE_EQ(order[0].exposed_ms, 0.0);
  EXPECT_EQ(order[0].gone_after, 3);  // out over nodes 2 and 3
  EXPECT_EQ(order[0].back_at, 16);    // back over nodes 16 and 17
  EXPECT_EQ(order[1].saved, 0);
  EXPECT_DOUBLE_EQ(order[1].exposed_ms, 2.0);  // 1 ms unhidden out, 1 ms back
}

TEST(Offload, ACopyTakenFillsTheStreamTheNextOneShares) {
  // Two tensors with one 5 ms window (nodes 5 to 9): the first copy's 4 ms
  // each way fill it, out from its start and back from its end, so the second
  // finds 1 ms each way for its 4.
  const auto order = plan::compiled::offload_order(request({{4'000'000, 4, 10}, {4'000'000, 4, 10}}));
  ASSERT_EQ(order.size(), 2u);
  EXPECT_DOUBLE_EQ(order[0].exposed_ms, 0.0);
  EXPECT_EQ(order[0].gone_after, 8);
  EXPECT_EQ(order[0].back_at, 6);
  EXPECT_DOUBLE_EQ(order[1].exposed_ms, 6.0);
}

TEST(Offload, TheHostLimitHoldsAndTheOrderStopsAtIt) {
  const auto order = plan::compiled::offload_order(request({{1'000'000, 1, 18}, {2'000'000, 1, 18}, {1'500'000, 2, 17}}, 3'100'000));
  int64_t host = 0;
  for (const Offloaded& o : order) host += std::vector<int64_t>{1'000'000, 2'000'000, 1'500'000}[static_cast<size_t>(o.saved)];
  EXPECT_LE(host, 3'100'000);
  ASSERT_EQ(order.size(), 2u);  // 2 MB first (the most bytes, all hidden); 1.5 MB more would pass the limit, 1 MB does not
  EXPECT_EQ(order[0].saved, 1);
  EXPECT_EQ(order[1].saved, 0);
  EXPECT_TRUE(plan::compiled::offload_order(request({{1'000'000, 1, 18}}, 0)).empty());
}

TEST(Offload, SerialisedCopiesCostTheirWholeTime) {
  OffloadRequest r = request({{2'000'000, 1, 18}});
  r.overlap = false;  // the CPU, or no copy stream
  const auto order = plan::compiled::offload_order(r);
  ASSERT_EQ(order.size(), 1u);
  EXPECT_DOUBLE_EQ(order[0].exposed_ms, 4.0);
  EXPECT_EQ(order[0].gone_after, 1);
  EXPECT_EQ(order[0].back_at, 18);
}

TEST(Offload, RecomputeWinsWhereItIsCheaperPerByte) {
  // The same bytes freed either way: the plan that recomputes for 0.5 ms beats
  // the one that offloads with 2 ms exposed, and loses to one with 0.1 ms.
  using plan::compiled::Priced;
  EXPECT_EQ(plan::compiled::fastest_within({{100, 0.5}, {100, 2.0}}, 100), 0);
  EXPECT_EQ(plan::compiled::fastest_within({{100, 0.5}, {100, 0.1}}, 100), 1);
}

TEST(Offload, ARefusalNamesTheOffloadFloorAndItsHostMemory) {
  const std::string t = plan::compiled::refusal_text(
      {int64_t{1} << 30, int64_t{6} << 30, int64_t{12} << 30, "the compiled graph at model.py:40", 0, 0, 0, int64_t{2} << 30});
  EXPECT_NE(t.find("lowest predicted added peak is 6.0 GiB, offloading 2.0 GiB to host memory"), std::string::npos) << t;
  EXPECT_NE(t.find("try budget=\"6.0GiB\""), std::string::npos) << t;
  const std::string bounded = plan::compiled::refusal_text({int64_t{1} << 30, int64_t{6} << 30, 0, "the graph", 0, 0, 0,
                                                            int64_t{1} << 30, int64_t{1} << 30, int64_t{4} << 30,
                                                            int64_t{3} << 30});
  EXPECT_NE(bounded.find("host_memory=1.0 GiB bounds it: with 3.0 GiB of host memory the lowest is 4.0 GiB"),
            std::string::npos) << bounded;
  const std::string kept = plan::compiled::refusal_text({1024, 4096, 0, "the graph", 0, 0, 0});
  EXPECT_EQ(kept.find("host memory"), std::string::npos) << "nothing offloaded, nothing said: " << kept;
}

TEST(Offload, ReadsOutOfOrderAreRefused) {
  EXPECT_THROW(plan::compiled::offload_order(request({{1'000'000, 12, 11}})), UserError);
  EXPECT_THROW(plan::compiled::offload_order(request({{1'000'000, 1, 20}})), UserError);
}

}  // namespace
}  // namespace mutwo
