// The KV codec: config names, round-trip error bounds per config, layouts and
// zstd agree, pre-RoPE keys, and hostile payloads give clear errors.
#include "common/kv_codec/kv_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/cpu/ops.h"
#include "common/kv_codec/kv_quant.h"
#include "common/util/fp16.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

// 2 layers, 4 query heads, 2 KV heads, head_dim 64.
KvGeometry test_geometry() { return KvGeometry{2, 4, 2, 64, {}}; }

// KV-like data: N(0, 1) plus a few outlier channels with a large offset, as
// real keys have.
std::vector<float> kv_data(const KvGeometry& g, int64_t n_tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n_tokens * g.kv_dim()));
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t c = 0; c < g.kv_dim(); ++c) {
      float v = normal(rng);
      if (c % 16 == 3) v = 8.0f + 2.0f * v;  // outlier channel
      x[t * g.kv_dim() + c] = v;
    }
  }
  return x;
}

KvCodecConfig parse(const std::string& name) {
  auto c = parse_kv_codec_config(name);
  EXPECT_TRUE(c.ok()) << name << ": " << c.status();
  return c.ok() ? *c : KvCodecConfig{};
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& ch : name) {
    if (ch == '-') ch = '_';
  }
  return name;
}

// The encoder refuses a block with a value that is NaN, infinite or past
// the f16 range (it could not be scaled into the codes), naming the element;
// the range's ends themselves, -0 and the smallest denormal are accepted.
TEST(KvCodecValues, NonFiniteOrOutOfRangeValuesAreRefusedNamingTheElement) {
  const KvGeometry g = test_geometry();
  const int64_t n_tokens = 9;
  const float inf = std::numeric_limits<float>::infinity();
  for (const std::string& name : {std::string("int8-g32-z3"), std::string("int4-g32"), std::string("f16")}) {
    for (const float bad : {std::nanf(""), inf, -inf, 65505.0f, -65536.0f, 1e30f}) {
      for (const int64_t at : {int64_t{0}, int64_t{77}, n_tokens * g.kv_dim() - 1}) {
        std::vector<float> x = kv_data(g, n_tokens, 3);
        x[at] = bad;
        auto encoded = encode_kv_block(parse(name), g, /*is_key=*/false, x.data(), n_tokens);
        ASSERT_FALSE(encoded.ok()) << name << " took " << bad << " at " << at;
        EXPECT_EQ(encoded.status().code(), absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(std::string(encoded.status().message()), HasSubstr("at element " + std::to_string(at)));
      }
    }
    std::vector<float> x = kv_data(g, n_tokens, 4);
    x[0] = 65504.0f;
    x[1] = -65504.0f;
    x[2] = -0.0f;
    x[3] = std::numeric_limits<float>::denorm_min();
    EXPECT_TRUE(encode_kv_block(parse(name), g, /*is_key=*/false, x.data(), n_tokens).ok()) << name;
  }
}

// ---------------------------------------------------------------- names ----

TEST(KvCodecConfig, CanonicalNamesRoundTrip) {
  for (const char* name : {"f16", "f16-z3", "int8-g32", "int4-g32", "int4-pc-g32-had-z3", "int8-pc-g16-pre-hk",
                           "int4-g64-hv-rows-z1", "int8-g32-zf5", "f16-pre-had", "int4-k8-g32-z3",
                           "int4-pc-kg128-g32-z3", "int4-k8-pc-kg64-g32-pre-had-z3", "int4-kg16-g32",
                           "int8-pc-kg5-g32"}) {
    auto c = parse_kv_codec_config(name);
    ASSERT_TRUE(c.ok()) << name << ": " << c.status();
    EXPECT_EQ(c->to_string(), name);
  }
}

TEST(KvCodecConfig, ParsesOptionsInAnyOrderAndPrintsCanonically) {
  KvCodecConfig c = parse("int4-z3-had-g32-pc");
  EXPECT_EQ(c.bits, KvCodecConfig::Bits::kInt4);
  EXPECT_EQ(c.key_axis, KvCodecConfig::KeyAxis::kPerChannel);
  EXPECT_TRUE(c.hadamard_keys && c.hadamard_values);
  EXPECT_EQ(c.zstd_level, 3);
  EXPECT_EQ(c.to_string(), "int4-pc-g32-had-z3");
  EXPECT_EQ(parse("int8").to_string(), "int8-g32");  // default group printed
  EXPECT_EQ(parse("int8-hk-hv").to_string(), "int8-g32-had");
  EXPECT_EQ(parse("int8-planes-z0").to_string(), "int8-g32");
  EXPECT_EQ(parse("int4-g32-z3-kg128-pc-k8").to_string(), "int4-k8-pc-kg128-g32-z3");
  // Defaults restated are dropped: int8 keys of int8, a key group equal to g.
  EXPECT_EQ(parse("int8-k8-g32"), parse("int8-g32"));
  EXPECT_EQ(parse("int4-kg64-g64"), parse("int4-g64"));
  EXPECT_EQ(parse("int4-kg64-g64").to_string(), "int4-g64");
}

TEST(KvCodecConfig, KeyBitsAndKeyGroupDefaultToTheValueOnes) {
  // Old names keep their meaning: keys share bits and group with values.
  const KvCodecConfig old = parse("int4-pc-g32-z3");
  EXPECT_FALSE(old.key_bits.has_value());
  EXPECT_EQ(old.key_group_size, 0);
  EXPECT_EQ(old.bits_for(true), KvCodecConfig::Bits::kInt4);
  EXPECT_EQ(old.group_size_for(true), 32);
  const KvCodecConfig mixed = parse("int4-k8-pc-kg128-g32");
  EXPECT_EQ(mixed.bits_for(true), KvCodecConfig::Bits::kInt8);
  EXPECT_EQ(mixed.bits_for(false), KvCodecConfig::Bits::kInt4);
  EXPECT_EQ(mixed.group_size_for(true), 128);
  EXPECT_EQ(mixed.group_size_for(false), 32);
}

TEST(KvCodecConfig, KeyGroupTokensIsThePerChannelKeyGroup) {
  EXPECT_EQ(key_group_tokens(parse("int4-pc-kg128-g32")), 128);
  EXPECT_EQ(key_group_tokens(parse("int4-pc-g32")), 32);
  EXPECT_EQ(key_group_tokens(parse("int4-kg16-g32")), 1);  // per-token keys: no alignment
  EXPECT_EQ(key_group_tokens(parse("int4-g32")), 1);
  EXPECT_EQ(key_group_tokens(parse("f16")), 1);
}

TEST(KvCodecConfig, RejectsInvalidMixesWithTheReason) {
  struct Bad {
    const char* name;
    const char* reason;
  };
  for (const Bad& b : {Bad{"f16-k8", "f16 does not mix"}, Bad{"f16-kg32", "f16 takes no key group"},
                       Bad{"int4-kg7", "even key group size, not 7"},
                       Bad{"int4-kg0", "kg0"}, Bad{"int8-kg2000", "key group size 2000 is outside [1, 1024]"},
                       Bad{"int4-k4", "unknown option 'k4'"}, Bad{"int4-kg", "unknown option 'kg'"}}) {
    auto c = parse_kv_codec_config(b.name);
    ASSERT_FALSE(c.ok()) << b.name;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(b.reason)) << b.name;
  }
  // INT8 keys need no even key group (only INT4 packs two codes per byte).
  EXPECT_TRUE(parse_kv_codec_config("int4-k8-pc-kg7").ok());
  KvCodecConfig narrow_keys = parse("int8-g32");
  narrow_keys.key_bits = KvCodecConfig::Bits::kInt4;
  EXPECT_THAT(std::string(narrow_keys.validate().message()), HasSubstr("keys may not be narrower than values"));
  KvCodecConfig f16_keys = parse("int4-g32");
  f16_keys.key_bits = KvCodecConfig::Bits::kF16;
  EXPECT_THAT(std::string(f16_keys.validate().message()), HasSubstr("f16 does not mix"));
  KvCodecConfig f16_values = parse("f16");
  f16_values.key_bits = KvCodecConfig::Bits::kInt8;
  EXPECT_THAT(std::string(f16_values.validate().message()), HasSubstr("f16 does not mix"));
}

