// AVX-512 VNNI prefill GEMM over packed int8 weight panels (Q4_0 / Q8_0).
// Entered only when best_simd_level() == kAvx512 (see matmul_kernels.h for why
// nothing here may be an inline function or template shared with other files).
//
// Why a second kernel beside matmul_avx512.cc's tiles: those put two blocks of
// ONE row in a register, so every vpdpbusd (64 products) is followed by a
// convert, a multiply and an FMA to apply the two blocks' scales, and the
// products of a row are summed across lanes at the end. Here a register's 16
// int32 lanes are 16 ROWS, and one vpdpbusd adds 4 products to each: a block
// (32 columns) of 16 rows x 1 token is 8 vpdpbusd into one int32 accumulator
// and only then one convert, multiply and FMA: 8 dot-product instructions per
// 3 scale instructions instead of 1 per 3. For that the weights must sit
// "4 columns of 16 rows" per 64 bytes, which GGUF's row-major blocks do not:
// each task repacks its rows into that panel layout once and runs every token
// of the call over it (the weights come from cache for all but the first).
//
// Signs: vpdpbusd multiplies unsigned by signed bytes. The weights enter
// signed (Q4_0: nibble - 8; Q8_0: q) and x unsigned as xu = xq + 128, so
//   sum_k w * xq = sum_k w * xu - 128 * sum_k w,
// and -128 * sum_k w is per row and block: it is computed at packing time and
// starts each block's accumulator. Exact in int32.
//
// Panel of one strip (16 rows), per block b of 32 columns, kPanelBlockBytes:
//   bytes   0..511: 8 steps of 64 bytes; step j, lane i (bytes 4i..4i+3) = row
//                   i's columns 4j..4j+3 of the block (signed)
//   bytes 512..575: int32 x 16, -128 * sum of row i's 32 weights
//   bytes 576..639: f32 x 16, row i's block scale d
//   bytes 640..703: f32 x 16, row i's block offset c (Q4_K / Q5_K):
//                   w = d * stored + c, and sum_k c * x = c * xd * sum_k xq
//                   is one more FMA per block against xdsum = xd * sum xq
// K-quants (Q4_K, Q5_K): a panel block is one 32-element sub-block of a
// 256-element super-block, its 6-bit scale and min folded into d and c; the
// quants enter centered (Q4_K: q - 8, Q5_K: q - 16) and c takes the offset.
// Q6_K (16-element sub-blocks): steps 0..3 and 4..7 of a block are two
// sub-blocks; the second one's bias and scale take bytes 640..767.
// Rows past the matrix (the last strip of a matrix whose rows are not a
// multiple of 16) repeat the last row and are never stored.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "common/cpu/matmul_kernels.h"

