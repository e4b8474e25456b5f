// --codec auto's choice (edge_decode/plan/codec_choice.h) from a quality
// table and link figures: a slow link takes the smallest codec within the
// loss floor, a fast one the least lossy of the equally fast; the floor
// excludes lossy codecs; a continuing session keeps its store; without a
// table or a candidate the fallback, and the reason names the numbers.
#include "edge_decode/plan/codec_choice.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/util/format_bytes.h"
#include "edge_decode/link/transform_coders.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

// The 1B shape: 16 layers x 8 KV heads x 64 dims, K and V: 32 KiB of F16 per token.
constexpr double kF16BytesPerToken = 2.0 * 16 * 8 * 64 * 2;

// Figures of the README's tables (wire / F16, perplexity change, mean KL),
// with one INT4 variant over the 1% floor.
std::vector<KvCodecQuality> table() {
  return {{"int8-g32-z3", 0.500, 0.011, 8.5e-6},          {"int4-g32-z3", 0.297, 1.3, 1.8e-3},
          {"int4-pc-kg128-g32-z3", 0.269, 0.068, 1.8e-3}, {"int4-k8-g32-z3", 0.401, -0.017, 3.6e-4},
          {"tc-b1", 0.142, 0.009, 1.4e-3},                {"tc-b2", 0.199, 0.025, 3.4e-4},
          {"tc-b4", 0.312, 0.029, 3.9e-5}};
}

