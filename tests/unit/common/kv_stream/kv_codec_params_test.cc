// CodecParams <-> KvCodecConfig round trips, what the proto cannot say, and
// the reader's codec hooks (exact raw size, trial decode) on real blocks and
// inside a KvStreamReader.
#include "common/kv_stream/kv_codec_params.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/kv_codec/kv_codec.h"
#include "common/kv_stream/kv_stream_reader.h"
#include "common/kv_stream/kv_stream_writer.h"
#include "common/kv_stream/prefix_digest.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

// 2 layers, 4 query heads, 2 KV heads, head_dim 32.
KvGeometry test_geometry() { return KvGeometry{2, 4, 2, 32, {}}; }

KvCodecConfig parse(const std::string& name) {
  auto c = parse_kv_codec_config(name);
  EXPECT_TRUE(c.ok()) << name << ": " << c.status();
  return *c;
}

std::vector<float> random_rows(int64_t n, int64_t width, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * width));
  for (float& v : x) v = normal(rng);
  return x;
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

class KvCodecParamsRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(KvCodecParamsRoundTrip, ConfigToParamsAndBackIsTheSameConfig) {
  const KvCodecConfig config = parse(GetParam());
  auto params = kv_codec_params(config);
  ASSERT_TRUE(params.ok()) << params.status();
  EXPECT_TRUE(params->has_zstd_level());
  EXPECT_EQ(params->zstd_level(), config.zstd_level);
  EXPECT_EQ(params->pre_rope_keys(), config.pre_rope_keys);
  EXPECT_EQ(params->hadamard_keys(), config.hadamard_keys);
  EXPECT_EQ(params->hadamard_values(), config.hadamard_values);
  auto back = kv_codec_config_from_params(*params);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, config) << back->to_string();
  EXPECT_EQ(back->to_string(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Names, KvCodecParamsRoundTrip,
                         ::testing::Values("f16", "f16-z3", "f16-had-z1", "int8-g32", "int8-g16-z3",
                                           "int8-pc-g32-z3", "int8-g32-pre-hk-z3", "int4-g32-z3", "int4-pc-g32-z3",
                                           "int4-pc-g32-pre-had-z3", "int4-g64-hv-zf1", "int4-g2"),
                         param_name);

TEST(KvCodecParams, F16CarriesNoGroupOrAxis) {
  auto params = kv_codec_params(parse("f16-z3"));
  ASSERT_TRUE(params.ok());
  EXPECT_EQ(params->codec(), v1::KV_CODEC_F16);
  EXPECT_EQ(params->group_size(), 0u);
  EXPECT_EQ(params->key_axis(), v1::KEY_AXIS_UNSPECIFIED);
  // Whatever an F16 header says about groups is ignored, as in the fingerprint.
  v1::CodecParams odd = *params;
  odd.set_group_size(7);
  odd.set_key_axis(v1::KEY_AXIS_PER_CHANNEL);
  auto config = kv_codec_config_from_params(odd);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(*config, parse("f16-z3"));
}

TEST(KvCodecParams, QuantizedFieldsMapOneToOne) {
  auto params = kv_codec_params(parse("int4-pc-g64-pre-hk-z5"));
  ASSERT_TRUE(params.ok());
  EXPECT_EQ(params->codec(), v1::KV_CODEC_INT4);
  EXPECT_EQ(params->group_size(), 64u);
  EXPECT_EQ(params->key_axis(), v1::KEY_AXIS_PER_CHANNEL);
  EXPECT_TRUE(params->pre_rope_keys());
  EXPECT_TRUE(params->hadamard_keys());
  EXPECT_FALSE(params->hadamard_values());
  EXPECT_EQ(params->zstd_level(), 5);
  EXPECT_EQ(kv_codec_params(parse("int8-g32"))->key_axis(), v1::KEY_AXIS_PER_TOKEN);
  EXPECT_EQ(kv_codec_params(parse("int8-g32"))->zstd_level(), 0);
  EXPECT_TRUE(kv_codec_params(parse("int8-g32"))->has_zstd_level());
}

TEST(KvCodecParams, RowsLayoutIsRejectedWithTheReason) {
  auto params = kv_codec_params(parse("int4-g32-rows-z3"));
  ASSERT_FALSE(params.ok());
  EXPECT_EQ(params.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(params.status().message()), HasSubstr("rows layout"));
  EXPECT_THAT(std::string(params.status().message()), HasSubstr("no layout field"));
}

TEST(KvCodecParams, MixedKeyBitsAndKeyGroupTravelAndRoundTrip) {
  for (const char* name : {"int4-k8-g32-z3", "int4-pc-kg64-g32-z3", "int4-k8-pc-kg128-g32-pre-z3"}) {
    const KvCodecConfig config = parse(name);
    auto params = kv_codec_params(config);
    ASSERT_TRUE(params.ok()) << name << ": " << params.status();
    auto back = kv_codec_config_from_params(*params);
    ASSERT_TRUE(back.ok()) << name << ": " << back.status();
    EXPECT_EQ(back->to_string(), config.to_string()) << name;
  }
  const v1::CodecParams mixed = *kv_codec_params(parse("int4-k8-g32-z3"));
  EXPECT_EQ(mixed.codec(), v1::KV_CODEC_INT4);
  EXPECT_EQ(mixed.key_codec(), v1::KV_CODEC_INT8);
  const v1::CodecParams wide = *kv_codec_params(parse("int4-pc-kg64-g32-z3"));
  EXPECT_EQ(wide.group_size(), 32u);
  EXPECT_EQ(wide.key_group_size(), 64u);
  // Plain codecs leave the new fields unset, so their fingerprints do not move.
  const v1::CodecParams plain = *kv_codec_params(parse("int4-pc-g32-z3"));
  EXPECT_EQ(plain.key_codec(), v1::KV_CODEC_UNSPECIFIED);
  EXPECT_EQ(plain.key_group_size(), 0u);
}

TEST(KvCodecParams, KeysNarrowerThanValuesAreRejected) {
  v1::CodecParams params = *kv_codec_params(parse("int8-g32-z3"));
  params.set_key_codec(v1::KV_CODEC_INT4);
  auto config = kv_codec_config_from_params(params);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvCodecParams, InvalidConfigIsRejected) {
  KvCodecConfig odd_int4 = parse("int4-g32");
  odd_int4.group_size = 7;
  EXPECT_EQ(kv_codec_params(odd_int4).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvCodecParams, IncompleteParamsNameTheField) {
  const v1::CodecParams good = *kv_codec_params(parse("int8-pc-g32-z3"));
  struct Case {
    void (*mutate)(v1::CodecParams&);
    const char* message;
  };
  const Case cases[] = {
      {[](v1::CodecParams& p) { p.set_codec(v1::KV_CODEC_UNSPECIFIED); }, "codec is unspecified"},
      {[](v1::CodecParams& p) { p.set_codec(static_cast<v1::KvCodec>(9)); }, "codec is unknown(9)"},
      {[](v1::CodecParams& p) { p.set_group_size(0); }, "needs a group_size"},
      {[](v1::CodecParams& p) { p.set_group_size(4096); }, "group_size 4096"},
      {[](v1::CodecParams& p) { p.set_key_axis(v1::KEY_AXIS_UNSPECIFIED); }, "key_axis is unspecified"},
      {[](v1::CodecParams& p) { p.clear_zstd_level(); }, "zstd_level is unset"},
      {[](v1::CodecParams& p) { p.set_zstd_level(99); }, "zstd level 99"},
      {[](v1::CodecParams& p) {
         p.set_codec(v1::KV_CODEC_INT4);
         p.set_group_size(5);
       },
       "even group size"},
  };
  for (const Case& c : cases) {
    v1::CodecParams p = good;
    c.mutate(p);
    auto config = kv_codec_config_from_params(p);
    ASSERT_FALSE(config.ok()) << c.message;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(c.message));
  }
}

// ------------------------------------------------------------- hooks -------

TEST(KvCodecHooks, ExpectedRawSizeIsTheCodecsRawSize) {
  const KvGeometry g = test_geometry();
  const KvExpectedRawSizeFn fn = kv_expected_raw_size_fn(g);
  for (const char* name : {"f16-z3", "int8-g32", "int8-pc-g32-z3", "int4-g16-z3", "int4-pc-g32-pre-had-z1"}) {
    const KvCodecConfig c = parse(name);
    const v1::CodecParams params = *kv_codec_params(c);
    for (uint32_t n : {1u, 31u, 32u, 100u}) {
      for (bool is_key : {true, false}) {
        auto got = fn(params, is_key ? v1::KV_KIND_K : v1::KV_KIND_V, n);
        ASSERT_TRUE(got.ok()) << name << ": " << got.status();
        EXPECT_EQ(*got, kv_block_raw_size(c, g, is_key, n)) << name << " n=" << n << " key=" << is_key;
        // And it is what the encoder produces.
        const auto rows = random_rows(n, g.kv_dim(), n);
        auto encoded = encode_kv_block(c, g, is_key, rows.data(), n);
        ASSERT_TRUE(encoded.ok());
        EXPECT_EQ(encoded->raw_size, *got);
      }
    }
  }
}

TEST(KvCodecHooks, ExpectedRawSizeRejectsACodecTheGeometryCannotHold) {
  const KvGeometry g = test_geometry();  // head_dim 32
  const auto got = kv_expected_raw_size_fn(g)(*kv_codec_params(parse("int8-g64")), v1::KV_KIND_V, 8);
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("64"));
}