TEST(KvCodecConfig, RejectsBadNamesWithTheReason) {
  struct Bad {
    const char* name;
    const char* reason;
  };
  for (const Bad& b : {Bad{"int3", "unknown bits"}, Bad{"int8-x", "unknown option 'x'"},
                       Bad{"int8-g0", "group size 0"}, Bad{"int4-g7", "even group size"},
                       Bad{"f16-g32", "f16 takes no group"}, Bad{"f16-pc", "per-channel"},
                       Bad{"int8-z99", "zstd level 99"}, Bad{"int8-g", "unknown option 'g'"},
                       Bad{"", "unknown bits"}, Bad{"int8-g2000", "outside [1, 1024]"}}) {
    auto c = parse_kv_codec_config(b.name);
    ASSERT_FALSE(c.ok()) << b.name;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(b.reason)) << b.name;
  }
}

TEST(KvCodecConfig, ValidatesAgainstGeometry) {
  KvGeometry g = test_geometry();
  EXPECT_TRUE(parse("int8-g32-had").validate(g).ok());
  KvCodecConfig c = parse("int8-g48");
  absl::Status st = c.validate(g);
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("group size 48 does not divide head_dim 64"));
  g.head_dim = 96;
  st = parse("int8-g32-hk").validate(g);
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("power-of-two head_dim, not 96"));
  EXPECT_TRUE(parse("int8-g32").validate(g).ok());
  g.head_dim = 64;
  // Per-token keys group along head_dim; per-channel key groups span tokens.
  st = parse("int4-kg48-g32").validate(g);
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("key group size 48 does not divide head_dim 64"));
  EXPECT_TRUE(parse("int4-pc-kg128-g32").validate(g).ok());
  EXPECT_TRUE(parse("int4-kg16-g32").validate(g).ok());
}

