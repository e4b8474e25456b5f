// The split policy counts the fixed cost of a cloud call (issue 16: a
// 3-token follow-up went to the cloud although auto keeps short turns
// local) and marks every figure it assumed rather than measured.
#include <gtest/gtest.h>

#include "edge_decode/plan/split_policy.h"

namespace baton {
namespace {

// A follow-up of 3 tokens on loopback: every figure measured and fast,
// the local prefill 1000 tok/s (3 ms), the cloud 5000 tok/s over a
// 0.3 ms round trip and 1 GB/s. Without a per-call cost the cloud looked
// faster (0.3 + 0.6 ms); a real call costs its set-up, header, trailer and
// commit whatever its length.
SplitInputs short_follow_up() {
  SplitInputs in;
  in.policy = PrefillPolicy::kAuto;
  in.cloud_configured = true;
  in.cloud_reachable = true;
  in.reused_tokens = 640;
  in.prefill_tokens = 3;
  in.local_prefill_tokens_per_s = 1000;
  in.cloud_prefill_tokens_per_s = 5000;
  in.link_bytes_per_s = 1e9;
  in.link_rtt_ms = 0.3;
  in.wire_bytes_per_token = 480;
  return in;
}

TEST(SplitPolicyCallCostTest, AShortFollowUpStaysLocal) {
  const SplitPlan plan = decide_split(short_follow_up());
  EXPECT_EQ(plan.place, v1::PREFILL_PLACE_LOCAL) << plan.reason;
  EXPECT_NEAR(plan.estimated_cloud_ms, 0.3 + kAssumedCloudCallSetupMs + 3.0 / 5000 * 1000 + 3 * 480 / 1e9 * 1000,
              1e-9);
  // Until a call measured it, the set-up is an assumption and says so.
  EXPECT_NE(plan.reason.find("set-up 50 ms, assumed"), std::string::npos) << plan.reason;
}

TEST(SplitPolicyCallCostTest, AMeasuredCallCostReplacesTheAssumption) {
  SplitInputs in = short_follow_up();
  in.cloud_call_overhead_ms = 120;  // round trip included
  const SplitPlan plan = decide_split(in);
  EXPECT_NEAR(plan.estimated_cloud_ms, 120 + 3.0 / 5000 * 1000 + 3 * 480 / 1e9 * 1000, 1e-9);
  EXPECT_NE(plan.reason.find("per-call cost 120 ms, measured"), std::string::npos) << plan.reason;
  EXPECT_EQ(plan.reason.find("assumed"), std::string::npos) << plan.reason;
}

TEST(SplitPolicyCallCostTest, ALongPromptStillGoesToAFasterCloud) {
  SplitInputs in = short_follow_up();
  in.prefill_tokens = 2000;  // 2 s locally vs 50.3 + 400 ms
  EXPECT_EQ(decide_split(in).place, v1::PREFILL_PLACE_CLOUD);
}

TEST(SplitPolicyCallCostTest, EveryUnmeasuredFigureIsMarkedAssumed) {
  SplitInputs in = short_follow_up();
  in.policy = PrefillPolicy::kCloud;
  in.cloud_prefill_tokens_per_s = 0;
  in.link_bytes_per_s = 0;
  in.link_rtt_ms = 0;
  in.local_prefill_tokens_per_s = 0;
  const SplitPlan plan = decide_split(in);
  for (const char* expected : {"RTT 50 ms (assumed)", "2000 tok/s, assumed", "11.9 MiB/s, assumed",
                               "50 tok/s, assumed"}) {
    EXPECT_NE(plan.reason.find(expected), std::string::npos) << expected << " in: " << plan.reason;
  }
}

TEST(SplitPolicyCallCostTest, TheReasonUsesIecUnits) {
  SplitInputs in = short_follow_up();
  in.prefill_tokens = 2000;  // 2000 x 480 B = 937.5 KiB
  const SplitPlan plan = decide_split(in);
  EXPECT_NE(plan.reason.find("937.5 KiB at 953.7 MiB/s"), std::string::npos) << plan.reason;
  EXPECT_EQ(plan.reason.find("MB/s"), std::string::npos) << plan.reason;
}

}  // namespace
}  // namespace baton
