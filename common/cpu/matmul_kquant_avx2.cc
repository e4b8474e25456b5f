// AVX2 + FMA + F16C K-quant matmul (Q4_K, Q5_K, Q6_K x Q8_K) and Q8_K
// quantization. Entered only when best_simd_level() >= kAvx2 (see
// matmul_kernels.h for why nothing here may be an inline function or template
// shared with other files).
//
// Per super-block of 256 and row: the weights are unpacked to unsigned bytes
// (Q4_K 0..15, Q5_K 0..31, Q6_K 0..63), maddubs with the signed x quants gives
// int16 pairs (at most 63 * 127 * 2 < 2^15, exact), madd with the sub-block
// scale as int16 gives int32. The mins (Q4_K/Q5_K) and Q6_K's -32 offset come
// from the Q8_K sums per 16 (bsums), as in ggml's vec_dot_q*_K_q8_K.
// Rows are contiguous in memory, so a tile is one row (a single forward
// stream for the hardware prefetcher) times up to 2 tokens.
#include <immintrin.h>

#include <cstring>

#include "common/cpu/matmul_kernels.h"
#include "common/cpu/simd_avx2.h"

namespace baton::cpu_kernels {
namespace {

using simd_avx2::hmax256;
using simd_avx2::hsum256;

// Software prefetch distance for decode: a few super-blocks ahead of the one
// being multiplied.
constexpr int64_t kPrefetchBytes = 1024;


inline float half_to_float(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// The 8 scales (bytes 0..7) and 8 mins (bytes 8..15) of a Q4_K / Q5_K
// super-block, from the 12 packed bytes (ggml's get_scale_min_k4, four words at a time).
inline __m128i unpack_scales_mins(const uint8_t* packed) {
  uint32_t u[4];
  std::memcpy(u, packed, 12);
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  u[3] = ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4);
  const uint32_t mins_low = u[1] & kLow6;
  u[1] = (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4);
  u[2] = mins_low;
  u[0] &= kLow6;
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(u));
}

// Bit `bit` of every byte of h, moved to bit 4 (value 16).
inline __m256i bit_as_16(__m256i h, int bit) {
  const __m256i shifted = bit <= 4 ? _mm256_slli_epi16(h, 4 - bit) : _mm256_srli_epi16(h, bit - 4);
  return _mm256_and_si256(shifted, _mm256_set1_epi8(0x10));
}

// One Q4_K (kQ5 false) or Q5_K row times T tokens.
template <bool kQ5, int T>
void q45_k_row(const MatmulProblem& p, int64_t r, int64_t t0) {
  constexpr int64_t kBlockBytes = kQ5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  constexpr int kQsOffset = kQ5 ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs);
  const int64_t n_super = p.cols / kQK_K;
  const uint8_t* row = p.weights + r * p.row_bytes;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t s = 0; s < n_super; ++s) {
    const uint8_t* block = row + s * kBlockBytes;
    if constexpr (T == 1) {
      _mm_prefetch(reinterpret_cast<const char*>(block + kPrefetchBytes), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(block + kPrefetchBytes + 64), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(block + kPrefetchBytes + 128), _MM_HINT_T0);
    }
    const float d = half_to_float(block);
    const float dmin = half_to_float(block + 2);
    const __m256i scales_mins = _mm256_cvtepu8_epi16(unpack_scales_mins(block + 4));
    const __m128i mins = _mm256_extracti128_si256(scales_mins, 1);
    const __m256i scales = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(scales_mins));
    __m256i high_bits = _mm256_setzero_si256();
    if constexpr (kQ5) high_bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + offsetof(BlockQ5_K, qh)));
    const uint8_t* qs = block + kQsOffset;
    __m256i sumi[T];
    for (int t = 0; t < T; ++t) sumi[t] = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      // Sub-block 2j: low nibbles of qs[32j..32j+31]; 2j+1: the high nibbles.
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j));
      __m256i w_lo = _mm256_and_si256(packed, low4);
      __m256i w_hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low4);
      if constexpr (kQ5) {
        w_lo = _mm256_or_si256(w_lo, bit_as_16(high_bits, 2 * j));
        w_hi = _mm256_or_si256(w_hi, bit_as_16(high_bits, 2 * j + 1));
      }
      const __m256i scale_lo = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<int16_t>(((4 * j + 1) << 8) | (4 * j))));
      const __m256i scale_hi = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<int16_t>(((4 * j + 3) << 8) | (4 * j + 2))));
      for (int t = 0; t < T; ++t) {
        const int8_t* x = p.xq + (t0 + t) * p.cols + s * kQK_K + 64 * j;
        const __m256i x_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
        const __m256i x_hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32));
        const __m256i dot_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(w_lo, x_lo), scale_lo);
        const __m256i dot_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(w_hi, x_hi), scale_hi);
        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(dot_lo, dot_hi));
      }
    }
    for (int t = 0; t < T; ++t) {
      const float dx = p.xd[(t0 + t) * n_super + s];
      const __m256i bsums =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.xsums + (t0 + t) * (p.cols / 16) + s * 16));
      // Sums per sub-block of 32 (pairs of bsums), times the mins.
      const __m128i sums32 = _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256(bsums, 1));
      const __m128 mins_dot = _mm_cvtepi32_ps(_mm_madd_epi16(mins, sums32));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(-dmin * dx), _mm256_set_m128(_mm_setzero_ps(), mins_dot), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) p.y[(t0 + t) * p.rows + r] = hsum256(acc[t]);
}

