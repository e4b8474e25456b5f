// matmul / quantize_row_q8_0_fast / vec kernels at every SIMD level this CPU
// has, against plain double-precision references.
//
// Tolerances (relative to sum_c |W[r,c] * x[t,c]|, the scale of float error):
//   F32 / F16 / BF16 vs double(dequant(W)) . double(x):             1e-5
//   Q4_0 / Q8_0 vs double(dequant(W)) . double(dequant(q8_0(x))):    4e-6
//     (the integer path is exact; only the float scaling/summation order differs)
//   Q4_0 / Q8_0 vs double(dequant(W)) . double(x): the above plus the exact
//     activation-quantization bound sum_c |W[r,c]| * |x[t,c] - dequant(q8_0(x))[t,c]|.
//   Every level vs scalar: the same bounds.
#include "common/cpu/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/cpu/matmul_kernels.h"
#include "common/cpu/vec.h"
#include "common/util/cpu_features.h"
#include "common/util/thread_pool.h"
#include "common/util/fp16.h"

namespace baton {
namespace {

constexpr SimdLevel kAllLevels[] = {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512};

#define SKIP_IF_UNAVAILABLE(level)                                                             \
  if ((level) > best_simd_level())                                                             \
  GTEST_SKIP() << simd_level_name(level) << " is not available on this CPU (best: "           \
               << simd_level_name(best_simd_level()) << ")"

// ggml's reference quantizers, kept here so the test does not depend on the
// library code it checks.
void ref_quantize_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    for (int i = 0; i < 32; ++i) y[b].qs[i] = static_cast<int8_t>(std::roundf(x[b * 32 + i] * id));
  }
}

void ref_quantize_q4_0(const float* x, BlockQ4_0* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 32; ++i) {
      const float v = x[b * 32 + i];
      if (std::fabs(v) > amax) {
        amax = std::fabs(v);
        max = v;
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    for (int j = 0; j < 16; ++j) {
      const int lo = std::min(15, static_cast<int>(static_cast<int8_t>(x[b * 32 + j] * id + 8.5f)));
      const int hi = std::min(15, static_cast<int>(static_cast<int8_t>(x[b * 32 + j + 16] * id + 8.5f)));
      y[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

// A weight matrix in `type`, plus its exact dequantized values.
struct TestWeights {
  std::vector<uint8_t> bytes;    // [rows, row_bytes]
  std::vector<double> dequant;   // [rows, cols]
};

TestWeights make_weights(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float row_scale = 0.25f + static_cast<float>(r % 5);  // rows of different magnitude
    for (int64_t c = 0; c < cols; ++c) values[r * cols + c] = dist(rng) * row_scale;
  }
  TestWeights w;
  const int64_t row_bytes = ggml_row_bytes(type, cols);
  w.bytes.resize(rows * row_bytes);
  w.dequant.resize(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = w.bytes.data() + r * row_bytes;
    const float* v = values.data() + r * cols;
    double* out = w.dequant.data() + r * cols;
    switch (type) {
      case GgmlType::kF32:
        std::memcpy(row, v, cols * 4);
        for (int64_t c = 0; c < cols; ++c) out[c] = v[c];
        break;
      case GgmlType::kF16:
        for (int64_t c = 0; c < cols; ++c) {
          const uint16_t h = fp32_to_fp16(v[c]);
          std::memcpy(row + 2 * c, &h, 2);
          out[c] = fp16_to_fp32(h);
        }
        break;
      case GgmlType::kBF16:
        for (int64_t c = 0; c < cols; ++c) {
          const uint16_t h = fp32_to_bf16(v[c]);
          std::memcpy(row + 2 * c, &h, 2);
          out[c] = bf16_to_fp32(h);
        }
        break;
      case GgmlType::kQ8_0: {
        BlockQ8_0* blocks = reinterpret_cast<BlockQ8_0*>(row);
        ref_quantize_q8_0(v, blocks, cols);
        for (int64_t c = 0; c < cols; ++c)
          out[c] = static_cast<double>(fp16_to_fp32(blocks[c / 32].d)) * blocks[c / 32].qs[c % 32];
        break;
      }
      case GgmlType::kQ4_0: {
        BlockQ4_0* blocks = reinterpret_cast<BlockQ4_0*>(row);
        ref_quantize_q4_0(v, blocks, cols);
        for (int64_t c = 0; c < cols; ++c) {
          const BlockQ4_0& blk = blocks[c / 32];
          const int j = c % 32;
          const int q = j < 16 ? (blk.qs[j] & 0x0f) : (blk.qs[j - 16] >> 4);
          out[c] = static_cast<double>(fp16_to_fp32(blk.d)) * (q - 8);
        }
        break;
      }
      default:
        ADD_FAILURE() << "no test quantizer for " << ggml_type_name(type);
        break;
    }
  }
  return w;
}

// A packed copy of a matrix (pack_weight_matrix), or none where its type has
// no packed layout on this CPU.
struct PackedCopy {
  std::vector<uint8_t> storage;
  WeightMatrix matrix{};
  bool ok = false;
};

PackedCopy packed_copy(const WeightMatrix& w) {
  PackedCopy copy;
  const int64_t bytes = packed_weight_bytes(w.type, w.rows, w.cols);
  if (bytes == 0) return copy;
  copy.storage.assign(static_cast<size_t>(bytes + 64), 0xa5);  // garbage where nothing is written
  auto* aligned = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(copy.storage.data()) + 63) / 64 * 64);
  ThreadPool pool(2);
  pack_weight_matrix(w, aligned, &pool);
  copy.matrix = w;
  copy.matrix.packed = aligned;
  copy.ok = true;
  return copy;
}

struct MatmulCase {
  SimdLevel level;
  GgmlType type;
  int64_t n_tokens;
  int64_t rows;
  int64_t cols;
  int threads;
};

std::string case_name(const testing::TestParamInfo<MatmulCase>& info) {
  const MatmulCase& c = info.param;
  return std::string(simd_level_name(c.level)) + "_" + std::string(ggml_type_name(c.type)) + "_tokens" +
         std::to_string(c.n_tokens) + "_" + std::to_string(c.rows) + "x" + std::to_string(c.cols) +
         "_threads" + std::to_string(c.threads);
}

std::vector<MatmulCase> all_cases() {
  std::vector<MatmulCase> cases;
  const GgmlType types[] = {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                            GgmlType::kQ4_0};
  // 37 x 96: odd rows and an odd block count (AVX-512 pairs blocks);
  // 8 x 64: so few rows that prefill splits tokens; 37 x 100: float column tail;
  // 13 x 224 and 6 x 480: 7 and 15 blocks (AVX-512 Q4_0 decode takes four
  // blocks per step, then pairs, then one).
  // 50 x 128: the AVX-512 prefill panel kernel's two-strip panel with a
  // partial second strip (32 + 18 rows).
  const int64_t shapes[][2] = {{96, 256}, {37, 96}, {8, 64}, {37, 100}, {13, 224}, {6, 480}, {50, 128}};
  for (SimdLevel level : kAllLevels)
    for (GgmlType type : types)
      for (int64_t n_tokens : {1, 3, 17, 64})
        for (const auto& shape : shapes)
          for (int threads : {1, 3}) {
            const bool quantized = type == GgmlType::kQ4_0 || type == GgmlType::kQ8_0;
            if (quantized && shape[1] % 32 != 0) continue;
            cases.push_back({level, type, n_tokens, shape[0], shape[1], threads});
          }
  return cases;
}

class MatmulTest : public testing::TestWithParam<MatmulCase> {};

TEST_P(MatmulTest, MatchesDoubleReferenceWithinStatedTolerance) {
  const MatmulCase& tc = GetParam();
  SKIP_IF_UNAVAILABLE(tc.level);
  std::mt19937 rng(1234 + static_cast<unsigned>(tc.rows * 7 + tc.n_tokens));
  const TestWeights w = make_weights(tc.type, tc.rows, tc.cols, rng);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> x(tc.n_tokens * tc.cols);  // [n_tokens, cols]
  for (float& v : x) v = dist(rng);

  ThreadPool pool(tc.threads);
  std::vector<float> y(tc.n_tokens * tc.rows, -1234.0f);  // [n_tokens, rows]
  const WeightMatrix matrix{tc.type, w.bytes.data(), tc.rows, tc.cols};
  matmul_with(tc.level, matrix, x.data(), tc.n_tokens, y.data(), tc.threads > 1 ? &pool : nullptr);
  // Q4_0 packed at load (AVX2, AVX-512), Q8_0 (AVX2): the packed kernel.
  const PackedCopy packed = tc.level >= SimdLevel::kAvx2 ? packed_copy(matrix) : PackedCopy{};
  std::vector<float> y_packed(tc.n_tokens * tc.rows, -4321.0f);
  if (packed.ok) {
    matmul_with(tc.level, packed.matrix, x.data(), tc.n_tokens, y_packed.data(), tc.threads > 1 ? &pool : nullptr);
  }
  std::vector<float> y_scalar(tc.n_tokens * tc.rows);
  matmul_with(SimdLevel::kScalar, matrix, x.data(), tc.n_tokens, y_scalar.data(), nullptr);

  const bool quantized = tc.type == GgmlType::kQ4_0 || tc.type == GgmlType::kQ8_0;
  std::vector<double> x_used(x.begin(), x.end());  // what the kernel multiplies: x or dequant(q8_0(x))
  if (quantized) {
    std::vector<BlockQ8_0> xq(tc.cols / 32);
    for (int64_t t = 0; t < tc.n_tokens; ++t) {
      ref_quantize_q8_0(x.data() + t * tc.cols, xq.data(), tc.cols);
      for (int64_t c = 0; c < tc.cols; ++c)
        x_used[t * tc.cols + c] = static_cast<double>(fp16_to_fp32(xq[c / 32].d)) * xq[c / 32].qs[c % 32];
    }
  }
  const double rel_tol = quantized ? 4e-6 : 1e-5;
  for (int64_t t = 0; t < tc.n_tokens; ++t) {
    for (int64_t r = 0; r < tc.rows; ++r) {
      double exact = 0, exact_from_x = 0, magnitude = 0, activation_error = 0;
      for (int64_t c = 0; c < tc.cols; ++c) {
        const double wv = w.dequant[r * tc.cols + c];
        const double xv = x_used[t * tc.cols + c];
        exact += wv * xv;
        exact_from_x += wv * x[t * tc.cols + c];
        magnitude += std::fabs(wv * xv);
        activation_error += std::fabs(wv) * std::fabs(x[t * tc.cols + c] - xv);
      }
      const double tol = rel_tol * magnitude + 1e-6;
      const float got = y[t * tc.rows + r];
      ASSERT_NEAR(got, exact, tol) << "token " << t << " row " << r;
      ASSERT_NEAR(got, exact_from_x, tol + activation_error) << "token " << t << " row " << r;
      ASSERT_NEAR(got, y_scalar[t * tc.rows + r], 2 * tol) << "vs scalar, token " << t << " row " << r;
      if (packed.ok) {
        ASSERT_NEAR(y_packed[t * tc.rows + r], exact, tol) << "packed, token " << t << " row " << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllLevelsTypesShapes, MatmulTest, testing::ValuesIn(all_cases()), case_name);

TEST(Matmul, DispatchedMatmulEqualsActiveLevel) {
  std::mt19937 rng(7);
  const TestWeights w = make_weights(GgmlType::kQ4_0, 40, 128, rng);
  std::vector<float> x(3 * 128);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * static_cast<float>(i));
  const WeightMatrix matrix{GgmlType::kQ4_0, w.bytes.data(), 40, 128};
  std::vector<float> a(3 * 40), b(3 * 40);
  matmul(matrix, x.data(), 3, a.data(), nullptr);
  matmul_with(active_simd_level(), matrix, x.data(), 3, b.data(), nullptr);
  EXPECT_EQ(a, b);
}

// matmul_decode_order: each token's row bit-identical to a one-token matmul
// on it, for token counts that leave odd ones out of the pairs, rows that
// leave a partial tile and widths whose blocks do not fill the last
// four-block step; on the pool and without.
TEST(Matmul, DecodeOrderRowsEqualOneTokenCallsBitForBit) {
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kF16}) {
    for (int64_t cols : {int64_t{128}, int64_t{192}, int64_t{224}}) {
      std::mt19937 rng(static_cast<uint32_t>(cols));
      const int64_t rows = 45;
      const TestWeights w = make_weights(type, rows, cols, rng);
      const WeightMatrix gguf{type, w.bytes.data(), rows, cols};
      const PackedCopy packed = packed_copy(gguf);  // Q4_0 on AVX2 / AVX-512, Q8_0 on AVX2: the packed kernel
      for (const WeightMatrix& matrix : {gguf, packed.ok ? packed.matrix : gguf}) {
      ThreadPool pool(2);
      for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{5}, int64_t{7}, int64_t{9}}) {
        std::vector<float> x(static_cast<size_t>(n * cols));
        for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i) + 0.1f * n);
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
          std::vector<float> batched(static_cast<size_t>(n * rows));
          matmul_decode_order(matrix, x.data(), n, batched.data(), p);
          for (int64_t t = 0; t < n; ++t) {
            std::vector<float> one(static_cast<size_t>(rows));
            matmul(matrix, x.data() + t * cols, 1, one.data(), p);
            EXPECT_EQ(std::memcmp(one.data(), batched.data() + t * rows, sizeof(float) * rows), 0)
                << ggml_type_name(type) << (matrix.packed != nullptr ? " packed" : "") << " cols " << cols
                << " n " << n << " token " << t;
          }
        }
      }
      }
    }
  }
}

