// AVX-512 (F/BW/VL/DQ/VNNI) K-quant matmul (Q4_K, Q5_K, Q6_K x Q8_K) and Q8_K
// quantization. Entered only when best_simd_level() == kAvx512 (see
// matmul_kernels.h for why nothing here may be an inline function or template
// shared with other files).
//
// Same integer math as the AVX2 file, 64 weights per zmm: maddubs (unsigned
// weights x signed x quants -> exact int16 pairs) then vpdpwssd with the
// sub-block scales as int16 (multiply, add pairs, accumulate in int32). The
// weights are unpacked into the natural element order so x is loaded as is;
// each 128-bit lane holds 16 elements of one sub-block.
// GCC 12's AVX-512 headers self-initialize _mm512_undefined_*() values, which
// -Wuninitialized reports at every inlined use; the warning is in the header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstddef>
#include <cstring>

#include "common/cpu/matmul_kernels.h"

namespace baton::cpu_kernels {
namespace {

// Software prefetch distance for decode: a few super-blocks ahead.
constexpr int64_t kPrefetchBytes = 1024;

inline float half_to_float(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// See the AVX2 file: scales in bytes 0..7, mins in bytes 8..15.
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

// A vpshufb control that fills 128-bit lanes 0-1 with int16 word `a` of the
// lane and lanes 2-3 with word `b`.
inline __m512i word_control(int a, int b) {
  const __m256i lo = _mm256_set1_epi16(static_cast<int16_t>(((2 * a + 1) << 8) | (2 * a)));
  const __m256i hi = _mm256_set1_epi16(static_cast<int16_t>(((2 * b + 1) << 8) | (2 * b)));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// ... and the same lines 8 KiB ahead into L2 (the rows are consecutive, so
// both run on into the thread's next rows). The near prefetch alone left
// decode waiting on memory: on the AVX-512 host without AMX (2026-12-05,
// BM_MatmulDecodeVsReadBandwidth level 2, 2 threads) 8192 x 2048 Q4_K / Q6_K
// streamed 0.66 / 0.80 of the read bandwidth against 0.45 / 0.55 without it,
// 2048 x 8192 Q4_K 0.60 against 0.50; 16 KiB ahead 0.63 / 0.73, 4 KiB 0.57
// (2048 x 8192).
constexpr int64_t kFarPrefetchBytes = 8192;

inline void prefetch_block(const uint8_t* block, int lines) {
  for (int i = 0; i < lines; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(block + kPrefetchBytes + 64 * i), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(block + kFarPrefetchBytes + 64 * i), _MM_HINT_T1);
  }
}

// One Q4_K (kQ5 false) or Q5_K row times T tokens. zmm j holds elements
// 64j..64j+63: the low nibbles of qs[32j..32j+31] (sub-block 2j, lanes 0-1)
// then their high nibbles (sub-block 2j+1, lanes 2-3); Q5_K's fifth bits are
// bits 2j and 2j+1 of qh.
template <bool kQ5, int T>
void q45_k_row(const MatmulProblem& p, int64_t r, int64_t t0) {
  constexpr int64_t kBlockBytes = kQ5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  constexpr int kQsOffset = kQ5 ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs);
  const int64_t n_super = p.cols / kQK_K;
  const uint8_t* row = p.weights + r * p.row_bytes;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i sixteen = _mm512_set1_epi8(16);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t s = 0; s < n_super; ++s) {
    const uint8_t* block = row + s * kBlockBytes;
    if constexpr (T == 1) prefetch_block(block, 3);
    const float d = half_to_float(block);
    const float dmin = half_to_float(block + 2);
    const __m256i scales_mins = _mm256_cvtepu8_epi16(unpack_scales_mins(block + 4));
    const __m128i mins = _mm256_extracti128_si256(scales_mins, 1);
    const __m512i scales = _mm512_broadcast_i32x4(_mm256_castsi256_si128(scales_mins));
    __m512i high_bits = _mm512_setzero_si512();
    if constexpr (kQ5) {
      high_bits = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + offsetof(BlockQ5_K, qh))));
    }
    const uint8_t* qs = block + kQsOffset;
    __m512i sumi[T];
    for (int t = 0; t < T; ++t) sumi[t] = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j));
      __m512i w = _mm512_and_si512(
          _mm512_inserti64x4(_mm512_castsi256_si512(packed), _mm256_srli_epi16(packed, 4), 1), low4);
      if constexpr (kQ5) {
        const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * j))),
                                               _mm256_set1_epi8(static_cast<char>(1 << (2 * j + 1))), 1);
        w = _mm512_mask_add_epi8(w, _mm512_test_epi8_mask(high_bits, bit), w, sixteen);
      }
      const __m512i scale = _mm512_shuffle_epi8(scales, word_control(2 * j, 2 * j + 1));
      for (int t = 0; t < T; ++t) {
        const __m512i x = _mm512_loadu_si512(p.xq + (t0 + t) * p.cols + s * kQK_K + 64 * j);
        sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(w, x), scale);
      }
    }
    for (int t = 0; t < T; ++t) {
      const float dx = p.xd[(t0 + t) * n_super + s];
      const __m256i bsums =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.xsums + (t0 + t) * (p.cols / 16) + s * 16));
      const __m128i sums32 = _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256(bsums, 1));
      const __m512 mins_dot = _mm512_zextps128_ps512(_mm_cvtepi32_ps(_mm_madd_epi16(mins, sums32)));
      acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(d * dx), _mm512_cvtepi32_ps(sumi[t]), acc[t]);
      acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(-dmin * dx), mins_dot, acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) p.y[(t0 + t) * p.rows + r] = _mm512_reduce_add_ps(acc[t]);
}

