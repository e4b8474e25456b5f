#include "common/gguf/ggml_quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/util/fp16.h"

namespace baton {
namespace {

TEST(GgmlQuant, Q4_0BlockOfRampMatchesHandComputedBytes) {
  // x = -16..15: max |x| is x[0] = -16, so d = -16 / -8 = 2 (fp16 0x4000),
  // q = min(15, trunc(x / 2 + 8.5)).
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i - 16);
  BlockQ4_0 block;
  quantize_row_q4_0(x, &block, 32);
  EXPECT_EQ(block.d, 0x4000);
  // Low nibble: element j (q = 0,1,1,2,2,...,7,8); high nibble: element j+16
  // (q = 8,9,9,...,15,15, then 16 clamped to 15).
  const uint8_t expected[16] = {0x80, 0x91, 0x91, 0xA2, 0xA2, 0xB3, 0xB3, 0xC4,
                                0xC4, 0xD5, 0xD5, 0xE6, 0xE6, 0xF7, 0xF7, 0xF8};
  EXPECT_EQ(std::memcmp(block.qs, expected, 16), 0);

  float y[32];
  dequantize_row_q4_0(&block, y, 32);
  EXPECT_EQ(y[0], -16.0f);   // q 0
  EXPECT_EQ(y[1], -14.0f);   // x -15, q 1
  EXPECT_EQ(y[16], 0.0f);    // x 0, q 8
  EXPECT_EQ(y[31], 14.0f);   // x 15, q 15 (clamped)
  for (int i = 0; i < 32; ++i) EXPECT_LE(std::fabs(y[i] - x[i]), 2.0f) << i;
}

TEST(GgmlQuant, Q4_0PositiveMaxGivesNegativeScale) {
  // max = +8 at x[5]: d = 8 / -8 = -1 (fp16 0xBC00), id = -1, q = trunc(8.5 - x).
  float x[32] = {};
  x[3] = 3.0f;    // q 5
  x[5] = 8.0f;    // q 0
  x[20] = -4.0f;  // q 12, high nibble of qs[4]
  BlockQ4_0 block;
  quantize_row_q4_0(x, &block, 32);
  EXPECT_EQ(block.d, 0xBC00);
  uint8_t expected[16];
  std::memset(expected, 0x88, 16);  // zeros quantize to 8
  expected[3] = 0x85;
  expected[4] = 0xC8;
  expected[5] = 0x80;
  EXPECT_EQ(std::memcmp(block.qs, expected, 16), 0);
  float y[32];
  dequantize_row_q4_0(&block, y, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], x[i]) << i;  // exact for these values
}

TEST(GgmlQuant, Q4_0AllZeroBlockHasNegativeZeroScaleAndMidpointQuants) {
  float x[32] = {};
  BlockQ4_0 block;
  quantize_row_q4_0(x, &block, 32);
  EXPECT_EQ(block.d, 0x8000);  // 0 / -8 = -0.0, as in ggml
  for (uint8_t q : block.qs) EXPECT_EQ(q, 0x88);
}

TEST(GgmlQuant, Q8_0BlockMatchesHandComputedBytesWithHalfAwayFromZeroRounding) {
  // x[0] = -127 makes amax 127 so d = 1 exactly (fp16 0x3C00); the others are
  // 2.5 * (i - 16), so odd multiples land on .5 and round away from zero.
  float x[32];
  x[0] = -127.0f;
  for (int i = 1; i < 32; ++i) x[i] = 2.5f * static_cast<float>(i - 16);
  BlockQ8_0 block;
  quantize_row_q8_0(x, &block, 32);
  EXPECT_EQ(block.d, 0x3C00);
  const int8_t expected[32] = {-127, -38, -35, -33, -30, -28, -25, -23, -20, -18, -15, -13, -10, -8, -5, -3,
                               0,    3,   5,   8,   10,  13,  15,  18,  20,  23,  25,  28,  30,  33, 35, 38};
  EXPECT_EQ(std::memcmp(block.qs, expected, 32), 0);
  float y[32];
  dequantize_row_q8_0(&block, y, 32);
  for (int i = 0; i < 32; ++i) EXPECT_LE(std::fabs(y[i] - x[i]), 0.5f) << i;
}

TEST(GgmlQuant, Q8_0ScaleIsFp16OfAmaxOver127) {
  // d = 16/127 = 0.12598...; fp16: exponent 2^-3 (0x3000), mantissa
  // round((128/127 - 1) * 1024) = round(8.06) = 8 -> 0x3008.
  float x[32] = {};
  x[7] = -16.0f;
  BlockQ8_0 block;
  quantize_row_q8_0(x, &block, 32);
  EXPECT_EQ(block.d, 0x3008);
  EXPECT_EQ(block.qs[7], -127);
  EXPECT_EQ(block.qs[0], 0);
}

