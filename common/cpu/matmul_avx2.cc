// AVX2 + FMA + F16C matmul, the f32 panels of float-weight prefill, and Q8_0
// quantization.
// Entered only when best_simd_level() >= kAvx2 (see matmul_kernels.h for why
// nothing here may be an inline function or template shared with other files).
//
// Q4_0 / Q8_0: per block of 32, ggml's sign trick turns the signed x signed
// product into maddubs (unsigned x signed -> int16 pairs) + madd (-> int32),
// exact because |w| <= 128 and |q| <= 127 keep the int16 pairs below 2^15.
#include <immintrin.h>

#include "common/cpu/matmul_kernels.h"
#include "common/cpu/simd_avx2.h"

namespace baton::cpu_kernels {
namespace {

using simd_avx2::hmax256;
using simd_avx2::hsum256;

inline float bf16_bits_to_f32(uint16_t h) {
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(h) << 16)));
}

// 32 weights of block b of a row as signed int8 (Q4_0 shifted by -8).
template <GgmlType kType>
inline __m256i load_block_i8(const uint8_t* row, int64_t b) {
  if constexpr (kType == GgmlType::kQ4_0) {
    const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs));
    const __m256i nibbles = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw),
                                             _mm256_set1_epi8(0x0f));
    return _mm256_sub_epi8(nibbles, _mm256_set1_epi8(8));
  } else {
    const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs));
  }
}

template <GgmlType kType>
inline float block_scale(const uint8_t* row, int64_t b) {
  if constexpr (kType == GgmlType::kQ4_0) {
    return _cvtsh_ss(reinterpret_cast<const BlockQ4_0*>(row)[b].d);
  } else {
    return _cvtsh_ss(reinterpret_cast<const BlockQ8_0*>(row)[b].d);
  }
}

// R rows x T tokens of a Q4_0 / Q8_0 matrix times Q8_0 activations.
template <GgmlType kType, int R, int T>
void quant_tile(const MatmulProblem& p, int64_t r0, int64_t t0) {
  const int64_t n_blocks = p.cols / kQK8_0;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  const uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = p.weights + (r0 + r) * p.row_bytes;

  // Decode (T == 1) streams weights from DRAM: prefetch the next tile's rows
  // (R rows further on, the same columns) while this one computes.
  constexpr int64_t kBlockBytes = kType == GgmlType::kQ4_0 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  const int64_t ahead = R * p.row_bytes;
  for (int64_t b = 0; b < n_blocks; ++b) {
    if constexpr (T == 1) {
      if ((b & 1) == 0) {
        for (int r = 0; r < R; ++r) {
          _mm_prefetch(reinterpret_cast<const char*>(rows[r] + ahead + b * kBlockBytes), _MM_HINT_T0);
        }
      }
    }
    __m256i w[R], w_abs[R];
    float w_scale[R];
    for (int r = 0; r < R; ++r) {
      w[r] = load_block_i8<kType>(rows[r], b);
      w_abs[r] = _mm256_sign_epi8(w[r], w[r]);
      w_scale[r] = block_scale<kType>(rows[r], b);
    }
    for (int t = 0; t < T; ++t) {
      const __m256i xq =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.xq + (t0 + t) * p.cols + b * kQK8_0));
      const float x_scale = p.xd[(t0 + t) * n_blocks + b];
      for (int r = 0; r < R; ++r) {
        const __m256i pairs = _mm256_maddubs_epi16(w_abs[r], _mm256_sign_epi8(xq, w[r]));
        const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
        acc[r][t] = _mm256_fmadd_ps(dot, _mm256_set1_ps(w_scale[r] * x_scale), acc[r][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) p.y[(t0 + t) * p.rows + r0 + r] = hsum256(acc[r][t]);
}

template <GgmlType kType>
inline __m256 load8_f32(const uint8_t* row, int64_t c) {
  if constexpr (kType == GgmlType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + c);
  } else if constexpr (kType == GgmlType::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c)));
  } else {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
}