// matmul_many (Q/K/V and gate/up in one dispatch) must give exactly what one
// matmul per matrix gives: the same kernels on the same quantized input.
TEST(Matmul, ManyEqualsOneCallPerMatrixBitForBit) {
  const GgmlType type_sets[][3] = {{GgmlType::kQ4_0, GgmlType::kQ4_0, GgmlType::kQ4_0},
                                   {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ8_0},
                                   {GgmlType::kF16, GgmlType::kF32, GgmlType::kBF16},
                                   {GgmlType::kQ4_0, GgmlType::kF16, GgmlType::kQ4_0}};  // mixed storage
  const int64_t rows[3] = {64, 16, 37};  // Q, K, V of a GQA layer (V: odd rows)
  const int64_t cols = 224;              // 7 blocks
  for (SimdLevel level : kAllLevels) {
    if (level > best_simd_level()) continue;
    for (const auto& types : type_sets) {
      std::mt19937 rng(99);
      std::vector<TestWeights> weights;
      std::vector<WeightMatrix> matrices;
      for (int i = 0; i < 3; ++i) weights.push_back(make_weights(types[i], rows[i], cols, rng));
      for (int i = 0; i < 3; ++i) matrices.push_back(WeightMatrix{types[i], weights[i].bytes.data(), rows[i], cols});
      for (int64_t n_tokens : {1, 5, 40}) {
        std::vector<float> x(n_tokens * cols);  // [n_tokens, cols]
        std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
        for (float& v : x) v = dist(rng);
        for (int threads : {1, 3}) {
          ThreadPool pool(threads);
          ThreadPool* p = threads > 1 ? &pool : nullptr;
          std::vector<std::vector<float>> one(3), many(3);
          for (int i = 0; i < 3; ++i) {
            one[i].assign(n_tokens * rows[i], -1.0f);
            many[i].assign(n_tokens * rows[i], -2.0f);
            matmul_with(level, matrices[i], x.data(), n_tokens, one[i].data(), p);
          }
          const WeightMatrix* ws[] = {&matrices[0], &matrices[1], &matrices[2]};
          float* const ys[] = {many[0].data(), many[1].data(), many[2].data()};
          matmul_many_with(level, ws, x.data(), n_tokens, ys, p);
          for (int i = 0; i < 3; ++i) {
            EXPECT_EQ(many[i], one[i]) << simd_level_name(level) << " " << ggml_type_name(types[i]) << " matrix "
                                       << i << " tokens " << n_tokens << " threads " << threads;
          }
        }
      }
    }
  }
}

// A prefill call's token rows must not depend on which other tokens share
// the call, how many there are or how the pool splits them: the same prompt
// then gives the same KV whatever the micro-batch (the AVX-512 panel kernel
// runs 6-token groups plus a 1..5-token tail, the f32 one for float weights
// 12 / 4 / 1-token groups (AVX2: 6 / 4 / 2 / 1 over 16 rows, 12 / 4 / 2 / 1
// over a last 8), the scalar level's plain tile for float weights blocks of
// 64 tokens, block after block; all go through the same operations per
// token). At the active level and the scalar one.
TEST(Matmul, PrefillTokenRowsDoNotDependOnTheOtherTokensBitForBit) {
  for (const SimdLevel level : {active_simd_level(), SimdLevel::kScalar})
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kF16, GgmlType::kBF16, GgmlType::kF32}) {
    const int64_t rows = 83, cols = 320;  // 3 panels, the last one partial; 10 blocks
    std::mt19937 rng(5);
    const TestWeights w = make_weights(type, rows, cols, rng);
    const WeightMatrix matrix{type, w.bytes.data(), rows, cols};
    const int64_t n_max = 150;  // over two of the plain float tile's 64-token blocks
    std::vector<float> x(static_cast<size_t>(n_max * cols));
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    for (float& v : x) v = dist(rng);
    ThreadPool pool(3);
    std::vector<float> all(static_cast<size_t>(n_max * rows));
    matmul_with(level, matrix, x.data(), n_max, all.data(), nullptr);
    for (int64_t n : {2, 5, 16, 17, 23, 40, 70, 129, 150}) {
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        // Tokens [n_max - n, n_max): the same rows as in the big call, at other offsets in their group.
        std::vector<float> part(static_cast<size_t>(n * rows));
        matmul_with(level, matrix, x.data() + (n_max - n) * cols, n, part.data(), p);
        EXPECT_EQ(std::memcmp(part.data(), all.data() + (n_max - n) * rows, sizeof(float) * n * rows), 0)
            << simd_level_name(level) << " " << ggml_type_name(type) << " n " << n << (p != nullptr ? " pool" : "");
      }
    }
  }
}

// Weights packed at load run one kernel for every call: a prefill call's
// token rows (tokens [n_max - n, n_max) of x for each n in ns, on the pool
// and without, and in decode order where `level` is the active one) are the
// same bits as one-token calls (decode steps) on those tokens, and agree
// with the GGUF kernels at `level` up to float summation order.
void expect_packed_prefill_rows_equal_decode_steps(SimdLevel level, const WeightMatrix& gguf, const WeightMatrix& packed,
                                                   const std::vector<float>& x, int64_t n_max,
                                                   const std::vector<int64_t>& ns) {
  const int64_t rows = gguf.rows, cols = gguf.cols;
  const std::string what = std::string(simd_level_name(level)) + " " + std::string(ggml_type_name(gguf.type)) +
                           " rows " + std::to_string(rows);
  ThreadPool pool(3);
  std::vector<float> steps(static_cast<size_t>(n_max * rows));
  for (int64_t t = 0; t < n_max; ++t) {
    matmul_with(level, packed, x.data() + t * cols, 1, steps.data() + t * rows, nullptr);
  }
  for (const int64_t n : ns) {
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      const float* xn = x.data() + (n_max - n) * cols;
      const float* want = steps.data() + (n_max - n) * rows;
      std::vector<float> a(static_cast<size_t>(n * rows), 1.0f), b(static_cast<size_t>(n * rows), 2.0f);
      matmul_with(level, gguf, xn, n, a.data(), p);
      matmul_with(level, packed, xn, n, b.data(), p);
      EXPECT_EQ(std::memcmp(b.data(), want, sizeof(float) * n * rows), 0) << what << " n " << n;
      if (level == active_simd_level()) {
        std::vector<float> c(static_cast<size_t>(n * rows), 3.0f);
        matmul_decode_order(packed, xn, n, c.data(), p);
        EXPECT_EQ(std::memcmp(c.data(), want, sizeof(float) * n * rows), 0) << what << " decode order, n " << n;
      }
      for (int64_t i = 0; i < n * rows; ++i) {
        ASSERT_NEAR(a[i], b[i], 1e-4 * (1 + std::fabs(a[i]))) << what << " n " << n << " at " << i;
      }
    }
  }
}

