// K-quant (Q4_K, Q5_K, Q6_K x Q8_K) and older-type (Q5_0, Q4_1, Q5_1 x Q8_0)
// matmuls and Q8_K activation quantization, at every SIMD level this CPU has.
//
// References, all independent of the library code under test:
//   - ggml's quantize_row_q8_K_ref and the per-element dequantization formulas
//     of ggml's block layouts, written out here;
//   - tests/data/kquants/blocks-<TYPE>.json: blocks quantized and dequantized
//     by llama.cpp/ggml (see /work/shared/testdata/kquants/README.md upstream:
//     8 rows of 256; "quantized_hex" = raw blocks, "dequantized" = ggml's floats).
// Tolerances (relative to sum_c |W[r,c] * x[t,c]|, the scale of float error):
//   kernel vs double(dequant(W)) . double(dequant(q8(x))):  2e-6 (the integer
//     dot products are exact; only float scaling and summation order differ)
//   kernel vs double(dequant(W)) . double(x): the above plus the exact
//     activation-quantization bound sum_c |W[r,c]| * |x - dequant(q8(x))|.
//   every SIMD level vs scalar: 2x the first bound.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/cpu/matmul.h"
#include "common/cpu/matmul_kernels.h"
#include "common/util/fp16.h"

namespace baton {
namespace {

constexpr SimdLevel kAllLevels[] = {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512};
constexpr GgmlType kKquantTypes[] = {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};
constexpr GgmlType kLegacyTypes[] = {GgmlType::kQ5_0, GgmlType::kQ4_1, GgmlType::kQ5_1};

#define SKIP_IF_UNAVAILABLE(level)                                                             \
  if ((level) > best_simd_level())                                                             \
  GTEST_SKIP() << simd_level_name(level) << " is not available on this CPU (best: "           \
               << simd_level_name(best_simd_level()) << ")"

bool is_kquant(GgmlType type) {
  return type == GgmlType::kQ4_K || type == GgmlType::kQ5_K || type == GgmlType::kQ6_K;
}

int64_t block_elements(GgmlType type) { return is_kquant(type) ? 256 : 32; }

int64_t block_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_K: return sizeof(BlockQ4_K);
    case GgmlType::kQ5_K: return sizeof(BlockQ5_K);
    case GgmlType::kQ6_K: return sizeof(BlockQ6_K);
    case GgmlType::kQ5_0: return sizeof(BlockQ5_0);
    case GgmlType::kQ4_1: return sizeof(BlockQ4_1);
    case GgmlType::kQ5_1: return sizeof(BlockQ5_1);
    case GgmlType::kQ4_0: return sizeof(BlockQ4_0);
    case GgmlType::kQ8_0: return sizeof(BlockQ8_0);
    default: return 0;
  }
}

// --- References (ggml's formulas, written out) ---

// ggml's nearest_int (round half to even) and quantize_row_q8_K_ref.
int ref_nearest_int(float v) { return static_cast<int>(std::nearbyint(v)); }

std::vector<BlockQ8_K> ref_quantize_q8_k(const float* x, int64_t n) {
  std::vector<BlockQ8_K> out(n / 256);
  for (int64_t b = 0; b < n / 256; ++b) {
    const float* v = x + 256 * b;
    BlockQ8_K& y = out[b];
    float amax = 0, max = 0;
    for (int j = 0; j < 256; ++j) {
      if (std::fabs(v[j]) > amax) {
        amax = std::fabs(v[j]);
        max = v[j];
      }
    }
    if (amax == 0) {
      std::memset(&y, 0, sizeof(y));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < 256; ++j) y.qs[j] = static_cast<int8_t>(std::min(127, ref_nearest_int(iscale * v[j])));
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += y.qs[16 * g + i];
      y.bsums[g] = static_cast<int16_t>(sum);
    }
    y.d = 1 / iscale;
  }
  return out;
}

