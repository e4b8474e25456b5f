// The transform KV codec on seeded data drawn from a known calibration
// (tests/support/synthetic_calibration.h): names, allocation, round trips
// (rANS and zstd back ends), the INT8 sink and recent rows, and what it does
// with hostile payloads and a mismatched calibration.
#include "common/kv_codec/kv_transform_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/kv_codec/kv_codec_config.h"
#include "tests/support/synthetic_calibration.h"

namespace baton {
namespace {

using ::testing::HasSubstr;
using testing::synthetic_kv_calibration;
using testing::synthetic_kv_rows;

const KvGeometry kGeometry{2, 4, 2, 32, {}};

std::shared_ptr<const KvCalibration> calibration(uint64_t seed = 7) {
  return std::make_shared<const KvCalibration>(synthetic_kv_calibration(kGeometry, seed));
}

std::unique_ptr<KvTransformCodec> coder(const std::string& name, std::shared_ptr<const KvCalibration> cal) {
  absl::StatusOr<KvCodecConfig> config = parse_kv_codec_config(name);
  EXPECT_TRUE(config.ok()) << config.status();
  absl::StatusOr<std::unique_ptr<KvTransformCodec>> made = KvTransformCodec::Create(std::move(cal), *config);
  EXPECT_TRUE(made.ok()) << made.status();
  return std::move(*made);
}

double squared_error(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) e += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
  return e;
}

TEST(KvTransformConfigTest, NamesRoundTrip) {
  for (const char* name : {"tc-b2.5", "tc-b1", "tc-b0.5-s0-w0", "tc-b4-s8-w64-z3", "tc-b8-zf1"}) {
    absl::StatusOr<KvCodecConfig> c = parse_kv_codec_config(name);
    ASSERT_TRUE(c.ok()) << name << ": " << c.status();
    EXPECT_EQ(c->to_string(), name);
    EXPECT_TRUE(c->transform_coded());
    EXPECT_TRUE(c->pre_rope_keys);
    EXPECT_EQ(key_group_tokens(*c), 1);
  }
  EXPECT_EQ(parse_kv_codec_config("tc-b2.0")->to_string(), "tc-b2");
  EXPECT_EQ(parse_kv_codec_config("tc-b2.5-s4-w16")->to_string(), "tc-b2.5");
  for (const char* bad : {"tc", "tc-b", "tc-b2.55", "tc-b9", "tc-b0", "tc-bx", "tc-b2-g32", "tc-b2-pre",
                          "tc-b2-s5000", "tc-b1.2.3"}) {
    EXPECT_FALSE(parse_kv_codec_config(bad).ok()) << bad;
  }
}

TEST(KvTransformConfigTest, RawSizeIsTheF16Size) {
  const KvCodecConfig c = *parse_kv_codec_config("tc-b2");
  EXPECT_EQ(kv_block_raw_size(c, kGeometry, true, 10), 2u * 10 * 64);
  // The block codec of kv_codec.h refuses it: it needs its calibration.
  std::vector<float> rows(64 * 10, 0.5f);
  absl::StatusOr<EncodedKvBlock> e = encode_kv_block(c, kGeometry, true, rows.data(), 10);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(e.status().message(), HasSubstr("calibration"));
}

TEST(KvTransformCodecTest, AllocationSpendsTheBudgetOnTheLeadingComponents) {
  for (int tenths : {10, 25, 40}) {
    auto c = coder(absl::StrCat("tc-b", tenths / 10, ".", tenths % 10), calibration());
    const KvTransformPlan& p = c->plan(1, true);
    const double budget = tenths / 10.0 * kGeometry.kv_dim();
    EXPECT_LE(p.predicted_bits, budget + 1e-9);
    EXPECT_GT(p.predicted_bits, 0.9 * budget) << tenths;
    // Variances fall along the basis: a head's coded components are a prefix.
    for (int h = 0; h < kGeometry.n_head_kv; ++h) {
      int expected = 0;
      for (const KvTransformComponent& comp : p.active) {
        if (comp.head != h) continue;
        EXPECT_EQ(comp.index, expected++);
      }
      if (tenths <= 25) {
        EXPECT_LT(expected, kGeometry.head_dim) << "trailing components get 0 bits";
      }
    }
  }
}

TEST(KvTransformCodecTest, RoundTripErrorFallsWithTheBudgetAndMatchesThePrediction) {
  auto cal = calibration();
  const int64_t n = 512;
  double previous = 1e30;
  for (const char* name : {"tc-b1-s0-w0", "tc-b2-s0-w0", "tc-b4-s0-w0"}) {
    auto c = coder(name, cal);
    for (const bool is_key : {true, false}) {
      const std::vector<float> rows = synthetic_kv_rows(*cal, 1, is_key, n, 11);
      absl::StatusOr<EncodedKvBlock> e = c->encode(1, is_key, 0, n, rows.data(), n);
      ASSERT_TRUE(e.ok()) << e.status();
      std::vector<float> out(rows.size());
      ASSERT_TRUE(c->decode(1, is_key, 0, n, e->payload, e->raw_size, n, out.data()).ok());
      const double mse_per_token = squared_error(rows, out) / n;
      const KvTransformPlan& p = c->plan(1, is_key);
      EXPECT_NEAR(mse_per_token, p.predicted_mse, 0.25 * p.predicted_mse) << name;
      // The rANS stream is within a few percent of the predicted entropy.
      const double bits = 8.0 * e->payload.size() / n;
      EXPECT_NEAR(bits, p.predicted_bits, 0.05 * p.predicted_bits + 64.0 / n * 8) << name;
      if (is_key) {
        EXPECT_LT(mse_per_token, previous) << name;
        previous = mse_per_token;
      }
    }
  }
}

TEST(KvTransformCodecTest, ZstdBackEndDecodesToTheSameRows) {
  auto cal = calibration();
  const int64_t n = 200;
  const std::vector<float> rows = synthetic_kv_rows(*cal, 0, false, n, 3);
  std::vector<float> out_rans(rows.size()), out_zstd(rows.size());
  for (auto [name, out] : {std::pair{"tc-b2", &out_rans}, std::pair{"tc-b2-z3", &out_zstd}}) {
    auto c = coder(name, cal);
    absl::StatusOr<EncodedKvBlock> e = c->encode(0, false, 100, 300, rows.data(), n);
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_TRUE(c->decode(0, false, 100, 300, e->payload, e->raw_size, n, out->data()).ok());
  }
  EXPECT_EQ(out_rans, out_zstd);
}

TEST(KvTransformCodecTest, SinkAndRecentRowsAreInt8) {
  auto cal = calibration();
  auto c = coder("tc-b1-s4-w16", cal);
  const int64_t n = 40;
  // Block [0, 40) of a stream that ends at 30 + 40 - ... : positions 0..3 sink,
  // the stream [0, 40) ends at 40, so rows 24..39 are recent.
  const KvTransformCodec::Split s = c->split(0, 40, n);
  EXPECT_EQ(s.a, 4);
  EXPECT_EQ(s.b, 24);
  EXPECT_EQ(c->split(100, 140, 10).a, 0);   // no sink rows past position 4
  EXPECT_EQ(c->split(100, 200, 10).b, 10);  // all before the recent window
  EXPECT_EQ(c->split(0, 10, 10).b, 4);      // a stream shorter than S + W
  const std::vector<float> rows = synthetic_kv_rows(*cal, 0, true, n, 5);
  absl::StatusOr<EncodedKvBlock> e = c->encode(0, true, 0, 40, rows.data(), n);
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<float> out(rows.size());
  ASSERT_TRUE(c->decode(0, true, 0, 40, e->payload, e->raw_size, n, out.data()).ok());
  const int64_t kv_dim = kGeometry.kv_dim();
  double int8_err = 0, int8_ref = 0, tc_err = 0, tc_ref = 0;
  for (int64_t t = 0; t < n; ++t) {
    const bool int8 = t < 4 || t >= 24;
    for (int64_t j = 0; j < kv_dim; ++j) {
      const double d = out[t * kv_dim + j] - rows[t * kv_dim + j], r = rows[t * kv_dim + j];
      (int8 ? int8_err : tc_err) += d * d;
      (int8 ? int8_ref : tc_ref) += r * r;
    }
  }
  EXPECT_LT(int8_err / int8_ref, 1e-4);  // INT8 with groups of 32
  EXPECT_GT(tc_err / tc_ref, 1e-3);      // 1 bit per element is far coarser
}

TEST(KvTransformCodecTest, HostilePayloadsFailCleanly) {
  auto cal = calibration();
  auto c = coder("tc-b2-s0-w0", cal);  // all rows transform-coded: every byte is rANS
  const int64_t n = 64;
  const std::vector<float> rows = synthetic_kv_rows(*cal, 1, true, n, 9);
  absl::StatusOr<EncodedKvBlock> e = c->encode(1, true, 0, 64, rows.data(), n);
  ASSERT_TRUE(e.ok());
  std::vector<float> out(rows.size());
  EXPECT_EQ(c->decode(1, true, 0, 64, e->payload, e->raw_size + 1, n, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(c->decode(1, true, 0, 64, e->payload + "x", e->raw_size, n, out.data()).ok());
  for (size_t cut = 0; cut < e->payload.size(); cut += 7) {
    EXPECT_FALSE(c->decode(1, true, 0, 64, e->payload.substr(0, cut), e->raw_size, n, out.data()).ok()) << cut;
  }
  std::mt19937 rng(1);
  int failed = 0;
  for (int i = 0; i < 200; ++i) {
    std::string bad = e->payload;
    bad[rng() % bad.size()] ^= static_cast<char>(1 + rng() % 255);
    failed += c->decode(1, true, 0, 64, bad, e->raw_size, n, out.data()).ok() ? 0 : 1;
  }
  EXPECT_GT(failed, 190);  // the rANS states end elsewhere
  EXPECT_FALSE(c->decode(2, true, 0, 64, e->payload, e->raw_size, n, out.data()).ok());  // no layer 2
  EXPECT_FALSE(c->decode(1, true, 10, 64, e->payload, e->raw_size, n, out.data()).ok());  // past the stream
  std::vector<float> inf = rows;
  inf[100] = INFINITY;
  EXPECT_EQ(c->encode(1, true, 0, 64, inf.data(), n).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvTransformCodecTest, BindsTheCalibrationDigestAndRefusesAnother) {
  auto a = calibration(1), b = calibration(2);
  auto ca = coder("tc-b2", a);
  EXPECT_TRUE(ca->config().transform->bound());
  EXPECT_EQ(ca->config().transform->calibration, kv_calibration_digest(*a));
  // The same bound config with its own calibration: fine; with another: refused.
  EXPECT_TRUE(KvTransformCodec::Create(a, ca->config()).ok());
  absl::StatusOr<std::unique_ptr<KvTransformCodec>> other = KvTransformCodec::Create(b, ca->config());
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.status().message(), HasSubstr("calibration mismatch"));
}

}  // namespace
}  // namespace baton
