// AVX2 + FMA + F16C matmul for the older block types Q5_0, Q4_1, Q5_1 times
// Q8_0 activations (plus the per-block sums of the x quants). Used at the
// AVX2 and AVX-512 levels (these types are rare; one kernel serves both).
// Entered only when best_simd_level() >= kAvx2 (see matmul_kernels.h for why
// nothing here may be an inline function or template shared with other files).
//
// Per block of 32: the weights as unsigned bytes (4 low bits from the nibbles,
// Q5's fifth bit from qh), maddubs with the signed x quants (exact int16
// pairs, at most 31 * 127 * 2), madd to int32. The offset (Q5_0: -16) or
// minimum (Q4_1/Q5_1: m) term is d_x * sum(x quants) times a scalar.
#include <immintrin.h>

#include <cstring>

#include "common/cpu/matmul_kernels.h"
#include "common/cpu/simd_avx2.h"

namespace baton::cpu_kernels {
namespace {

using simd_avx2::hsum256;

// Byte i = 16 where bit i of `bits` is set, else 0.
inline __m256i fifth_bits(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  // All bits set except bit i % 8 in byte i: the byte is all ones iff that bit was set.
  const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi64x(-1));
  return _mm256_and_si256(set, _mm256_set1_epi8(16));
}

template <GgmlType kType, typename Block>
float legacy_row(const MatmulProblem& p, int64_t r, int64_t t) {
  const int64_t n_blocks = p.cols / 32;
  const Block* blocks = reinterpret_cast<const Block*>(p.weights + r * p.row_bytes);
  const int8_t* xq = p.xq + t * p.cols;
  const float* xd = p.xd + t * n_blocks;
  const int16_t* xsums = p.xsums + t * n_blocks;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc = _mm256_setzero_ps();
  float extra = 0.0f;  // the offset / minimum terms
  for (int64_t b = 0; b < n_blocks; ++b) {
    const Block& blk = blocks[b];
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs));
    __m256i w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low4);
    if constexpr (kType != GgmlType::kQ4_1) {
      uint32_t qh;
      std::memcpy(&qh, blk.qh, 4);
      w = _mm256_or_si256(w, fifth_bits(qh));
    }
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32 * b));
    const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones);
    const float scale = _cvtsh_ss(blk.d) * xd[b];
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(scale), acc);
    if constexpr (kType == GgmlType::kQ5_0) {
      extra += scale * static_cast<float>(-16 * xsums[b]);
    } else {
      extra += _cvtsh_ss(blk.m) * xd[b] * static_cast<float>(xsums[b]);
    }
  }
  return hsum256(acc) + extra;
}

}  // namespace

void legacy_tile_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                      int64_t tok_end) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    for (int64_t t = tok_begin; t < tok_end; ++t) {
      float value = 0.0f;
      switch (p.type) {
        case GgmlType::kQ5_0: value = legacy_row<GgmlType::kQ5_0, BlockQ5_0>(p, r, t); break;
        case GgmlType::kQ4_1: value = legacy_row<GgmlType::kQ4_1, BlockQ4_1>(p, r, t); break;
        case GgmlType::kQ5_1: value = legacy_row<GgmlType::kQ5_1, BlockQ5_1>(p, r, t); break;
        default: break;  // matmul.cc routes only these three types here
      }
      p.y[t * p.rows + r] = value;
    }
  }
}

}  // namespace baton::cpu_kernels