std::vector<float> random_row(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

TEST(GgmlQuant, Q8_0RoundTripErrorIsWithinHalfAStepPerElement) {
  const int64_t n = 32 * 64;
  const std::vector<float> x = random_row(n, 1);
  std::vector<BlockQ8_0> blocks(n / 32);
  std::vector<float> y(n);
  quantize_row_q8_0(x.data(), blocks.data(), n);
  dequantize_row_q8_0(blocks.data(), y.data(), n);
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float d = amax / 127;                    // scale used to quantize
    const float d16 = fp16_to_fp32(blocks[b].d);   // scale used to dequantize
    const float bound = d / 2 + 127 * std::fabs(d16 - d) + 1e-6f;
    for (int j = 0; j < 32; ++j) EXPECT_LE(std::fabs(y[b * 32 + j] - x[b * 32 + j]), bound) << b << "," << j;
  }
}

TEST(GgmlQuant, Q4_0RoundTripErrorIsWithinOneStepPerElement) {
  const int64_t n = 32 * 64;
  const std::vector<float> x = random_row(n, 2);
  std::vector<BlockQ4_0> blocks(n / 32);
  std::vector<float> y(n);
  quantize_row_q4_0(x.data(), blocks.data(), n);
  dequantize_row_q4_0(blocks.data(), y.data(), n);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float d16 = std::fabs(fp16_to_fp32(blocks[b].d));
    const float bound = d16 * (1 + 1e-2f);  // one step, plus fp16 rounding of d times |q - 8| <= 8
    for (int j = 0; j < 32; ++j) EXPECT_LE(std::fabs(y[b * 32 + j] - x[b * 32 + j]), bound) << b << "," << j;
  }
}

TEST(GgmlQuant, Fp16RoundsSpecificValuesToNearestEven) {
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);   // largest finite half
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);   // halfway to the next step: rounds to inf
  EXPECT_EQ(fp32_to_fp16(0.1f), 0x2E66);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  // Ties between two halves go to the even mantissa.
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(fp16_to_fp32(0x3C00), 1.0f);
  EXPECT_EQ(fp16_to_fp32(0x7BFF), 65504.0f);
}

TEST(GgmlQuant, Bf16RoundsSpecificValuesToNearestEven) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(fp32_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(fp32_to_bf16(fp32_from_bits(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(fp32_to_bf16(fp32_from_bits(0x3F818000u)), 0x3F82);  // tie -> even
  EXPECT_EQ(fp32_to_bf16(fp32_from_bits(0x3F808001u)), 0x3F81);  // above the tie
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(std::nanf("")))));
  EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0f);
}

TEST(GgmlQuant, GenericRowConversionsRoundTripEveryType) {
  const int64_t n = 256;
  const std::vector<float> x = random_row(n, 3);
  struct Case {
    GgmlType type;
    float tolerance;  // max |error| for N(0,1) data
  };
  for (const Case& c : {Case{GgmlType::kF32, 0.0f}, Case{GgmlType::kF16, 2e-3f}, Case{GgmlType::kBF16, 2e-2f},
                        Case{GgmlType::kQ8_0, 0.03f}, Case{GgmlType::kQ4_0, 0.6f}}) {
    std::vector<uint8_t> packed(ggml_row_bytes(c.type, n));
    std::vector<float> y(n);
    quantize_row(c.type, x.data(), packed.data(), n);
    dequantize_row(c.type, packed.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_LE(std::fabs(y[i] - x[i]), c.tolerance) << ggml_type_name(c.type) << " element " << i;
    }
  }
}

TEST(GgmlQuant, GenericQuantizeMatchesTheTypedFunctions) {
  const int64_t n = 64;
  const std::vector<float> x = random_row(n, 4);
  BlockQ4_0 q4[2], q4_generic[2];
  quantize_row_q4_0(x.data(), q4, n);
  quantize_row(GgmlType::kQ4_0, x.data(), q4_generic, n);
  EXPECT_EQ(std::memcmp(q4, q4_generic, sizeof(q4)), 0);
  BlockQ8_0 q8[2], q8_generic[2];
  quantize_row_q8_0(x.data(), q8, n);
  quantize_row(GgmlType::kQ8_0, x.data(), q8_generic, n);
  EXPECT_EQ(std::memcmp(q8, q8_generic, sizeof(q8)), 0);
}

}  // namespace
}  // namespace baton
