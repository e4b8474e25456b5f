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


#include "common/cpu/matmul_kernels.h"

namespace baton::cpu_kernels {
namespace {

// xbias_blocks of 16 blocks from their quant sums: -kQ4_0NibbleOffset x sum,
// as a shift.
static_assert(kQ4_0NibbleOffset == 1 << 3, "the Q4_0 bias is a shift by 3");
__m512i q4_0_x_bias16(__m512i sums) {
  return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sums, 3));
}

inline __mmask16 tail_mask16(int64_t left) {
  return static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1);
}

template <GgmlType kType>
constexpr int kWeightOffset = kType == GgmlType::kQ4_0 ? 8 : 128;

// Lane layout of one step (two blocks b, b+1; or b alone with zeros for b+1),
// in 128-bit lanes of 16 bytes:
//   Q8_0: [b 0..15 | b 16..31 | b+1 0..15 | b+1 16..31]  (the natural order)
//   Q4_0: [b 0..15 | b+1 0..15 | b 16..31 | b+1 16..31]  (low nibbles, then high:
//         cheaper to build from packed nibbles; x quants are permuted to match)
// Scales are spread to the int32 lanes their block's products land in.

// The step's weights as offset unsigned bytes, in the layout above.
template <GgmlType kType, bool kPair>
inline __m512i load_weights_u8(const uint8_t* row, int64_t b) {
  if constexpr (kType == GgmlType::kQ4_0) {
    const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
    __m256i packed = _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[0].qs)));
    if constexpr (kPair) {
      packed = _mm256_inserti128_si256(packed, _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[1].qs)), 1);
    } else {
      packed = _mm256_zextsi128_si256(_mm256_castsi256_si128(packed));
    }
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(packed), _mm256_srli_epi16(packed, 4), 1);
    return _mm512_and_si512(both, _mm512_set1_epi8(0x0f));
  } else {
    const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
    const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[0].qs));
    const __m256i q1 = kPair ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[1].qs))
                             : _mm256_set1_epi8(static_cast<char>(0x80));  // -> 0 after the xor
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
    return _mm512_xor_si512(both, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
}

// The step's two fp16 weight scales, widened and spread over the int32 lanes
// (one masked load + vpermw + vcvtph2ps instead of scalar conversions).
template <GgmlType kType, bool kPair>
inline __m512 load_weight_scales(const uint8_t* row, int64_t b) {
  if constexpr (kType == GgmlType::kQ4_0) {
    // d of block b is word 0, d of block b+1 is word 9 (18-byte blocks).
    const __m256i idx = _mm256_setr_epi16(0, 0, 0, 0, 9, 9, 9, 9, 0, 0, 0, 0, 9, 9, 9, 9);
    const __m256i halves = _mm256_maskz_loadu_epi16(kPair ? 0x201 : 0x1, row + b * sizeof(BlockQ4_0));
    return _mm512_cvtph_ps(_mm256_permutexvar_epi16(idx, halves));
  } else {
    // d of block b is word 0, d of block b+1 is word 17 (34-byte blocks).
    const __m512i idx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  //
                                         17, 17, 17, 17, 17, 17, 17, 17, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i halves = _mm512_maskz_loadu_epi16(kPair ? 0x20001 : 0x1, row + b * sizeof(BlockQ8_0));
    return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(idx, halves)));
  }
}

// The step's x quants (token row xq at block b) in the weights' layout.
template <GgmlType kType, bool kPair>
inline __m512i load_x_quants(const int8_t* xq) {
  const __m512i x = kPair ? _mm512_loadu_si512(xq)
                          : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq)));
  if constexpr (kType == GgmlType::kQ4_0) {
    return _mm512_shuffle_i64x2(x, x, _MM_SHUFFLE(3, 1, 2, 0));
  } else {
    return x;
  }
}

// The step's two f32 x scales spread like the weight scales.
template <GgmlType kType, bool kPair>
inline __m512 load_x_scales(const float* xd) {
  const __m512i idx = kType == GgmlType::kQ4_0
                          ? _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1)
                          : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  return _mm512_permutexvar_ps(idx, _mm512_maskz_loadu_ps(kPair ? 0x3 : 0x1, xd));
}