namespace baton::cpu_kernels {

// 16 x 16 dwords in place: r[j] lane i = r[i] lane j.
void transpose_16x16_dwords_avx512(__m512i* r);

namespace {

constexpr int kStripRows = 16;
constexpr int64_t kBiasOffset = 512;
constexpr int64_t kScaleOffset = 576;
constexpr int64_t kMinOffset = 640;
// Q6_K: a block's second 16 columns have their own scale: their bias and
// scale go here, the first 16 columns' in kBiasOffset / kScaleOffset.
constexpr int64_t kSecondBiasOffset = 640;
constexpr int64_t kSecondScaleOffset = 704;
static_assert(kPanelBlockBytes == 768, "panel block: 8 x 64 weight bytes, then 4 x 64 of biases and scales");

// How a block's products become floats.
enum class BlockScales {
  kOne,         // Q4_0, Q8_0: one scale per 32 columns
  kOneWithMin,  // Q4_K, Q5_K: one scale and an offset c per 32 columns
  kTwoHalves,   // Q6_K: one scale per 16 columns
};

// ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j (0..7) of
// a Q4_K / Q5_K super-block.
inline void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// 16 rows x 16 bytes (row i at base + offsets[i]) -> out[j] = dword j of
// every row, lane i = row i: the 4 x 16 dword transpose packing needs.
inline void transpose_16x4_dwords(const uint8_t* base, const int64_t* offsets, __m512i (&out)[4]) {
  __m512i a[4];  // a[m]: rows 4m..4m+3, one row per 128-bit lane
  for (int m = 0; m < 4; ++m) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(base + offsets[4 * m])));
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + offsets[4 * m + 1])), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + offsets[4 * m + 2])), 2);
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + offsets[4 * m + 3])), 3);
    a[m] = v;
  }
  // Level 1: lo = dwords 0, 1 of 8 rows as [r0d0 .. r7d0, r0d1 .. r7d1]; hi = dwords 2, 3.
  // Row r (0..7) of the pair (x, y) is x's lane r (r < 4) or y's lane r - 4.
  const __m512i lo_index = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
  const __m512i hi_index = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
  const __m512i p_lo = _mm512_permutex2var_epi32(a[0], lo_index, a[1]);  // rows 0..7
  const __m512i p_hi = _mm512_permutex2var_epi32(a[0], hi_index, a[1]);
  const __m512i q_lo = _mm512_permutex2var_epi32(a[2], lo_index, a[3]);  // rows 8..15
  const __m512i q_hi = _mm512_permutex2var_epi32(a[2], hi_index, a[3]);
  // Level 2: dword j of rows 0..7 (p) then of rows 8..15 (q).
  out[0] = _mm512_shuffle_i64x2(p_lo, q_lo, _MM_SHUFFLE(1, 0, 1, 0));
  out[1] = _mm512_shuffle_i64x2(p_lo, q_lo, _MM_SHUFFLE(3, 2, 3, 2));
  out[2] = _mm512_shuffle_i64x2(p_hi, q_hi, _MM_SHUFFLE(1, 0, 1, 0));
  out[3] = _mm512_shuffle_i64x2(p_hi, q_hi, _MM_SHUFFLE(3, 2, 3, 2));
}

// Rows [r0, r0 + 16) of a strip, clamped to the matrix (rows past its end
// repeat the last one and are never stored): offsets from row r0, pointers.
void strip_rows(const MatmulProblem& p, int64_t r0, int64_t (&offsets)[kStripRows],
                const uint8_t* (&rows)[kStripRows]) {
  for (int i = 0; i < kStripRows; ++i) {
    const int64_t r = r0 + i < p.rows ? r0 + i : p.rows - 1;
    offsets[i] = (r - r0) * p.row_bytes;
    rows[i] = p.weights + r * p.row_bytes;
  }
}

// A block's bias: -128 x the sum of each row's signed weights (x enters as
// xq + 128), from the row sums in the lanes.
inline void store_bias(uint8_t* at, __m512i row_sums) {
  _mm512_storeu_si512(at, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(row_sums, 7)));
}

// Packs rows [r0, r0 + 16) (clamped to the matrix) into one strip's panel.
template <GgmlType kType>
void pack_strip(const MatmulProblem& p, int64_t r0, uint8_t* panel) {
  constexpr int64_t kBlockBytes = kType == GgmlType::kQ4_0 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  int64_t offsets[kStripRows];  // of row i from row r0
  const uint8_t* rows[kStripRows];
  strip_rows(p, r0, offsets, rows);
  alignas(64) int32_t offsets32[kStripRows];
  for (int i = 0; i < kStripRows; ++i) offsets32[i] = static_cast<int32_t>(offsets[i]);
  const __m512i index = _mm512_load_si512(offsets32);
  const uint8_t* base = p.weights + r0 * p.row_bytes;
  const int64_t n_blocks = p.cols / kQK8_0;
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
  const __m512i eight = _mm512_set1_epi8(8);
  const __m512i low_words = _mm512_set1_epi32(0xffff);
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* out = panel + b * kPanelBlockBytes;
    const uint8_t* block = base + b * kBlockBytes;
    __m512i steps[8];
    __m512i t[4];
    transpose_16x4_dwords(block + 2, offsets, t);
    if constexpr (kType == GgmlType::kQ4_0) {
      // Byte m of qs: low nibble = column m, high nibble = column m + 16.
      for (int j = 0; j < 4; ++j) {
        steps[j] = _mm512_sub_epi8(_mm512_and_si512(t[j], low_nibbles), eight);
        steps[j + 4] = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(t[j], 4), low_nibbles), eight);
      }
    } else {
      for (int j = 0; j < 4; ++j) steps[j] = t[j];
      transpose_16x4_dwords(block + 18, offsets, t);
      for (int j = 0; j < 4; ++j) steps[j + 4] = t[j];
    }
    __m512i sum = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      _mm512_storeu_si512(out + 64 * j, steps[j]);
      sum = _mm512_dpbusd_epi32(sum, ones, steps[j]);  // row i's sum in lane i
    }
    store_bias(out + kBiasOffset, sum);
    // The fp16 scale is the block's first two bytes: the low word of a dword gather.
    const __m512i d = _mm512_and_si512(_mm512_i32gather_epi32(index, block, 1), low_words);
    _mm512_storeu_ps(out + kScaleOffset, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d)));
  }
}