KvCodecConfig codec(const std::string& name) {
  absl::StatusOr<KvCodecConfig> c = parse_kv_codec_config(name);
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

// 2000 tokens to prefill; the edge at 50 tok/s (40 s), the cloud at 20k tok/s.
CodecChoiceInputs inputs(double link_bytes_per_s) {
  CodecChoiceInputs in;
  in.table = table();
  in.f16_bytes_per_token = kF16BytesPerToken;
  in.fallback = codec("int4-pc-kg128-g32-z3");
  in.usable = [](const KvCodecConfig&) { return absl::OkStatus(); };
  in.split_inputs = [link_bytes_per_s](const KvCodecConfig&) {
    SplitInputs s;
    s.policy = PrefillPolicy::kAuto;
    s.cloud_configured = s.cloud_reachable = true;
    s.prefill_tokens = 2000;
    s.local_prefill_tokens_per_s = 50;
    s.cloud_prefill_tokens_per_s = 20000;
    s.link_bytes_per_s = link_bytes_per_s;
    s.link_rtt_ms = 20;
    s.wire_bytes_per_token = 1;  // replaced by the table's figure
    return s;
  };
  return in;
}

TEST(CodecChoice, ASlowLinkTakesTheSmallestCodecWithinTheFloor) {
  const CodecChoice choice = choose_codec(inputs(2.5e6));  // 20 Mbit/s: 9.3 s for tc-b1's 23 MB
  EXPECT_EQ(choice.codec.to_string(), "tc-b1");
  EXPECT_TRUE(choice.from_table);
  EXPECT_DOUBLE_EQ(choice.wire_bytes_per_token, kF16BytesPerToken * 0.142);
  // The split policy's plan for tc-b1 on this link: cloud-only costs the
  // call (RTT 20 + set-up) + 100 ms of compute + 9.3 s of transfer, so the
  // edge prefills the front itself (overlap) and the cloud sends the rest.
  CodecChoiceInputs in = inputs(2.5e6);
  SplitInputs split = in.split_inputs(codec("tc-b1"));
  split.wire_bytes_per_token = kF16BytesPerToken * 0.142;
  const SplitPlan plan = decide_split(split);
  const double cloud_only = 20 + kAssumedCloudCallSetupMs + 100 + 2000 * kF16BytesPerToken * 0.142 / 2.5e6 * 1000;
  EXPECT_NEAR(plan.estimated_cloud_ms, cloud_only, 1e-6);
  ASSERT_EQ(plan.place, v1::PREFILL_PLACE_OVERLAP);
  EXPECT_LT(plan.estimated_ms, cloud_only);
  EXPECT_NEAR(choice.predicted_ms, plan.estimated_ms, 1e-6);
  // The reason names the choice with its time and the bytes it streams, the
  // runners-up with theirs, and the codec over the floor.
  EXPECT_THAT(choice.reason,
              HasSubstr(absl::StrFormat(
                  "codec auto: tc-b1 (overlap %.0f ms est., %s", plan.estimated_ms,
                  format_bytes(static_cast<uint64_t>(split.wire_bytes_per_token * plan.cloud_tokens())))));
  EXPECT_THAT(choice.reason, HasSubstr("over tc-b2 (overlap"));
  EXPECT_THAT(choice.reason, HasSubstr("over the loss floor +1.00%: int4-g32-z3 (+1.30%)"));
}

TEST(CodecChoice, AFastLinkBuysTheLeastLossAmongTheEquallyFast) {
  // 10 GB/s: transfers of 1-3 ms beside 170 ms of call and compute, so every
  // codec is within 5% of the fastest and INT8 (the least KL) wins.
  const CodecChoice fast = choose_codec(inputs(10e9));
  EXPECT_EQ(fast.codec.to_string(), "int8-g32-z3");
  EXPECT_THAT(fast.reason, HasSubstr("within 5% of the fastest, with less loss"));
  // 1 GB/s: tc-b1 179 ms; tc-b2 183 ms and int4-pc-kg128 188 ms are within
  // 5% (188.3 ms), tc-b4 (190 ms) and INT8 (203 ms) are not; of the three,
  // tc-b2 has the least KL.
  const CodecChoice mid = choose_codec(inputs(1e9));
  EXPECT_EQ(mid.codec.to_string(), "tc-b2");
}

TEST(CodecChoice, TheFloorExcludesLossyCodecs) {
  CodecChoiceInputs in = inputs(2.5e6);
  in.max_loss_pct = 0.02;  // only int8, int4-k8 and tc-b1 stay
  const CodecChoice strict = choose_codec(in);
  EXPECT_EQ(strict.codec.to_string(), "tc-b1");
  EXPECT_THAT(strict.reason, HasSubstr("tc-b4 (+0.03%)"));
  in.max_loss_pct = 0.0;  // int4-k8 only (-0.017%)
  EXPECT_EQ(choose_codec(in).codec.to_string(), "int4-k8-g32-z3");
  in.max_loss_pct = -1.0;  // nothing: the fallback, and the reason says why
  const CodecChoice none = choose_codec(in);
  EXPECT_FALSE(none.from_table);
  EXPECT_EQ(none.codec.to_string(), "int4-pc-kg128-g32-z3");
  EXPECT_THAT(none.reason, HasSubstr("the default (no codec of the table qualifies; over the loss floor -1.00%"));
}

TEST(CodecChoice, AContinuingSessionChoosesAmongTheCodecsOfItsStore) {
  const KvGeometry geometry{16, 128, 8, 64, {}};
  for (const std::string held : {"int4-pc-kg128-g32-z3", "tc-b2"}) {
    CodecChoiceInputs in = inputs(2.5e6);
    const KvCodecConfig store = edge_store_config(codec(held), geometry);
    in.usable = [&](const KvCodecConfig& c) {
      const KvCodecConfig lands = edge_store_config(c, geometry);
      if (lands == store) return absl::OkStatus();
      return absl::FailedPreconditionError(absl::StrCat("lands in ", lands.to_string()));
    };
    const CodecChoice choice = choose_codec(in);
    // An INT4 session: the INT4 default is the only codec of its store within
    // the floor. An INT8 one (tc lands there): the smallest tc.
    EXPECT_EQ(choice.codec.to_string(), held == "tc-b2" ? "tc-b1" : "int4-pc-kg128-g32-z3");
    EXPECT_EQ(edge_store_config(choice.codec, geometry), store);
    EXPECT_THAT(choice.reason, HasSubstr("not usable: "));
  }
}

TEST(CodecChoice, WithoutATableTheFallbackAndTheReasonSaysWhy) {
  CodecChoiceInputs in = inputs(2.5e6);
  in.table.clear();
  in.no_table_why = "the KV calibration has none (format 1)";
  const CodecChoice choice = choose_codec(in);
  EXPECT_FALSE(choice.from_table);
  EXPECT_EQ(choice.codec, in.fallback);
  EXPECT_EQ(choice.wire_bytes_per_token, 0.0);
  EXPECT_EQ(choice.reason,
            "codec auto: int4-pc-kg128-g32-z3, the default (no quality table: the KV calibration has none (format 1))");
}

TEST(CodecChoice, LocalEitherWayKeepsTheFallbackForTheStore) {
  CodecChoiceInputs in = inputs(2.5e6);
  auto base = in.split_inputs;
  in.split_inputs = [base](const KvCodecConfig& c) {
    SplitInputs s = base(c);
    s.cloud_reachable = false;  // every plan is local
    return s;
  };
  const CodecChoice choice = choose_codec(in);
  EXPECT_EQ(choice.codec.to_string(), "int4-pc-kg128-g32-z3");
  EXPECT_THAT(choice.reason, HasSubstr("prefilled here either way"));
  // A plan that sends nothing names no bytes.
  EXPECT_THAT(choice.reason, HasSubstr("codec auto: int4-pc-kg128-g32-z3 (local 40000 ms est., ppl +0.07%)"));
  // A fallback over the floor is not taken: the least loss (KL) is.
  in.max_loss_pct = 0.05;
  EXPECT_EQ(choose_codec(in).codec.to_string(), "int8-g32-z3");
}

TEST(CodecChoice, PredictedTimeReadsThePlanOfItsPlace) {
  SplitPlan plan;
  plan.estimated_local_ms = 900;
  plan.estimated_cloud_ms = 300;
  plan.place = v1::PREFILL_PLACE_CLOUD;
  EXPECT_EQ(predicted_ttft_ms(plan), 300);
  plan.place = v1::PREFILL_PLACE_LOCAL;
  EXPECT_EQ(predicted_ttft_ms(plan), 900);
  plan.place = v1::PREFILL_PLACE_REUSED;
  EXPECT_EQ(predicted_ttft_ms(plan), 0);
}

}  // namespace
}  // namespace baton