// Packed Q4_0: token groups of 6, 4, 2, 1 (AVX-512) or 4, 2, 1 (AVX2), row
// counts with a partial strip and a partial strip pair.
TEST(Matmul, PackedQ4_0PrefillRowsEqualDecodeStepsBitForBitAndAgreeWithGguf) {
  if (best_simd_level() < SimdLevel::kAvx2) GTEST_SKIP() << "packed weights serve the AVX2 and AVX-512 kernels only";
  for (const SimdLevel level : {SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (level > best_simd_level()) continue;
    for (const int64_t rows : {int64_t{83}, int64_t{16}, int64_t{130}}) {
      const int64_t cols = 320;
      std::mt19937 rng(static_cast<uint32_t>(rows));
      const TestWeights w = make_weights(GgmlType::kQ4_0, rows, cols, rng);
      const WeightMatrix gguf{GgmlType::kQ4_0, w.bytes.data(), rows, cols};
      const PackedCopy packed = packed_copy(gguf);
      ASSERT_TRUE(packed.ok);
      const int64_t n_max = 40;
      std::vector<float> x(static_cast<size_t>(n_max * cols));
      std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
      for (float& v : x) v = dist(rng);
      expect_packed_prefill_rows_equal_decode_steps(level, gguf, packed.matrix, x, n_max, {2, 3, 5, 7, 13, 40});
    }
  }
}

// The packed Q4_0 / Q8_0 kernels' arithmetic, written out: per row and
// token, for each block in order, the exact int32 sum of weight x quant
// (Q4_0's weight: nibble - 8), converted to float, times (weight scale x x
// scale) added by one fused multiply-add. Also returns each output's
// magnitude sum_c |dequant(w) x dequant(q8_0(x))| (the scale of float error).
std::vector<float> packed_block_arithmetic(GgmlType type, const std::vector<uint8_t>& bytes, int64_t rows,
                                           int64_t cols, const std::vector<float>& x, int64_t n,
                                           std::vector<double>* magnitude) {
  const int64_t n_blocks = cols / kQK8_0;
  const int64_t row_bytes = ggml_row_bytes(type, cols);
  std::vector<float> y(static_cast<size_t>(n * rows));
  magnitude->assign(static_cast<size_t>(n * rows), 0.0);
  std::vector<BlockQ8_0> xq(static_cast<size_t>(n_blocks));
  for (int64_t t = 0; t < n; ++t) {
    ref_quantize_q8_0(x.data() + t * cols, xq.data(), cols);
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = bytes.data() + r * row_bytes;
      float acc = 0.0f;
      double mag = 0.0;
      for (int64_t b = 0; b < n_blocks; ++b) {
        int w[kQK8_0];
        float d_w = 0.0f;
        if (type == GgmlType::kQ4_0) {
          const BlockQ4_0& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
          d_w = fp16_to_fp32(blk.d);
          for (int i = 0; i < kQK8_0; ++i) w[i] = (i < 16 ? blk.qs[i] & 0x0f : blk.qs[i - 16] >> 4) - 8;
        } else {
          const BlockQ8_0& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
          d_w = fp16_to_fp32(blk.d);
          for (int i = 0; i < kQK8_0; ++i) w[i] = blk.qs[i];
        }
        const float d_x = fp16_to_fp32(xq[b].d);
        int32_t sum = 0;
        for (int i = 0; i < kQK8_0; ++i) {
          sum += w[i] * xq[b].qs[i];
          mag += std::fabs(static_cast<double>(d_w) * w[i] * d_x * xq[b].qs[i]);
        }
        acc = std::fma(static_cast<float>(sum), d_w * d_x, acc);
      }
      y[t * rows + r] = acc;
      (*magnitude)[t * rows + r] = mag;
    }
  }
  return y;
}

// Each ISA's packed Q4_0 kernel equals its arithmetic written out bit for
// bit, so the AVX2 and AVX-512 kernels equal each other (a machine with
// AVX-512 checks both), for decode, prefill and every row remainder.
TEST(Matmul, PackedQ4_0KernelsEqualTheirArithmeticWrittenOutBitForBit) {
  if (best_simd_level() < SimdLevel::kAvx2) GTEST_SKIP() << "packed weights serve the AVX2 and AVX-512 kernels only";
  for (const int64_t rows : {int64_t{7}, int64_t{45}, int64_t{96}}) {
    const int64_t cols = 256;
    const int64_t n_blocks = cols / kQK8_0;
    std::mt19937 rng(static_cast<uint32_t>(100 + rows));
    TestWeights w = make_weights(GgmlType::kQ4_0, rows, cols, rng);
    // Row 0 at the int16 sums' bound: every nibble 15, against token 0's
    // quants all 127 (x all 1): 8 pairs of 15 x 127 x 2 = 30480 per block.
    for (int64_t b = 0; b < n_blocks; ++b) {
      std::memset(reinterpret_cast<BlockQ4_0*>(w.bytes.data())[b].qs, 0xff, 16);
    }
    const WeightMatrix gguf{GgmlType::kQ4_0, w.bytes.data(), rows, cols};
    const PackedCopy packed = packed_copy(gguf);
    ASSERT_TRUE(packed.ok);
    for (const int64_t n : {int64_t{1}, int64_t{6}, int64_t{11}}) {
      std::vector<float> x(static_cast<size_t>(n * cols));
      std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
      for (float& v : x) v = dist(rng);
      std::fill(x.begin(), x.begin() + cols, 1.0f);
      std::vector<double> magnitude;
      const std::vector<float> want = packed_block_arithmetic(GgmlType::kQ4_0, w.bytes, rows, cols, x, n, &magnitude);
      for (const SimdLevel level : {SimdLevel::kAvx2, SimdLevel::kAvx512}) {
        if (level > best_simd_level()) continue;
        std::vector<float> got(static_cast<size_t>(n * rows), -1.0f);
        matmul_with(level, packed.matrix, x.data(), n, got.data(), nullptr);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * n * rows), 0)
            << simd_level_name(level) << " rows " << rows << " n " << n;
      }
    }
  }
}

// set_packed_two_streams moves which places of the weights a thread reads
// at once, never what a one-token call computes: single matrices and a
// group of three (Q/K/V-like, the pairs of tasks crossing from one matrix to
// the next), with whole 32-row tasks, a 16-row tail and odd task counts,
// give the same bits on 2 threads with two streams as on one thread with
// one, and -1 gives back the vendor's default.
TEST(Matmul, PackedTwoStreamsKeepTheBits) {
  if (best_simd_level() < SimdLevel::kAvx512) GTEST_SKIP() << "two streams are the AVX-512 packed kernel's";
  std::mt19937 rng(78);
  const int64_t cols = 512;
  std::vector<float> x(static_cast<size_t>(cols));
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  for (float& v : x) v = dist(rng);
  std::vector<TestWeights> weights;
  std::vector<PackedCopy> copies;
  const std::vector<int64_t> shapes = {2048, 96, 80, 48, 96, 32, 64};
  weights.reserve(shapes.size());
  copies.reserve(shapes.size());
  for (const int64_t rows : shapes) {
    weights.push_back(make_weights(GgmlType::kQ4_0, rows, cols, rng));
    copies.push_back(packed_copy(WeightMatrix{GgmlType::kQ4_0, weights.back().bytes.data(), rows, cols}));
    ASSERT_TRUE(copies.back().ok);
  }
  EXPECT_EQ(packed_two_streams(), cpu_features().amd);
  ThreadPool pool(2);
  // Every matrix alone, then the last three as one group.
  constexpr size_t kGroupFirst = 4;
  auto run = [&](ThreadPool* on, bool group) {
    std::vector<std::vector<float>> out;
    for (size_t i = group ? kGroupFirst : 0; i < shapes.size(); ++i) {
      out.emplace_back(static_cast<size_t>(shapes[i]), -1.0f);
    }
    if (group) {
      const WeightMatrix* ws[] = {&copies[4].matrix, &copies[5].matrix, &copies[6].matrix};
      float* const ys[] = {out[0].data(), out[1].data(), out[2].data()};
      matmul_many(ws, x.data(), 1, ys, on);
      return out;
    }
    for (size_t i = 0; i < shapes.size(); ++i) matmul(copies[i].matrix, x.data(), 1, out[i].data(), on);
    return out;
  };
  set_packed_load_ahead(1);
  for (const bool group : {false, true}) {
    set_packed_two_streams(0);
    const std::vector<std::vector<float>> want = run(nullptr, group);
    set_packed_two_streams(1);
    EXPECT_TRUE(packed_two_streams());
    const std::vector<std::vector<float>> got = run(&pool, group);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), sizeof(float) * got[i].size()), 0)
          << "matrix " << (group ? kGroupFirst + i : i) << (group ? " (in the group)" : "");
    }
  }
  set_packed_two_streams(-1);
  set_packed_load_ahead(-1);
  EXPECT_EQ(packed_two_streams(), cpu_features().amd);
}