TEST(KvCodec, RawSizesFollowTheLayout) {
  const KvGeometry g = test_geometry();  // kv_dim 128
  EXPECT_EQ(kv_block_raw_size(parse("f16"), g, true, 10), 10u * 128 * 2);
  EXPECT_EQ(kv_block_raw_size(parse("int8-g32"), g, true, 10), 10u * 128 + 2 * 10 * 4);
  EXPECT_EQ(kv_block_raw_size(parse("int4-g32"), g, false, 10), 10u * 64 + 4 * 10 * 4);
  // Per-channel keys: ceil(10 / 4) = 3 token groups of 128 channels; values per token.
  EXPECT_EQ(kv_block_raw_size(parse("int4-pc-g4"), g, true, 10), 10u * 64 + 4 * 3 * 128);
  EXPECT_EQ(kv_block_raw_size(parse("int4-pc-g4"), g, false, 10), 10u * 64 + 4 * 10 * 32);
  // 2 layers x K,V x 128 x (0.5 + 4/32) bytes.
  EXPECT_DOUBLE_EQ(kv_raw_bytes_per_token(parse("int4-g32"), g), 2 * 2 * 128 * 0.625);
  // Mixed: INT8 keys (1 byte + 2-byte scale per 32), INT4 values.
  EXPECT_EQ(kv_block_raw_size(parse("int4-k8-g32"), g, true, 10), 10u * 128 + 2 * 10 * 4);
  EXPECT_EQ(kv_block_raw_size(parse("int4-k8-g32"), g, false, 10), 10u * 64 + 4 * 10 * 4);
  EXPECT_DOUBLE_EQ(kv_raw_bytes_per_token(parse("int4-k8-g32"), g), 2 * 128 * ((1 + 2.0 / 32) + (0.5 + 4.0 / 32)));
  // Separate key group: per-channel keys over 4 tokens, values per token g32.
  EXPECT_EQ(kv_block_raw_size(parse("int4-pc-kg4-g32"), g, true, 10), 10u * 64 + 4 * 3 * 128);
  EXPECT_EQ(kv_block_raw_size(parse("int4-pc-kg4-g32"), g, false, 10), 10u * 64 + 4 * 10 * 4);
  EXPECT_DOUBLE_EQ(kv_raw_bytes_per_token(parse("int4-pc-kg128-g32"), g),
                   2 * 128 * ((0.5 + 4.0 / 128) + (0.5 + 4.0 / 32)));
}

