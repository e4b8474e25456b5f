// Request values of a Generate turn -> sampler parameters and wire codec:
// proto zero values mean "off" or the agent default, bad values name the
// field and its range.
#include "edge_decode/generate/generate_turn.h"
#include "edge_decode/generate/stop_matcher.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

TEST(EdgeGenerateTurnTest, UnsetSamplingTakesTheDefaultsAndZeroMeansOff) {
  v1::SamplingParams params;
  params.set_seed(7);
  absl::StatusOr<SamplingParams> out = sampling_params_from_proto(params, 0.8f);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FLOAT_EQ(out->temperature, 0.8f);
  EXPECT_EQ(out->top_k, 0);
  EXPECT_FLOAT_EQ(out->top_p, 1.0f);
  EXPECT_FLOAT_EQ(out->min_p, 0.0f);
  EXPECT_FLOAT_EQ(out->repeat_penalty, 1.0f);
  EXPECT_EQ(out->repeat_last_n, 64);
  EXPECT_EQ(out->seed, 7u);
}

TEST(EdgeGenerateTurnTest, SetSamplingValuesPassThrough) {
  v1::SamplingParams params;
  params.set_temperature(0.0f);
  params.set_top_k(5);
  params.set_top_p(0.9f);
  params.set_min_p(0.05f);
  params.set_repetition_penalty(1.1f);
  params.set_repetition_last_n(32);
  absl::StatusOr<SamplingParams> out = sampling_params_from_proto(params, 0.8f);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FLOAT_EQ(out->temperature, 0.0f);
  EXPECT_EQ(out->top_k, 5);
  EXPECT_FLOAT_EQ(out->top_p, 0.9f);
  EXPECT_FLOAT_EQ(out->min_p, 0.05f);
  EXPECT_FLOAT_EQ(out->repeat_penalty, 1.1f);
  EXPECT_EQ(out->repeat_last_n, 32);
}

TEST(EdgeGenerateTurnTest, BadSamplingValuesNameTheField) {
  v1::SamplingParams params;
  params.set_top_p(1.5f);
  absl::StatusOr<SamplingParams> out = sampling_params_from_proto(params, 0.8f);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("top_p"), std::string::npos) << out.status();
  params.set_top_p(0);
  params.set_temperature(-0.5f);
  out = sampling_params_from_proto(params, 0.8f);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("temperature"), std::string::npos) << out.status();
}

TEST(EdgeGenerateTurnTest, WireCodecFromRequestFields) {
  const KvGeometry geometry{16, 32, 8, 64, {}};
  const KvCodecConfig fallback = default_kv_codec_config(KvCodecConfig::Bits::kInt4, geometry);
  v1::CodecParams unset;
  absl::StatusOr<KvCodecConfig> out = resolve_wire_codec(unset, fallback, geometry);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, fallback);
  // Auto is resolved per turn (codec_choice.h): until then, the fallback,
  // whatever else the request sets.
  v1::CodecParams automatic;
  automatic.set_codec(v1::KV_CODEC_AUTO);
  automatic.set_group_size(48);
  out = resolve_wire_codec(automatic, fallback, geometry);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, fallback);

  v1::CodecParams f16;
  f16.set_codec(v1::KV_CODEC_F16);
  out = resolve_wire_codec(f16, fallback, geometry);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->bits, KvCodecConfig::Bits::kF16);

  v1::CodecParams int8;
  int8.set_codec(v1::KV_CODEC_INT8);
  int8.set_group_size(64);
  int8.set_zstd_level(0);
  out = resolve_wire_codec(int8, fallback, geometry);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->bits, KvCodecConfig::Bits::kInt8);
  EXPECT_EQ(out->group_size, 64);
  EXPECT_EQ(out->zstd_level, 0);

  v1::CodecParams bad = int8;
  bad.set_group_size(48);  // does not divide head_dim 64
  out = resolve_wire_codec(bad, fallback, geometry);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
}

// KV_CODEC_TC: unset fields take KvTransformParams' defaults and the rANS
// back end; the edge binds the calibration later (TransformCoders), so a
// request without calibration_sha256 stays unbound and one with it keeps it.
TEST(EdgeGenerateTurnTest, TransformCodecRequestsTakeTheDefaultsAndKeepANamedCalibration) {
  const KvGeometry geometry{16, 32, 8, 64, {}};
  const KvCodecConfig fallback = default_kv_codec_config(KvCodecConfig::Bits::kInt4, geometry);
  v1::CodecParams tc;
  tc.set_codec(v1::KV_CODEC_TC);
  absl::StatusOr<KvCodecConfig> out = resolve_wire_codec(tc, fallback, geometry);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(out->transform.has_value());
  EXPECT_EQ(*out->transform, KvTransformParams{});
  EXPECT_EQ(out->zstd_level, 0);
  EXPECT_FALSE(out->transform->bound());

  tc.mutable_transform()->set_budget_tenths(20);
  tc.mutable_transform()->set_sink_tokens(2);
  tc.mutable_transform()->set_recent_tokens(8);
  tc.mutable_transform()->set_calibration_sha256(std::string(32, '\x07'));
  out = resolve_wire_codec(tc, fallback, geometry);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->to_string(), "tc-b2-s2-w8");
  EXPECT_TRUE(out->transform->bound());
  EXPECT_EQ(out->transform->calibration[31], 7);

  tc.mutable_transform()->set_calibration_sha256("short");
  out = resolve_wire_codec(tc, fallback, geometry);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

TEST(EdgeStopMatcherTest, HoldsBackAPossibleStartAndCutsAtTheStop) {
  StopMatcher matcher({"END", ""});
  bool stopped = false;
  EXPECT_EQ(matcher.add("hello E", &stopped), "hello ");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(matcher.add("N", &stopped), "");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(matcher.add("D and more", &stopped), "");
  EXPECT_TRUE(stopped);
}

TEST(EdgeStopMatcherTest, ReleasesHeldTextWhenItIsNotAStop) {
  StopMatcher matcher({"END"});
  bool stopped = false;
  EXPECT_EQ(matcher.add("EN", &stopped), "");
  EXPECT_EQ(matcher.add("X", &stopped), "ENX");
  EXPECT_EQ(matcher.add("E", &stopped), "");
  EXPECT_EQ(matcher.flush(), "E");
  EXPECT_FALSE(stopped);
}

TEST(EdgeStopMatcherTest, EarliestOfSeveralStopsWins) {
  StopMatcher matcher({"zz", "b"});
  bool stopped = false;
  EXPECT_EQ(matcher.add("aabzz", &stopped), "aa");
  EXPECT_TRUE(stopped);
}

TEST(EdgeStopMatcherTest, MultiByteStopIsCutAtCharacterBoundaries) {
  StopMatcher matcher({"\xC3\xA9t\xC3\xA9"});  // "été"
  bool stopped = false;
  EXPECT_EQ(matcher.add("caf\xC3\xA9", &stopped), "caf");  // "é" may start the stop
  EXPECT_EQ(matcher.add("!", &stopped), "\xC3\xA9!");
  EXPECT_FALSE(stopped);
}

}  // namespace
}  // namespace baton