// One Q6_K row times T tokens. 32-element vector v (v = 4 * half + i) holds
// sub-blocks 2v and 2v+1, one per 128-bit lane.
template <int T>
void q6_k_row(const MatmulProblem& p, int64_t r, int64_t t0) {
  const int64_t n_super = p.cols / kQK_K;
  const uint8_t* row = p.weights + r * p.row_bytes;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i bits45 = _mm256_set1_epi8(0x30);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t s = 0; s < n_super; ++s) {
    const BlockQ6_K* block = reinterpret_cast<const BlockQ6_K*>(row) + s;
    if constexpr (T == 1) {
      const char* ahead = reinterpret_cast<const char*>(block) + kPrefetchBytes;
      _mm_prefetch(ahead, _MM_HINT_T0);
      _mm_prefetch(ahead + 64, _MM_HINT_T0);
      _mm_prefetch(ahead + 128, _MM_HINT_T0);
      _mm_prefetch(ahead + 192, _MM_HINT_T0);
    }
    const float d = _cvtsh_ss(block->d);
    const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block->scales)));
    const __m256i scales_first = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(scales16));  // sc 0..7 per lane
    const __m256i scales_second = _mm256_broadcastsi128_si256(_mm256_extracti128_si256(scales16, 1));  // sc 8..15
    __m256i sumi[T];
    for (int t = 0; t < T; ++t) sumi[t] = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block->ql + 64 * half));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block->ql + 64 * half + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block->qh + 32 * half));
      __m256i w[4];
      w[0] = _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45));
      w[1] = _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45));
      w[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, bits45));
      w[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                             _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45));
      const __m256i source = half == 0 ? scales_first : scales_second;
      for (int i = 0; i < 4; ++i) {
        // Lane 0: word 2i of source (sub-block 8*half + 2i), lane 1: word 2i+1.
        const __m256i control = _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(((4 * i + 3) << 8) | (4 * i + 2))),
                                                 _mm_set1_epi16(static_cast<int16_t>(((4 * i + 1) << 8) | (4 * i))));
        const __m256i scale = _mm256_shuffle_epi8(source, control);
        for (int t = 0; t < T; ++t) {
          const int8_t* x = p.xq + (t0 + t) * p.cols + s * kQK_K + 128 * half + 32 * i;
          const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
          sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(_mm256_maddubs_epi16(w[i], xv), scale));
        }
      }
    }
    for (int t = 0; t < T; ++t) {
      // The weights entered as q + 32: subtract 32 * sum over sub-blocks of scale * bsum.
      const __m256i bsums =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.xsums + (t0 + t) * (p.cols / 16) + s * 16));
      const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(scales16, bsums), 5);
      const float dx = p.xd[(t0 + t) * n_super + s];
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[t], offset)), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) p.y[(t0 + t) * p.rows + r] = hsum256(acc[t]);
}

