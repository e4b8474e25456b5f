// AVX-512 BF16 prefill GEMM for float weights (F16 / BF16 / F32): the cloud
// CPU backend's fast path (FloatMatmul::kBf16), not the golden-exact one.
// Entered only when cpu_features().avx512bf16 and best_simd_level() ==
// kAvx512 (see matmul_kernels.h for why nothing here may be an inline
// function or template shared with other files).
//
// vdpbf16ps adds, to each f32 lane, the products of a PAIR of bf16 values:
// 32 multiply-adds per instruction where an f32 FMA does 16. As in the int8
// panel kernel, a register's 16 lanes are 16 rows: one k-step (2 columns) of
// 16 rows is 64 bytes, [row i: w(i, 2j), w(i, 2j+1)] in lane i, and x enters
// as one broadcast pair. There are no per-block scales: the f32 accumulators
// take every step directly. Weights are rounded to bf16 (8 mantissa bits,
// round to nearest even) when a task packs its rows; x when the call starts.
// Error: about 2^-9 relative per product, below what the KV's INT8 (2^-8 of
// its range) loses next.
//
// Panel of one strip (16 rows) = cols_padded / 2 steps of 64 bytes; columns
// past `cols` (up to a multiple of 32) are zero in both weights and x.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "common/cpu/matmul_kernels.h"

namespace baton::cpu_kernels {

// In matmul_panel_avx512.cc: 16 x 16 dwords in place, r[j] lane i = r[i] lane j.
void transpose_16x16_dwords_avx512(__m512i* r);

namespace {

constexpr int kStripRows = 16;

// 32 weights of row `row` from column c (fewer at the tail, zero-filled) as f32.
template <GgmlType kType>
inline void load32_f32(const uint8_t* row, int64_t c, int64_t cols, __m512& lo, __m512& hi) {
  const int64_t left = cols - c;
  const __mmask16 m_lo = static_cast<__mmask16>(left >= 16 ? 0xffff : left <= 0 ? 0 : (1u << left) - 1);
  const __mmask16 m_hi =
      static_cast<__mmask16>(left >= 32 ? 0xffff : left <= 16 ? 0 : (1u << (left - 16)) - 1);
  if constexpr (kType == GgmlType::kF32) {
    lo = _mm512_maskz_loadu_ps(m_lo, reinterpret_cast<const float*>(row) + c);
    hi = _mm512_maskz_loadu_ps(m_hi, reinterpret_cast<const float*>(row) + c + 16);
  } else if constexpr (kType == GgmlType::kF16) {
    lo = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m_lo, row + 2 * c));
    hi = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m_hi, row + 2 * (c + 16)));
  } else {
    lo = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m_lo, row + 2 * c)), 16));
    hi = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m_hi, row + 2 * (c + 16))), 16));
  }
}

// Packs rows [r0, r0 + 16) (clamped to the matrix) into one strip's panel.
template <GgmlType kType>
void pack_strip(const MatmulProblem& p, int64_t r0, int64_t cols_padded, uint8_t* panel) {
  const uint8_t* rows[kStripRows];
  for (int i = 0; i < kStripRows; ++i) {
    const int64_t r = r0 + i < p.rows ? r0 + i : p.rows - 1;
    rows[i] = p.weights + r * p.row_bytes;
  }
  for (int64_t c = 0; c < cols_padded; c += 32) {
    __m512i m[16];  // m[i]: row i's 32 bf16 of columns c..c+31 = 16 pairs
    for (int i = 0; i < kStripRows; ++i) {
      __m512 lo, hi;
      load32_f32<kType>(rows[i], c, p.cols, lo, hi);
      m[i] = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
    }
    transpose_16x16_dwords_avx512(m);  // m[j]: pair j of every row
    uint8_t* out = panel + c / 2 * 64;
    for (int j = 0; j < 16; ++j) _mm512_storeu_si512(out + 64 * j, m[j]);
  }
}