template <GgmlType kType>
inline float load1_f32(const uint8_t* row, int64_t c) {
  if constexpr (kType == GgmlType::kF32) {
    return reinterpret_cast<const float*>(row)[c];
  } else if constexpr (kType == GgmlType::kF16) {
    return _cvtsh_ss(reinterpret_cast<const uint16_t*>(row)[c]);
  } else {
    return bf16_bits_to_f32(reinterpret_cast<const uint16_t*>(row)[c]);
  }
}

// R rows x T tokens of an F32 / F16 / BF16 matrix times f32 activations.
template <GgmlType kType, int R, int T>
void float_tile(const MatmulProblem& p, int64_t r0, int64_t t0) {
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  const uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = p.weights + (r0 + r) * p.row_bytes;
  const float* xs[T];
  for (int t = 0; t < T; ++t) xs[t] = p.x + (t0 + t) * p.cols;

  int64_t c = 0;
  for (; c + 8 <= p.cols; c += 8) {
    __m256 w[R];
    for (int r = 0; r < R; ++r) w[r] = load8_f32<kType>(rows[r], c);
    for (int t = 0; t < T; ++t) {
      const __m256 xv = _mm256_loadu_ps(xs[t] + c);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(w[r], xv, acc[r][t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < R; ++r) {
      float sum = hsum256(acc[r][t]);
      for (int64_t k = c; k < p.cols; ++k) sum += load1_f32<kType>(rows[r], k) * xs[t][k];
      p.y[(t0 + t) * p.rows + r0 + r] = sum;
    }
  }
}

template <GgmlType kType, int R, int T>
inline void tile(const MatmulProblem& p, int64_t r0, int64_t t0) {
  if constexpr (kType == GgmlType::kQ4_0 || kType == GgmlType::kQ8_0) {
    quant_tile<kType, R, T>(p, r0, t0);
  } else {
    float_tile<kType, R, T>(p, r0, t0);
  }
}

// Covers [row_begin, row_end) x [tok_begin, tok_end) with R x T tiles, then
// R x 1, 1 x T and 1 x 1 tiles for the edges. Within a row tile the weights
// stay in L1 while the token tiles go by.
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

// 16 ymm registers: quantized prefill tiles are 2 rows x 4 tokens (8
// accumulators), float ones 4 x 2; decode streams 4 rows at a time.
template <GgmlType kType>
void run_type(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
              int64_t tok_end) {
  constexpr bool kQuant = kType == GgmlType::kQ4_0 || kType == GgmlType::kQ8_0;
  if (tok_end - tok_begin == 1) {
    run_tiles<kType, 4, 1>(p, row_begin, row_end, tok_begin, tok_end);
  } else if constexpr (kQuant) {
    run_tiles<kType, 2, 4>(p, row_begin, row_end, tok_begin, tok_end);
  } else {
    run_tiles<kType, 4, 2>(p, row_begin, row_end, tok_begin, tok_end);
  }
}

// ggml's quantize_row_q8_0 for one block, but rounding half away from zero
// like the scalar roundf (ggml's AVX2 path rounds half to even), so every level
// produces the same quants. Returns the fp16 scale.
inline uint16_t quantize_block(const float* x, int8_t* qs) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 8 * i);
  __m256 amax = _mm256_andnot_ps(sign_bit, v[0]);
  for (int i = 1; i < 4; ++i) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, v[i]));
  const float d = hmax256(amax) / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m256 vid = _mm256_set1_ps(id);
  const __m256 half = _mm256_set1_ps(0.5f);
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256i q[4];
  for (int i = 0; i < 4; ++i) {
    const __m256 scaled = _mm256_mul_ps(v[i], vid);
    const __m256 trunc = _mm256_round_ps(scaled, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_andnot_ps(sign_bit, _mm256_sub_ps(scaled, trunc));  // exact
    const __m256 away = _mm256_or_ps(_mm256_and_ps(scaled, sign_bit), one);        // +-1
    const __m256 bump = _mm256_and_ps(_mm256_cmp_ps(frac, half, _CMP_GE_OQ), away);
    q[i] = _mm256_cvtps_epi32(_mm256_add_ps(trunc, bump));
  }
  // int32 -> int8; packs work within 128-bit lanes, the permute restores order.
  const __m256i q16_01 = _mm256_packs_epi32(q[0], q[1]);
  const __m256i q16_23 = _mm256_packs_epi32(q[2], q[3]);
  const __m256i q8 = _mm256_packs_epi16(q16_01, q16_23);
  const __m256i ordered = _mm256_permutevar8x32_epi32(q8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), ordered);
  return _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
}