// ggml's quantize_row_q8_0_ref, dequantized: what Q8_0-based kernels multiply.
std::vector<double> ref_q8_0_dequant(const float* x, int64_t n) {
  std::vector<double> out(n);
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    const double dh = fp16_to_fp32(fp32_to_fp16(d));
    for (int i = 0; i < 32; ++i) out[32 * b + i] = dh * std::roundf(x[32 * b + i] * id);
  }
  return out;
}

std::vector<double> ref_q8_k_dequant(const float* x, int64_t n) {
  const std::vector<BlockQ8_K> blocks = ref_quantize_q8_k(x, n);
  std::vector<double> out(n);
  for (int64_t c = 0; c < n; ++c) out[c] = static_cast<double>(blocks[c / 256].d) * blocks[c / 256].qs[c % 256];
  return out;
}

// Scale j and min j of a Q4_K/Q5_K super-block (6 bits each, ggml's packing).
void ref_scale_min(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Element i of one block, per ggml's layouts (dequantize_row_* in ggml-quants.c).
double ref_element(GgmlType type, const uint8_t* block, int i) {
  auto half = [&](int offset) {
    uint16_t h;
    std::memcpy(&h, block + offset, 2);
    return static_cast<double>(fp16_to_fp32(h));
  };
  switch (type) {
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      const bool q5 = type == GgmlType::kQ5_K;
      const uint8_t* qs = block + (q5 ? 48 : 16);
      const int chunk = i / 64, within = i % 64, l = within % 32, sub = 2 * chunk + within / 32;
      int q = within < 32 ? (qs[32 * chunk + l] & 0xf) : (qs[32 * chunk + l] >> 4);
      if (q5) q += ((block[16 + l] >> sub) & 1) << 4;
      int sc, m;
      ref_scale_min(block + 4, sub, &sc, &m);
      return half(0) * sc * q - half(2) * m;
    }
    case GgmlType::kQ6_K: {
      const uint8_t* ql = block + 64 * (i / 128);
      const uint8_t* qh = block + 128 + 32 * (i / 128);
      const int within = i % 128, l = within % 32, quarter = within / 32;
      const int low = quarter == 0 ? ql[l] & 0xf : quarter == 1 ? ql[l + 32] & 0xf : quarter == 2 ? ql[l] >> 4 : ql[l + 32] >> 4;
      const int q = (low | (((qh[l] >> (2 * quarter)) & 3) << 4)) - 32;
      const int8_t scale = static_cast<int8_t>(block[192 + i / 16]);
      return half(208) * scale * q;
    }
    case GgmlType::kQ4_0: return half(0) * (((i < 16 ? block[2 + i] : block[2 + i - 16] >> 4) & 0xf) - 8);
    case GgmlType::kQ8_0: return half(0) * static_cast<int8_t>(block[2 + i]);
    case GgmlType::kQ5_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1: {
      const bool has_min = type != GgmlType::kQ5_0, five = type != GgmlType::kQ4_1;
      const int qh_at = has_min ? 4 : 2, qs_at = qh_at + (five ? 4 : 0);
      int q = (i < 16 ? block[qs_at + i] : block[qs_at + i - 16] >> 4) & 0xf;
      if (five) {
        uint32_t qh;
        std::memcpy(&qh, block + qh_at, 4);
        q |= static_cast<int>((qh >> i) & 1) << 4;
      }
      if (!has_min) return half(0) * (q - 16);
      return half(0) * q + half(2);
    }
    default: ADD_FAILURE() << "no reference for " << ggml_type_name(type); return 0;
  }
}

std::vector<double> ref_dequantize(GgmlType type, const uint8_t* bytes, int64_t rows, int64_t cols) {
  std::vector<double> out(rows * cols);
  const int64_t per_block = block_elements(type), bytes_per_block = block_bytes(type);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t* block = bytes + (r * cols + c) / per_block * bytes_per_block;
      out[r * cols + c] = ref_element(type, block, static_cast<int>(c % per_block));
    }
  return out;
}