// A mixed config quantizes each kind exactly as the plain config of that
// kind's bits and group: int4-k8 keys are int8 keys (so within the INT8
// bound), its values int4 values; kgN keys are gN keys (a gN beyond
// head_dim is only valid as kgN, so the cases stay within head_dim 64).
TEST(KvCodec, MixedConfigsQuantizeEachKindAsItsPlainConfig) {
  const KvGeometry g = test_geometry();
  const int64_t n = 37;
  struct Case {
    const char* mixed;
    const char* keys_as;
    const char* values_as;
  };
  for (const Case& c : {Case{"int4-k8-g32-z3", "int8-g32-z3", "int4-g32-z3"},
                        Case{"int4-pc-kg64-g32", "int4-pc-g64", "int4-g32"},
                        Case{"int4-k8-pc-kg64-g16-rows", "int8-pc-g64-rows", "int4-g16-rows"},
                        Case{"int4-k8-kg64-g16", "int8-g64", "int4-g16"}}) {
    SCOPED_TRACE(c.mixed);
    for (bool is_key : {true, false}) {
      const std::vector<float> x = kv_data(g, n, is_key ? 5 : 6);
      const KvCodecConfig mixed = parse(c.mixed), plain = parse(is_key ? c.keys_as : c.values_as);
      auto a = quantize_kv_block(mixed, g, is_key, x.data(), n);
      auto b = quantize_kv_block(plain, g, is_key, x.data(), n);
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(a->codes, b->codes);
      EXPECT_EQ(a->scales, b->scales);
      EXPECT_EQ(a->mins, b->mins);
      auto ea = encode_kv_block(mixed, g, is_key, x.data(), n);
      auto eb = encode_kv_block(plain, g, is_key, x.data(), n);
      ASSERT_TRUE(ea.ok() && eb.ok());
      EXPECT_EQ(ea->payload, eb->payload);
      EXPECT_EQ(ea->raw_size, kv_block_raw_size(mixed, g, is_key, n));
    }
  }
}

// The point of k8: on the same data the keys' worst error drops to the INT8
// bound (amax / 254 per group) while values keep the INT4 one.
TEST(KvCodec, Int8KeysOfInt4ValuesAreWithinTheInt8Bound) {
  const KvGeometry g = test_geometry();
  const int64_t n = 40;
  const KvCodecConfig c = parse("int4-k8-g32-z3");
  const std::vector<float> x = kv_data(g, n, 7);
  for (bool is_key : {true, false}) {
    auto enc = encode_kv_block(c, g, is_key, x.data(), n);
    ASSERT_TRUE(enc.ok());
    std::vector<float> out(x.size());
    ASSERT_TRUE(decode_kv_block(c, g, is_key, enc->payload, enc->raw_size, n, out.data()).ok());
    for (int64_t grp = 0; grp < n * g.kv_dim() / 32; ++grp) {
      float lo = x[grp * 32], hi = lo, amax = 0;
      for (int i = 0; i < 32; ++i) {
        lo = std::min(lo, x[grp * 32 + i]);
        hi = std::max(hi, x[grp * 32 + i]);
        amax = std::max(amax, std::fabs(x[grp * 32 + i]));
      }
      // Half a step plus f16 rounding of the scale (and min).
      const float bound = is_key ? 0.5f * amax / 127 * 1.002f + 1e-6f : 0.5f * (hi - lo) / 15 * 1.01f + 2e-3f * std::fabs(lo);
      for (int i = 0; i < 32; ++i) {
        ASSERT_LE(std::fabs(out[grp * 32 + i] - x[grp * 32 + i]), bound)
            << (is_key ? "key" : "value") << " group " << grp << " element " << i;
      }
    }
  }
}

TEST(KvCodec, HadamardIsTheNormalizedSylvesterMatrix) {
  for (int n : {4, 8, 16, 64, 128}) {
    std::vector<float> x(n);
    std::mt19937 rng(n);
    std::normal_distribution<float> normal;
    for (float& v : x) v = normal(rng);
    std::vector<float> y = x;
    kv_quant::hadamard_inplace(y.data(), n);
    for (int i = 0; i < n; ++i) {
      double expected = 0;
      for (int j = 0; j < n; ++j) expected += (__builtin_popcount(i & j) % 2 ? -1.0 : 1.0) * x[j];
      expected /= std::sqrt(static_cast<double>(n));
      ASSERT_NEAR(y[i], expected, 1e-5) << "n " << n << " i " << i;
    }
    kv_quant::hadamard_inplace(y.data(), n);  // its own inverse
    for (int i = 0; i < n; ++i) ASSERT_NEAR(y[i], x[i], 1e-5);
  }
}

// ----------------------------------------------------------- round trips ----

class KvCodecRoundTrip : public ::testing::TestWithParam<std::string> {};