// Packs rows [r0, r0 + 16) of Q4_K / Q5_K weights: 8 panel blocks per super-block.
template <GgmlType kType>
void pack_strip_kquant(const MatmulProblem& p, int64_t r0, uint8_t* panel) {
  constexpr bool kQ5 = kType == GgmlType::kQ5_K;
  constexpr int64_t kBlockBytes = kQ5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  constexpr int64_t kQsOffset = kQ5 ? 48 : 16;  // d, dmin, scales[12], (qh[32])
  constexpr int kCenter = kQ5 ? 16 : 8;
  int64_t offsets[kStripRows];
  const uint8_t* rows[kStripRows];
  strip_rows(p, r0, offsets, rows);
  const uint8_t* base = p.weights + r0 * p.row_bytes;
  const int64_t n_super = p.cols / kQK_K;
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
  const __m512i one_bits = _mm512_set1_epi8(1);
  const __m512i center = _mm512_set1_epi8(kCenter);
  alignas(64) float d[8][kStripRows], c[8][kStripRows];
  for (int64_t sk = 0; sk < n_super; ++sk) {
    const uint8_t* super = base + sk * kBlockBytes;
    for (int i = 0; i < kStripRows; ++i) {
      const uint8_t* blk = rows[i] + sk * kBlockBytes;
      uint16_t dh, dminh;
      __builtin_memcpy(&dh, blk, 2);
      __builtin_memcpy(&dminh, blk + 2, 2);
      const float dd = _cvtsh_ss(dh), dmin = _cvtsh_ss(dminh);
      for (int j = 0; j < 8; ++j) {
        int sc, m;
        scale_min_k4(j, blk + 4, &sc, &m);
        d[j][i] = dd * static_cast<float>(sc);
        c[j][i] = static_cast<float>(kCenter) * d[j][i] - dmin * static_cast<float>(m);
      }
    }
    __m512i qh[8];  // Q5_K: dword k of every row's qh[32]
    if constexpr (kQ5) {
      __m512i t[4];
      transpose_16x4_dwords(super + 16, offsets, t);
      for (int k = 0; k < 4; ++k) qh[k] = t[k];
      transpose_16x4_dwords(super + 32, offsets, t);
      for (int k = 0; k < 4; ++k) qh[k + 4] = t[k];
    }
    for (int chunk = 0; chunk < 4; ++chunk) {  // 64 elements: sub-blocks 2 chunk (low nibbles), 2 chunk + 1 (high)
      __m512i q[8];  // dword k of qs[32 chunk .. 32 chunk + 31] of every row
      __m512i t[4];
      transpose_16x4_dwords(super + kQsOffset + 32 * chunk, offsets, t);
      for (int k = 0; k < 4; ++k) q[k] = t[k];
      transpose_16x4_dwords(super + kQsOffset + 32 * chunk + 16, offsets, t);
      for (int k = 0; k < 4; ++k) q[k + 4] = t[k];
      for (int half = 0; half < 2; ++half) {
        const int sub = 2 * chunk + half;
        uint8_t* out = panel + (sk * 8 + sub) * kPanelBlockBytes;
        __m512i sum = _mm512_setzero_si512();
        for (int k = 0; k < 8; ++k) {
          __m512i v = half == 0 ? _mm512_and_si512(q[k], low_nibbles)
                                : _mm512_and_si512(_mm512_srli_epi16(q[k], 4), low_nibbles);
          if constexpr (kQ5) {
            // Element l of the sub-block has its 5th bit at bit `sub` of qh[l].
            const __m512i bit = _mm512_and_si512(_mm512_srl_epi16(qh[k], _mm_cvtsi32_si128(sub)), one_bits);
            v = _mm512_or_si512(v, _mm512_slli_epi16(bit, 4));
          }
          v = _mm512_sub_epi8(v, center);
          _mm512_storeu_si512(out + 64 * k, v);
          sum = _mm512_dpbusd_epi32(sum, ones, v);
        }
        store_bias(out + kBiasOffset, sum);
        _mm512_storeu_ps(out + kScaleOffset, _mm512_load_ps(d[sub]));
        _mm512_storeu_ps(out + kMinOffset, _mm512_load_ps(c[sub]));
      }
    }
  }
}