// --- F16 / BF16 / F32 prefill, FloatMatmul::kExact: f32 panels ---
//
// The AVX-512 f32 panels (matmul_panel_avx512.cc) at 8 lanes. Why: the
// plain tile above (4 rows x 2 tokens, each (row, token) summed across 8
// lanes) converts 4 weight vectors per 8 FMAs and reads its rows once per
// token pair; here a task packs its rows once, widened to f32,
// "one column of 8 rows per 32 bytes", and every token of the call runs over
// them: 2 strips x 6 tokens = 12 accumulators, each column 2 weight loads, 6
// broadcasts of x and 12 FMAs (no conversion). f32 products and f32 sums as
// the tile computes them, in another order (one chain per row and token
// along the columns), as on AVX-512: a token's outputs do not depend on the
// other tokens of the call or on the task split.
//
// Panel of one task (up to kPanelRows rows = 4 strips of 8), strip s at
// s * strip_floats (cols rounded up to 8, x 8 floats): column c at + 8 c,
// lane i = row 8 s + i's weight. Rows past the matrix (a last strip
// that is not full) repeat the last row and are never stored.

constexpr int kStripRows = 8;
static_assert(kPanelRows % kStripRows == 0, "a panel is whole strips");

// 8 x 8 floats in place: r[j] lane i = r[i] lane j.
inline void transpose8(__m256 (&r)[8]) {
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  __m256 u[8];
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// Packs rows [r0, r0 + 8) (clamped to the matrix) into one strip.
template <GgmlType kType>
void pack_strip(const MatmulProblem& p, int64_t r0, float* strip) {
  const uint8_t* rows[kStripRows];
  for (int i = 0; i < kStripRows; ++i) rows[i] = p.weights + (r0 + i < p.rows ? r0 + i : p.rows - 1) * p.row_bytes;
  int64_t c = 0;
  for (; c + 8 <= p.cols; c += 8) {
    __m256 m[8];
    for (int i = 0; i < kStripRows; ++i) m[i] = load8_f32<kType>(rows[i], c);
    transpose8(m);  // m[j]: column c + j of every row
    for (int j = 0; j < 8; ++j) _mm256_storeu_ps(strip + (c + j) * 8, m[j]);
  }
  for (; c < p.cols; ++c) {
    for (int i = 0; i < kStripRows; ++i) strip[c * 8 + i] = load1_f32<kType>(rows[i], c);
  }
}

// Rows [r0, r0 + 8 S) of the panel x tokens [t0, t0 + T); `rows` of the last
// strip are stored (1..8).
template <int S, int T>
void f32_kernel(const MatmulProblem& p, const float* panel, int64_t strip_floats, int64_t r0, int64_t t0,
                int last_rows) {
  __m256 acc[S][T];
  for (int s = 0; s < S; ++s)
    for (int t = 0; t < T; ++t) acc[s][t] = _mm256_setzero_ps();
  const int64_t cols = p.cols;
  const float* xs[T];
  for (int t = 0; t < T; ++t) xs[t] = p.x + (t0 + t) * cols;
  // cols >= 1 (a matmul of no columns has no tiles). A do-while: with a
  // loop that may run zero times, GCC 12 keeps a stack copy of every
  // accumulator and stores to it after each FMA.
  int64_t c = 0;
  do {
    __m256 w[S];
    for (int s = 0; s < S; ++s) w[s] = _mm256_loadu_ps(panel + s * strip_floats + c * 8);
    for (int t = 0; t < T; ++t) {
      const __m256 xv = _mm256_broadcast_ss(xs[t] + c);
      for (int s = 0; s < S; ++s) {
        acc[s][t] = _mm256_fmadd_ps(w[s], xv, acc[s][t]);
      }
    }
  } while (++c < cols);
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int s = 0; s < S; ++s) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(s == S - 1 ? last_rows : kStripRows), lanes);
    for (int t = 0; t < T; ++t) _mm256_maskstore_ps(p.y + (t0 + t) * p.rows + r0 + s * kStripRows, mask, acc[s][t]);
  }
}