// One Q6_K row times T tokens. Per half of 128: zmm lo = elements 0..63
// (low nibbles of ql[0..63], qh bits 0-1 for 0..31 and 2-3 for 32..63), zmm
// hi = elements 64..127 (high nibbles, qh bits 4-5 and 6-7). Lane i of the
// k-th zmm (k = 2 * half + {0, 1}) is sub-block 4k + i.
template <int T>
void q6_k_row(const MatmulProblem& p, int64_t r, int64_t t0) {
  const int64_t n_super = p.cols / kQK_K;
  const uint8_t* row = p.weights + r * p.row_bytes;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i bits45 = _mm512_set1_epi8(0x30);
  // Lane i picks word i (k even) or word i + 4 (k odd) of an 8-word broadcast.
  const __m512i control_even = _mm512_setr_epi32(0x01000100, 0x01000100, 0x01000100, 0x01000100,  //
                                                 0x03020302, 0x03020302, 0x03020302, 0x03020302,  //
                                                 0x05040504, 0x05040504, 0x05040504, 0x05040504,  //
                                                 0x07060706, 0x07060706, 0x07060706, 0x07060706);
  const __m512i control_odd = _mm512_add_epi8(control_even, _mm512_set1_epi8(8));
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t s = 0; s < n_super; ++s) {
    const BlockQ6_K* block = reinterpret_cast<const BlockQ6_K*>(row) + s;
    if constexpr (T == 1) prefetch_block(reinterpret_cast<const uint8_t*>(block), 4);
    const float d = _cvtsh_ss(block->d);
    const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block->scales)));
    const __m512i scales_first = _mm512_broadcast_i32x4(_mm256_castsi256_si128(scales16));        // sc 0..7
    const __m512i scales_second = _mm512_broadcast_i32x4(_mm256_extracti128_si256(scales16, 1));  // sc 8..15
    __m512i sumi[T];
    for (int t = 0; t < T; ++t) sumi[t] = _mm512_setzero_si512();
    for (int half = 0; half < 2; ++half) {
      const __m512i ql = _mm512_loadu_si512(block->ql + 64 * half);
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block->qh + 32 * half));
      const __m512i qh_lo = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_slli_epi16(qh, 4)), _mm256_slli_epi16(qh, 2), 1);
      const __m512i qh_hi = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
      __m512i w[2];
      w[0] = _mm512_or_si512(_mm512_and_si512(ql, low4), _mm512_and_si512(qh_lo, bits45));
      w[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), _mm512_and_si512(qh_hi, bits45));
      const __m512i source = half == 0 ? scales_first : scales_second;
      for (int k = 0; k < 2; ++k) {
        const __m512i scale = _mm512_shuffle_epi8(source, k == 0 ? control_even : control_odd);
        for (int t = 0; t < T; ++t) {
          const __m512i x = _mm512_loadu_si512(p.xq + (t0 + t) * p.cols + s * kQK_K + 128 * half + 64 * k);
          sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(w[k], x), scale);
        }
      }
    }
    for (int t = 0; t < T; ++t) {
      // The weights entered as q + 32: subtract 32 * sum over sub-blocks of scale * bsum.
      const __m256i bsums =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.xsums + (t0 + t) * (p.cols / 16) + s * 16));
      const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(scales16, bsums), 5);
      const __m512i total = _mm512_sub_epi32(sumi[t], _mm512_zextsi256_si512(offset));
      const float dx = p.xd[(t0 + t) * n_super + s];
      acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(d * dx), _mm512_cvtepi32_ps(total), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) p.y[(t0 + t) * p.rows + r] = _mm512_reduce_add_ps(acc[t]);
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

