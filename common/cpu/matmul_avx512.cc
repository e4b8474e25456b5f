// AVX-512 (F/BW/VL/DQ/VNNI) matmul and Q8_0 quantization.
// Entered only when best_simd_level() == kAvx512 (see matmul_kernels.h for why
// nothing here may be an inline function or template shared with other files).
//
// Q4_0 / Q8_0: two blocks per zmm. vpdpbusd multiplies unsigned x signed bytes,
// so weights enter with an offset that keeps them unsigned (Q4_0: the raw
// nibble 0..15, offset 8; Q8_0: q ^ 0x80 = q + 128, offset 128) and the int32
// accumulator starts at -offset * sum(x quants); all exact in int32.
// GCC 12's AVX-512 headers self-initialize _mm512_undefined_*() values, which
// -Wuninitialized reports at every inlined use; the warning is in the header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <type_traits>

#include "common/cpu/matmul_kernels.h"

namespace baton::cpu_kernels {
namespace {

inline __mmask16 tail_mask16(int64_t left) {
  return static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1);
}

template <GgmlType kType>
constexpr int kWeightOffset = kType == GgmlType::kQ4_0 ? 8 : 128;

// Blocks b and b+1 (kPair) or b alone (upper half zero) of a row, as
// offset unsigned bytes: [block b: 32 bytes | block b+1: 32 bytes].
template <GgmlType kType, bool kPair>
inline __m512i load_blocks_u8(const uint8_t* row, int64_t b) {
  if constexpr (kType == GgmlType::kQ4_0) {
    const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
    const __m128i raw0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[0].qs));
    const __m256i lo = _mm256_set_m128i(_mm_srli_epi16(raw0, 4), raw0);
    __m512i both = _mm512_zextsi256_si512(lo);
    if constexpr (kPair) {
      const __m128i raw1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[1].qs));
      both = _mm512_inserti64x4(both, _mm256_set_m128i(_mm_srli_epi16(raw1, 4), raw1), 1);
    }
    return _mm512_and_si512(both, _mm512_set1_epi8(0x0f));
  } else {
    const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
    const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[0].qs));
    const __m256i u0 = _mm256_xor_si256(q0, _mm256_set1_epi8(static_cast<char>(0x80)));
    if constexpr (kPair) {
      const __m256i q1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[1].qs));
      const __m256i u1 = _mm256_xor_si256(q1, _mm256_set1_epi8(static_cast<char>(0x80)));
      return _mm512_inserti64x4(_mm512_castsi256_si512(u0), u1, 1);
    } else {
      return _mm512_zextsi256_si512(u0);
    }
  }
}

// [scale of block b x8 | scale of block b+1 x8 (or 0)].
template <GgmlType kType, bool kPair>
inline __m512 load_block_scales(const uint8_t* row, int64_t b) {
  using Block = std::conditional_t<kType == GgmlType::kQ4_0, BlockQ4_0, BlockQ8_0>;
  const Block* blk = reinterpret_cast<const Block*>(row) + b;
  const __m512 lo = _mm512_set1_ps(_cvtsh_ss(blk[0].d));
  const __m256 hi = kPair ? _mm256_set1_ps(_cvtsh_ss(blk[1].d)) : _mm256_setzero_ps();
  return _mm512_insertf32x8(lo, hi, 1);
}

// One step (two blocks, or the last odd block) of an R x T quantized tile.
template <GgmlType kType, int R, int T, bool kPair>
inline void quant_step(const MatmulProblem& p, const uint8_t* const* rows, int64_t t0, int64_t b,
                       int64_t n_blocks, __m512 (&acc)[R][T]) {
  __m512i w[R];
  __m512 w_scale[R];
  for (int r = 0; r < R; ++r) {
    w[r] = load_blocks_u8<kType, kPair>(rows[r], b);
    w_scale[r] = load_block_scales<kType, kPair>(rows[r], b);
  }
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(kWeightOffset<kType>));
  for (int t = 0; t < T; ++t) {
    const int8_t* xq = p.xq + (t0 + t) * p.cols + b * kQK8_0;
    const float* xd = p.xd + (t0 + t) * n_blocks + b;
    const __m512i x = kPair ? _mm512_loadu_si512(xq) : _mm512_zextsi256_si512(_mm256_loadu_si256(
                                                           reinterpret_cast<const __m256i*>(xq)));
    const __m512 x_scale = _mm512_insertf32x8(_mm512_set1_ps(xd[0]),
                                              kPair ? _mm256_set1_ps(xd[1]) : _mm256_setzero_ps(), 1);
    // -offset * (sum of x quants), spread over the lanes that the dot products fill.
    const __m512i bias = _mm512_sub_epi32(_mm512_setzero_si512(),
                                          _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, x));
    for (int r = 0; r < R; ++r) {
      const __m512 dot = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bias, w[r], x));
      acc[r][t] = _mm512_fmadd_ps(dot, _mm512_mul_ps(w_scale[r], x_scale), acc[r][t]);
    }
  }
}

template <GgmlType kType, int R, int T>
void quant_tile(const MatmulProblem& p, int64_t r0, int64_t t0) {
  const int64_t n_blocks = p.cols / kQK8_0;
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = p.weights + (r0 + r) * p.row_bytes;
  int64_t b = 0;
  for (; b + 2 <= n_blocks; b += 2) quant_step<kType, R, T, true>(p, rows, t0, b, n_blocks, acc);
  if (b < n_blocks) quant_step<kType, R, T, false>(p, rows, t0, b, n_blocks, acc);
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) p.y[(t0 + t) * p.rows + r0 + r] = _mm512_reduce_add_ps(acc[r][t]);
}