// Every token of [tok_begin, tok_end) over S strips from r0.
template <int S>
void f32_tokens(const MatmulProblem& p, const float* panel, int64_t strip_floats, int64_t r0, int64_t tok_begin,
                int64_t tok_end, int last_rows) {
  // 16 ymm registers: S x T accumulators, S weights, one broadcast of x.
  constexpr int kTokens = S == 2 ? 6 : 12;
  int64_t t = tok_begin;
  for (; t + kTokens <= tok_end; t += kTokens) f32_kernel<S, kTokens>(p, panel, strip_floats, r0, t, last_rows);
  for (; t + 4 <= tok_end; t += 4) f32_kernel<S, 4>(p, panel, strip_floats, r0, t, last_rows);
  for (; t + 2 <= tok_end; t += 2) f32_kernel<S, 2>(p, panel, strip_floats, r0, t, last_rows);
  for (; t < tok_end; ++t) f32_kernel<S, 1>(p, panel, strip_floats, r0, t, last_rows);
}

template <GgmlType kType>
void f32_rows(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin, int64_t tok_end,
              uint8_t* scratch) {
  const int64_t strip_floats = (p.cols + 7) / 8 * 8 * kStripRows;
  float* panel = reinterpret_cast<float*>(scratch);
  for (int64_t r = row_begin; r < row_end; r += kPanelRows) {
    const int64_t rows = row_end - r < kPanelRows ? row_end - r : kPanelRows;
    const int strips = static_cast<int>((rows + kStripRows - 1) / kStripRows);
    for (int s = 0; s < strips; ++s) pack_strip<kType>(p, r + s * kStripRows, panel + s * strip_floats);
    // Strips in pairs (2 x 6 tokens), an odd last one alone (1 x 12).
    for (int s = 0; s < strips; s += 2) {
      const int pair = strips - s >= 2 ? 2 : 1;
      const int last_rows = static_cast<int>(rows - (s + pair - 1) * kStripRows);
      const int64_t r0 = r + s * kStripRows;
      if (pair == 2) {
        f32_tokens<2>(p, panel + s * strip_floats, strip_floats, r0, tok_begin, tok_end, last_rows);
      } else {
        f32_tokens<1>(p, panel + s * strip_floats, strip_floats, r0, tok_begin, tok_end, last_rows);
      }
    }
  }
}

}  // namespace

void matmul_tile_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
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

void quantize_q8_0_avx2(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK8_0; ++b) y[b].d = quantize_block(x + b * kQK8_0, y[b].qs);
}

void quantize_q8_0_split_avx2(const float* x, int8_t* qs, float* d, int64_t n) {
  for (int64_t b = 0; b < n / kQK8_0; ++b)
    d[b] = _cvtsh_ss(quantize_block(x + b * kQK8_0, qs + b * kQK8_0));
}

void f32_panel_tile_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                         int64_t tok_end, uint8_t* scratch) {
  switch (p.type) {
    case GgmlType::kF16: return f32_rows<GgmlType::kF16>(p, row_begin, row_end, tok_begin, tok_end, scratch);
    case GgmlType::kBF16: return f32_rows<GgmlType::kBF16>(p, row_begin, row_end, tok_begin, tok_end, scratch);
    case GgmlType::kF32: return f32_rows<GgmlType::kF32>(p, row_begin, row_end, tok_begin, tok_end, scratch);
    default: return;
  }
}

}  // namespace baton::cpu_kernels