// Every element of the quantized domain (input rotated when the config says
// so) lies within half a step of the stored group parameters, and the full
// decode equals that dequantization rotated back.
TEST_P(KvCodecRoundTrip, ErrorWithinHalfAStepAndDecodeUndoesTheRotation) {
  const KvCodecConfig c = parse(GetParam());
  const KvGeometry g = test_geometry();
  const int64_t n = 37;  // not a multiple of the per-channel group
  for (bool is_key : {true, false}) {
    SCOPED_TRACE(is_key ? "keys" : "values");
    const std::vector<float> x = kv_data(g, n, is_key ? 1 : 2);
    std::vector<float> domain = x;
    if (is_key ? c.hadamard_keys : c.hadamard_values) kv_quant::hadamard_rows(domain.data(), n * g.n_head_kv, g.head_dim);

    absl::StatusOr<QuantizedKvBlock> q = quantize_kv_block(c, g, is_key, x.data(), n);
    ASSERT_TRUE(q.ok()) << q.status();
    std::vector<float> deq(x.size());
    ASSERT_TRUE(dequantize_kv_block(c, g, is_key, *q, deq.data()).ok());
    const bool per_channel = is_key && c.key_axis == KvCodecConfig::KeyAxis::kPerChannel;
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t ch = 0; ch < g.kv_dim(); ++ch) {
        const int64_t e = t * g.kv_dim() + ch;
        const float err = std::fabs(deq[e] - domain[e]);
        const KvCodecConfig::Bits bits = c.bits_for(is_key);
        const int group = c.group_size_for(is_key);
        if (bits == KvCodecConfig::Bits::kF16) {
          ASSERT_EQ(deq[e], fp16_to_fp32(fp32_to_fp16(domain[e]))) << e;
          continue;
        }
        const int64_t group_index = per_channel ? (t / group) * g.kv_dim() + ch : e / group;
        const float step = fp16_to_fp32(q->scales[group_index]);
        float bound = 0.5f * step * (1 + 1e-5f) + 1e-6f;
        if (bits == KvCodecConfig::Bits::kInt4) bound += 1e-3f * std::fabs(fp16_to_fp32(q->mins[group_index]));
        ASSERT_LE(err, bound) << "token " << t << " channel " << ch;
      }
    }

    absl::StatusOr<EncodedKvBlock> enc = encode_kv_block(c, g, is_key, x.data(), n);
    ASSERT_TRUE(enc.ok()) << enc.status();
    EXPECT_EQ(enc->raw_size, kv_block_raw_size(c, g, is_key, n));
    if (c.zstd_level == 0) {
      EXPECT_EQ(enc->payload.size(), enc->raw_size);
    }
    std::vector<float> out(x.size());
    absl::Status st = decode_kv_block(c, g, is_key, enc->payload, enc->raw_size, n, out.data());
    ASSERT_TRUE(st.ok()) << st;
    std::vector<float> expected = deq;
    if (is_key ? c.hadamard_keys : c.hadamard_values) kv_quant::hadamard_rows(expected.data(), n * g.n_head_kv, g.head_dim);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], expected[i], 1e-5f * (1 + std::fabs(expected[i]))) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, KvCodecRoundTrip,
                         ::testing::Values("f16", "f16-z3", "f16-rows", "int8-g32", "int8-g16-z3", "int8-g8-rows",
                                           "int8-pc-g32", "int8-pc-g16-rows-z1", "int4-g32", "int4-g16-z3",
                                           "int4-g64-rows", "int4-pc-g32", "int4-pc-g32-rows-z3", "int4-g32-had",
                                           "int8-pc-g32-had-z1", "int4-pc-g32-hk", "f16-had", "int4-k8-g32",
                                           "int4-k8-g16-rows-z3", "int4-k8-pc-g32-had", "int4-pc-kg128-g32-z3",
                                           "int4-pc-kg16-g32-rows", "int4-k8-pc-kg64-g32", "int4-kg16-g32",
                                           "int8-pc-kg5-g32"),
                         param_name);

TEST(KvCodec, LayoutsAndCompressionDecodeToTheSameValues) {
  const KvGeometry g = test_geometry();
  const int64_t n = 40;
  const std::vector<float> x = kv_data(g, n, 5);
  for (const char* base : {"int8-g32", "int4-pc-g32", "f16"}) {
    std::vector<float> reference;
    for (const char* suffix : {"", "-rows", "-z3", "-rows-z1", "-zf3"}) {
      const KvCodecConfig c = parse(std::string(base) + suffix);
      auto enc = encode_kv_block(c, g, true, x.data(), n);
      ASSERT_TRUE(enc.ok()) << enc.status();
      std::vector<float> out(x.size());
      ASSERT_TRUE(decode_kv_block(c, g, true, enc->payload, enc->raw_size, n, out.data()).ok());
      if (reference.empty()) {
        reference = out;
      } else {
        EXPECT_EQ(out, reference) << c.to_string();
      }
    }
  }
}