// set_packed_near_blocks / set_packed_near_nta move where the packed Q4_0
// AVX-512 decode reads its lines from, never what it computes: one token's
// outputs are the same bits at every distance (none, shorter and longer
// than a row task, past the matrix's end) with either hint, and -1 gives
// back the vendor's defaults.
TEST(Matmul, PackedNearPrefetchDistanceKeepsTheBits) {
  if (best_simd_level() < SimdLevel::kAvx512) GTEST_SKIP() << "the near prefetch is the AVX-512 packed kernel's";
  std::mt19937 rng(77);
  // 5 strips: two pairs and a strip alone (the kernels' S = 2 and S = 1).
  const int64_t rows = 80, cols = 512;
  const TestWeights w = make_weights(GgmlType::kQ4_0, rows, cols, rng);
  const PackedCopy packed = packed_copy(WeightMatrix{GgmlType::kQ4_0, w.bytes.data(), rows, cols});
  ASSERT_TRUE(packed.ok);
  std::vector<float> x(static_cast<size_t>(cols));
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  for (float& v : x) v = dist(rng);
  ThreadPool pool(2);
  const int vendor = packed_near_blocks();
  EXPECT_EQ(vendor, cpu_features().amd ? 12 : 16);
  std::vector<float> want(static_cast<size_t>(rows));
  matmul_with(SimdLevel::kAvx512, packed.matrix, x.data(), 1, want.data(), &pool);
  const bool vendor_nta = packed_near_nta();
  EXPECT_EQ(vendor_nta, cpu_features().amd);
  const bool vendor_ahead = packed_load_ahead();
  EXPECT_EQ(vendor_ahead, cpu_features().amd);
  for (const int ahead : {0, 1}) {
    set_packed_load_ahead(ahead);
    EXPECT_EQ(packed_load_ahead(), ahead == 1);
    for (const int nta : {0, 1}) {
      set_packed_near_nta(nta);
      EXPECT_EQ(packed_near_nta(), nta == 1);
      for (const int blocks : {0, 1, 8, 16, 64}) {
        set_packed_near_blocks(blocks);
        EXPECT_EQ(packed_near_blocks(), blocks);
        std::vector<float> got(static_cast<size_t>(rows), -1.0f);
        matmul_with(SimdLevel::kAvx512, packed.matrix, x.data(), 1, got.data(), &pool);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * rows), 0)
            << "near " << blocks << " nta " << nta << " ahead " << ahead;
      }
    }
  }
  set_packed_near_blocks(-1);
  set_packed_near_nta(-1);
  set_packed_load_ahead(-1);
  EXPECT_EQ(packed_near_blocks(), vendor);
  EXPECT_EQ(packed_near_nta(), vendor_nta);
  EXPECT_EQ(packed_load_ahead(), vendor_ahead);
}

TEST(Matmul, PackedWeightBytesAreGgufBytesPlusStripPadding) {
  if (best_simd_level() < SimdLevel::kAvx2) GTEST_SKIP() << "packed weights serve the AVX2 and AVX-512 kernels only";
  // 16 rows x 2048 columns: 64 blocks of 16 x 18 bytes, a 64-byte multiple.
  EXPECT_EQ(packed_weight_bytes(GgmlType::kQ4_0, 2048, 2048), ggml_row_bytes(GgmlType::kQ4_0, 2048) * 2048);
  // 17 rows: two strips; 3 blocks: 3 x 288 bytes rounded up to 896.
  EXPECT_EQ(packed_weight_bytes(GgmlType::kQ4_0, 17, 96), 2 * 896);
  EXPECT_EQ(packed_weight_bytes(GgmlType::kF16, 64, 64), 0);
}

// --- Q8_0 packed at load (AVX2 only; the AVX-512 level keeps its panels and GGUF-row decode) ---

// Q8_0 rows [rows, cols] (make_weights' values) with rows 0..2 at the
// kernel's integer extremes: all -128 (a hostile file's value: |w| = 128
// enters vpmaddubsw as u8), all 127, and -128 / 127 alternating.
TestWeights q8_0_extreme_weights(int64_t rows, int64_t cols, std::mt19937& rng) {
  TestWeights w = make_weights(GgmlType::kQ8_0, rows, cols, rng);
  auto* blocks = reinterpret_cast<BlockQ8_0*>(w.bytes.data());
  for (int64_t r = 0; r < std::min<int64_t>(rows, 3); ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int8_t q = r == 0 ? -128 : r == 1 ? 127 : c % 2 == 0 ? -128 : 127;
      BlockQ8_0& blk = blocks[r * cols / kQK8_0 + c / kQK8_0];
      blk.qs[c % kQK8_0] = q;
      w.dequant[r * cols + c] = static_cast<double>(fp16_to_fp32(blk.d)) * q;
    }
  }
  return w;
}

// x [n, cols]: uniform in [-2, 2]; tokens 0..2 quantize to the extremes: all
// 127 (x all 1), +-127 alternating, all -127. Token 0 against row 0: every
// vpmaddubsw pair 2 x 128 x 127 = 32512, the int16 bound; two steps summed
// in int16 would overflow.
std::vector<float> q8_0_extreme_x(int64_t n, int64_t cols, std::mt19937& rng) {
  std::vector<float> x(static_cast<size_t>(n * cols));
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (float& v : x) v = dist(rng);
  for (int64_t t = 0; t < std::min<int64_t>(n, 3); ++t) {
    for (int64_t c = 0; c < cols; ++c) x[t * cols + c] = t == 0 ? 1.0f : t == 2 ? -1.0f : c % 2 == 0 ? 1.0f : -1.0f;
  }
  return x;
}

// A packed kernel's outputs at the AVX2 level (n tokens of x) equal `want`,
// its arithmetic written out, bit for bit, and the scalar kernel's over the
// GGUF rows within 4e-6 of each output's magnitude (MatmulTest's bound).
void expect_packed_avx2_equals_arithmetic_near_scalar(const WeightMatrix& gguf, const WeightMatrix& packed,
                                                      const std::vector<float>& x, int64_t n,
                                                      const std::vector<float>& want,
                                                      const std::vector<double>& magnitude) {
  const int64_t rows = gguf.rows, cols = gguf.cols;
  std::vector<float> got(static_cast<size_t>(n * rows), -1.0f), scalar(static_cast<size_t>(n * rows), -2.0f);
  matmul_with(SimdLevel::kAvx2, packed, x.data(), n, got.data(), nullptr);
  matmul_with(SimdLevel::kScalar, gguf, x.data(), n, scalar.data(), nullptr);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * n * rows), 0)
      << ggml_type_name(gguf.type) << " rows " << rows << " cols " << cols << " n " << n;
  for (int64_t i = 0; i < n * rows; ++i) {
    ASSERT_NEAR(got[i], scalar[i], 4e-6 * magnitude[i] + 1e-7)
        << ggml_type_name(gguf.type) << " rows " << rows << " cols " << cols << " n " << n << " at " << i;
  }
}

// The packed Q8_0 kernel equals its arithmetic written out bit for bit (so
// decode and prefill, every row remainder and strip pair), at the integer
// extremes, and agrees with the scalar kernel over the GGUF rows (4e-6 of
// the magnitude, MatmulTest's bound).
TEST(Matmul, PackedQ8_0KernelEqualsItsArithmeticWrittenOutBitForBitAndAgreesWithScalar) {
  if (best_simd_level() != SimdLevel::kAvx2) GTEST_SKIP() << "Q8_0 is packed at the AVX2 level only";
  for (const int64_t rows : {int64_t{7}, int64_t{45}, int64_t{96}}) {
    for (const int64_t cols : {int64_t{96}, int64_t{256}}) {
      std::mt19937 rng(static_cast<uint32_t>(500 + rows + cols));
      const TestWeights w = q8_0_extreme_weights(rows, cols, rng);
      const WeightMatrix gguf{GgmlType::kQ8_0, w.bytes.data(), rows, cols};
      const PackedCopy packed = packed_copy(gguf);
      ASSERT_TRUE(packed.ok);
      for (const int64_t n : {int64_t{1}, int64_t{3}, int64_t{6}, int64_t{11}}) {
        const std::vector<float> x = q8_0_extreme_x(n, cols, rng);
        std::vector<double> magnitude;
        const std::vector<float> want = packed_block_arithmetic(GgmlType::kQ8_0, w.bytes, rows, cols, x, n, &magnitude);
        expect_packed_avx2_equals_arithmetic_near_scalar(gguf, packed.matrix, x, n, want, magnitude);
      }
    }
  }
}

// Packed Q8_0: every token count from 1 to 40 (groups of 4, 2, 1), row
// counts that are not multiples of 16 (a partial strip, a partial strip
// pair) and one strip, the extremes among the rows and tokens.
TEST(Matmul, PackedQ8_0PrefillRowsEqualDecodeStepsBitForBitAndAgreeWithGguf) {
  if (best_simd_level() != SimdLevel::kAvx2) GTEST_SKIP() << "Q8_0 is packed at the AVX2 level only";
  std::vector<int64_t> ns;
  for (int64_t n = 1; n <= 40; ++n) ns.push_back(n);
  for (const int64_t rows : {int64_t{83}, int64_t{16}, int64_t{130}}) {
    const int64_t cols = 320;
    std::mt19937 rng(static_cast<uint32_t>(600 + rows));
    const TestWeights w = q8_0_extreme_weights(rows, cols, rng);
    const WeightMatrix gguf{GgmlType::kQ8_0, w.bytes.data(), rows, cols};
    const PackedCopy packed = packed_copy(gguf);
    ASSERT_TRUE(packed.ok);
    const int64_t n_max = 40;
    // The extreme tokens last, so that every call (tokens n_max - n ..) holds some.
    std::vector<float> x = q8_0_extreme_x(n_max, cols, rng);
    std::rotate(x.begin(), x.begin() + 3 * cols, x.end());
    expect_packed_prefill_rows_equal_decode_steps(SimdLevel::kAvx2, gguf, packed.matrix, x, n_max, ns);
  }
}

