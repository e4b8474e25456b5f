// Block vectors made by llama.cpp/ggml (tests/data/kquants/blocks-*.json, see
// its README): 8 rows of 256 floats per type, their quantized bytes and the
// dequantized values. Baton's reference quantizers must reproduce the bytes
// and its dequantizers the values, bit for bit. A wrong nibble order, scale
// unpacking, rounding step or search constant fails the byte or value
// comparison of at least one of the rows (outliers, tiny/huge scales,
// all-positive rows, zero and constant rows).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "common/gguf/ggml_kquant.h"
#include "common/gguf/ggml_quant.h"
#include "common/gguf/ggml_quant_fallback.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_models.h"

namespace baton {
namespace {

nlohmann::json load_json(const std::string& name) {
  const std::string path = testing::source_dir() + "/tests/data/kquants/" + name;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

std::string to_hex(const std::vector<uint8_t>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

struct BlockCase {
  const char* file;
  GgmlType type;
};

class KquantBlocksTest : public ::testing::TestWithParam<BlockCase> {};

TEST_P(KquantBlocksTest, TypeTableMatchesTheReference) {
  const nlohmann::json j = load_json(GetParam().file);
  const GgmlType type = GetParam().type;
  EXPECT_EQ(j["ggml_type_id"].get<uint32_t>(), static_cast<uint32_t>(type));
  EXPECT_EQ(j["ggml_type_name"].get<std::string>(), ggml_type_name(type));
  EXPECT_EQ(j["block_bytes"].get<int64_t>(), ggml_block_bytes(type));
  EXPECT_EQ(j["block_elems"].get<int64_t>(), ggml_block_elements(type));
  EXPECT_EQ(j["row_bytes"].get<int64_t>(), ggml_row_bytes(type, j["row_elems"].get<int64_t>()));
  EXPECT_TRUE(ggml_type_supported(static_cast<uint32_t>(type)));
}

TEST_P(KquantBlocksTest, DequantizeReproducesReferenceValuesExactly) {
  const nlohmann::json j = load_json(GetParam().file);
  const GgmlType type = GetParam().type;
  const int64_t n = j["row_elems"].get<int64_t>();
  ASSERT_EQ(j["rows"].size(), 8u);
  for (const auto& row : j["rows"]) {
    const std::vector<uint8_t> bytes = from_hex(row["quantized_hex"].get<std::string>());
    ASSERT_EQ(static_cast<int64_t>(bytes.size()), ggml_row_bytes(type, n));
    std::vector<float> y(n);
    dequantize_row(type, bytes.data(), y.data(), n);
    int mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float want = row["dequantized"][i].get<float>();
      // Exact equality. The JSON prints ggml's -0 (q == 0 with a negative
      // scale) as 0, so the sign of zero is not compared.
      if (!(want == y[i]) && ++mismatches <= 3) {
        ADD_FAILURE() << ggml_type_name(type) << " row " << row["row"] << " element " << i << ": " << y[i]
                      << " != " << want;
      }
    }
    EXPECT_EQ(mismatches, 0) << "row " << row["row"];
  }
}

TEST_P(KquantBlocksTest, QuantizeReproducesReferenceBytes) {
  const nlohmann::json j = load_json(GetParam().file);
  const GgmlType type = GetParam().type;
  const int64_t n = j["row_elems"].get<int64_t>();
  for (const auto& row : j["rows"]) {
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i) x[i] = row["input"][i].get<float>();
    std::vector<uint8_t> bytes(ggml_row_bytes(type, n));
    quantize_row(type, x.data(), bytes.data(), n);
    EXPECT_EQ(to_hex(bytes), row["quantized_hex"].get<std::string>())
        << ggml_type_name(type) << " row " << row["row"];
  }
}

INSTANTIATE_TEST_SUITE_P(Reference, KquantBlocksTest,
                         ::testing::Values(BlockCase{"blocks-Q4_K.json", GgmlType::kQ4_K},
                                           BlockCase{"blocks-Q5_K.json", GgmlType::kQ5_K},
                                           BlockCase{"blocks-Q6_K.json", GgmlType::kQ6_K},
                                           BlockCase{"blocks-Q8_0.json", GgmlType::kQ8_0},
                                           BlockCase{"blocks-Q4_0.json", GgmlType::kQ4_0}),
                         [](const ::testing::TestParamInfo<BlockCase>& param_info) {
                           return std::string(ggml_type_name(param_info.param.type));
                         });

// The fallback types have no reference vectors; they are checked against
// their closed-form definitions on hand-picked blocks and by round trip.
TEST(KquantFallbackTypes, Q5_0RampUsesAll32LevelsAndTheHighBits) {
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i - 16);  // max |x| = 16 at x[0]
  BlockQ5_0 b;
  quantize_row_q5_0(x, &b, 32);
  EXPECT_EQ(b.d, 0x3C00);  // d = -16 / -16 = 1
  float y[32];
  dequantize_row_q5_0(&b, y, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], x[i]) << i;  // q = x + 16: exact
  // Elements 16..31 have q >= 16: their 5th bits are bits 16..31 of qh.
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  EXPECT_EQ(qh, 0xFFFF0000u);
}