// One step (two blocks, or the last odd block) of an R x T quantized tile.
template <GgmlType kType, int R, int T, bool kPair>
inline void quant_step(const MatmulProblem& p, const uint8_t* const* rows, int64_t t0, int64_t b,
                       int64_t n_blocks, __m512 (&acc)[R][T]) {
  __m512i w[R];
  __m512 w_scale[R];
  for (int r = 0; r < R; ++r) {
    w[r] = load_weights_u8<kType, kPair>(rows[r], b);
    w_scale[r] = load_weight_scales<kType, kPair>(rows[r], b);
  }
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(kWeightOffset<kType>));
  for (int t = 0; t < T; ++t) {
    const __m512i x = load_x_quants<kType, kPair>(p.xq + (t0 + t) * p.cols + b * kQK8_0);
    const __m512 x_scale = load_x_scales<kType, kPair>(p.xd + (t0 + t) * n_blocks + b);
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
  // Decode (T == 1) streams weights from DRAM: prefetch the next tile's rows
  // (R rows further on, the same columns) while this one computes.
  constexpr int64_t kBlockBytes = kType == GgmlType::kQ4_0 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  const int64_t ahead = R * p.row_bytes;
  for (; b + 2 <= n_blocks; b += 2) {
    if constexpr (T == 1) {
      for (int r = 0; r < R; ++r) {
        _mm_prefetch(reinterpret_cast<const char*>(rows[r] + ahead + b * kBlockBytes), _MM_HINT_T0);
      }
    }
    quant_step<kType, R, T, true>(p, rows, t0, b, n_blocks, acc);
  }
  if (b < n_blocks) quant_step<kType, R, T, false>(p, rows, t0, b, n_blocks, acc);
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) p.y[(t0 + t) * p.rows + r0 + r] = _mm512_reduce_add_ps(acc[r][t]);
}