TEST(Matmul, PackedQ8_0BytesAreGgufBytesPlusStripPaddingOnAvx2Only) {
  if (best_simd_level() == SimdLevel::kAvx2) {
    // 16 rows x 2048 columns: 64 blocks of 16 x 34 bytes, a 64-byte multiple.
    EXPECT_EQ(packed_weight_bytes(GgmlType::kQ8_0, 2048, 2048), ggml_row_bytes(GgmlType::kQ8_0, 2048) * 2048);
    // 17 rows: two strips; 3 blocks: 3 x 544 bytes rounded up to 1664.
    EXPECT_EQ(packed_weight_bytes(GgmlType::kQ8_0, 17, 96), 2 * 1664);
  } else {
    // AVX-512: its panels and decode tile read the GGUF rows; scalar: nothing is packed.
    EXPECT_EQ(packed_weight_bytes(GgmlType::kQ8_0, 2048, 2048), 0);
  }
}

// FloatMatmul::kBf16: weights and x rounded to bf16 (round to nearest even),
// products summed in f32. Checked against that rounding done in double (only
// the f32 summation may differ: 1e-5 of the magnitude) and against the exact
// product (bf16 loses ~2^-9 per factor). Shapes: a partial second strip,
// columns that are not a multiple of 32 (zero-padded) or even odd.
TEST(MatmulBf16, MatchesBf16RoundedReferenceAndStaysNearExact) {
  if (!bf16_matmul_available()) GTEST_SKIP() << "this CPU has no AVX-512 BF16: FloatMatmul::kBf16 is kExact here";
  const int64_t shapes[][2] = {{96, 256}, {50, 70}, {37, 37}, {16, 2048}};
  for (GgmlType type : {GgmlType::kF16, GgmlType::kBF16, GgmlType::kF32}) {
    for (const auto& shape : shapes) {
      const int64_t rows = shape[0], cols = shape[1];
      std::mt19937 rng(static_cast<uint32_t>(rows * 31 + cols));
      const TestWeights w = make_weights(type, rows, cols, rng);
      const WeightMatrix matrix{type, w.bytes.data(), rows, cols};
      for (int64_t n : {2, 13, 40}) {
        std::vector<float> x(static_cast<size_t>(n * cols));
        std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
        for (float& v : x) v = dist(rng);
        for (int threads : {1, 3}) {
          ThreadPool pool(threads);
          std::vector<float> y(static_cast<size_t>(n * rows), -1234.0f);
          matmul(matrix, x.data(), n, y.data(), threads > 1 ? &pool : nullptr, FloatMatmul::kBf16);
          for (int64_t t = 0; t < n; ++t) {
            for (int64_t r = 0; r < rows; ++r) {
              double rounded = 0, exact = 0, magnitude = 0;
              for (int64_t c = 0; c < cols; ++c) {
                const double wv = w.dequant[r * cols + c];
                const double xv = x[t * cols + c];
                const double wb = bf16_to_fp32(fp32_to_bf16(static_cast<float>(wv)));
                const double xb = bf16_to_fp32(fp32_to_bf16(static_cast<float>(xv)));
                rounded += wb * xb;
                exact += wv * xv;
                magnitude += std::fabs(wv * xv);
              }
              const float got = y[t * rows + r];
              ASSERT_NEAR(got, rounded, 1e-5 * magnitude + 1e-6)
                  << ggml_type_name(type) << " " << rows << "x" << cols << " n " << n << " token " << t << " row " << r;
              ASSERT_NEAR(got, exact, (2.0 / 256) * magnitude + 1e-6) << "vs exact";
            }
          }
        }
      }
    }
  }
}

// As for the int8 panels: a token's row of y must not depend on the other
// tokens of the call or on the pool.
TEST(MatmulBf16, TokenRowsDoNotDependOnTheOtherTokensBitForBit) {
  if (!bf16_matmul_available()) GTEST_SKIP() << "this CPU has no AVX-512 BF16: FloatMatmul::kBf16 is kExact here";
  const int64_t rows = 83, cols = 200;
  std::mt19937 rng(8);
  const TestWeights w = make_weights(GgmlType::kF16, rows, cols, rng);
  const WeightMatrix matrix{GgmlType::kF16, w.bytes.data(), rows, cols};
  const int64_t n_max = 41;
  std::vector<float> x(static_cast<size_t>(n_max * cols));
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (float& v : x) v = dist(rng);
  ThreadPool pool(3);
  std::vector<float> all(static_cast<size_t>(n_max * rows));
  matmul(matrix, x.data(), n_max, all.data(), nullptr, FloatMatmul::kBf16);
  for (int64_t n : {2, 5, 12, 13, 29}) {
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      std::vector<float> part(static_cast<size_t>(n * rows));
      matmul(matrix, x.data() + (n_max - n) * cols, n, part.data(), p, FloatMatmul::kBf16);
      EXPECT_EQ(std::memcmp(part.data(), all.data() + (n_max - n) * rows, sizeof(float) * n * rows), 0)
          << "n " << n << (p != nullptr ? " pool" : "");
    }
  }
}

// kBf16 leaves quantized weights and one-token calls on their exact kernels.
TEST(MatmulBf16, QuantizedWeightsAndOneTokenAreUnchanged) {
  std::mt19937 rng(9);
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kF16}) {
    const TestWeights w = make_weights(type, 40, 128, rng);
    const WeightMatrix matrix{type, w.bytes.data(), 40, 128};
    for (int64_t n : {1, 7}) {
      if (type == GgmlType::kF16 && n > 1) continue;
      std::vector<float> x(static_cast<size_t>(n * 128));
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.3f * static_cast<float>(i));
      std::vector<float> exact(static_cast<size_t>(n * 40)), bf16(exact.size());
      matmul(matrix, x.data(), n, exact.data(), nullptr);
      matmul(matrix, x.data(), n, bf16.data(), nullptr, FloatMatmul::kBf16);
      EXPECT_EQ(exact, bf16) << ggml_type_name(type) << " n " << n;
    }
  }
}

TEST(Matmul, EmptyShapesWriteNothing) {
  const WeightMatrix matrix{GgmlType::kF32, nullptr, 0, 16};
  float y = 5.0f;
  matmul(matrix, nullptr, 4, &y, nullptr);
  const WeightMatrix rows_only{GgmlType::kF32, nullptr, 4, 16};
  matmul(rows_only, nullptr, 0, &y, nullptr);
  EXPECT_EQ(y, 5.0f);
}

TEST(MatmulDeathTest, UnsupportedWeightTypeIsACheckFailure) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<uint8_t> bytes(1024);
  std::vector<float> x(32), y(4);
  const WeightMatrix q2_k{static_cast<GgmlType>(10), bytes.data(), 4, 32};  // Q2_K: no kernel
  EXPECT_DEATH(matmul(q2_k, x.data(), 1, y.data(), nullptr), "unsupported weight type");
}

// --- Q8_0 activation quantization ---

cpu_kernels::QuantizeBlocksFn quantize_for(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512: return cpu_kernels::quantize_q8_0_avx512;
    case SimdLevel::kAvx2: return cpu_kernels::quantize_q8_0_avx2;
    case SimdLevel::kScalar: break;
  }
  return cpu_kernels::quantize_q8_0_scalar;
}

cpu_kernels::QuantizeSplitFn quantize_split_for(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512: return cpu_kernels::quantize_q8_0_split_avx512;
    case SimdLevel::kAvx2: return cpu_kernels::quantize_q8_0_split_avx2;
    case SimdLevel::kScalar: break;
  }
  return cpu_kernels::quantize_q8_0_split_scalar;
}

class QuantizeQ8Test : public testing::TestWithParam<SimdLevel> {};

TEST_P(QuantizeQ8Test, BitIdenticalToGgmlReferenceIncludingTies) {
  SKIP_IF_UNAVAILABLE(GetParam());
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  constexpr int64_t kBlocks = 40;
  std::vector<float> x(kBlocks * 32);
  for (float& v : x) v = dist(rng);
  // Block 0: amax 127 gives scale 1, so x.5 values are exact ties: roundf
  // rounds them away from zero (2.5 -> 3, -0.5 -> -1), unlike round-to-even.
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i % 8) - 3.5f;
  x[0] = 127.0f;
  for (int i = 0; i < 32; ++i) x[32 + i] = 0.0f;                              // block 1: all zero
  for (int i = 0; i < 32; ++i) x[64 + i] = 1e-5f * static_cast<float>(i - 16);  // block 2: fp16-subnormal scale
  for (int i = 0; i < 32; ++i) x[96 + i] = 6e4f * static_cast<float>(i - 16) / 16.0f;  // block 3: large

  std::vector<BlockQ8_0> want(kBlocks), got(kBlocks);
  ref_quantize_q8_0(x.data(), want.data(), kBlocks * 32);
  quantize_for(GetParam())(x.data(), got.data(), kBlocks * 32);
  std::vector<int8_t> split_qs(kBlocks * 32);
  std::vector<float> split_d(kBlocks);
  quantize_split_for(GetParam())(x.data(), split_qs.data(), split_d.data(), kBlocks * 32);
  EXPECT_EQ(want[0].qs[1], -3);  // x = -2.5
  EXPECT_EQ(want[0].qs[4], 1);   // x = 0.5
  for (int64_t b = 0; b < kBlocks; ++b) {
    ASSERT_EQ(got[b].d, want[b].d) << "block " << b;
    ASSERT_EQ(split_d[b], fp16_to_fp32(want[b].d)) << "block " << b;
    for (int i = 0; i < 32; ++i) {
      ASSERT_EQ(got[b].qs[i], want[b].qs[i]) << "block " << b << " element " << i;
      ASSERT_EQ(split_qs[b * 32 + i], want[b].qs[i]) << "block " << b << " element " << i;
    }
  }
}

TEST(QuantizeQ8, DispatchedMatchesReference) {
  std::vector<float> x(256);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.37f * static_cast<float>(i)) * 5.0f;
  std::vector<BlockQ8_0> want(8), got(8);
  ref_quantize_q8_0(x.data(), want.data(), 256);
  quantize_row_q8_0_fast(x.data(), got.data(), 256);
  EXPECT_EQ(std::memcmp(want.data(), got.data(), sizeof(BlockQ8_0) * 8), 0);
}