v1::KvBlock make_block(const KvCodecConfig& c, const KvGeometry& g, bool is_key, uint32_t n) {
  const auto rows = random_rows(n, g.kv_dim(), 11);
  auto encoded = encode_kv_block(c, g, is_key, rows.data(), n);
  EXPECT_TRUE(encoded.ok());
  v1::KvBlock block;
  block.set_layer(0);
  block.set_kind(is_key ? v1::KV_KIND_K : v1::KV_KIND_V);
  block.set_token_begin(0);
  block.set_token_count(n);
  block.set_raw_size(encoded->raw_size);
  block.set_encoded_size(encoded->payload.size());
  block.set_checksum(kv_payload_checksum(encoded->payload));
  block.set_payload(std::move(encoded->payload));
  return block;
}

TEST(KvCodecHooks, TrialDecodeAcceptsGoodBlocksAndRejectsBadScales) {
  const KvGeometry g = test_geometry();
  const KvPayloadCheckFn check = kv_trial_decode_fn(g);
  for (const char* name : {"f16", "f16-z3", "int8-g32", "int8-pc-g32-z3", "int4-g16-had-z3"}) {
    const KvCodecConfig c = parse(name);
    const v1::KvBlock block = make_block(c, g, true, 40);
    EXPECT_TRUE(check(*kv_codec_params(c), block).ok()) << name;
  }
  // Uncompressed INT8: the last payload byte is the high byte of the last
  // scale (planes layout); 0x7c there makes it inf or NaN.
  const KvCodecConfig c = parse("int8-g32");
  v1::KvBlock bad = make_block(c, g, false, 8);
  bad.mutable_payload()->back() = static_cast<char>(0x7c);
  const absl::Status st = check(*kv_codec_params(c), bad);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("layer 0 V"));
  // Compressed: garbage that is not a zstd frame.
  const KvCodecConfig z = parse("int8-g32-z3");
  v1::KvBlock junk = make_block(z, g, false, 8);
  junk.set_payload(std::string(junk.payload().size(), 'x'));
  EXPECT_FALSE(check(*kv_codec_params(z), junk).ok());
}