// Random bytes with finite, moderate fp16 scales (d, dmin / m) in every block.
std::vector<uint8_t> random_blocks(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::vector<uint8_t> bytes(rows * cols / block_elements(type) * block_bytes(type));
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  auto put = [&](uint8_t* at) {
    const uint16_t h = fp32_to_fp16(scale(rng));
    std::memcpy(at, &h, 2);
  };
  for (int64_t b = 0; b < static_cast<int64_t>(bytes.size()) / block_bytes(type); ++b) {
    uint8_t* block = bytes.data() + b * block_bytes(type);
    if (type == GgmlType::kQ6_K) {
      put(block + 208);
    } else {
      put(block);
      if (type == GgmlType::kQ4_K || type == GgmlType::kQ5_K || type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1)
        put(block + 2);
    }
  }
  return bytes;
}

std::vector<float> random_x(int64_t n, std::mt19937& rng) {
  std::vector<float> x(n);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  return x;
}

// Checks y [n_tokens, rows] against double references from dequant [rows, cols].
void expect_matches_reference(GgmlType type, const std::vector<double>& dequant, const std::vector<float>& x,
                              int64_t n_tokens, int64_t rows, int64_t cols, const std::vector<float>& y,
                              const std::string& what) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x.data() + t * cols;
    const std::vector<double> x_used = is_kquant(type) ? ref_q8_k_dequant(xt, cols) : ref_q8_0_dequant(xt, cols);
    for (int64_t r = 0; r < rows; ++r) {
      double exact = 0, exact_from_x = 0, magnitude = 0, activation_error = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double w = dequant[r * cols + c];
        exact += w * x_used[c];
        exact_from_x += w * xt[c];
        magnitude += std::fabs(w * x_used[c]);
        activation_error += std::fabs(w) * std::fabs(xt[c] - x_used[c]);
      }
      const double tol = 2e-6 * magnitude + 1e-7;
      const float got = y[t * rows + r];
      ASSERT_NEAR(got, exact, tol) << what << " token " << t << " row " << r;
      ASSERT_NEAR(got, exact_from_x, tol + activation_error) << what << " token " << t << " row " << r;
    }
  }
}

// --- Q8_K activation quantization ---

cpu_kernels::QuantizeQ8KSplitFn q8_k_split_for(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512: return cpu_kernels::quantize_q8_k_split_avx512;
    case SimdLevel::kAvx2: return cpu_kernels::quantize_q8_k_split_avx2;
    case SimdLevel::kScalar: break;
  }
  return cpu_kernels::quantize_q8_k_split_scalar;
}

// x with the cases that separate a faithful Q8_K from a near miss.
std::vector<float> q8_k_test_input() {
  std::mt19937 rng(5);
  std::vector<float> x = random_x(12 * 256, rng);
  float* b = x.data();
  for (int i = 0; i < 256; ++i) b[i] = 0.0f;  // block 0: zero -> d = 0
  b += 256;
  // Block 1: max -127 gives iscale 1: exact .5 ties round to even (2.5 -> 2, -3.5 -> -4).
  for (int i = 0; i < 256; ++i) b[i] = static_cast<float>(i % 16) - 7.5f;
  b[3] = -127.0f;
  b += 256;
  // Block 2: +a then -a of the same magnitude: the first one sets the sign.
  b[10] = 50.0f;
  b[200] = -50.0f;
  b += 256;
  b[7] = -50.0f;  // block 3: the mirror case
  b[100] = 50.0f;
  b += 256;
  for (int i = 0; i < 256; ++i) b[i] = 0.75f;  // block 4: constant
  b += 256;
  for (int i = 0; i < 256; ++i) b[i] *= 1e-30f;  // block 5: tiny
  b += 256;
  for (int i = 0; i < 256; ++i) b[i] *= 3e4f;  // block 6: large
  b += 256;
  b[255] = 1000.0f;  // block 7: the extreme is the last element
  return x;
}