template <int T>
void row_tile(const MatmulProblem& p, int64_t r, int64_t t0) {
  switch (p.type) {
    case GgmlType::kQ4_K: return q45_k_row<false, T>(p, r, t0);
    case GgmlType::kQ5_K: return q45_k_row<true, T>(p, r, t0);
    case GgmlType::kQ6_K: return q6_k_row<T>(p, r, t0);
    default: break;  // matmul.cc routes only K-quants here
  }
}

// One Q8_K super-block; see quantize_q8_k_scalar for the formulas. Rounding:
// cvtps rounds half to even (MXCSR default), as ggml's nearest_int does.
inline float quantize_q8_k_block(const float* x, int8_t* qs, int16_t* bsums) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  __m256 amax_v = _mm256_setzero_ps();
  for (int i = 0; i < kQK_K; i += 8) amax_v = _mm256_max_ps(amax_v, _mm256_andnot_ps(sign_bit, _mm256_loadu_ps(x + i)));
  const float amax = hmax256(amax_v);
  if (amax == 0.0f) {
    std::memset(qs, 0, kQK_K);
    std::memset(bsums, 0, kQK_K / 16 * sizeof(int16_t));
    return 0.0f;
  }
  // The first element of largest magnitude decides the sign, as in ggml.
  float max = 0.0f;
  const __m256 amax_b = _mm256_set1_ps(amax);
  for (int i = 0; i < kQK_K; i += 8) {
    const int hits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign_bit, _mm256_loadu_ps(x + i)), amax_b, _CMP_EQ_OQ));
    if (hits != 0) {
      max = x[i + __builtin_ctz(static_cast<unsigned>(hits))];
      break;
    }
  }
  const float iscale = -127.0f / max;
  const __m256 vscale = _mm256_set1_ps(iscale);
  const __m256i limit = _mm256_set1_epi32(127);
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int g = 0; g < kQK_K; g += 32) {
    __m256i q[4];
    for (int i = 0; i < 4; ++i) {
      q[i] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + g + 8 * i), vscale)), limit);
    }
    const __m256i q8 = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    const __m256i ordered = _mm256_permutevar8x32_epi32(q8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + g), ordered);
    // Sums of 16: q + 128 is unsigned, sad sums 8 bytes per 64-bit lane.
    const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(ordered, bias), _mm256_setzero_si256());
    const __m256i pair = _mm256_add_epi64(sad, _mm256_srli_si256(sad, 8));  // lanes 0 and 2
    bsums[g / 16] = static_cast<int16_t>(_mm256_extract_epi64(pair, 0) - 16 * 128);
    bsums[g / 16 + 1] = static_cast<int16_t>(_mm256_extract_epi64(pair, 2) - 16 * 128);
  }
  return 1.0f / iscale;
}

}  // namespace

void kquant_tile_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                      int64_t tok_end) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    int64_t t = tok_begin;
    for (; t + 2 <= tok_end; t += 2) row_tile<2>(p, r, t);
    if (t < tok_end) row_tile<1>(p, r, t);
  }
}

void quantize_q8_k_avx2(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) y[b].d = quantize_q8_k_block(x + b * kQK_K, y[b].qs, y[b].bsums);
}

void quantize_q8_k_split_avx2(const float* x, int8_t* qs, float* d, int16_t* bsums, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b)
    d[b] = quantize_q8_k_block(x + b * kQK_K, qs + b * kQK_K, bsums + b * (kQK_K / 16));
}

}  // namespace baton::cpu_kernels
