// bench split's overlapped rows (tools/bench/bench_split.h): the split comes
// from the edge's split policy, a = 0 and a = n-1 reproduce the cloud-only
// and local rows, and in between the modeled TTFT follows the stated formula.
#include <algorithm>

#include <gtest/gtest.h>

#include "bench_split.h"

namespace baton::cli {
namespace {

// 512 tokens to prefill: the edge at 512 tok/s (1 s), the cloud's work 50 ms
// (first block at 10 ms), 1000 wire bytes per token.
LengthResult measured() {
  LengthResult r;
  r.prompt_len = 513;
  r.local_prefill_ms = 1000;
  r.local_last_token_ms = 5;
  r.local_ttft_ms = 1005;
  r.cloud_ms = 50;
  r.first_block_ms = 10;
  r.ingest_ms = 2;
  r.split_last_token_ms = 5;
  r.wire_bytes = 512 * 1000;
  return r;
}

WanProfile link(double bytes_per_s, double rtt_ms) {
  WanProfile profile;
  profile.name = "test";
  profile.bandwidth_bytes_per_s = bytes_per_s;
  profile.rtt_ms = rtt_ms;
  return profile;
}

TEST(BenchSplitOverlapTest, InBetweenTheTwoPartsRunAtOnce) {
  const LengthResult r = measured();
  const WanProfile profile = link(1e6, 20);  // 512 ms on the link: cloud-only 549 ms, local 1005 ms
  const OverlapRow row = modeled_overlap(r, profile, r.cloud_ms, r.first_block_ms);
  ASSERT_EQ(row.place, "overlap");
  ASSERT_GT(row.split_position, 0);
  ASSERT_LT(row.split_position, 512);
  const double streamed = (512.0 - static_cast<double>(row.split_position)) / 512.0;
  const double local_part = 1000.0 * (1.0 - streamed);
  const double cloud_part = 20.0 + std::max(50.0, 10.0 + streamed * 512.0);
  EXPECT_NEAR(row.ttft_ms, std::max(local_part, cloud_part) + streamed * 2.0 + 5.0, 1e-9);
  const double split = modeled_split_ttft_ms(r, profile, r.cloud_ms, r.first_block_ms);
  EXPECT_NEAR(split, 549.0, 1e-9);
  EXPECT_NEAR(row.gain, split / row.ttft_ms, 1e-12);
  EXPECT_GT(row.gain, 1.2);
}

TEST(BenchSplitOverlapTest, TheEndsAreTheLocalAndCloudOnlyRows) {
  const LengthResult r = measured();
  const OverlapRow local = modeled_overlap(r, link(1e3, 20), r.cloud_ms, r.first_block_ms);  // 8.5 min on the link
  EXPECT_EQ(local.place, "local");
  EXPECT_EQ(local.split_position, 512);
  EXPECT_DOUBLE_EQ(local.ttft_ms, r.local_ttft_ms);
  EXPECT_DOUBLE_EQ(local.gain, 1.0);
  const WanProfile fiber = link(1e9, 1);
  const OverlapRow cloud = modeled_overlap(r, fiber, r.cloud_ms, r.first_block_ms);
  EXPECT_EQ(cloud.place, "cloud");
  EXPECT_EQ(cloud.split_position, 0);
  EXPECT_DOUBLE_EQ(cloud.ttft_ms, modeled_split_ttft_ms(r, fiber, r.cloud_ms, r.first_block_ms));
  EXPECT_DOUBLE_EQ(cloud.gain, 1.0);
}

}  // namespace
}  // namespace baton::cli