class QuantizeQ8KTest : public testing::TestWithParam<SimdLevel> {};

TEST_P(QuantizeQ8KTest, BitIdenticalToGgmlReference) {
  SKIP_IF_UNAVAILABLE(GetParam());
  const std::vector<float> x = q8_k_test_input();
  const int64_t n = static_cast<int64_t>(x.size());
  const std::vector<BlockQ8_K> expected = ref_quantize_q8_k(x.data(), n);
  std::vector<BlockQ8_K> got(n / 256);
  std::memset(got.data(), 0x5a, got.size() * sizeof(BlockQ8_K));
  quantize_row_q8_k_with(GetParam(), x.data(), got.data(), n);
  std::vector<int8_t> qs(n);
  std::vector<float> d(n / 256);
  std::vector<int16_t> bsums(n / 16);
  q8_k_split_for(GetParam())(x.data(), qs.data(), d.data(), bsums.data(), n);
  for (size_t b = 0; b < expected.size(); ++b) {
    EXPECT_EQ(fp32_to_bits(got[b].d), fp32_to_bits(expected[b].d)) << "block " << b;
    EXPECT_EQ(fp32_to_bits(d[b]), fp32_to_bits(expected[b].d)) << "split, block " << b;
    for (int i = 0; i < 256; ++i) {
      ASSERT_EQ(got[b].qs[i], expected[b].qs[i]) << "block " << b << " element " << i;
      ASSERT_EQ(qs[256 * b + i], expected[b].qs[i]) << "split, block " << b << " element " << i;
    }
    for (int g = 0; g < 16; ++g) {
      ASSERT_EQ(got[b].bsums[g], expected[b].bsums[g]) << "block " << b << " group " << g;
      ASSERT_EQ(bsums[16 * b + g], expected[b].bsums[g]) << "split, block " << b << " group " << g;
    }
  }
  // Spot checks of the reference itself. Block 1 has iscale 1: ties go to even.
  EXPECT_EQ(expected[1].qs[0], -8);  // -7.5
  EXPECT_EQ(expected[1].qs[1], -6);  // -6.5
  EXPECT_EQ(expected[1].qs[10], 2);  // 2.5
  EXPECT_EQ(expected[1].qs[3], -127);
  // The first extreme sets the sign: it maps to -127, the opposite one to +127.
  EXPECT_EQ(expected[2].qs[10], -127);
  EXPECT_EQ(expected[2].qs[200], 127);
  EXPECT_EQ(expected[3].qs[7], -127);
  EXPECT_EQ(expected[3].qs[100], 127);
  EXPECT_EQ(expected[0].d, 0.0f);
}

INSTANTIATE_TEST_SUITE_P(AllLevels, QuantizeQ8KTest, testing::ValuesIn(kAllLevels),
                         [](const testing::TestParamInfo<SimdLevel>& level) { return simd_level_name(level.param); });

// --- Matmul: every level vs scalar and vs the double reference ---

struct KquantCase {
  SimdLevel level;
  GgmlType type;
  int64_t n_tokens;
  int64_t rows;
  int64_t cols;
  int threads;
};

std::string kquant_case_name(const testing::TestParamInfo<KquantCase>& info) {
  const KquantCase& c = info.param;
  return std::string(simd_level_name(c.level)) + "_" + std::string(ggml_type_name(c.type)) + "_tokens" +
         std::to_string(c.n_tokens) + "_" + std::to_string(c.rows) + "x" + std::to_string(c.cols) + "_threads" +
         std::to_string(c.threads);
}