// S strips x T tokens; steps of 2 columns. The same operations per (row,
// token) whatever S and T are.
template <int S, int T>
void bf16_kernel(const MatmulProblem& p, const uint8_t* panel, int64_t strip_bytes, int64_t steps, int64_t r0,
                 int64_t t0, __mmask16 last_mask) {
  __m512 acc[S][T];
  for (int s = 0; s < S; ++s)
    for (int t = 0; t < T; ++t) acc[s][t] = _mm512_setzero_ps();
  const uint8_t* x = p.xu + t0 * steps * 4;  // [n_tokens, steps] pairs of bf16
  const int64_t x_stride = steps * 4;
  for (int64_t j = 0; j < steps; ++j) {
    __m512bh w[S];
    for (int s = 0; s < S; ++s) {
      w[s] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(panel + s * strip_bytes + j * 64));
    }
    for (int t = 0; t < T; ++t) {
      int32_t pair;
      __builtin_memcpy(&pair, x + t * x_stride + 4 * j, 4);
      const __m512bh xb = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
      for (int s = 0; s < S; ++s) acc[s][t] = _mm512_dpbf16_ps(acc[s][t], w[s], xb);
    }
  }
  for (int s = 0; s < S; ++s) {
    const __mmask16 mask = s == S - 1 ? last_mask : static_cast<__mmask16>(0xffff);
    for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(p.y + (t0 + t) * p.rows + r0 + s * kStripRows, mask, acc[s][t]);
  }
}

template <int S>
void run_tokens(const MatmulProblem& p, const uint8_t* panel, int64_t strip_bytes, int64_t steps, int64_t r0,
                int64_t tok_begin, int64_t tok_end, __mmask16 last_mask) {
  constexpr int kTokens = 12;  // 2 x 12 accumulators + 2 weights + x: 27 of the 32 registers
  int64_t t = tok_begin;
  for (; t + kTokens <= tok_end; t += kTokens) bf16_kernel<S, kTokens>(p, panel, strip_bytes, steps, r0, t, last_mask);
  for (; t + 4 <= tok_end; t += 4) bf16_kernel<S, 4>(p, panel, strip_bytes, steps, r0, t, last_mask);
  for (; t < tok_end; ++t) bf16_kernel<S, 1>(p, panel, strip_bytes, steps, r0, t, last_mask);
}

template <GgmlType kType>
void bf16_rows(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin, int64_t tok_end,
               uint8_t* scratch) {
  const int64_t cols_padded = (p.cols + 31) / 32 * 32;
  const int64_t steps = cols_padded / 2;
  const int64_t strip_bytes = steps * 64;
  for (int64_t r = row_begin; r < row_end; r += kPanelRows) {
    const int64_t rows = row_end - r < kPanelRows ? row_end - r : kPanelRows;
    const int strips = rows > kStripRows ? 2 : 1;
    for (int s = 0; s < strips; ++s) pack_strip<kType>(p, r + s * kStripRows, cols_padded, scratch + s * strip_bytes);
    const int64_t last_rows = rows - (strips - 1) * kStripRows;
    const __mmask16 last_mask = static_cast<__mmask16>(last_rows >= 16 ? 0xffff : (1u << last_rows) - 1);
    if (strips == 2) {
      run_tokens<2>(p, scratch, strip_bytes, steps, r, tok_begin, tok_end, last_mask);
    } else {
      run_tokens<1>(p, scratch, strip_bytes, steps, r, tok_begin, tok_end, last_mask);
    }
  }
}

}  // namespace

void bf16_panel_tile_avx512bf16(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                                int64_t tok_end, uint8_t* scratch) {
  switch (p.type) {
    case GgmlType::kF16: return bf16_rows<GgmlType::kF16>(p, row_begin, row_end, tok_begin, tok_end, scratch);
    case GgmlType::kBF16: return bf16_rows<GgmlType::kBF16>(p, row_begin, row_end, tok_begin, tok_end, scratch);
    case GgmlType::kF32: return bf16_rows<GgmlType::kF32>(p, row_begin, row_end, tok_begin, tok_end, scratch);
    default: return;
  }
}

void bf16_activations_avx512bf16(const float* x, int64_t cols, uint8_t* out) {
  const int64_t cols_padded = (cols + 31) / 32 * 32;
  for (int64_t c = 0; c < cols_padded; c += 32) {
    const int64_t left = cols - c;
    const __mmask16 m_lo = static_cast<__mmask16>(left >= 16 ? 0xffff : left <= 0 ? 0 : (1u << left) - 1);
    const __mmask16 m_hi =
        static_cast<__mmask16>(left >= 32 ? 0xffff : left <= 16 ? 0 : (1u << (left - 16)) - 1);
    const __m512 lo = _mm512_maskz_loadu_ps(m_lo, x + c);
    const __m512 hi = _mm512_maskz_loadu_ps(m_hi, x + c + 16);
    _mm512_storeu_si512(out + 2 * c, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
  }
}

}  // namespace baton::cpu_kernels