// The AVX-512 level's one-pass quantization for the packed Q4_0 kernel
// (sixteen blocks at a time, scales and sums in lanes) writes what the
// two-step path writes (quantize_split, then packed_activations), bit for
// bit: every block of every token, the blocks past the last sixteen too.
TEST(QuantizeQ8, PackedOnePassEqualsSplitThenPackedActivations) {
  SKIP_IF_UNAVAILABLE(SimdLevel::kAvx512);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  for (int64_t cols : {int64_t{32}, int64_t{512}, int64_t{2048}, int64_t{19 * 32}, int64_t{35 * 32}}) {
    constexpr int64_t kTokens = 5;
    const int64_t n_blocks = cols / 32;
    std::vector<float> x(kTokens * cols);
    for (float& v : x) v = dist(rng);
    // Token 1: a block of exact ties (scale 1), an all-zero block, one of
    // fp16-subnormal scale, and a block whose quants all sit at +-127.
    for (int64_t i = 0; i < std::min<int64_t>(cols, 32); ++i) x[cols + i] = static_cast<float>(i % 8) - 3.5f;
    x[cols] = 127.0f;
    if (n_blocks > 3) {
      for (int i = 0; i < 32; ++i) x[cols + 32 + i] = 0.0f;
      for (int i = 0; i < 32; ++i) x[cols + 64 + i] = 1e-5f * static_cast<float>(i - 16);
      for (int i = 0; i < 32; ++i) x[cols + 96 + i] = i % 2 == 0 ? 9.0f : -9.0f;
    }
    std::vector<int8_t> want_qs(kTokens * cols), got_qs(kTokens * cols), want_bqs(kTokens * cols), got_bqs(kTokens * cols);
    std::vector<float> want_d(kTokens * n_blocks), got_d(kTokens * n_blocks), want_bd(kTokens * n_blocks),
        got_bd(kTokens * n_blocks);
    std::vector<int32_t> want_bias(kTokens * n_blocks), got_bias(kTokens * n_blocks);
    for (int64_t t = 0; t < kTokens; ++t) {
      cpu_kernels::quantize_q8_0_split_avx512(x.data() + t * cols, want_qs.data() + t * cols,
                                              want_d.data() + t * n_blocks, cols);
      cpu_kernels::packed_activations_avx2(want_qs.data() + t * cols, want_d.data() + t * n_blocks, cols, kTokens, t,
                                           want_bqs.data(), want_bias.data(), want_bd.data());
      cpu_kernels::quantize_q8_0_packed_avx512(x.data() + t * cols, cols, kTokens, t, got_qs.data() + t * cols,
                                               got_d.data() + t * n_blocks, got_bqs.data(), got_bias.data(),
                                               got_bd.data());
    }
    EXPECT_EQ(got_qs, want_qs) << "cols " << cols;
    EXPECT_EQ(got_bqs, want_bqs) << "cols " << cols;
    EXPECT_EQ(got_bias, want_bias) << "cols " << cols;
    EXPECT_EQ(std::memcmp(got_d.data(), want_d.data(), sizeof(float) * got_d.size()), 0) << "cols " << cols;
    EXPECT_EQ(std::memcmp(got_bd.data(), want_bd.data(), sizeof(float) * got_bd.size()), 0) << "cols " << cols;
  }
}

// The block-major quantization of a prefill call (blocks outer, 16 tokens
// per quantize_16_blocks, the last tokens one by one, the work split by
// block ranges) writes what the per-token one-pass writes there, bit for bit:
// token counts around multiples of 16, block ranges that start and end
// anywhere, ties, zero and tiny blocks.
TEST(QuantizeQ8, BlockMajorByBlocksEqualsTheTokenByTokenPass) {
  SKIP_IF_UNAVAILABLE(SimdLevel::kAvx512);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  for (int64_t n_tokens : {int64_t{16}, int64_t{17}, int64_t{33}, int64_t{64}}) {
    for (int64_t cols : {int64_t{32}, int64_t{7 * 32}, int64_t{2048}}) {
      const int64_t n_blocks = cols / 32;
      std::vector<float> x(static_cast<size_t>(n_tokens * cols));
      for (float& v : x) v = dist(rng);
      for (int64_t i = 0; i < 32; ++i) x[static_cast<size_t>(cols + i)] = static_cast<float>(i % 8) - 3.5f;  // ties
      for (int64_t i = 0; i < 32; ++i) x[static_cast<size_t>(2 * cols + i)] = 0.0f;
      for (int64_t i = 0; i < 32; ++i) x[static_cast<size_t>(3 * cols + i)] = 1e-5f * static_cast<float>(i - 16);
      const size_t blocks = static_cast<size_t>(n_tokens * n_blocks);
      std::vector<int8_t> qs(static_cast<size_t>(n_tokens * cols)), want_bqs(qs.size()), got_bqs(qs.size(), 99);
      std::vector<float> d(blocks), want_bd(blocks), got_bd(blocks, -1.0f);
      std::vector<int32_t> want_bias(blocks), got_bias(blocks, 12345);
      for (int64_t t = 0; t < n_tokens; ++t) {
        cpu_kernels::quantize_q8_0_packed_avx512(x.data() + t * cols, cols, n_tokens, t, qs.data() + t * cols,
                                                 d.data() + t * n_blocks, want_bqs.data(), want_bias.data(),
                                                 want_bd.data());
      }
      // Three ranges of blocks, as a pool's threads would take them.
      const int64_t cut1 = n_blocks / 3, cut2 = 2 * n_blocks / 3;
      for (const auto& [b0, b1] : {std::pair{int64_t{0}, cut1}, std::pair{cut1, cut2}, std::pair{cut2, n_blocks}}) {
        cpu_kernels::quantize_q8_0_block_major_avx512(x.data(), cols, n_tokens, b0, b1, got_bqs.data(),
                                                      got_bias.data(), got_bd.data());
      }
      EXPECT_EQ(got_bqs, want_bqs) << n_tokens << " tokens, cols " << cols;
      EXPECT_EQ(got_bias, want_bias) << n_tokens << " tokens, cols " << cols;
      EXPECT_EQ(std::memcmp(got_bd.data(), want_bd.data(), sizeof(float) * blocks), 0)
          << n_tokens << " tokens, cols " << cols;
    }
  }
}

// --- vec kernels ---

class VecTest : public testing::TestWithParam<SimdLevel> {};

TEST_P(VecTest, DotAxpyScaleMatchDoubleReference) {
  SKIP_IF_UNAVAILABLE(GetParam());
  struct Fns {
    float (*dot)(const float*, const float*, int64_t);
    void (*axpy)(float, const float*, float*, int64_t);
    void (*scale)(float*, float, int64_t);
  } fns{cpu_kernels::dot_f32_scalar, cpu_kernels::axpy_f32_scalar, cpu_kernels::scale_f32_scalar};
  if (GetParam() == SimdLevel::kAvx2)
    fns = {cpu_kernels::dot_f32_avx2, cpu_kernels::axpy_f32_avx2, cpu_kernels::scale_f32_avx2};
  if (GetParam() == SimdLevel::kAvx512)
    fns = {cpu_kernels::dot_f32_avx512, cpu_kernels::axpy_f32_avx512, cpu_kernels::scale_f32_avx512};

  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 33, 100, 1000}) {
    std::vector<float> a(n), b(n);
    for (int64_t i = 0; i < n; ++i) a[i] = dist(rng), b[i] = dist(rng);
    double want = 0, magnitude = 0;
    for (int64_t i = 0; i < n; ++i) want += double(a[i]) * b[i], magnitude += std::fabs(double(a[i]) * b[i]);
    EXPECT_NEAR(fns.dot(a.data(), b.data(), n), want, 1e-5 * magnitude + 1e-7) << "n=" << n;

    std::vector<float> y = b;
    fns.axpy(0.75f, a.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], b[i] + 0.75 * a[i], 1e-6) << "axpy n=" << n;
    fns.scale(y.data(), -2.0f, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], -2.0 * (b[i] + 0.75 * a[i]), 2e-6) << "scale n=" << n;
  }
  // The dispatched entry points agree with the per-level ones on a simple case.
  const float ones[3] = {1, 1, 1};
  EXPECT_EQ(dot_f32(ones, ones, 3), 3.0f);
}

std::string level_name(const testing::TestParamInfo<SimdLevel>& info) { return simd_level_name(info.param); }

INSTANTIATE_TEST_SUITE_P(AllLevels, QuantizeQ8Test, testing::ValuesIn(kAllLevels), level_name);
INSTANTIATE_TEST_SUITE_P(AllLevels, VecTest, testing::ValuesIn(kAllLevels), level_name);

// --- K-quants (Q4_K, Q5_K, Q6_K) packed at load (AVX2 only; the AVX-512 level reads the GGUF rows) ---

int64_t kquant_block_bytes(GgmlType type) {
  return type == GgmlType::kQ4_K ? sizeof(BlockQ4_K) : type == GgmlType::kQ5_K ? sizeof(BlockQ5_K) : sizeof(BlockQ6_K);
}