TEST(KvCodec, PreRopeKeysAreRotatedOnDecode) {
  const KvGeometry g = test_geometry();
  const int64_t n = 12, first = 100;
  const std::vector<float> pre = kv_data(g, n, 9);
  std::vector<float> inv_freq(g.head_dim / 2);
  for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / g.head_dim);
  const KvRopeParams rope{inv_freq.data(), g.head_dim, /*neox=*/false, first};
  for (const char* name : {"f16-pre", "int8-g32-pre-hk"}) {
    const KvCodecConfig c = parse(name);
    auto enc = encode_kv_block(c, g, true, pre.data(), n);
    ASSERT_TRUE(enc.ok());
    std::vector<float> out(pre.size());
    absl::Status missing = decode_kv_block(c, g, true, enc->payload, enc->raw_size, n, out.data());
    EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(missing.message()), HasSubstr("RoPE parameters"));
    ASSERT_TRUE(decode_kv_block(c, g, true, enc->payload, enc->raw_size, n, out.data(), &rope).ok());
    std::vector<float> expected = pre;
    rope_rows(expected.data(), n, g.n_head_kv, g.head_dim, g.head_dim, false, first, inv_freq.data());
    const float tolerance = c.bits == KvCodecConfig::Bits::kF16 ? 1e-2f : 0.15f;
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], expected[i], tolerance) << name << " " << i;
    // Values never take RoPE.
    auto venc = encode_kv_block(c, g, false, pre.data(), n);
    ASSERT_TRUE(venc.ok());
    EXPECT_TRUE(decode_kv_block(c, g, false, venc->payload, venc->raw_size, n, out.data()).ok());
  }
}

TEST(KvCodec, RejectsValuesOutsideTheF16Range) {
  const KvGeometry g = test_geometry();
  std::vector<float> x = kv_data(g, 2, 3);
  x[17] = std::nanf("");
  auto enc = encode_kv_block(parse("int8-g32"), g, true, x.data(), 2);
  ASSERT_FALSE(enc.ok());
  EXPECT_THAT(std::string(enc.status().message()), HasSubstr("element 17"));
  x[17] = 1e6f;
  EXPECT_FALSE(encode_kv_block(parse("f16"), g, true, x.data(), 2).ok());
  EXPECT_FALSE(encode_kv_block(parse("f16"), g, true, x.data(), 0).ok());
}

// ------------------------------------------------------ hostile payloads ----

class KvCodecCorruption : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    config_ = parse(GetParam());
    x_ = kv_data(g_, n_, 4);
    auto enc = encode_kv_block(config_, g_, true, x_.data(), n_);
    ASSERT_TRUE(enc.ok());
    enc_ = *enc;
    out_.resize(x_.size());
  }
  absl::Status decode(std::string_view payload, uint64_t raw_size) {
    return decode_kv_block(config_, g_, true, payload, raw_size, n_, out_.data());
  }
  KvGeometry g_ = test_geometry();
  int64_t n_ = 33;
  KvCodecConfig config_;
  std::vector<float> x_, out_;
  EncodedKvBlock enc_;
};

TEST_P(KvCodecCorruption, WrongRawSizeNamesBothSizes) {
  const uint64_t expected = enc_.raw_size;
  absl::Status st = decode(enc_.payload, expected + 1);
  ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr(std::to_string(expected + 1)));
  EXPECT_THAT(std::string(st.message()), HasSubstr(std::to_string(expected)));
  // A wrong token count is a wrong expected size.
  st = decode_kv_block(config_, g_, true, enc_.payload, expected, n_ - 1, out_.data());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(KvCodecCorruption, TruncatedOrExtendedPayloadIsAnError) {
  for (size_t keep : {size_t{0}, size_t{1}, size_t{4}, enc_.payload.size() / 2, enc_.payload.size() - 1}) {
    absl::Status st = decode(std::string_view(enc_.payload).substr(0, keep), enc_.raw_size);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << keep << ": " << st;
  }
  absl::Status st = decode(enc_.payload + "xyz", enc_.raw_size);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
}