TEST(KvCodecHooks, ReaderWithHooksAcceptsAWriterStreamAndRejectsAWrongRawSize) {
  const KvGeometry g = test_geometry();
  const KvCodecConfig c = parse("int4-pc-g32-z3");
  const uint32_t n = 70;
  std::vector<int32_t> tokens(n);
  for (uint32_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>(i * 3 + 1);
  ModelFingerprint model;
  model.fields = {{"version", "1"}, {"n_layer", "2"}, {"n_head_kv", "2"}, {"head_dim", "32"}, {"n_vocab", "1000"}};
  model.digest = to_hex(sha256(model.canonical()));
  KvFingerprint fp;
  fp.model = model;
  fp.context = {0, n, prefix_digest(tokens)};
  fp.codec = *kv_codec_params(c);
  v1::KvHeader header;
  set_header_fingerprint(fp, &header);
  for (int32_t t : tokens) header.add_token_ids(static_cast<uint32_t>(t));

  std::vector<v1::KvStreamMessage> messages;
  KvStreamWriter writer([&](const v1::KvStreamMessage& m) {
    messages.push_back(m);
    return absl::OkStatus();
  }, KvStreamWriterOptions{2000});  // a few blocks per layer
  ASSERT_TRUE(writer.write_header(header).ok());
  for (uint32_t layer = 0; layer < 2; ++layer) {
    for (bool is_key : {true, false}) {
      const auto rows = random_rows(n, g.kv_dim(), layer * 2 + is_key);
      ASSERT_TRUE(writer
                      .write_layer(layer, is_key ? v1::KV_KIND_K : v1::KV_KIND_V,
                                   kv_block_raw_size(c, g, is_key, 64) / 64,
                                   [&](uint32_t begin, uint32_t count) -> absl::StatusOr<KvEncodedPayload> {
                                     auto e = encode_kv_block(c, g, is_key, rows.data() + begin * g.kv_dim(), count);
                                     if (!e.ok()) return e.status();
                                     return KvEncodedPayload{std::move(e->payload), e->raw_size};
                                   })
                      .ok());
    }
  }
  ASSERT_TRUE(writer.write_trailer().ok());
  ASSERT_GT(writer.block_count(), 4u);

  KvStreamExpectation expected;
  expected.model = model;
  {
    KvStreamReader reader(expected, kv_reader_options_with_codec(g));
    for (const auto& m : messages) ASSERT_TRUE(reader.consume(m).ok());
    EXPECT_TRUE(reader.commit().ok());
  }
  {
    // A block that lies about its raw size (consistently, with the zstd
    // frame left as is) fails on the codec's exact size.
    std::vector<v1::KvStreamMessage> lying = messages;
    lying[1].mutable_block()->set_raw_size(lying[1].block().raw_size() + 2);
    KvStreamReader reader(expected, kv_reader_options_with_codec(g));
    const absl::Status st = reader.consume(lying[0]).ok() ? reader.consume(lying[1]) : absl::UnknownError("header");
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(st.message()), HasSubstr("needs exactly"));
  }
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

TEST(KvCodecDefaults, DefaultsAreTheMeasuredChoicesAndTravel) {
  const KvGeometry geometry{6, 8, 2, 32, {}};
  EXPECT_EQ(default_kv_codec_config(KvCodecConfig::Bits::kF16, geometry).to_string(), "f16-z3");
  EXPECT_EQ(default_kv_codec_config(KvCodecConfig::Bits::kInt8, geometry).to_string(), "int8-g32-z3");
  EXPECT_EQ(default_kv_codec_config(KvCodecConfig::Bits::kInt4, geometry).to_string(), "int4-pc-kg128-g32-z3");
  const KvGeometry narrow{2, 4, 2, 16, {}};
  for (auto bits : {KvCodecConfig::Bits::kF16, KvCodecConfig::Bits::kInt8, KvCodecConfig::Bits::kInt4}) {
    const KvCodecConfig config = default_kv_codec_config(bits, narrow);
    EXPECT_TRUE(config.validate(narrow).ok()) << config.to_string();
    EXPECT_TRUE(kv_codec_params(config).ok()) << config.to_string();
  }
}

// A request may carry an unbound tc config (the receiving edge binds it);
// a header never does. Bound configs travel the same either way.
TEST(KvCodecParams, RequestParamsCarryAnUnboundTransformConfigWithoutADigest) {
  absl::StatusOr<KvCodecConfig> tc = parse_kv_codec_config("tc-b2-s2-w8");
  ASSERT_TRUE(tc.ok()) << tc.status();
  EXPECT_FALSE(kv_codec_params(*tc).ok());
  absl::StatusOr<v1::CodecParams> request = kv_codec_request_params(*tc);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->codec(), v1::KV_CODEC_TC);
  EXPECT_EQ(request->transform().budget_tenths(), 20u);
  EXPECT_EQ(request->transform().sink_tokens(), 2u);
  EXPECT_EQ(request->transform().recent_tokens(), 8u);
  EXPECT_TRUE(request->transform().calibration_sha256().empty());

  tc->transform->calibration.fill(3);
  absl::StatusOr<v1::CodecParams> bound = kv_codec_request_params(*tc);
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_EQ(bound->transform().calibration_sha256(), std::string(32, '\x03'));
  absl::StatusOr<KvCodecConfig> int8 = parse_kv_codec_config("int8-g32-z3");
  ASSERT_TRUE(int8.ok());
  EXPECT_EQ(kv_codec_request_params(*int8)->SerializeAsString(), kv_codec_params(*int8)->SerializeAsString());
}