// Q4_0 decode (one token): four blocks per step, so one int32 accumulator
// register holds whole blocks and the scales are applied once per four blocks.
// Per row and step: the 72 bytes of blocks b..b+3 arrive in two loads; one
// two-source word permute gathers their packed nibbles into
//   packed = [qs(b) | qs(b+1) | qs(b+2) | qs(b+3)]   (16 bytes per 128-bit lane)
// and the low / high nibbles (elements 0..15 / 16..31 of each block) meet x
// quants arranged the same way (xa / xb, built once per step for all rows).
// Lane k of the int32 result holds block b+k's dot product in lanes 4k..4k+3.
// Weights are read once from DRAM, so later tiles' rows are prefetched
// while this one computes.
// T > 1 (matmul_decode_order: a speculative draft, a step of several
// sessions): the unpacked weights of a row serve T tokens, and each token
// goes through exactly the operations, in the same order, of T = 1 on that
// token alone, so its results are bit-identical to a decode step's.
template <int R, int T>
void q4_0_decode_tile(const MatmulProblem& p, int64_t r0, int64_t t0) {
  const int64_t n_blocks = p.cols / kQK8_0;
  constexpr int64_t kGroupBytes = 4 * sizeof(BlockQ4_0);  // 72
  const uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = p.weights + (r0 + r) * p.row_bytes;
  const int64_t ahead = R * p.row_bytes;
  // Words 9k+1..9k+8 are block k's nibbles; 32.. index the second source.
  alignas(64) static constexpr int16_t kQsWords[32] = {1,  2,  3,  4,  5,  6,  7,  8,  10, 11, 12,
                                                       13, 14, 15, 16, 17, 19, 20, 21, 22, 23, 24,
                                                       25, 26, 28, 29, 30, 31, 32, 33, 34, 35};
  // Word 9k is block k's fp16 scale: spread over the block's four lanes.
  alignas(64) static constexpr int16_t kScaleWords[32] = {0, 0, 0, 0, 9, 9, 9, 9, 18, 18, 18, 18, 27, 27, 27, 27};
  const __m512i qs_index = _mm512_load_si512(kQsWords);
  const __m512i d_index = _mm512_load_si512(kScaleWords);
  const __m512i xd_index = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
  const __m512i eight = _mm512_set1_epi8(8);
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();

  int64_t b = 0;
  for (; b + 4 <= n_blocks; b += 4) {
    __m512i xa[T], xb[T], bias[T];
    __m512 x_scale[T];
    for (int t = 0; t < T; ++t) {
      const int8_t* xq = p.xq + (t0 + t) * p.cols;
      const __m512i x0 = _mm512_loadu_si512(xq + b * kQK8_0);       // blocks b, b+1
      const __m512i x1 = _mm512_loadu_si512(xq + b * kQK8_0 + 64);  // blocks b+2, b+3
      xa[t] = _mm512_shuffle_i64x2(x0, x1, _MM_SHUFFLE(2, 0, 2, 0));  // elements 0..15
      xb[t] = _mm512_shuffle_i64x2(x0, x1, _MM_SHUFFLE(3, 1, 3, 1));  // elements 16..31
      x_scale[t] =
          _mm512_permutexvar_ps(xd_index, _mm512_castps128_ps512(_mm_loadu_ps(p.xd + (t0 + t) * n_blocks + b)));
      // The weights enter as nibble + 8: start each block at -8 * sum(x quants).
      bias[t] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                 _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, xa[t]), eight,
                                                     xb[t]));
    }
    for (int r = 0; r < R; ++r) {
      const uint8_t* group = rows[r] + b * sizeof(BlockQ4_0);
      // Near (next tile, into L1) and far (four tiles on, into L2): the far
      // one keeps more DRAM requests in flight than L1's fill buffers allow.
      _mm_prefetch(reinterpret_cast<const char*>(group + ahead), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(group + ahead + kGroupBytes - 1), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(group + 4 * ahead), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(group + 4 * ahead + kGroupBytes - 1), _MM_HINT_T1);
      const __m512i head = _mm512_loadu_si512(group);                                     // bytes 0..63
      const __m512i tail = _mm512_castsi128_si512(_mm_maskz_loadu_epi16(0xf, group + 64));  // bytes 64..71
      const __m512i packed = _mm512_permutex2var_epi16(head, qs_index, tail);
      const __m512i wa = _mm512_and_si512(packed, low_nibbles);
      const __m512i wb = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low_nibbles);
      const __m512 w_scale = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(d_index, head)));
      for (int t = 0; t < T; ++t) {
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(bias[t], wa, xa[t]), wb, xb[t]);
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(w_scale, x_scale[t]), acc[r][t]);
      }
    }
  }
  if (b < n_blocks) {  // 1..3 blocks left: the pairwise steps, same accumulators
    for (int t = 0; t < T; ++t) {
      __m512 tail_acc[R][1];
      for (int r = 0; r < R; ++r) tail_acc[r][0] = acc[r][t];
      int64_t bt = b;
      for (; bt + 2 <= n_blocks; bt += 2) {
        quant_step<GgmlType::kQ4_0, R, 1, true>(p, rows, t0 + t, bt, n_blocks, tail_acc);
      }
      if (bt < n_blocks) quant_step<GgmlType::kQ4_0, R, 1, false>(p, rows, t0 + t, bt, n_blocks, tail_acc);
      for (int r = 0; r < R; ++r) acc[r][t] = tail_acc[r][0];
    }
  }
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
  if (kType == GgmlType::kQ4_0 && tok_end - tok_begin == 1) {
    int64_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) q4_0_decode_tile<4, 1>(p, r, tok_begin);
    for (; r < row_end; ++r) q4_0_decode_tile<1, 1>(p, r, tok_begin);
  } else if (tok_end - tok_begin == 1) {
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

// vshufps on dwords: in each 128-bit lane, two of x's, then two of y's.
template <int kImm>
inline __m512i shuffle_dwords(__m512i x, __m512i y) {
  return _mm512_castps_si512(_mm512_shuffle_ps(_mm512_castsi512_ps(x), _mm512_castsi512_ps(y), kImm));
}

// Lane i of the result = op over the 16 lanes of a[i] (op: max_ps or
// add_epi32, both exact in any order), by a transposing tree: 256-bit halves,
// then 128-bit quarters, then pairs, then single lanes of two vectors at a
// time (3 instructions per joined pair, 45 for the 16), which leaves a[4j + k]
// in lane 4k + j; one permute puts it in lane 4j + k.
template <typename Op>
inline __m512i reduce16x16_lanes(__m512i (&a)[16], Op op) {
  for (int i = 0; i < 8; ++i) {
    a[i] = op(_mm512_shuffle_i32x4(a[2 * i], a[2 * i + 1], 0x44), _mm512_shuffle_i32x4(a[2 * i], a[2 * i + 1], 0xEE));
  }
  for (int i = 0; i < 4; ++i) {
    a[i] = op(_mm512_shuffle_i32x4(a[2 * i], a[2 * i + 1], 0x88), _mm512_shuffle_i32x4(a[2 * i], a[2 * i + 1], 0xDD));
  }
  for (int i = 0; i < 2; ++i) {
    a[i] = op(shuffle_dwords<0x44>(a[2 * i], a[2 * i + 1]), shuffle_dwords<0xEE>(a[2 * i], a[2 * i + 1]));
  }
  const __m512i r = op(shuffle_dwords<0x88>(a[0], a[1]), shuffle_dwords<0xDD>(a[0], a[1]));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_epi32(order, r);
}

// Sixteen blocks of 32 floats from x, quantized as quantize_block does (the
// same bits: a max is exact in any order, and d, 1 / d and the fp16 rounding
// are the same IEEE operations on vectors): block b's quants to qs_of(b) (32
// bytes), the blocks' fp16 scales returned; with kSums, *sums lane b = the
// sum of block b's 32 quants (exact in int32).
// x_of(b): block b's 32 floats (consecutive blocks of a row, or one block of
// 16 rows).
template <bool kSums, typename XOf, typename QsOf>
inline __m256i quantize_16_blocks_of(XOf x_of, QsOf qs_of, __m512i* sums) {
  __m512i amax[16];
  for (int b = 0; b < 16; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x_of(b)), v1 = _mm512_loadu_ps(x_of(b) + 16);
    amax[b] = _mm512_castps_si512(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
  }
  const __m512 vmax = _mm512_castsi512_ps(reduce16x16_lanes(amax, [](__m512i p, __m512i q) {
    return _mm512_castps_si512(_mm512_max_ps(_mm512_castsi512_ps(p), _mm512_castsi512_ps(q)));
  }));
  const __m512 d = _mm512_div_ps(vmax, _mm512_set1_ps(127.0f));
  const __mmask16 nonzero = _mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_UQ);
  alignas(64) float ids[16];
  _mm512_store_ps(ids, _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(1.0f), d));
  const __m512 half = _mm512_set1_ps(0.5f);
  const __m512i sign_bit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512i one_bits = _mm512_castps_si512(_mm512_set1_ps(1.0f));
  __m512i block_sums[16];
  for (int b = 0; b < 16; ++b) {
    const __m512 vid = _mm512_set1_ps(ids[b]);
    int8_t* qs = qs_of(b);
    __m512i q[2];
    for (int i = 0; i < 2; ++i) {
      const __m512 scaled = _mm512_mul_ps(_mm512_loadu_ps(x_of(b) + 16 * i), vid);
      const __m512 trunc = _mm512_roundscale_ps(scaled, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(scaled, trunc));  // exact
      const __m512 away = _mm512_castsi512_ps(
          _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(scaled), sign_bit), one_bits));  // +-1
      const __mmask16 round_up = _mm512_cmp_ps_mask(frac, half, _CMP_GE_OQ);
      q[i] = _mm512_cvtps_epi32(_mm512_mask_add_ps(trunc, round_up, trunc, away));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16 * i), _mm512_cvtsepi32_epi8(q[i]));
    }
    // |q| <= 127 (|x| <= amax, so |x| / d rounds to at most 127): the sum of
    // the int32s is the sum of the stored bytes.
    if constexpr (kSums) block_sums[b] = _mm512_add_epi32(q[0], q[1]);
  }
  if constexpr (kSums) *sums = reduce16x16_lanes(block_sums, [](__m512i p, __m512i q) { return _mm512_add_epi32(p, q); });
  return _mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// Sixteen consecutive blocks of one row at x.