// K-quant rows [rows, cols] of random bytes with moderate fp16 d (and dmin),
// both signs. Row 0 at the kernels' integer bounds: every quant at its
// largest (Q4_K 15, Q5_K 31, Q6_K 63), the scales at theirs (Q4_K / Q5_K:
// 6-bit scales and mins 63, all 12 scale bytes 0xff; Q6_K: +127 and -128 in
// turn). Row 1: every quant 0 (Q6_K's weight -32), scales as row 0's.
std::vector<uint8_t> kquant_test_rows(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const int64_t block_bytes = kquant_block_bytes(type);
  const int64_t n_blocks = rows * cols / kQK_K, row_blocks = cols / kQK_K;
  std::vector<uint8_t> bytes(static_cast<size_t>(n_blocks * block_bytes));
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* block = bytes.data() + b * block_bytes;
    const int64_t row = b / row_blocks;
    const uint8_t quant_bytes = row == 0 ? 0xff : 0x00;
    if (type == GgmlType::kQ6_K) {
      auto* q6 = reinterpret_cast<BlockQ6_K*>(block);
      q6->d = fp32_to_fp16(scale(rng));
      if (row > 1) continue;
      std::memset(q6->ql, quant_bytes, sizeof(q6->ql));
      std::memset(q6->qh, quant_bytes, sizeof(q6->qh));
      for (int j = 0; j < 16; ++j) q6->scales[j] = static_cast<int8_t>(j % 2 == 0 ? 127 : -128);
      continue;
    }
    auto* q4 = reinterpret_cast<BlockQ4_K*>(block);  // Q5_K starts alike: d, dmin, scales
    q4->d = fp32_to_fp16(scale(rng));
    q4->dmin = fp32_to_fp16(scale(rng));
    if (row > 1) continue;
    std::memset(q4->scales, 0xff, sizeof(q4->scales));
    if (type == GgmlType::kQ4_K) {
      std::memset(q4->qs, quant_bytes, sizeof(q4->qs));
    } else {
      auto* q5 = reinterpret_cast<BlockQ5_K*>(block);
      std::memset(q5->qs, quant_bytes, sizeof(q5->qs));
      std::memset(q5->qh, quant_bytes, sizeof(q5->qh));
    }
  }
  return bytes;
}

// ggml's get_scale_min_k4: sub-block j's 6-bit scale and min.
void q4_k_scale_min(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// The stored (unsigned) quant of column c (0..255) of a GGUF block, from
// ggml's layouts: Q4_K / Q5_K: sub-block 2 j the low nibbles of qs[32 j ..],
// 2 j + 1 the high ones, Q5_K's 5th bit of column 32 u + l bit u of qh[l];
// Q6_K: per half of 128, column l + 32 f (f 0..3) from ql[l + 32 (f % 2)]'s
// low (f < 2) or high nibble and bits 2 f of qh[l].
int kquant_quant(GgmlType type, const uint8_t* block, int c) {
  if (type == GgmlType::kQ6_K) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(block);
    const int half = c / 128, f = c % 128 / 32, l = c % 32;
    const uint8_t low = b->ql[64 * half + l + 32 * (f % 2)];
    return (f < 2 ? low & 0x0f : low >> 4) | ((b->qh[32 * half + l] >> (2 * f)) & 3) << 4;
  }
  const int u = c / 32, l = c % 32;
  const uint8_t* qs = type == GgmlType::kQ4_K ? reinterpret_cast<const BlockQ4_K*>(block)->qs
                                              : reinterpret_cast<const BlockQ5_K*>(block)->qs;
  const uint8_t byte = qs[32 * (u / 2) + l];
  const int nibble = u % 2 == 0 ? byte & 0x0f : byte >> 4;
  if (type == GgmlType::kQ4_K) return nibble;
  return nibble | ((reinterpret_cast<const BlockQ5_K*>(block)->qh[l] >> u) & 1) << 4;
}

// x [n, cols]: uniform in [-2, 2], token 0 all 1 (its Q8_K quants all -127:
// the int16 sums at their bound against row 0's largest quants), token 1
// alternating +-1 (quants +-127).
std::vector<float> kquant_test_x(int64_t n, int64_t cols, std::mt19937& rng) {
  std::vector<float> x(static_cast<size_t>(n * cols));
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (float& v : x) v = dist(rng);
  for (int64_t c = 0; c < cols; ++c) {
    x[c] = 1.0f;
    if (n > 1) x[cols + c] = c % 2 == 0 ? 1.0f : -1.0f;
  }
  return x;
}

// The packed K-quant kernels' arithmetic written out, per row and token and
// super-block in order:
//   Q4_K / Q5_K: A = sum over sub-blocks of sc x (exact int sum of quant x
//   x quant), B = sum of m x (sum of the sub-block's x quants), then
//   acc = fma(A, d xd, acc), acc = fma(-B, dmin xd, acc) in float;
//   Q6_K: S = sum over the 16-column halves of sc x (exact int sum of
//   (quant - 32) x x quant), then acc = fma(S, d xd, acc).
// Also returns each output's magnitude sum_c |dequant(w) x dequant(q8_k(x))|
// (the scale of float error) in `magnitude`.
std::vector<float> kquant_packed_arithmetic(GgmlType type, const std::vector<uint8_t>& bytes, int64_t rows,
                                            int64_t cols, const std::vector<float>& x, int64_t n,
                                            std::vector<double>* magnitude) {
  const int64_t n_super = cols / kQK_K, block_bytes = kquant_block_bytes(type);
  std::vector<float> y(static_cast<size_t>(n * rows));
  magnitude->assign(static_cast<size_t>(n * rows), 0.0);
  std::vector<BlockQ8_K> xq(static_cast<size_t>(n_super));
  for (int64_t t = 0; t < n; ++t) {
    quantize_row_q8_k_with(SimdLevel::kScalar, x.data() + t * cols, xq.data(), cols);
    for (int64_t r = 0; r < rows; ++r) {
      float acc = 0.0f;
      double mag = 0.0;
      for (int64_t s = 0; s < n_super; ++s) {
        const uint8_t* block = bytes.data() + (r * n_super + s) * block_bytes;
        const double xd = xq[s].d;
        if (type == GgmlType::kQ6_K) {
          const auto* b = reinterpret_cast<const BlockQ6_K*>(block);
          const float d = fp16_to_fp32(b->d);
          int64_t sum = 0;
          for (int j = 0; j < 16; ++j) {
            int64_t dot = 0;
            for (int l = 0; l < 16; ++l) {
              const int q = kquant_quant(type, block, 16 * j + l) - 32;
              const int xv = xq[s].qs[16 * j + l];
              dot += q * xv;
              mag += std::fabs(static_cast<double>(d) * b->scales[j] * q * xd * xv);
            }
            sum += b->scales[j] * dot;
          }
          EXPECT_LT(std::llabs(sum), int64_t{1} << 31);
          acc = std::fma(static_cast<float>(sum), d * xq[s].d, acc);
          continue;
        }
        const auto* b = reinterpret_cast<const BlockQ4_K*>(block);  // Q5_K starts alike
        const float d = fp16_to_fp32(b->d), dmin = fp16_to_fp32(b->dmin);
        int64_t a = 0, mins = 0;
        for (int u = 0; u < 8; ++u) {
          int sc = 0, m = 0;
          q4_k_scale_min(b->scales, u, &sc, &m);
          int64_t dot = 0, sum = 0;
          for (int l = 0; l < 32; ++l) {
            const int q = kquant_quant(type, block, 32 * u + l);
            const int xv = xq[s].qs[32 * u + l];
            dot += q * xv;
            sum += xv;
            mag += std::fabs((static_cast<double>(d) * sc * q - static_cast<double>(dmin) * m) * xd * xv);
          }
          a += sc * dot;
          mins += m * sum;
        }
        EXPECT_LT(std::llabs(a), int64_t{1} << 31);
        acc = std::fma(static_cast<float>(a), d * xq[s].d, acc);
        acc = std::fma(-static_cast<float>(mins), dmin * xq[s].d, acc);
      }
      y[t * rows + r] = acc;
      (*magnitude)[t * rows + r] = mag;
    }
  }
  return y;
}

std::string kquant_type_name(const testing::TestParamInfo<GgmlType>& info) {
  return std::string(ggml_type_name(info.param));
}

// One test body per K-quant type (PackedKquantTest/q4_K, q5_K, q6_K).
class PackedKquantTest : public testing::TestWithParam<GgmlType> {
 protected:
  void SetUp() override {
    if (best_simd_level() != SimdLevel::kAvx2) GTEST_SKIP() << "K-quants are packed at the AVX2 level only";
  }
};

// The packed kernel of each type equals its arithmetic written out bit for bit
// (so decode and prefill, every row remainder and strip pair), and agrees
// with the scalar K-quant kernel over the GGUF rows (KquantMatmulTest's
// bound: 4e-6 of the magnitude), including rows 0 and 1 at the integer bounds.
TEST_P(PackedKquantTest, KernelEqualsItsArithmeticWrittenOutAndAgreesWithScalar) {
  const GgmlType type = GetParam();
  for (const int64_t rows : {int64_t{7}, int64_t{45}, int64_t{96}}) {
    for (const int64_t cols : {int64_t{256}, int64_t{768}}) {
      std::mt19937 rng(static_cast<uint32_t>(300 + rows + cols));
      const std::vector<uint8_t> bytes = kquant_test_rows(type, rows, cols, rng);
      const WeightMatrix gguf{type, bytes.data(), rows, cols};
      const PackedCopy packed = packed_copy(gguf);
      ASSERT_TRUE(packed.ok);
      for (const int64_t n : {int64_t{1}, int64_t{6}, int64_t{11}}) {
        const std::vector<float> x = kquant_test_x(n, cols, rng);
        std::vector<double> magnitude;
        const std::vector<float> want = kquant_packed_arithmetic(type, bytes, rows, cols, x, n, &magnitude);
        expect_packed_avx2_equals_arithmetic_near_scalar(gguf, packed.matrix, x, n, want, magnitude);
      }
    }
  }
}

