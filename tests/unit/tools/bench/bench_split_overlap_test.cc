// bench split's overlapped rows (tools/bench/bench_split.h): the split comes
// from the edge's split policy, a = 0 and a = n-1 reproduce the cloud-only
// and local rows, and in between the modeled TTFT follows the stated formula.
// The auto rows: the codec is the edge's choose_codec over the measured
// codecs within the loss floor, and the gains compare with the baseline and
// the best fixed codec.
#include <algorithm>

#include <gtest/gtest.h>

#include "bench_split.h"
#include "tests/unit/tools/bench/bench_split_fixture.h"

namespace baton::cli {
namespace {

LengthResult measured() { return testing::measured_length(); }
WanProfile link(double bytes_per_s, double rtt_ms) { return testing::test_link(bytes_per_s, rtt_ms); }

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

// Three measured codecs of 512 prefilled tokens at 4000 F16 bytes per token:
// the baseline int8 (0.5 of F16), int4 (0.25) and tc-b1 (0.1, over the +1%
// floor).
SplitRun three_codec_run(double link_bytes_per_s) {
  SplitRun run;
  run.lengths = {513};
  run.gpu_rates = {1e5};
  run.profiles = {link(link_bytes_per_s, 20)};
  run.auto_codec = true;
  run.max_kv_loss_pct = 1.0;
  run.f16_bytes_per_token = 4000;
  struct Spec {
    const char* name;
    double ratio, ppl, kl;
  };
  for (const Spec& spec : {Spec{"int8-g32-z3", 0.5, 0.01, 0.0001}, Spec{"int4-g32-z3", 0.25, 0.4, 0.002},
                           Spec{"tc-b1", 0.1, 5.0, 0.05}}) {
    CodecRun& codec = run.codecs.emplace_back();
    absl::StatusOr<KvCodecConfig> config = parse_kv_codec_config(spec.name);
    EXPECT_TRUE(config.ok()) << config.status();
    codec.config = *config;
    codec.codec = config->to_string();
    LengthResult r = measured();
    r.wire_bytes = static_cast<uint64_t>(512 * 4000 * spec.ratio);
    codec.results.push_back(r);
    run.table.push_back(KvCodecQuality{codec.codec, spec.ratio, spec.ppl, spec.kl});
  }
  model_profiles(run);
  return run;
}

TEST(BenchSplitAutoTest, ASlowLinkTakesTheSmallestCodecWithinTheFloor) {
  const SplitRun run = three_codec_run(1e6);  // int8 1024 ms on the link, int4 512 ms, tc-b1 205 ms
  ASSERT_EQ(run.auto_rows.size(), 1u);
  const AutoRow& row = run.auto_rows[0].rows[0];
  EXPECT_EQ(run.codecs[row.codec].codec, run.codecs[1].codec) << row.reason;  // int4: tc-b1 is over the floor
  EXPECT_NE(row.reason.find("over the loss floor"), std::string::npos) << row.reason;
  const LengthResult& int4 = run.codecs[1].results[0];
  const OverlapRow expect = modeled_overlap(int4, run.profiles[0], int4.cloud_ms, int4.first_block_ms);
  EXPECT_EQ(row.overlap.split_position, expect.split_position);
  EXPECT_DOUBLE_EQ(row.overlap.ttft_ms, expect.ttft_ms);
  // Baseline: cloud-only int8 (20 + 1034 + 2 + 5 ms) loses to local (1005 ms).
  EXPECT_DOUBLE_EQ(row.baseline_ms, 1005.0);
  EXPECT_NEAR(row.best_fixed_ms, 20.0 + 10.0 + 512.0 + 2.0 + 5.0, 1e-9);  // cloud-only int4
  EXPECT_NEAR(row.gain, 1005.0 / row.overlap.ttft_ms, 1e-12);
  EXPECT_NEAR(row.gain_vs_best, row.best_fixed_ms / row.overlap.ttft_ms, 1e-12);
  EXPECT_GT(row.gain_vs_best, 1.0);
  // The cloud-only rows of every codec are there, tc-b1's too.
  EXPECT_NEAR(run.codecs[2].per_profile[0].split_ms[0], 20.0 + 10.0 + 204.8 + 2.0 + 5.0, 1e-9);
}

TEST(BenchSplitAutoTest, AFastLinkTakesTheLeastLossAmongEquallyFastCodecs) {
  const SplitRun run = three_codec_run(1e10);
  const AutoRow& row = run.auto_rows[0].rows[0];
  EXPECT_EQ(row.codec, 0u) << row.reason;  // int8: the least loss, as fast as int4 on this link
  EXPECT_EQ(row.overlap.place, "cloud");
  EXPECT_NEAR(row.gain, 1.0, 1e-9);
}

TEST(BenchSplitAutoTest, AFloorThatExcludesEveryCodecFallsBackToTheBaseline) {
  SplitRun run = three_codec_run(1e6);
  run.max_kv_loss_pct = -1.0;  // nothing qualifies
  model_profiles(run);
  const AutoRow& row = run.auto_rows[0].rows[0];
  EXPECT_EQ(row.codec, 0u);
  EXPECT_NE(row.reason.find("the default"), std::string::npos) << row.reason;
  EXPECT_DOUBLE_EQ(row.best_fixed_ms, row.baseline_ms);  // only the baseline counts
}

}  // namespace
}  // namespace baton::cli