// Packs rows [r0, r0 + 16) of Q6_K weights: 8 panel blocks per super-block.
// In each half of 128 elements (ql 64 bytes, qh 32): element l (< 32) is
// ql[l] low | qh[l] bits 0-1, l + 32 is ql[l + 32] low | bits 2-3, l + 64 is
// ql[l] high | bits 4-5, l + 96 is ql[l + 32] high | bits 6-7; minus 32.
// Each 16 elements have an int8 scale (times the fp16 d).
void pack_strip_q6_k(const MatmulProblem& p, int64_t r0, uint8_t* panel) {
  int64_t offsets[kStripRows];
  const uint8_t* rows[kStripRows];
  strip_rows(p, r0, offsets, rows);
  const uint8_t* base = p.weights + r0 * p.row_bytes;
  const int64_t n_super = p.cols / kQK_K;
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
  const __m512i two_bits = _mm512_set1_epi8(0x03);
  const __m512i center = _mm512_set1_epi8(32);
  alignas(64) float scale[16][kStripRows];  // [16-element sub-block][row]
  for (int64_t sk = 0; sk < n_super; ++sk) {
    const uint8_t* super = base + sk * sizeof(BlockQ6_K);
    for (int i = 0; i < kStripRows; ++i) {
      const uint8_t* blk = rows[i] + sk * sizeof(BlockQ6_K);
      uint16_t dh;
      __builtin_memcpy(&dh, blk + 208, 2);
      const float d = _cvtsh_ss(dh);
      for (int k = 0; k < 16; ++k) scale[k][i] = d * static_cast<float>(static_cast<int8_t>(blk[192 + k]));
    }
    for (int half = 0; half < 2; ++half) {
      __m512i ql[2][8];  // [ql[l] or ql[l + 32]][dword k of 32 bytes] of every row
      __m512i qh[8];
      __m512i t[4];
      for (int part = 0; part < 2; ++part) {
        for (int q = 0; q < 2; ++q) {
          transpose_16x4_dwords(super + 64 * half + 32 * part + 16 * q, offsets, t);
          for (int k = 0; k < 4; ++k) ql[part][4 * q + k] = t[k];
        }
      }
      for (int q = 0; q < 2; ++q) {
        transpose_16x4_dwords(super + 128 + 32 * half + 16 * q, offsets, t);
        for (int k = 0; k < 4; ++k) qh[4 * q + k] = t[k];
      }
      for (int g = 0; g < 4; ++g) {  // 32-element block 4 half + g: ql part g % 2, nibble g / 2, qh bits 2g
        uint8_t* out = panel + (sk * 8 + 4 * half + g) * kPanelBlockBytes;
        __m512i sums[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
        for (int k = 0; k < 8; ++k) {
          const __m512i nib = g < 2 ? _mm512_and_si512(ql[g % 2][k], low_nibbles)
                                    : _mm512_and_si512(_mm512_srli_epi16(ql[g % 2][k], 4), low_nibbles);
          const __m512i high = _mm512_and_si512(_mm512_srl_epi16(qh[k], _mm_cvtsi32_si128(2 * g)), two_bits);
          const __m512i v = _mm512_sub_epi8(_mm512_or_si512(nib, _mm512_slli_epi16(high, 4)), center);
          _mm512_storeu_si512(out + 64 * k, v);
          sums[k / 4] = _mm512_dpbusd_epi32(sums[k / 4], ones, v);
        }
        const int sub = 8 * half + 2 * g;  // the block's first 16-element sub-block
        store_bias(out + kBiasOffset, sums[0]);
        _mm512_storeu_ps(out + kScaleOffset, _mm512_load_ps(scale[sub]));
        store_bias(out + kSecondBiasOffset, sums[1]);
        _mm512_storeu_ps(out + kSecondScaleOffset, _mm512_load_ps(scale[sub + 1]));
      }
    }
  }
}

// S strips (16 rows each, panels n_blocks * kPanelBlockBytes apart) x T tokens.
// Every (row, token) goes through the same operations in the same order
// whatever S and T are, so a token's outputs do not depend on the others in
// the call.
// prefetch / prefetch_step: while the first token group runs, each block
// step asks for the next prefetch_step bytes of the rows the next panel will
// pack (the weights come from DRAM once per call: packing would otherwise
// wait for them); nullptr: nothing to prefetch.
template <int S, int T, BlockScales kScales>
void panel_kernel(const MatmulProblem& p, const uint8_t* panel, int64_t r0, int64_t t0, __mmask16 last_mask,
                  const uint8_t* prefetch, int64_t prefetch_step) {
  const int64_t n_blocks = p.cols / kQK8_0;
  const int64_t strip_bytes = n_blocks * kPanelBlockBytes;
  __m512 acc[S][T];
  for (int s = 0; s < S; ++s)
    for (int t = 0; t < T; ++t) acc[s][t] = _mm512_setzero_ps();
  // One base pointer and a stride each (token t at base + t * stride): fewer
  // live general registers than a pointer per token.
  const uint8_t* xu = p.xu + t0 * p.cols;
  const float* xd = p.xd + t0 * n_blocks;
  const int64_t xu_stride = p.cols;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* block = panel + b * kPanelBlockBytes;
    __m512i dot[S][T];
    for (int s = 0; s < S; ++s) {
      const __m512i bias = _mm512_loadu_si512(block + s * strip_bytes + kBiasOffset);
      for (int t = 0; t < T; ++t) dot[s][t] = bias;
    }
    // Steps [j0, j1) into dot; then, for Q6_K's first half, its scale applied and dot restarted.
    auto steps = [&](int j0, int j1) {
      for (int j = j0; j < j1; ++j) {
        __m512i w[S];
        for (int s = 0; s < S; ++s) w[s] = _mm512_loadu_si512(block + s * strip_bytes + 64 * j);
        for (int t = 0; t < T; ++t) {
          int32_t four;
          __builtin_memcpy(&four, xu + t * xu_stride + 4 * j, 4);
          const __m512i x = _mm512_set1_epi32(four);
          for (int s = 0; s < S; ++s) dot[s][t] = _mm512_dpbusd_epi32(dot[s][t], x, w[s]);
        }
      }
    };
    if constexpr (kScales == BlockScales::kTwoHalves) {
      steps(0, 4);
      for (int t = 0; t < T; ++t) {
        const __m512 x_scale = _mm512_set1_ps(xd[t * n_blocks]);
        for (int s = 0; s < S; ++s) {
          const __m512 scaled = _mm512_mul_ps(_mm512_cvtepi32_ps(dot[s][t]), x_scale);
          acc[s][t] = _mm512_fmadd_ps(scaled, _mm512_loadu_ps(block + s * strip_bytes + kScaleOffset), acc[s][t]);
        }
      }
      for (int s = 0; s < S; ++s) {
        const __m512i bias = _mm512_loadu_si512(block + s * strip_bytes + kSecondBiasOffset);
        for (int t = 0; t < T; ++t) dot[s][t] = bias;
      }
      steps(4, 8);
    } else {
      steps(0, 8);
    }
    constexpr int64_t kLastScale = kScales == BlockScales::kTwoHalves ? kSecondScaleOffset : kScaleOffset;
    for (int t = 0; t < T; ++t) {
      const __m512 x_scale = _mm512_set1_ps(xd[t * n_blocks]);
      for (int s = 0; s < S; ++s) {
        const __m512 scaled = _mm512_mul_ps(_mm512_cvtepi32_ps(dot[s][t]), x_scale);
        acc[s][t] = _mm512_fmadd_ps(scaled, _mm512_loadu_ps(block + s * strip_bytes + kLastScale), acc[s][t]);
      }
      if constexpr (kScales == BlockScales::kOneWithMin) {
        const __m512 x_sum = _mm512_set1_ps(p.xdsum[(t0 + t) * n_blocks + b]);
        for (int s = 0; s < S; ++s) {
          acc[s][t] = _mm512_fmadd_ps(_mm512_loadu_ps(block + s * strip_bytes + kMinOffset), x_sum, acc[s][t]);
        }
      }
    }
    xu += kQK8_0;
    xd += 1;
    if (prefetch != nullptr) {
      for (int64_t line = 0; line < prefetch_step; line += 64) _mm_prefetch(reinterpret_cast<const char*>(prefetch + line), _MM_HINT_T1);
      prefetch += prefetch_step;
    }
  }
  for (int s = 0; s < S; ++s) {
    const __mmask16 mask = s == S - 1 ? last_mask : static_cast<__mmask16>(0xffff);
    for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(p.y + (t0 + t) * p.rows + r0 + s * kStripRows, mask, acc[s][t]);
  }
}