TEST(KquantFallbackTypes, Q4_1AndQ5_1KeepTheMinimumAndStepExactly) {
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = 2.0f + 0.5f * static_cast<float>(i % 16);  // min 2, max 9.5
  BlockQ4_1 b41;
  quantize_row_q4_1(x, &b41, 32);
  float y[32];
  dequantize_row_q4_1(&b41, y, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], x[i]) << i;  // d = 7.5 / 15 = 0.5
  for (int i = 0; i < 32; ++i) x[i] = -3.0f + 0.25f * static_cast<float>(i);  // min -3, max 4.75
  BlockQ5_1 b51;
  quantize_row_q5_1(x, &b51, 32);
  dequantize_row_q5_1(&b51, y, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], x[i]) << i;  // d = 7.75 / 31 = 0.25
}

TEST(KquantFallbackTypes, RoundTripErrorIsWithinHalfAStep) {
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 7));
  for (GgmlType type : {GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1}) {
    std::vector<uint8_t> bytes(ggml_row_bytes(type, 256));
    quantize_row(type, x.data(), bytes.data(), 256);
    std::vector<float> y(256);
    dequantize_row(type, bytes.data(), y.data(), 256);
    const float levels = type == GgmlType::kQ4_1 ? 15.0f : 31.0f;
    for (int b = 0; b < 8; ++b) {
      float lo = x[32 * b], hi = x[32 * b];
      for (int i = 0; i < 32; ++i) lo = std::min(lo, x[32 * b + i]), hi = std::max(hi, x[32 * b + i]);
      // Q5_0 is symmetric: its step is max|x| / 16 over 32 levels (range 2 max|x|).
      const float range = type == GgmlType::kQ5_0 ? 2 * std::max(std::fabs(lo), std::fabs(hi)) : hi - lo;
      for (int i = 0; i < 32; ++i) {
        EXPECT_LE(std::fabs(y[32 * b + i] - x[32 * b + i]), 0.5f * range / levels * 1.01f + 1e-3f)
            << ggml_type_name(type) << " element " << 32 * b + i;
      }
    }
  }
}

TEST(KquantTypes, Q8_KIsAnActivationFormatNotAStoredType) {
  EXPECT_FALSE(ggml_type_supported(static_cast<uint32_t>(GgmlType::kQ8_K)));
  EXPECT_EQ(ggml_type_name(GgmlType::kQ8_K), "q8_K");
  EXPECT_EQ(ggml_block_bytes(GgmlType::kQ8_K), 292);
  EXPECT_EQ(ggml_block_elements(GgmlType::kQ8_K), 256);
  for (GgmlType t : {GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1}) {
    EXPECT_TRUE(ggml_type_supported(static_cast<uint32_t>(t)));
    EXPECT_EQ(ggml_block_elements(t), 32);
  }
  EXPECT_EQ(ggml_type_name(GgmlType::kQ4_1), "q4_1");
  EXPECT_EQ(ggml_type_name(GgmlType::kQ5_0), "q5_0");
  EXPECT_EQ(ggml_type_name(GgmlType::kQ5_1), "q5_1");
  EXPECT_EQ(ggml_row_bytes(GgmlType::kQ5_1, 64), 48);
}

}  // namespace
}  // namespace baton
