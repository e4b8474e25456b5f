// AVX2 prefill of F16 / BF16 / F32 weights, FloatMatmul::kExact: the AVX-512
// f32 panels (matmul_panel_avx512.cc) at 8 lanes. Entered only when
// best_simd_level() >= kAvx2 (see matmul_kernels.h for why nothing here may
// be an inline function or template shared with other files).
//
// Why: the plain tile (matmul_avx2.cc, 4 rows x 2 tokens, each (row, token)
// summed across 8 lanes) converts 4 weight vectors per 8 FMAs and reads its
// rows once per token pair; here a task packs its rows once, widened to f32,
// "one column of 8 rows per 32 bytes", and every token of the call runs over
// them: 2 strips x 6 tokens = 12 accumulators, each column 2 weight loads, 6
// broadcasts of x and 12 FMAs (no conversion). f32 products and f32 sums as
// the tile computes them, in another order (one chain per row and token
// along the columns), as on AVX-512: a token's outputs do not depend on the
// other tokens of the call or on the task split.
//
// Panel of one task (up to kPanelRows rows = 4 strips of 8), strip s at
// s * strip_bytes (strip_bytes = cols rounded up to 8, x 32): column c at
// + 32 c, lane i = row 8 s + i's weight. Rows past the matrix (a last strip
// that is not full) repeat the last row and are never stored.
#include <immintrin.h>

#include "common/cpu/matmul_kernels.h"

namespace baton::cpu_kernels {
namespace {

constexpr int kStripRows = 8;
constexpr int kStrips = static_cast<int>(kPanelRows) / kStripRows;

int64_t strip_bytes_for(int64_t cols) { return (cols + 7) / 8 * 8 * 32; }

// 8 weights of one row from column c (c + 8 <= cols), as f32.
template <GgmlType kType>
inline __m256 load8(const uint8_t* row, int64_t c) {
  if constexpr (kType == GgmlType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + c);
  } else if constexpr (kType == GgmlType::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c)));
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

// One weight of one row, as f32 (the columns past the last multiple of 8).
template <GgmlType kType>
inline float load1(const uint8_t* row, int64_t c) {
  if constexpr (kType == GgmlType::kF32) {
    return reinterpret_cast<const float*>(row)[c];
  } else if constexpr (kType == GgmlType::kF16) {
    return _cvtsh_ss(reinterpret_cast<const uint16_t*>(row)[c]);
  } else {
    uint32_t bits = uint32_t{reinterpret_cast<const uint16_t*>(row)[c]} << 16;
    float f;
    __builtin_memcpy(&f, &bits, sizeof(f));
    return f;
  }
}

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
    for (int i = 0; i < kStripRows; ++i) m[i] = load8<kType>(rows[i], c);
    transpose8(m);  // m[j]: column c + j of every row
    for (int j = 0; j < 8; ++j) _mm256_storeu_ps(strip + (c + j) * 8, m[j]);
  }
  for (; c < p.cols; ++c) {
    for (int i = 0; i < kStripRows; ++i) strip[c * 8 + i] = load1<kType>(rows[i], c);
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
  const int64_t strip_floats = strip_bytes_for(p.cols) / 4;
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

static_assert(kStrips * kStripRows == kPanelRows);

}  // namespace

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
