// The split policy decides from measured figures; policy local never picks
// the cloud, an unreachable cloud means local, and the reason carries the
// numbers.
#include "edge_decode/plan/split_policy.h"

#include <gtest/gtest.h>

#include "tests/unit/edge_decode/plan/long_prompt_inputs.h"

namespace baton {
namespace {

SplitInputs long_prompt() { return testing::long_prompt_inputs(); }

TEST(SplitPolicyTest, AutoOffloadsALongPromptWhenTheCloudIsFaster) {
  const SplitPlan plan = decide_split(long_prompt());
  EXPECT_EQ(plan.place, v1::PREFILL_PLACE_CLOUD);
  EXPECT_DOUBLE_EQ(plan.estimated_local_ms, 8000.0 / 80.0 * 1000.0);
  // Per-call cost (RTT 20 ms + the assumed set-up) + compute + transfer.
  const double expected_cloud =
      20.0 + kAssumedCloudCallSetupMs + 8000.0 / 10000.0 * 1000.0 + 8000.0 * 30 * 1024 / 100e6 * 1000.0;
  EXPECT_NEAR(plan.estimated_cloud_ms, expected_cloud, 1e-6);
  EXPECT_EQ(plan.reused_tokens, 100u);
  EXPECT_EQ(plan.prefill_tokens, 8000u);
  EXPECT_NE(plan.reason.find("8000 tokens at 80 tok/s"), std::string::npos) << plan.reason;
  EXPECT_NE(plan.reason.find("cloud"), std::string::npos) << plan.reason;
}

TEST(SplitPolicyTest, AutoKeepsAShortPromptLocal) {
  SplitInputs in = long_prompt();
  in.prefill_tokens = 4;  // 50 ms locally vs RTT 20 + 0.4 + 12 ms... make the link slow
  in.link_bytes_per_s = 1e5;
  const SplitPlan plan = decide_split(in);
  EXPECT_EQ(plan.place, v1::PREFILL_PLACE_LOCAL);
  EXPECT_GT(plan.estimated_cloud_ms, plan.estimated_local_ms);
  EXPECT_EQ(plan.reason.rfind("local:", 0), 0u) << plan.reason;
}

TEST(SplitPolicyTest, SlowLinkMakesLocalWin) {
  SplitInputs in = long_prompt();
  in.link_bytes_per_s = 1e4;  // 8000 * 30 KiB = 6.8 h over 10 kB/s
  EXPECT_EQ(decide_split(in).place, v1::PREFILL_PLACE_LOCAL);
  // Over 1 MB/s (245 s) the cloud alone loses too, but the edge prefilling
  // the front while it streams the back beats both (split_policy_overlap_test).
  in.link_bytes_per_s = 1e6;
  EXPECT_EQ(decide_split(in).place, v1::PREFILL_PLACE_OVERLAP);
}

TEST(SplitPolicyTest, PolicyLocalNeverPicksTheCloud) {
  SplitInputs in = long_prompt();
  in.policy = PrefillPolicy::kLocal;
  const SplitPlan plan = decide_split(in);
  EXPECT_EQ(plan.place, v1::PREFILL_PLACE_LOCAL);
  EXPECT_NE(plan.reason.find("policy local"), std::string::npos) << plan.reason;
  EXPECT_EQ(plan.estimated_cloud_ms, 0.0);
}

TEST(SplitPolicyTest, UnreachableCloudMeansLocalUnderAuto) {
  SplitInputs in = long_prompt();
  in.cloud_reachable = false;
  const SplitPlan plan = decide_split(in);
  EXPECT_EQ(plan.place, v1::PREFILL_PLACE_LOCAL);
  EXPECT_NE(plan.reason.find("unreachable"), std::string::npos) << plan.reason;
}

TEST(SplitPolicyTest, NoCloudConfiguredMeansLocal) {
  SplitInputs in = long_prompt();
  in.cloud_configured = false;
  in.policy = PrefillPolicy::kCloud;
  EXPECT_EQ(decide_split(in).place, v1::PREFILL_PLACE_LOCAL);
}

TEST(SplitPolicyTest, PolicyCloudAsksTheCloudEvenWhenLocalIsFaster) {
  SplitInputs in = long_prompt();
  in.policy = PrefillPolicy::kCloud;
  in.prefill_tokens = 2;
  in.cloud_reachable = false;
  EXPECT_EQ(decide_split(in).place, v1::PREFILL_PLACE_CLOUD);
}

TEST(SplitPolicyTest, NothingToPrefillIsReused) {
  SplitInputs in = long_prompt();
  in.prefill_tokens = 0;
  const SplitPlan plan = decide_split(in);
  EXPECT_EQ(plan.place, v1::PREFILL_PLACE_REUSED);
  EXPECT_NE(plan.reason.find("100 tokens"), std::string::npos) << plan.reason;
}

TEST(SplitPolicyTest, UnknownFiguresUseTheStatedAssumptions) {
  SplitInputs in;
  in.cloud_configured = true;
  in.cloud_reachable = true;
  in.prefill_tokens = 1000;
  in.wire_bytes_per_token = 1000;
  const SplitPlan plan = decide_split(in);
  EXPECT_DOUBLE_EQ(plan.estimated_local_ms, 1000.0 / kAssumedLocalPrefillTokensPerS * 1000.0);
  EXPECT_NEAR(plan.estimated_cloud_ms,
              kAssumedLinkRttMs + kAssumedCloudCallSetupMs + 1000.0 / kAssumedCloudPrefillTokensPerS * 1000.0 +
                  1e6 / kAssumedLinkBytesPerS * 1000.0,
              1e-6);
  EXPECT_NE(plan.reason.find("assumed"), std::string::npos) << plan.reason;
}

TEST(SplitPolicyTest, LocalRecomputationCountsInTheLocalEstimate) {
  SplitInputs in = long_prompt();
  in.prefill_tokens = 10;
  in.local_prefill_tokens = 4000;  // a lossless store recomputing earlier turns
  const SplitPlan plan = decide_split(in);
  EXPECT_DOUBLE_EQ(plan.estimated_local_ms, 4000.0 / 80.0 * 1000.0);
  EXPECT_EQ(plan.place, v1::PREFILL_PLACE_CLOUD);
  EXPECT_EQ(plan.prefill_tokens, 10u);
}

TEST(SplitPolicyTest, PolicyNamesRoundTrip) {
  for (PrefillPolicy policy : {PrefillPolicy::kAuto, PrefillPolicy::kLocal, PrefillPolicy::kCloud}) {
    absl::StatusOr<PrefillPolicy> parsed = parse_prefill_policy(prefill_policy_name(policy));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, policy);
  }
  EXPECT_FALSE(parse_prefill_policy("sometimes").ok());
  EXPECT_EQ(prefill_policy_from_proto(v1::SPLIT_POLICY_UNSPECIFIED, PrefillPolicy::kLocal), PrefillPolicy::kLocal);
  EXPECT_EQ(prefill_policy_from_proto(v1::SPLIT_POLICY_CLOUD, PrefillPolicy::kLocal), PrefillPolicy::kCloud);
}

TEST(SplitPolicyTest, MovingAverageWeighsTheNewestSample) {
  MovingAverage average(0.5);
  EXPECT_EQ(average.value(), 0.0);
  average.add(100);
  EXPECT_EQ(average.value(), 100.0);
  average.add(200);
  EXPECT_EQ(average.value(), 150.0);
  EXPECT_EQ(average.samples(), 2);
}

}  // namespace
}  // namespace baton
