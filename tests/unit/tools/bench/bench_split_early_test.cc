// bench split's early-token rows (tools/bench/bench_split.h): the first
// early token pays the RTT, the cloud's time to it and the KV bytes still
// ahead of it on the link, at most the HTTP/2 window the edge grants such a
// call (early_tokens_window_bytes: about 2 x BDP); the ratio is
// plain / early; "decoded here" is the split with the early call's cloud time
// plus the edge's extra prefill; the PROJECTION adds one GPU decode step.
#include <gtest/gtest.h>

#include "edge_decode/link/cloud_client.h"

#include "bench_split.h"
#include "tests/unit/tools/bench/bench_split_fixture.h"

namespace baton::cli {
namespace {

// 512 tokens to prefill; the cloud's work 50 ms (first block at 10 ms),
// 1000 wire bytes per token; K = 4 early tokens, the first read at 60 ms,
// the early call's trailer at 62 ms; the edge's batch costs 3 ms more than
// its one-token last step.
LengthResult measured() {
  LengthResult r = testing::measured_length();
  r.early_asked = 4;
  r.early_received = 4;
  r.first_early_ms = 60;
  r.early_cloud_ms = 59;  // reported, not modeled
  r.early_stream_cloud_ms = 62;
  r.early_delta_ms = 3;
  return r;
}

WanProfile link(double bytes_per_s, double rtt_ms, double loss = 0) {
  return testing::test_link(bytes_per_s, rtt_ms, loss);
}

EarlyCloud measured_cloud(const LengthResult& r) {
  return EarlyCloud{r.cloud_ms, r.first_block_ms, r.first_early_ms, r.early_stream_cloud_ms};
}

TEST(BenchSplitEarlyTest, TheWindowIsTwiceTheBandwidthDelayProductAsTheEdgeGrantsIt) {
  // 2 x 1 MB/s x 20 ms = 40 kB: the 64 KiB floor.
  EXPECT_DOUBLE_EQ(transport_window_bytes(link(1e6, 20)), 64.0 * 1024);
  // 2 x 2.5 MB/s x 60 ms = 300 kB: 512 KiB, the next power of two.
  EXPECT_DOUBLE_EQ(transport_window_bytes(link(2.5e6, 60)), 512.0 * 1024);
  // 2 x 1 GB/s x 100 ms = 200 MB: the 4 MiB ceiling.
  EXPECT_DOUBLE_EQ(transport_window_bytes(link(1e9, 100)), 4.0 * 1024 * 1024);
  EXPECT_EQ(early_tokens_window_bytes(0, 20), 0) << "unknown bandwidth: gRPC's own window";
  EXPECT_EQ(early_tokens_window_bytes(1e6, 0), 0) << "unknown RTT: gRPC's own window";
}

TEST(BenchSplitEarlyTest, OnAFastLinkNothingIsAheadAndTheTokenPaysRttAndTheCloud) {
  const LengthResult r = measured();
  const WanProfile fiber = link(1e10, 1);
  const EarlyRow row = modeled_early(r, fiber, measured_cloud(r));
  EXPECT_DOUBLE_EQ(row.ahead_bytes, 0.0);
  EXPECT_DOUBLE_EQ(row.ttft_ms, 1.0 + 60.0);
  EXPECT_DOUBLE_EQ(row.plain_ms, modeled_split_ttft_ms(r, fiber, r.cloud_ms, r.first_block_ms));
  EXPECT_NEAR(row.plain_ms, 1.0 + 50.0 + 2.0 + 5.0, 1e-9);
  EXPECT_DOUBLE_EQ(row.ratio, row.plain_ms / row.ttft_ms);
}

TEST(BenchSplitEarlyTest, BytesProducedButNotDeliveredAreAhead) {
  LengthResult r = measured();
  r.first_early_ms = 30;  // while the encoder still has half the KV to send
  const WanProfile slow = link(1e6, 200);  // window: 2 x 1 MB/s x 200 ms -> 512 KiB
  // Produced by 30 ms: (30 - 10) / (50 - 10) of 512,000 bytes; delivered: 1 MB/s x 20 ms.
  const double ahead = 256000.0 - 20000.0;
  EXPECT_DOUBLE_EQ(bytes_ahead(r, slow, r.cloud_ms, r.first_block_ms, 30.0), ahead);
  const EarlyRow row = modeled_early(r, slow, measured_cloud(r));
  EXPECT_DOUBLE_EQ(row.ahead_bytes, ahead);
  EXPECT_NEAR(row.ttft_ms, 200.0 + 30.0 + ahead / 1e6 * 1000.0, 1e-9);
  EXPECT_NEAR(row.plain_ms, 200.0 + (10.0 + 512.0) + 2.0 + 5.0, 1e-9);
  EXPECT_NEAR(row.ratio, 729.0 / 466.0, 1e-12);
  EXPECT_GT(row.ratio, 1.5);
}

TEST(BenchSplitEarlyTest, AtMostTheFlowControlWindowIsAhead) {
  LengthResult r = measured();
  r.wire_bytes = 40'000'000;  // 40 s on the link
  const WanProfile slow = link(1e6, 20);
  const EarlyRow row = modeled_early(r, slow, measured_cloud(r));
  EXPECT_DOUBLE_EQ(row.ahead_bytes, 64.0 * 1024);
  EXPECT_NEAR(row.ttft_ms, 20.0 + 60.0 + 65.536, 1e-9);
  EXPECT_NEAR(row.plain_ms, 20.0 + 10.0 + 40000.0 + 2.0 + 5.0, 1e-9);
  EXPECT_GT(row.ratio, 9.0);
}

TEST(BenchSplitEarlyTest, LossSlowsTheBytesAhead) {
  LengthResult r = measured();
  r.first_early_ms = 30;
  const WanProfile lossy = link(1e6, 200, 0.5);  // 0.5 MB/s effective; window 512 KiB
  const double ahead = 256000.0 - 10000.0;
  const EarlyRow row = modeled_early(r, lossy, measured_cloud(r));
  EXPECT_DOUBLE_EQ(row.ahead_bytes, ahead);
  EXPECT_NEAR(row.ttft_ms, 200.0 + 30.0 + ahead / 0.5e6 * 1000.0, 1e-9);
}

TEST(BenchSplitEarlyTest, DecodedHereIsTheSplitWithTheEarlyCallsCloudTimePlusTheEdgesExtraPrefill) {
  const LengthResult r = measured();
  const WanProfile fiber = link(1e10, 1);
  const EarlyRow row = modeled_early(r, fiber, measured_cloud(r));
  // The trailer came at 62 ms (after the K decode steps), not 50.
  EXPECT_NEAR(row.decoded_here_ms, 1.0 + 62.0 + 2.0 + 5.0 + 3.0, 1e-9);
  EXPECT_GT(row.decoded_here_ms, row.plain_ms);
}

TEST(BenchSplitEarlyTest, TheProjectionAddsOneGpuDecodeStepToThePrefillAndKToTheTrailer) {
  const LengthResult r = measured();
  const EarlyCloud cloud = projected_early_cloud(r, 1e5, 0.5);
  EXPECT_NEAR(cloud.cloud_ms, 5.12, 1e-12);             // 512 tokens at 1e5 tok/s
  EXPECT_NEAR(cloud.first_block_ms, 5.12 * 0.2, 1e-12);  // the measured fraction 10 / 50
  EXPECT_NEAR(cloud.first_early_ms, 5.12 + 0.5, 1e-12);
  EXPECT_NEAR(cloud.stream_cloud_ms, 5.12 + 4 * 0.5, 1e-12);
}

TEST(BenchSplitEarlyTest, ModelProfilesFillsTheRowsOnlyForMeasuredEarlyTokens) {
  SplitRun run;
  run.lengths = {513};
  run.gpu_rates = {1e5};
  run.gpu_decode_step_ms = 0.5;
  run.profiles = {link(1e6, 20), link(1e10, 1)};
  run.early_tokens = 4;
  CodecRun& base = run.codecs.emplace_back();
  base.codec = "int8-g32-z3";
  base.results.push_back(measured());
  CodecRun& other = run.codecs.emplace_back();
  other.codec = "int4-g32-z3";
  LengthResult plain = measured();
  plain.early_asked = 0;
  other.results.push_back(plain);
  model_profiles(run);
  for (size_t p = 0; p < run.profiles.size(); ++p) {
    const ProfileRows& rows = run.codecs[0].per_profile[p];
    ASSERT_EQ(rows.early.size(), 1u);
    ASSERT_EQ(rows.projection_early.size(), 1u);
    EXPECT_DOUBLE_EQ(rows.early[0].plain_ms, rows.split_ms[0]);
    EXPECT_DOUBLE_EQ(rows.projection_early[0].plain_ms, rows.projection_ms[0]);
    const EarlyRow expect =
        modeled_early(run.codecs[0].results[0], run.profiles[p], projected_early_cloud(measured(), 1e5, 0.5));
    EXPECT_DOUBLE_EQ(rows.projection_early[0].ttft_ms, expect.ttft_ms);
    EXPECT_TRUE(run.codecs[1].per_profile[p].early.empty());
  }
}

}  // namespace
}  // namespace baton::cli