// One Q8_K super-block; see quantize_q8_k_scalar for the formulas. One zmm is
// one group of 16 (one bsum). cvtps rounds half to even, as ggml's nearest_int.
inline float quantize_q8_k_block(const float* x, int8_t* qs, int16_t* bsums) {
  __m512 amax_v = _mm512_setzero_ps();
  for (int i = 0; i < kQK_K; i += 16) amax_v = _mm512_max_ps(amax_v, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  const float amax = _mm512_reduce_max_ps(amax_v);
  if (amax == 0.0f) {
    std::memset(qs, 0, kQK_K);
    std::memset(bsums, 0, kQK_K / 16 * sizeof(int16_t));
    return 0.0f;
  }
  float max = 0.0f;
  const __m512 amax_b = _mm512_set1_ps(amax);
  for (int i = 0; i < kQK_K; i += 16) {
    const __mmask16 hits = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + i)), amax_b, _CMP_EQ_OQ);
    if (hits != 0) {
      max = x[i + __builtin_ctz(static_cast<unsigned>(hits))];
      break;
    }
  }
  const float iscale = -127.0f / max;
  const __m512 vscale = _mm512_set1_ps(iscale);
  const __m512i limit = _mm512_set1_epi32(127);
  const __m128i bias = _mm_set1_epi8(static_cast<char>(0x80));
  for (int g = 0; g < kQK_K / 16; ++g) {
    const __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * g), vscale)), limit);
    const __m128i q8 = _mm512_cvtsepi32_epi8(q);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16 * g), q8);
    const __m128i sad = _mm_sad_epu8(_mm_xor_si128(q8, bias), _mm_setzero_si128());
    bsums[g] = static_cast<int16_t>(_mm_cvtsi128_si64(sad) + _mm_extract_epi64(sad, 1) - 16 * 128);
  }
  return 1.0f / iscale;
}

}  // namespace

void kquant_tile_avx512(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                        int64_t tok_end) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    int64_t t = tok_begin;
    for (; t + 4 <= tok_end; t += 4) row_tile<4>(p, r, t);
    for (; t < tok_end; ++t) row_tile<1>(p, r, t);
  }
}

void quantize_q8_k_avx512(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) y[b].d = quantize_q8_k_block(x + b * kQK_K, y[b].qs, y[b].bsums);
}

void quantize_q8_k_split_avx512(const float* x, int8_t* qs, float* d, int16_t* bsums, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b)
    d[b] = quantize_q8_k_block(x + b * kQK_K, qs + b * kQK_K, bsums + b * (kQK_K / 16));
}

}  // namespace baton::cpu_kernels