template <int S, BlockScales kScales>
void run_tokens(const MatmulProblem& p, const uint8_t* panel, int64_t r0, int64_t tok_begin, int64_t tok_end,
                __mmask16 last_mask, const uint8_t* prefetch, int64_t prefetch_step) {
  // 2 x 6 int32 + 2 x 6 f32 accumulators: 24 of the 32 registers (4 and 5
  // tokens measured slower, 7 spills).
  constexpr int kTokens = 6;
  int64_t t = tok_begin;
  for (; t + kTokens <= tok_end; t += kTokens) {
    panel_kernel<S, kTokens, kScales>(p, panel, r0, t, last_mask, prefetch, prefetch_step);
    prefetch = nullptr;  // the first group asked for all of it
  }
  switch (tok_end - t) {
    case 5: return panel_kernel<S, 5, kScales>(p, panel, r0, t, last_mask, prefetch, prefetch_step);
    case 4: return panel_kernel<S, 4, kScales>(p, panel, r0, t, last_mask, prefetch, prefetch_step);
    case 3: return panel_kernel<S, 3, kScales>(p, panel, r0, t, last_mask, prefetch, prefetch_step);
    case 2: return panel_kernel<S, 2, kScales>(p, panel, r0, t, last_mask, prefetch, prefetch_step);
    case 1: return panel_kernel<S, 1, kScales>(p, panel, r0, t, last_mask, prefetch, prefetch_step);
    default: return;
  }
}