TEST_P(KvCodecCorruption, RandomBytesAndBitFlipsNeverCrash) {
  std::mt19937 rng(123);
  int errors = 0;
  for (int iter = 0; iter < 300; ++iter) {
    std::string payload = enc_.payload;
    if (iter % 3 == 0) {
      for (char& b : payload) b = static_cast<char>(rng());
    } else {
      for (int flips = 0; flips < 1 + iter % 5; ++flips) {
        payload[rng() % payload.size()] ^= static_cast<char>(1u << (rng() % 8));
      }
    }
    absl::Status st = decode(payload, enc_.raw_size);
    if (!st.ok()) {
      ++errors;
      EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    }
  }
  // Compressed payloads catch most damage; raw ones only bad f16 patterns.
  if (config_.zstd_level != 0) {
    EXPECT_GT(errors, 100);
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, KvCodecCorruption,
                         ::testing::Values("f16", "f16-z3", "int8-g32", "int8-g32-z3", "int4-pc-g32-z3",
                                           "int4-g32-rows-z1", "int4-g32", "int4-k8-g32-z3", "int4-k8-g32",
                                           "int4-pc-kg128-g32-z3", "int4-k8-pc-kg16-g32-rows-z1"),
                         param_name);

TEST(KvCodec, NonFiniteF16FieldsAreRejected) {
  const KvGeometry g = test_geometry();
  const int64_t n = 5;
  const std::vector<float> x = kv_data(g, n, 6);
  for (const char* name : {"f16", "int8-g32", "int4-g32", "int4-pc-g16"}) {
    const KvCodecConfig c = parse(name);
    auto enc = encode_kv_block(c, g, true, x.data(), n);
    ASSERT_TRUE(enc.ok());
    // Planes layout: the last byte is the high byte of the last f16 (a value,
    // scale or minimum); 0x7c / 0xfe make it Inf / NaN.
    for (char high : {'\x7c', '\xfe'}) {
      std::string payload = enc->payload;
      payload.back() = high;
      std::vector<float> out(x.size());
      absl::Status st = decode_kv_block(c, g, true, payload, enc->raw_size, n, out.data());
      ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << name;
      EXPECT_THAT(std::string(st.message()), HasSubstr("Inf or NaN")) << name;
    }
  }
}

TEST(KvCodec, ZstdBombIsRefusedBeforeDecompressing) {
  const KvGeometry g = test_geometry();
  const KvCodecConfig c = parse("int8-g32-z3");
  const int64_t n = 16;
  const uint64_t expected = kv_block_raw_size(c, g, true, n);
  // 64 MiB of zeros compress to a few KiB.
  const std::string zeros(64u << 20, '\0');
  std::string bomb(ZSTD_compressBound(zeros.size()), '\0');
  bomb.resize(ZSTD_compress(bomb.data(), bomb.size(), zeros.data(), zeros.size(), 3));
  ASSERT_LT(bomb.size(), 64u << 10);
  std::vector<float> out(static_cast<size_t>(n * g.kv_dim()));
  // The honest raw_size: the frame's declared content size disagrees.
  absl::Status st = decode_kv_block(c, g, true, bomb, expected, n, out.data());
  ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr(std::to_string(zeros.size())));
  EXPECT_THAT(std::string(st.message()), HasSubstr(std::to_string(expected)));
  // The bomb's own size as raw_size: refused by the expected-size check.
  st = decode_kv_block(c, g, true, bomb, zeros.size(), n, out.data());
  ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("raw_size is 67108864 bytes"));
}

TEST(KvCodec, FrameWithoutContentSizeIsRefused) {
  const KvGeometry g = test_geometry();
  const KvCodecConfig c = parse("int8-g32-z3");
  const int64_t n = 4;
  std::vector<float> x = kv_data(g, n, 8);
  auto q = quantize_kv_block(c, g, true, x.data(), n);
  ASSERT_TRUE(q.ok());
  const uint64_t raw_size = kv_block_raw_size(c, g, true, n);
  const std::string raw(raw_size, 'a');
  // Streaming compression without a pledged size leaves the size out.
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0);
  std::string frame(ZSTD_compressBound(raw.size()), '\0');
  frame.resize(ZSTD_compress2(cctx, frame.data(), frame.size(), raw.data(), raw.size()));
  ZSTD_freeCCtx(cctx);
  std::vector<float> out(x.size());
  absl::Status st = decode_kv_block(c, g, true, frame, raw_size, n, out.data());
  ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("content size"));
}

}  // namespace
}  // namespace baton