std::vector<KquantCase> kquant_cases() {
  std::vector<KquantCase> cases;
  // Odd row counts (no tile multiple), 1..5 super-blocks, tokens: decode (1),
  // odd (AVX2 pairs tokens, AVX-512 takes 4), and enough to split tokens.
  const int64_t shapes[][2] = {{37, 256}, {5, 768}, {64, 512}, {3, 1280}};
  for (SimdLevel level : kAllLevels)
    for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ5_0, GgmlType::kQ4_1,
                          GgmlType::kQ5_1})
      for (int64_t n_tokens : {1, 3, 7, 40})
        for (const auto& shape : shapes)
          for (int threads : {1, 3}) {
            if (threads == 3 && n_tokens != 1 && n_tokens != 40) continue;
            cases.push_back({level, type, n_tokens, shape[0], shape[1], threads});
          }
  return cases;
}

class KquantMatmulTest : public testing::TestWithParam<KquantCase> {};

TEST_P(KquantMatmulTest, RandomBlocksMatchScalarAndDoubleReference) {
  const KquantCase& tc = GetParam();
  SKIP_IF_UNAVAILABLE(tc.level);
  std::mt19937 rng(77 + static_cast<unsigned>(tc.rows * 31 + tc.cols + tc.n_tokens));
  const std::vector<uint8_t> bytes = random_blocks(tc.type, tc.rows, tc.cols, rng);
  const std::vector<float> x = random_x(tc.n_tokens * tc.cols, rng);  // [n_tokens, cols]
  const WeightMatrix matrix{tc.type, bytes.data(), tc.rows, tc.cols};
  ThreadPool pool(tc.threads);
  std::vector<float> y(tc.n_tokens * tc.rows, -1234.0f), y_scalar(tc.n_tokens * tc.rows, -4321.0f);
  matmul_with(tc.level, matrix, x.data(), tc.n_tokens, y.data(), tc.threads > 1 ? &pool : nullptr);
  matmul_with(SimdLevel::kScalar, matrix, x.data(), tc.n_tokens, y_scalar.data(), nullptr);

  const std::vector<double> dequant = ref_dequantize(tc.type, bytes.data(), tc.rows, tc.cols);
  expect_matches_reference(tc.type, dequant, x, tc.n_tokens, tc.rows, tc.cols, y, "level");
  expect_matches_reference(tc.type, dequant, x, tc.n_tokens, tc.rows, tc.cols, y_scalar, "scalar");
  for (int64_t t = 0; t < tc.n_tokens; ++t) {
    for (int64_t r = 0; r < tc.rows; ++r) {
      double magnitude = 0;
      for (int64_t c = 0; c < tc.cols; ++c) magnitude += std::fabs(dequant[r * tc.cols + c] * x[t * tc.cols + c]);
      ASSERT_NEAR(y[t * tc.rows + r], y_scalar[t * tc.rows + r], 4e-6 * magnitude + 1e-7)
          << "vs scalar, token " << t << " row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllLevelsTypesShapes, KquantMatmulTest, testing::ValuesIn(kquant_cases()),
                         kquant_case_name);

// --- llama.cpp's block vectors (tests/data/kquants) ---

std::string data_dir() {
  const char* env = std::getenv("BATON_SOURCE_DIR");
  return std::string(env != nullptr ? env : BATON_SOURCE_DIR) + "/tests/data/kquants";
}

struct ReferenceRows {
  std::vector<std::vector<uint8_t>> quantized;  // [8][row_bytes]: one row of 256 each
  std::vector<std::vector<float>> dequantized;  // [8][256]: ggml's to_float
};

ReferenceRows load_reference_rows(GgmlType type) {
  const std::string path = data_dir() + "/blocks-" +
                           (type == GgmlType::kQ4_K   ? "Q4_K"
                            : type == GgmlType::kQ5_K ? "Q5_K"
                            : type == GgmlType::kQ6_K ? "Q6_K"
                            : type == GgmlType::kQ4_0 ? "Q4_0"
                                                      : "Q8_0") +
                           ".json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  ReferenceRows out;
  if (!in.good()) return out;
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc.at("ggml_type_id").get<int>(), static_cast<int>(type));
  for (const nlohmann::json& row : doc.at("rows")) {
    const std::string hex = row.at("quantized_hex").get<std::string>();
    std::vector<uint8_t> bytes(hex.size() / 2);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
    out.quantized.push_back(bytes);
    out.dequantized.push_back(row.at("dequantized").get<std::vector<float>>());
  }
  EXPECT_EQ(out.quantized.size(), 8u) << path;
  return out;
}

// The reference dequantization of this file reproduces ggml's floats exactly
// (so the formulas the random-block tests use are ggml's).
TEST(KquantReferenceVectors, TestDequantizerReproducesGgmlBitForBit) {
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ4_0, GgmlType::kQ8_0}) {
    const ReferenceRows ref = load_reference_rows(type);
    for (size_t r = 0; r < ref.quantized.size(); ++r) {
      const std::vector<double> mine = ref_dequantize(type, ref.quantized[r].data(), 1, 256);
      for (int c = 0; c < 256; ++c)
        ASSERT_EQ(static_cast<float>(mine[c]), ref.dequantized[r][c]) << ggml_type_name(type) << " row " << r << " col " << c;
    }
  }
}