template <GgmlType kType>
void panel_rows(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin, int64_t tok_end,
                uint8_t* scratch) {
  const int64_t strip_bytes = p.cols / kQK8_0 * kPanelBlockBytes;
  for (int64_t r = row_begin; r < row_end; r += kPanelRows) {
    const int64_t rows = row_end - r < kPanelRows ? row_end - r : kPanelRows;
    const int strips = rows > kStripRows ? 2 : 1;
    constexpr BlockScales kScales = kType == GgmlType::kQ6_K ? BlockScales::kTwoHalves
                                    : kType == GgmlType::kQ4_K || kType == GgmlType::kQ5_K ? BlockScales::kOneWithMin
                                                                                           : BlockScales::kOne;
    for (int s = 0; s < strips; ++s) {
      if constexpr (kType == GgmlType::kQ6_K) {
        pack_strip_q6_k(p, r + s * kStripRows, scratch + s * strip_bytes);
      } else if constexpr (kScales == BlockScales::kOneWithMin) {
        pack_strip_kquant<kType>(p, r + s * kStripRows, scratch + s * strip_bytes);
      } else {
        pack_strip<kType>(p, r + s * kStripRows, scratch + s * strip_bytes);
      }
    }
    const int64_t last_rows = rows - (strips - 1) * kStripRows;
    const __mmask16 last_mask = static_cast<__mmask16>(last_rows >= 16 ? 0xffff : (1u << last_rows) - 1);
    // The next panel's rows (this task's, or the next task's, which the
    // dynamic split mostly gives the same thread) are contiguous.
    const int64_t next = r + kPanelRows;
    const int64_t next_rows = p.rows - next < kPanelRows ? p.rows - next : kPanelRows;
    const uint8_t* prefetch = next_rows > 0 ? p.weights + next * p.row_bytes : nullptr;
    const int64_t n_blocks = p.cols / kQK8_0;
    const int64_t prefetch_step = next_rows > 0 ? (next_rows * p.row_bytes + n_blocks - 1) / n_blocks : 0;
    if (strips == 2) {
      run_tokens<2, kScales>(p, scratch, r, tok_begin, tok_end, last_mask, prefetch, prefetch_step);
    } else {
      run_tokens<1, kScales>(p, scratch, r, tok_begin, tok_end, last_mask, prefetch, prefetch_step);
    }
  }
}