// Both ends read a tc request with kv_transform_request_config: unset fields
// are the defaults, a request's own values (even 0) are kept, the digest it
// names binds the config, and bad digests and budgets are refused by name.
TEST(KvCodecParams, ATransformRequestTakesTheDefaultsWhereUnset) {
  const KvGeometry geometry{2, 4, 2, 32, {}};
  const KvTransformParams defaults;
  v1::CodecParams bare;
  bare.set_codec(v1::KV_CODEC_TC);
  absl::StatusOr<KvCodecConfig> config = kv_transform_request_config(bare, geometry);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->transform.has_value());
  EXPECT_EQ(config->transform->budget_tenths, defaults.budget_tenths);
  EXPECT_EQ(config->transform->sink_tokens, defaults.sink_tokens);
  EXPECT_EQ(config->transform->recent_tokens, defaults.recent_tokens);
  EXPECT_FALSE(config->transform->bound());
  EXPECT_EQ(config->zstd_level, 0);  // rANS
  EXPECT_TRUE(config->pre_rope_keys);

  v1::CodecParams set = bare;
  set.mutable_transform()->set_budget_tenths(0);  // the default budget
  set.mutable_transform()->set_sink_tokens(0);
  set.mutable_transform()->set_recent_tokens(7);
  set.mutable_transform()->set_calibration_sha256(std::string(32, '\x05'));
  set.set_zstd_level(3);
  config = kv_transform_request_config(set, geometry);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->transform->budget_tenths, defaults.budget_tenths);
  EXPECT_EQ(config->transform->sink_tokens, 0);
  EXPECT_EQ(config->transform->recent_tokens, 7);
  EXPECT_TRUE(config->transform->bound());
  EXPECT_EQ(config->transform->calibration[31], 5);
  EXPECT_EQ(config->zstd_level, 3);

  v1::CodecParams short_digest = bare;
  short_digest.mutable_transform()->set_calibration_sha256("abc");
  config = kv_transform_request_config(short_digest, geometry);
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(config.status().message().find("calibration_sha256 has 3 bytes"), std::string::npos) << config.status();
  v1::CodecParams huge_budget = bare;
  huge_budget.mutable_transform()->set_budget_tenths(4000000000u);
  config = kv_transform_request_config(huge_budget, geometry);
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
}

}  // namespace
}  // namespace baton