template <bool kSums, typename QsOf>
inline __m256i quantize_16_blocks(const float* x, QsOf qs_of, __m512i* sums) {
  return quantize_16_blocks_of<kSums>([x](int b) { return x + 32 * b; }, qs_of, sums);
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
    default: break;  // not (yet) supported: handled below
  }
}

void decode_tile_avx512(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                        int64_t tok_end) {
  if (p.type != GgmlType::kQ4_0) {
    for (int64_t t = tok_begin; t < tok_end; ++t) matmul_tile_avx512(p, row_begin, row_end, t, t + 1);
    return;
  }
  // Tokens in pairs (two tokens' x and four rows' accumulators fit the 32
  // registers), each as the one-token tile computes it.
  int64_t r = row_begin;
  for (; r + 4 <= row_end; r += 4) {
    int64_t t = tok_begin;
    for (; t + 2 <= tok_end; t += 2) q4_0_decode_tile<4, 2>(p, r, t);
    if (t < tok_end) q4_0_decode_tile<4, 1>(p, r, t);
  }
  for (; r < row_end; ++r) {
    int64_t t = tok_begin;
    for (; t + 2 <= tok_end; t += 2) q4_0_decode_tile<1, 2>(p, r, t);
    if (t < tok_end) q4_0_decode_tile<1, 1>(p, r, t);
  }
}

