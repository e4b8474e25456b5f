// The overlapped plan (issue 20, part 4): the edge prefills [have, a) while
// the cloud streams [a, n-1). The split a sits where the rising local line
// crosses the falling cloud + transfer line, rounded to the better neighbour
// and kept inside the prompt; auto takes it only when it beats both single
// places by kMinOverlapGain; policies local and cloud keep their one place;
// a request may force a.
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "edge_decode/plan/split_policy.h"
#include "tests/unit/edge_decode/plan/long_prompt_inputs.h"

namespace baton {
namespace {

// The common long prompt (long_prompt_inputs.h) over `link_bytes_per_s`.
SplitInputs prompt_over(double link_bytes_per_s) { return testing::long_prompt_inputs(link_bytes_per_s); }

// The two lines of prompt_over at x tokens prefilled by the edge.
double local_ms(const SplitInputs& in, double x) { return x / in.local_prefill_tokens_per_s * 1000.0; }
double cloud_ms(const SplitInputs& in, double x) {
  return in.link_rtt_ms + kAssumedCloudCallSetupMs + in.prefill_tokens / in.cloud_prefill_tokens_per_s * 1000.0 +
         (in.prefill_tokens - x) * in.wire_bytes_per_token / in.link_bytes_per_s * 1000.0;
}
double overlap_ms(const SplitInputs& in, double x) { return std::max(local_ms(in, x), cloud_ms(in, x)); }

TEST(SplitPolicyOverlapTest, TheCrossingOfTheTwoLines) {
  // 10 ms/token locally against a cloud line from 1000 ms falling 10 ms/token: 50.
  EXPECT_DOUBLE_EQ(overlap_split_tokens(10, 0, 1000, 10), 50.0);
  // A flat cloud line (instant link): local reaches it at 100 tokens.
  EXPECT_DOUBLE_EQ(overlap_split_tokens(10, 0, 1000, 0), 100.0);
  // 20 tokens the edge recomputes first move the crossing 20 tokens earlier.
  EXPECT_DOUBLE_EQ(overlap_split_tokens(10, 20, 1000, 0), 80.0);
  // Unclamped: a cloud line under the recomputation crosses below 0.
  EXPECT_LT(overlap_split_tokens(10, 200, 1000, 0), 0.0);
}

TEST(SplitPolicyOverlapTest, ASlowLinkSplitsWhereTheLinesCross) {
  const SplitInputs in = prompt_over(1e6);  // 30.7 ms/token on the link: the cloud alone takes 247 s
  const SplitPlan plan = decide_split(in);
  ASSERT_EQ(plan.place, v1::PREFILL_PLACE_OVERLAP) << plan.reason;
  const double crossing = overlap_split_tokens(12.5, 0, cloud_ms(in, 0), 30 * 1024 / 1e6 * 1000.0);
  const double x = plan.split_position - in.reused_tokens;
  EXPECT_LE(std::fabs(x - crossing), 1.0) << x << " vs " << crossing;
  // Rounded to the better neighbour.
  EXPECT_LE(overlap_ms(in, x), overlap_ms(in, x - 1));
  EXPECT_LE(overlap_ms(in, x), overlap_ms(in, x + 1));
  EXPECT_EQ(plan.split_position, plan.overlap_split_position);
  EXPECT_EQ(plan.local_tokens() + plan.cloud_tokens(), 8000u);
  EXPECT_NEAR(plan.estimated_overlap_local_ms, local_ms(in, x), 1e-6);
  EXPECT_NEAR(plan.estimated_overlap_cloud_ms, cloud_ms(in, x), 1e-6);
  EXPECT_DOUBLE_EQ(plan.estimated_ms, std::max(plan.estimated_overlap_local_ms, plan.estimated_overlap_cloud_ms));
  // Both single places stay estimated, and the overlap beats them.
  EXPECT_NEAR(plan.estimated_cloud_ms, cloud_ms(in, 0), 1e-6);
  EXPECT_DOUBLE_EQ(plan.estimated_local_ms, 100000.0);
  EXPECT_LT(plan.estimated_ms, (1 - kMinOverlapGain) * plan.estimated_local_ms);
  // The reason gives a, both sides' times and why.
  const std::string a = std::to_string(plan.split_position);
  EXPECT_EQ(plan.reason.rfind("overlap: ", 0), 0u) << plan.reason;
  EXPECT_NE(plan.reason.find("split at " + a + ": the edge prefills [100, " + a + ")"), std::string::npos)
      << plan.reason;
  EXPECT_NE(plan.reason.find("the cloud streams [" + a + ", 8100)"), std::string::npos) << plan.reason;
  EXPECT_NE(plan.reason.find("vs the better single place local by"), std::string::npos) << plan.reason;
  v1::Plan proto;
  to_proto(plan, &proto);
  EXPECT_EQ(proto.place(), v1::PREFILL_PLACE_OVERLAP);
  EXPECT_EQ(proto.split_position(), plan.split_position);
  EXPECT_EQ(proto.local_tokens(), plan.split_position - 100);
  EXPECT_EQ(proto.cloud_tokens(), 8100 - plan.split_position);
  EXPECT_DOUBLE_EQ(proto.estimated_ms(), plan.estimated_ms);
  EXPECT_STREQ(prefill_place_name(proto.place()), "overlap");
}

TEST(SplitPolicyOverlapTest, AFastLinkKeepsTheSplitAtHave) {
  // 100 MB/s: the cloud alone takes 2.5 s; overlapping would save ~3%, under kMinOverlapGain.
  const SplitInputs in = prompt_over(100e6);
  const SplitPlan plan = decide_split(in);
  EXPECT_EQ(plan.place, v1::PREFILL_PLACE_CLOUD) << plan.reason;
  EXPECT_EQ(plan.split_position, in.reused_tokens);
  EXPECT_EQ(plan.cloud_tokens(), 8000u);
  EXPECT_DOUBLE_EQ(plan.estimated_ms, plan.estimated_cloud_ms);
  // The best overlap is near have, and the reason says why it was not taken.
  EXPECT_GT(plan.overlap_split_position, in.reused_tokens);
  EXPECT_LT(plan.overlap_split_position, in.reused_tokens + 400);
  EXPECT_NE(plan.reason.find("; no overlap: "), std::string::npos) << plan.reason;
}

TEST(SplitPolicyOverlapTest, AVerySlowLinkSplitsNearTheEndOrStaysLocal) {
  const SplitInputs in = prompt_over(1e4);  // 3 s per token on the link
  const SplitPlan plan = decide_split(in);
  // The best overlap hands the cloud only a few tokens and saves < 5%: local.
  EXPECT_GT(plan.overlap_split_position, in.reused_tokens + 7900);
  EXPECT_EQ(plan.place, v1::PREFILL_PLACE_LOCAL) << plan.reason;
  EXPECT_EQ(plan.split_position, 8100u);
  EXPECT_EQ(plan.local_tokens(), 8000u);
  EXPECT_EQ(plan.cloud_tokens(), 0u);
  EXPECT_DOUBLE_EQ(plan.estimated_ms, plan.estimated_local_ms);
}

TEST(SplitPolicyOverlapTest, TheSplitIsClampedInsideThePrompt) {
  // A cloud call costing more than the whole local prefill: the crossing is
  // past the end, the best overlap leaves the cloud one token.
  SplitInputs slow_call = prompt_over(1e6);
  slow_call.cloud_call_overhead_ms = 1e9;
  EXPECT_EQ(decide_split(slow_call).overlap_split_position, 100u + 7999u);
  EXPECT_EQ(decide_split(slow_call).place, v1::PREFILL_PLACE_LOCAL);
  // A lossless store recomputing 100k tokens before the new ones: the
  // crossing is below 0, the best overlap gives the edge one token.
  SplitInputs recompute = prompt_over(1e6);
  recompute.local_prefill_tokens = 108000;
  EXPECT_LT(overlap_split_tokens(12.5, 100000, cloud_ms(recompute, 0), 30.72), 0.0);
  EXPECT_EQ(decide_split(recompute).overlap_split_position, 101u);
  EXPECT_EQ(decide_split(recompute).place, v1::PREFILL_PLACE_CLOUD);
  // One token to prefill has no inside: no overlap at all.
  SplitInputs one = prompt_over(1e6);
  one.prefill_tokens = 1;
  EXPECT_EQ(decide_split(one).overlap_split_position, 0u);
  EXPECT_NE(decide_split(one).place, v1::PREFILL_PLACE_OVERLAP);
}

TEST(SplitPolicyOverlapTest, PoliciesLocalAndCloudKeepTheirPlace) {
  SplitInputs in = prompt_over(1e6);  // where auto overlaps
  in.policy = PrefillPolicy::kLocal;
  SplitPlan plan = decide_split(in);
  EXPECT_EQ(plan.place, v1::PREFILL_PLACE_LOCAL);
  EXPECT_EQ(plan.split_position, 8100u);
  EXPECT_EQ(plan.estimated_cloud_ms, 0.0);
  EXPECT_DOUBLE_EQ(plan.estimated_ms, plan.estimated_local_ms);
  in.policy = PrefillPolicy::kCloud;
  plan = decide_split(in);
  EXPECT_EQ(plan.place, v1::PREFILL_PLACE_CLOUD);
  EXPECT_EQ(plan.split_position, 100u);
  EXPECT_DOUBLE_EQ(plan.estimated_ms, plan.estimated_cloud_ms);
}

TEST(SplitPolicyOverlapTest, ARequestCanForceTheSplit) {
  SplitInputs in = prompt_over(100e6);  // where auto picks the cloud
  in.forced_split_position = 150;
  SplitPlan plan = decide_split(in);
  EXPECT_EQ(plan.place, v1::PREFILL_PLACE_OVERLAP);
  EXPECT_EQ(plan.split_position, 150u);
  EXPECT_EQ(plan.local_tokens(), 50u);
  EXPECT_NEAR(plan.estimated_overlap_local_ms, local_ms(in, 50), 1e-6);
  EXPECT_NEAR(plan.estimated_overlap_cloud_ms, cloud_ms(in, 50), 1e-6);
  EXPECT_NE(plan.reason.find("forced by the request's split_position 150"), std::string::npos) << plan.reason;
  in.forced_split_position = 100;
  EXPECT_EQ(decide_split(in).place, v1::PREFILL_PLACE_CLOUD);
  in.forced_split_position = 8100;
  EXPECT_EQ(decide_split(in).place, v1::PREFILL_PLACE_LOCAL);
  // Under policy cloud too; never under local, nor without a usable cloud.
  in.policy = PrefillPolicy::kCloud;
  in.forced_split_position = 4000;
  EXPECT_EQ(decide_split(in).place, v1::PREFILL_PLACE_OVERLAP);
  in.policy = PrefillPolicy::kLocal;
  EXPECT_EQ(decide_split(in).place, v1::PREFILL_PLACE_LOCAL);
  in.policy = PrefillPolicy::kAuto;
  in.cloud_reachable = false;
  EXPECT_EQ(decide_split(in).place, v1::PREFILL_PLACE_LOCAL);
}

}  // namespace
}  // namespace baton