// A packed K-quant matrix runs one kernel for every call: a prefill call's
// token rows are the same bits as one-token calls (decode steps), for every
// token count (groups of 4, 2, 1), row count (partial strip, partial strip
// pair) and split (pool or not, decode order); and they agree with the GGUF
// AVX2 K-quant kernel up to float summation order.
TEST_P(PackedKquantTest, PrefillRowsEqualDecodeStepsBitForBitAndAgreeWithGguf) {
  const GgmlType type = GetParam();
  for (const int64_t rows : {int64_t{83}, int64_t{16}, int64_t{130}}) {
    const int64_t cols = 512;
    std::mt19937 rng(static_cast<uint32_t>(400 + rows));
    const std::vector<uint8_t> bytes = kquant_test_rows(type, rows, cols, rng);
    const WeightMatrix gguf{type, bytes.data(), rows, cols};
    const PackedCopy packed = packed_copy(gguf);
    ASSERT_TRUE(packed.ok);
    const int64_t n_max = 40;
    const std::vector<float> x = kquant_test_x(n_max, cols, rng);
    ThreadPool pool(3);
    std::vector<float> steps(static_cast<size_t>(n_max * rows));
    for (int64_t t = 0; t < n_max; ++t) {
      matmul_with(SimdLevel::kAvx2, packed.matrix, x.data() + t * cols, 1, steps.data() + t * rows, nullptr);
    }
    for (int64_t n : {2, 3, 5, 7, 13, 40}) {
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        const float* xn = x.data() + (n_max - n) * cols;
        std::vector<float> a(static_cast<size_t>(n * rows), 1.0f), b(static_cast<size_t>(n * rows), 2.0f);
        std::vector<float> c(static_cast<size_t>(n * rows), 3.0f);
        matmul_with(SimdLevel::kAvx2, gguf, xn, n, a.data(), p);
        matmul_with(SimdLevel::kAvx2, packed.matrix, xn, n, b.data(), p);
        matmul_decode_order(packed.matrix, xn, n, c.data(), p);
        EXPECT_EQ(std::memcmp(b.data(), steps.data() + (n_max - n) * rows, sizeof(float) * n * rows), 0)
            << ggml_type_name(type) << " rows " << rows << " n " << n;
        EXPECT_EQ(std::memcmp(c.data(), steps.data() + (n_max - n) * rows, sizeof(float) * n * rows), 0)
            << ggml_type_name(type) << " decode order, rows " << rows << " n " << n;
        for (int64_t i = 0; i < n * rows; ++i) {
          ASSERT_NEAR(a[i], b[i], 1e-4 * (1 + std::fabs(a[i])))
              << ggml_type_name(type) << " rows " << rows << " n " << n << " at " << i;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllKquants, PackedKquantTest,
                         testing::Values(GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K),
                         kquant_type_name);

// A Q4_K_M layer's grouped calls mix packed types (Q4_K wq / wk beside a
// Q6_K wv; Q6_K alone needs no sums per 32, whatever its place in the group)
// and may hold a GGUF matrix beside them: matmul_many gives exactly what one
// matmul per matrix gives, decode and prefill.
TEST(Matmul, PackedKquantManyWithMixedTypesEqualsOneCallPerMatrixBitForBit) {
  if (best_simd_level() != SimdLevel::kAvx2) GTEST_SKIP() << "K-quants are packed at the AVX2 level only";
  const GgmlType types[4] = {GgmlType::kQ6_K, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};
  const int64_t rows[4] = {40, 64, 23, 16};
  const int64_t cols = 512;
  std::mt19937 rng(77);
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<PackedCopy> copies;
  std::vector<WeightMatrix> matrices;
  for (int i = 0; i < 4; ++i) bytes.push_back(kquant_test_rows(types[i], rows[i], cols, rng));
  for (int i = 0; i < 4; ++i) copies.push_back(packed_copy(WeightMatrix{types[i], bytes[i].data(), rows[i], cols}));
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(copies[i].ok);
    matrices.push_back(i == 3 ? WeightMatrix{types[i], bytes[i].data(), rows[i], cols} : copies[i].matrix);
  }
  for (const int64_t n_tokens : {int64_t{1}, int64_t{9}}) {
    const std::vector<float> x = kquant_test_x(n_tokens, cols, rng);
    ThreadPool pool(3);
    for (const size_t first : {size_t{0}, size_t{2}}) {  // Q6_K first, or Q5_K then a GGUF Q6_K
      std::vector<const WeightMatrix*> ws;
      std::vector<std::vector<float>> one, many;
      for (size_t i = first; i < 4; ++i) {
        ws.push_back(&matrices[i]);
        one.emplace_back(static_cast<size_t>(n_tokens * rows[i]), -1.0f);
        many.emplace_back(static_cast<size_t>(n_tokens * rows[i]), -2.0f);
        matmul_with(SimdLevel::kAvx2, matrices[i], x.data(), n_tokens, one.back().data(), &pool);
      }
      std::vector<float*> ys;
      for (std::vector<float>& y : many) ys.push_back(y.data());
      matmul_many_with(SimdLevel::kAvx2, ws, x.data(), n_tokens, ys, &pool);
      for (size_t i = 0; i < ws.size(); ++i) {
        EXPECT_EQ(many[i], one[i]) << "matrix " << first + i << " tokens " << n_tokens;
      }
    }
  }
}

TEST(Matmul, PackedKquantBytesAreStripsOfSuperBlockRecordsOnAvx2Only) {
  if (best_simd_level() == SimdLevel::kAvx2) {
    // Per strip and super-block: Q4_K 2368 bytes (16 x 144 GGUF bytes plus
    // 64), Q5_K 2880 (16 x 176 + 64), Q6_K 3392 (16 x 210 + 32).
    EXPECT_EQ(packed_weight_bytes(GgmlType::kQ4_K, 2048, 2048), 128 * 8 * 2368);
    EXPECT_EQ(packed_weight_bytes(GgmlType::kQ4_K, 17, 256), 2 * 2368);
    EXPECT_EQ(packed_weight_bytes(GgmlType::kQ5_K, 2048, 2048), 128 * 8 * 2880);
    EXPECT_EQ(packed_weight_bytes(GgmlType::kQ5_K, 17, 512), 2 * 2 * 2880);
    EXPECT_EQ(packed_weight_bytes(GgmlType::kQ6_K, 8192, 2048), 512 * 8 * 3392);
    EXPECT_EQ(packed_weight_bytes(GgmlType::kQ6_K, 1, 256), 3392);
  } else {
    // AVX-512: its K-quant kernels read the GGUF rows; scalar: nothing is packed.
    for (const GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
      EXPECT_EQ(packed_weight_bytes(type, 2048, 2048), 0) << ggml_type_name(type);
    }
  }
}

// The packed Q4_0 AVX-512 decode's software prefetch (the near one 16
// blocks ahead, plus the far one into L2 on Intel only: matmul.cc
// set_packed_prefetch) changes where lines are asked for, never the sums:
// both settings and other distances give the same bits, on matrices whose
// strips end inside a prefetch distance (it reaches into the next pair) and on
// a last strip of fewer than 16 rows, for 1, 2, 4, 7 and 13 tokens (13: two
// strips take the chunked prefill path). And the pairs' layout
// (packed_strip_at) read from tasks that start on an odd strip (two strips
// from two pairs): the same bits.
TEST(Matmul, PackedAvx512PrefetchSettingsAndTaskStartsGiveTheSameBits) {
  if (best_simd_level() != SimdLevel::kAvx512) GTEST_SKIP() << "needs the AVX-512 level (this CPU has not)";
  std::mt19937 rng(7);
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{96, 256}, {77, 1024}, {64, 4096}}) {
    const TestWeights tw = make_weights(GgmlType::kQ4_0, rows, cols, rng);
    const WeightMatrix w{GgmlType::kQ4_0, tw.bytes.data(), rows, cols};
    const PackedCopy packed = packed_copy(w);
    ASSERT_TRUE(packed.ok);
    for (const int64_t n_tokens : {1, 2, 4, 7, 13}) {
      std::vector<float> x(n_tokens * cols);
      std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
      for (float& v : x) v = dist(rng);
      const int64_t n_blocks = cols / 32;
      std::vector<int8_t> xq(n_blocks * n_tokens * 32);
      std::vector<int32_t> xbias(n_blocks * n_tokens);
      std::vector<float> xd(n_blocks * n_tokens);
      cpu_kernels::quantize_q8_0_block_major_avx512(x.data(), cols, n_tokens, 0, n_blocks, xq.data(), xbias.data(),
                                                    xd.data());
      auto run = [&](int32_t near_blocks, bool far, int64_t first_task_rows = 32) {
        std::vector<float> y(n_tokens * rows, -1.0f);
        cpu_kernels::MatmulProblem p{};
        p.type = GgmlType::kQ4_0;
        p.rows = rows;
        p.cols = cols;
        p.y = y.data();
        p.packed = static_cast<const uint8_t*>(packed.matrix.packed);
        p.xq_blocks = xq.data();
        p.xbias_blocks = xbias.data();
        p.xd_blocks = xd.data();
        p.n_tokens = n_tokens;
        p.packed_near_blocks = near_blocks;
        p.packed_far_prefetch = far;
        // The decode split's tasks of 32 rows (or a first of 16, then 32s:
        // every later task starts on an odd strip).
        for (int64_t r = 0; r < rows; r += r == 0 ? first_task_rows : 32) {
          const int64_t end = std::min(rows, r + (r == 0 ? first_task_rows : 32));
          cpu_kernels::packed_decode_tile_avx512(p, r, end, 0, n_tokens);
        }
        return y;
      };
      const std::vector<float> intel = run(16, true);
      for (float v : intel) ASSERT_NE(v, -1.0f) << "an output was not written";
      const std::string at = std::to_string(rows) + "x" + std::to_string(cols) + " tokens " + std::to_string(n_tokens);
      EXPECT_EQ(run(8, false), intel) << at;
      EXPECT_EQ(run(1, false), intel) << at;
      EXPECT_EQ(run(64, true), intel) << at;
      EXPECT_EQ(run(16, true, 16), intel) << at << " (tasks from odd strips)";
      EXPECT_EQ(run(16, false, 16), intel) << at << " (tasks from odd strips)";
      // And the settings matmul picks for this CPU: the same bits as well.
      std::vector<float> y(n_tokens * rows);
      ThreadPool pool(2);
      matmul(packed.matrix, x.data(), n_tokens, y.data(), &pool);
      EXPECT_EQ(y, intel) << at << " (matmul, this CPU's settings)";
    }
  }
}

}  // namespace
}  // namespace baton