// --- Float weights, exact (FloatMatmul::kExact): f32 panels and FMAs ---
//
// The same 16-row strips, one column per 64-byte step (lane i = row i's
// weight, widened to f32 when packed), x broadcast from its f32 row: f32
// products and f32 sums as the tiles compute them, in another order (one
// chain per row and token along the columns).

template <GgmlType kType>
inline __m512 load16_widened(const uint8_t* row, int64_t c, __mmask16 mask) {
  if constexpr (kType == GgmlType::kF32) {
    return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(row) + c);
  } else if constexpr (kType == GgmlType::kF16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, row + 2 * c));
  } else {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, row + 2 * c)), 16));
  }
}

template <GgmlType kType>
void pack_strip_f32(const MatmulProblem& p, int64_t r0, uint8_t* panel) {
  int64_t offsets[kStripRows];
  const uint8_t* rows[kStripRows];
  strip_rows(p, r0, offsets, rows);
  for (int64_t c = 0; c < p.cols; c += 16) {
    const int64_t left = p.cols - c;
    const __mmask16 mask = static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1);
    __m512i m[16];
    for (int i = 0; i < kStripRows; ++i) m[i] = _mm512_castps_si512(load16_widened<kType>(rows[i], c, mask));
    transpose_16x16_dwords_avx512(m);  // m[j]: column c + j of every row
    for (int j = 0; j < 16; ++j) _mm512_storeu_si512(panel + (c + j) * 64, m[j]);
  }
}

template <int S, int T>
void f32_kernel(const MatmulProblem& p, const uint8_t* panel, int64_t strip_bytes, int64_t r0, int64_t t0,
                __mmask16 last_mask) {
  __m512 acc[S][T];
  for (int s = 0; s < S; ++s)
    for (int t = 0; t < T; ++t) acc[s][t] = _mm512_setzero_ps();
  const float* x = p.x + t0 * p.cols;
  for (int64_t c = 0; c < p.cols; ++c) {
    __m512 w[S];
    for (int s = 0; s < S; ++s) w[s] = _mm512_loadu_ps(panel + s * strip_bytes + c * 64);
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_set1_ps(x[t * p.cols + c]);
      for (int s = 0; s < S; ++s) acc[s][t] = _mm512_fmadd_ps(w[s], xv, acc[s][t]);
    }
  }
  for (int s = 0; s < S; ++s) {
    const __mmask16 mask = s == S - 1 ? last_mask : static_cast<__mmask16>(0xffff);
    for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(p.y + (t0 + t) * p.rows + r0 + s * kStripRows, mask, acc[s][t]);
  }
}

template <int S>
void f32_tokens(const MatmulProblem& p, const uint8_t* panel, int64_t strip_bytes, int64_t r0, int64_t tok_begin,
                int64_t tok_end, __mmask16 last_mask) {
  constexpr int kTokens = 12;  // 2 x 12 accumulators, 2 weights, x: 27 of the 32 registers
  int64_t t = tok_begin;
  for (; t + kTokens <= tok_end; t += kTokens) f32_kernel<S, kTokens>(p, panel, strip_bytes, r0, t, last_mask);
  for (; t + 4 <= tok_end; t += 4) f32_kernel<S, 4>(p, panel, strip_bytes, r0, t, last_mask);
  for (; t < tok_end; ++t) f32_kernel<S, 1>(p, panel, strip_bytes, r0, t, last_mask);
}