// Sixteen blocks at a time (quantize_16_blocks), the rest one by one: the
// same bits either way.
void quantize_q8_0_avx512(const float* x, BlockQ8_0* y, int64_t n) {
  const int64_t n_blocks = n / kQK8_0;
  int64_t b = 0;
  for (; b + 16 <= n_blocks; b += 16) {
    alignas(32) uint16_t d[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(d),
                       quantize_16_blocks<false>(x + b * kQK8_0, [&](int i) { return y[b + i].qs; }, nullptr));
    for (int i = 0; i < 16; ++i) y[b + i].d = d[i];
  }
  for (; b < n_blocks; ++b) y[b].d = quantize_block(x + b * kQK8_0, y[b].qs);
}

void quantize_q8_0_split_avx512(const float* x, int8_t* qs, float* d, int64_t n) {
  const int64_t n_blocks = n / kQK8_0;
  int64_t b = 0;
  for (; b + 16 <= n_blocks; b += 16) {
    const __m256i h = quantize_16_blocks<false>(x + b * kQK8_0, [&](int i) { return qs + (b + i) * kQK8_0; }, nullptr);
    _mm512_storeu_ps(d + b, _mm512_cvtph_ps(h));
  }
  for (; b < n_blocks; ++b) d[b] = _cvtsh_ss(quantize_block(x + b * kQK8_0, qs + b * kQK8_0));
}

void quantize_q8_0_packed_avx512(const float* x, int64_t cols, int64_t n_tokens, int64_t t, int8_t* qs, float* d,
                                 int8_t* xq_blocks, int32_t* xbias_blocks, float* xd_blocks) {
  const int64_t n_blocks = cols / kQK8_0;
  int64_t b = 0;
  for (; b + 16 <= n_blocks; b += 16) {
    __m512i sums;
    const __m256i h = quantize_16_blocks<true>(x + b * kQK8_0, [&](int i) { return qs + (b + i) * kQK8_0; }, &sums);
    const __m512 scales = _mm512_cvtph_ps(h);
    _mm512_storeu_ps(d + b, scales);
    alignas(64) int32_t bias[16];
    _mm512_store_si512(bias, q4_0_x_bias16(sums));
    for (int i = 0; i < 16; ++i) {
      const int64_t at = (b + i) * n_tokens + t;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(xq_blocks + at * kQK8_0),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + (b + i) * kQK8_0)));
      xbias_blocks[at] = bias[i];
      xd_blocks[at] = d[b + i];
    }
  }
  if (b == n_blocks) return;
  // The last blocks (cols not a multiple of 512): one by one, then the
  // two-step path's copy of them (blocks b.. of the block-major arrays).
  const int64_t tail_cols = (n_blocks - b) * kQK8_0;
  quantize_q8_0_split_avx512(x + b * kQK8_0, qs + b * kQK8_0, d + b, tail_cols);
  packed_activations_avx2(qs + b * kQK8_0, d + b, tail_cols, n_tokens, t, xq_blocks + b * n_tokens * kQK8_0,
                          xbias_blocks + b * n_tokens, xd_blocks + b * n_tokens);
}

void quantize_q8_0_block_major_avx512(const float* x, int64_t cols, int64_t n_tokens, int64_t b_begin, int64_t b_end,
                                      int8_t* xq_blocks, int32_t* xbias_blocks, float* xd_blocks) {
  for (int64_t b = b_begin; b < b_end; ++b) {
    const float* column = x + b * kQK8_0;  // block b of token 0
    const int64_t at = b * n_tokens;       // block b, token 0 in the block-major arrays
    int64_t t = 0;
    for (; t + 16 <= n_tokens; t += 16) {
      __m512i sums;
      const __m256i h = quantize_16_blocks_of<true>([&](int i) { return column + (t + i) * cols; },
                                                    [&](int i) { return xq_blocks + (at + t + i) * kQK8_0; }, &sums);
      _mm512_storeu_ps(xd_blocks + at + t, _mm512_cvtph_ps(h));
      _mm512_storeu_si512(xbias_blocks + at + t, q4_0_x_bias16(sums));
    }
    for (; t < n_tokens; ++t) {  // the last tokens one by one: the same bits
      int8_t* qs = xq_blocks + (at + t) * kQK8_0;
      xd_blocks[at + t] = _cvtsh_ss(quantize_block(column + t * cols, qs));
      int32_t sum = 0;
      for (int i = 0; i < kQK8_0; ++i) sum += qs[i];
      xbias_blocks[at + t] = -kQ4_0NibbleOffset * sum;
    }
  }
}

}  // namespace baton::cpu_kernels