// Matrices of several super-blocks built from the reference rows: matrix row
// i is the concatenation of reference rows i, i+1, ..., i+k-1 (mod 8).
// y = W x at every level vs double(ggml's dequantized W) . double(x as the
// kernel quantizes it), and vs the unquantized x.
TEST(KquantReferenceVectors, MatmulMatchesGgmlDequantizedWeightsAtEveryLevel) {
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ4_0, GgmlType::kQ8_0}) {
    const ReferenceRows ref = load_reference_rows(type);
    if (ref.quantized.size() != 8) continue;
    for (int64_t super_blocks : {1, 3}) {
      const int64_t rows = 7, cols = 256 * super_blocks;
      std::vector<uint8_t> bytes;
      std::vector<double> dequant;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < super_blocks; ++k) {
          const size_t src = static_cast<size_t>((r + k) % 8);
          bytes.insert(bytes.end(), ref.quantized[src].begin(), ref.quantized[src].end());
          dequant.insert(dequant.end(), ref.dequantized[src].begin(), ref.dequantized[src].end());
        }
      std::mt19937 rng(11);
      for (int64_t n_tokens : {1, 6}) {
        const std::vector<float> x = random_x(n_tokens * cols, rng);
        const WeightMatrix matrix{type, bytes.data(), rows, cols};
        for (SimdLevel level : kAllLevels) {
          if (level > best_simd_level()) continue;
          std::vector<float> y(n_tokens * rows, -1.0f);
          matmul_with(level, matrix, x.data(), n_tokens, y.data(), nullptr);
          expect_matches_reference(type, dequant, x, n_tokens, rows, cols, y,
                                   std::string(ggml_type_name(type)) + " " + simd_level_name(level));
        }
      }
    }
  }
}

// Prefill calls of Q4_K / Q5_K (the AVX-512 panel kernel, 32-element
// sub-blocks) must give a token the same row whatever other tokens share the
// call and however the pool splits it: one prompt, one KV, whatever the
// micro-batches.
TEST(KquantMatmul, PrefillTokenRowsDoNotDependOnTheOtherTokensBitForBit) {
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    const int64_t rows = 83, cols = 768;
    std::mt19937 rng(21);
    const std::vector<uint8_t> bytes = random_blocks(type, rows, cols, rng);
    const WeightMatrix matrix{type, bytes.data(), rows, cols};
    const int64_t n_max = 47;
    const std::vector<float> x = random_x(n_max * cols, rng);
    ThreadPool pool(3);
    std::vector<float> all(static_cast<size_t>(n_max * rows));
    matmul(matrix, x.data(), n_max, all.data(), nullptr);
    for (int64_t n : {2, 7, 13, 30}) {
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::vector<float> part(static_cast<size_t>(n * rows));
        matmul(matrix, x.data() + (n_max - n) * cols, n, part.data(), p);
        EXPECT_EQ(std::memcmp(part.data(), all.data() + (n_max - n) * rows, sizeof(float) * n * rows), 0)
            << ggml_type_name(type) << " n " << n << (p != nullptr ? " pool" : "");
      }
    }
  }
}