// 16 weights from column c, masked: lanes past `mask` read nothing and are 0.
template <GgmlType kType>
inline __m512 load16_f32(const uint8_t* row, int64_t c, __mmask16 mask) {
  if constexpr (kType == GgmlType::kF32) {
    return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(row) + c);
  } else if constexpr (kType == GgmlType::kF16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, row + 2 * c));
  } else {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, row + 2 * c));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
}

template <GgmlType kType, int R, int T>
void float_tile(const MatmulProblem& p, int64_t r0, int64_t t0) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = p.weights + (r0 + r) * p.row_bytes;
  const float* xs[T];
  for (int t = 0; t < T; ++t) xs[t] = p.x + (t0 + t) * p.cols;

  for (int64_t c = 0; c < p.cols; c += 16) {
    const __mmask16 mask = tail_mask16(p.cols - c);
    __m512 w[R];
    for (int r = 0; r < R; ++r) w[r] = load16_f32<kType>(rows[r], c, mask);
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, xs[t] + c);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(w[r], xv, acc[r][t]);
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) p.y[(t0 + t) * p.rows + r0 + r] = _mm512_reduce_add_ps(acc[r][t]);
}

template <GgmlType kType, int R, int T>
inline void tile(const MatmulProblem& p, int64_t r0, int64_t t0) {
  if constexpr (kType == GgmlType::kQ4_0 || kType == GgmlType::kQ8_0) {
    quant_tile<kType, R, T>(p, r0, t0);
  } else {
    float_tile<kType, R, T>(p, r0, t0);
  }
}

// Same traversal as the AVX2 file: R x T tiles, then R x 1, 1 x T, 1 x 1 edges.
template <GgmlType kType, int R, int T>
void run_tiles(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
               int64_t tok_end) {
  int64_t r = row_begin;
  for (; r + R <= row_end; r += R) {
    int64_t t = tok_begin;
    for (; t + T <= tok_end; t += T) tile<kType, R, T>(p, r, t);
    for (; t < tok_end; ++t) tile<kType, R, 1>(p, r, t);
  }
  for (; r < row_end; ++r) {
    int64_t t = tok_begin;
    for (; t + T <= tok_end; t += T) tile<kType, 1, T>(p, r, t);
    for (; t < tok_end; ++t) tile<kType, 1, 1>(p, r, t);
  }
}

// 32 zmm registers: prefill tiles are 4 rows x 4 tokens (16 accumulators);
// decode streams 4 rows at a time.
template <GgmlType kType>
void run_type(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
              int64_t tok_end) {
  if (tok_end - tok_begin == 1) {
    run_tiles<kType, 4, 1>(p, row_begin, row_end, tok_begin, tok_end);
  } else {
    run_tiles<kType, 4, 4>(p, row_begin, row_end, tok_begin, tok_end);
  }
}

// Same rounding as the scalar roundf (half away from zero); see the AVX2 file.
inline uint16_t quantize_block(const float* x, int8_t* qs) {
  const __m512 v0 = _mm512_loadu_ps(x);
  const __m512 v1 = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m512 vid = _mm512_set1_ps(id);
  const __m512 half = _mm512_set1_ps(0.5f);
  const __m512i sign_bit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512i one_bits = _mm512_castps_si512(_mm512_set1_ps(1.0f));
  const __m512 v[2] = {v0, v1};
  for (int i = 0; i < 2; ++i) {
    const __m512 scaled = _mm512_mul_ps(v[i], vid);
    const __m512 trunc = _mm512_roundscale_ps(scaled, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(scaled, trunc));  // exact
    const __m512 away = _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(scaled), sign_bit), one_bits));  // +-1
    const __mmask16 round_up = _mm512_cmp_ps_mask(frac, half, _CMP_GE_OQ);
    const __m512 rounded = _mm512_mask_add_ps(trunc, round_up, trunc, away);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16 * i),
                     _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(rounded)));
  }
  return _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
}

}  // namespace

void matmul_tile_avx512(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                        int64_t tok_end) {
  switch (p.type) {
    case GgmlType::kQ4_0: return run_type<GgmlType::kQ4_0>(p, row_begin, row_end, tok_begin, tok_end);
    case GgmlType::kQ8_0: return run_type<GgmlType::kQ8_0>(p, row_begin, row_end, tok_begin, tok_end);
    case GgmlType::kF16: return run_type<GgmlType::kF16>(p, row_begin, row_end, tok_begin, tok_end);
    case GgmlType::kBF16: return run_type<GgmlType::kBF16>(p, row_begin, row_end, tok_begin, tok_end);
    case GgmlType::kF32: return run_type<GgmlType::kF32>(p, row_begin, row_end, tok_begin, tok_end);
  }
}

void quantize_q8_0_avx512(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK8_0; ++b) y[b].d = quantize_block(x + b * kQK8_0, y[b].qs);
}

void quantize_q8_0_split_avx512(const float* x, int8_t* qs, float* d, int64_t n) {
  for (int64_t b = 0; b < n / kQK8_0; ++b)
    d[b] = _cvtsh_ss(quantize_block(x + b * kQK8_0, qs + b * kQK8_0));
}

}  // namespace baton::cpu_kernels