template <GgmlType kType>
void f32_rows(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin, int64_t tok_end,
              uint8_t* scratch) {
  const int64_t strip_bytes = (p.cols + 15) / 16 * 16 * 64;
  for (int64_t r = row_begin; r < row_end; r += kPanelRows) {
    const int64_t rows = row_end - r < kPanelRows ? row_end - r : kPanelRows;
    const int strips = rows > kStripRows ? 2 : 1;
    for (int s = 0; s < strips; ++s) pack_strip_f32<kType>(p, r + s * kStripRows, scratch + s * strip_bytes);
    const int64_t last_rows = rows - (strips - 1) * kStripRows;
    const __mmask16 last_mask = static_cast<__mmask16>(last_rows >= 16 ? 0xffff : (1u << last_rows) - 1);
    if (strips == 2) {
      f32_tokens<2>(p, scratch, strip_bytes, r, tok_begin, tok_end, last_mask);
    } else {
      f32_tokens<1>(p, scratch, strip_bytes, r, tok_begin, tok_end, last_mask);
    }
  }
}

}  // namespace

void f32_panel_tile_avx512(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                           int64_t tok_end, uint8_t* scratch) {
  switch (p.type) {
    case GgmlType::kF16: return f32_rows<GgmlType::kF16>(p, row_begin, row_end, tok_begin, tok_end, scratch);
    case GgmlType::kBF16: return f32_rows<GgmlType::kBF16>(p, row_begin, row_end, tok_begin, tok_end, scratch);
    case GgmlType::kF32: return f32_rows<GgmlType::kF32>(p, row_begin, row_end, tok_begin, tok_end, scratch);
    default: return;
  }
}


void panel_tile_avx512(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                       int64_t tok_end, uint8_t* scratch) {
  if (p.type == GgmlType::kQ4_0) return panel_rows<GgmlType::kQ4_0>(p, row_begin, row_end, tok_begin, tok_end, scratch);
  if (p.type == GgmlType::kQ8_0) return panel_rows<GgmlType::kQ8_0>(p, row_begin, row_end, tok_begin, tok_end, scratch);
  if (p.type == GgmlType::kQ4_K) return panel_rows<GgmlType::kQ4_K>(p, row_begin, row_end, tok_begin, tok_end, scratch);
  if (p.type == GgmlType::kQ5_K) return panel_rows<GgmlType::kQ5_K>(p, row_begin, row_end, tok_begin, tok_end, scratch);
  if (p.type == GgmlType::kQ6_K) return panel_rows<GgmlType::kQ6_K>(p, row_begin, row_end, tok_begin, tok_end, scratch);
}

void offset_quants_avx512(const int8_t* xq, uint8_t* xu, int64_t n) {
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) _mm512_storeu_si512(xu + i, _mm512_xor_si512(_mm512_loadu_si512(xq + i), bias));
  for (; i < n; ++i) xu[i] = static_cast<uint8_t>(xq[i] ^ 0x80);
}

// Declared where it is used (matmul_bf16_avx512bf16.cc, this file): AVX-512 only.
// 16 x 16 dwords: m[j] lane i = m[i] lane j (unpacks, then 128-bit lane shuffles).
void transpose_16x16_dwords_avx512(__m512i* r) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], _MM_SHUFFLE(2, 0, 2, 0));
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], _MM_SHUFFLE(3, 1, 3, 1));
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], _MM_SHUFFLE(2, 0, 2, 0));
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], _MM_SHUFFLE(3, 1, 3, 1));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], _MM_SHUFFLE(2, 0, 2, 0));
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], _MM_SHUFFLE(3, 1, 3, 1));
    r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], _MM_SHUFFLE(2, 0, 2, 0));
    r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], _MM_SHUFFLE(3, 1, 3, 1));
  }
}

}  // namespace baton::cpu_kernels