// --- Grouped matmuls of mixed storage ---

// A Q4_K_M layer mixes types (Q4_K wq/wk beside a Q6_K wv); matmul_many must
// give exactly what one matmul per matrix gives, whatever the mix.
TEST(KquantMatmul, ManyWithMixedTypesEqualsOneCallPerMatrixBitForBit) {
  const GgmlType mix[] = {GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ5_K, GgmlType::kQ4_0,
                          GgmlType::kQ5_1, GgmlType::kF16, GgmlType::kQ8_0, GgmlType::kQ5_0};
  const int64_t rows[] = {64, 16, 37, 9, 5, 3, 11, 7};
  const int64_t cols = 512;
  std::mt19937 rng(3);
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<WeightMatrix> matrices;
  for (int i = 0; i < 8; ++i) {
    if (mix[i] == GgmlType::kF16) {
      std::vector<uint8_t> f16(rows[i] * cols * 2);
      std::normal_distribution<float> dist(0.0f, 0.05f);
      for (int64_t e = 0; e < rows[i] * cols; ++e) {
        const uint16_t h = fp32_to_fp16(dist(rng));
        std::memcpy(f16.data() + 2 * e, &h, 2);
      }
      bytes.push_back(std::move(f16));
    } else {
      bytes.push_back(random_blocks(mix[i], rows[i], cols, rng));
    }
  }
  for (int i = 0; i < 8; ++i) matrices.push_back(WeightMatrix{mix[i], bytes[i].data(), rows[i], cols});
  for (SimdLevel level : kAllLevels) {
    if (level > best_simd_level()) continue;
    for (int64_t n_tokens : {1, 9}) {
      const std::vector<float> x = random_x(n_tokens * cols, rng);
      for (int threads : {1, 3}) {
        ThreadPool pool(threads);
        ThreadPool* p = threads > 1 ? &pool : nullptr;
        for (size_t count : {size_t{2}, size_t{8}}) {  // Q4_K + Q6_K (attention), and all eight
          std::vector<std::vector<float>> one(count), many(count);
          std::vector<const WeightMatrix*> ws;
          std::vector<float*> ys;
          for (size_t i = 0; i < count; ++i) {
            one[i].assign(n_tokens * rows[i], -1.0f);
            many[i].assign(n_tokens * rows[i], -2.0f);
            matmul_with(level, matrices[i], x.data(), n_tokens, one[i].data(), p);
            ws.push_back(&matrices[i]);
            ys.push_back(many[i].data());
          }
          matmul_many_with(level, ws, x.data(), n_tokens, ys, p);
          for (size_t i = 0; i < count; ++i) {
            EXPECT_EQ(many[i], one[i]) << simd_level_name(level) << " " << ggml_type_name(mix[i]) << " matrix " << i
                                       << " of " << count << " tokens " << n_tokens << " threads " << threads;
          }
        }
      }
    }
  }
}

TEST(KquantMatmulDeathTest, ColsNotAMultipleOfTheSuperBlockIsACheckFailure) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<uint8_t> bytes(4096);
  std::vector<float> x(384), y(4);
  const WeightMatrix q4_k{GgmlType::kQ4_K, bytes.data(), 2, 384};
  EXPECT_DEATH(matmul(q4_k, x.data(), 1, y.data(), nullptr), "multiple of the weight type's block");
}

}  // namespace
}  // namespace baton
