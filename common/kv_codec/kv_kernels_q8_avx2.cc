// AVX2 kernels of the INT8 in-place attention tile step (kv_kernels.h,
// attend_tile_q8 / attend_tile_q8_positions): the arithmetic of the scalar
// reference (kv_kernels_q8.cc) without VNNI. Both integer products go
// through vpmaddwd (int16 x int16 pairs summed into int32), exact:
//   q . k: query and key codes widened to int16 (|q| <= 127, |k| <= 128, a
//     pair <= 32512), which sums q * k directly: the scalar's bias + sum q *
//     (k + 128) is that same integer, so no bias term is added here;
//     vpmaddubsw on (k + 128) x q would saturate int16 (2 * 255 * 127).
//   p . V: two rows' 15-bit weight codes x their int8 values per dword.
// The float steps around them are the scalar's, in its order (each block's
// fma of the score, the weight code's products, the value fma), except the
// weights exp(s - m') (a polynomial, exp256) and the sums of l (8 lanes, then
// a fixed tree), as attend_tile_avx2.
// INT4 K and V (attend_tile_q4_positions, kv_kernels.h): the same steps on
// the codes - 8 (the keys in the query's nibble order), with the mins' terms:
// each score then takes fma(mn'_g(b), qs_b * sum(codes_b), .) per block in
// order, each head's acc[d] the sum over the rows of p_r mn'_r(g) (8 lanes,
// then the tree of hsum256).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/cpu/simd_avx2.h"
#include "common/kv_codec/kv_kernels.h"

namespace baton::kv_kernels_impl {
namespace {

using simd_avx2::exp256;
using simd_avx2::hmax256;
using simd_avx2::hsum256;
using simd_avx2::rows_mask8;

constexpr int kTile = kAttentionTileRows;

// Which planes of a tile hold INT4 codes (attend_tile_q4_positions): none
// (INT8 K and V), the values only (int4-k8: INT8 keys), or both.
constexpr int kNoInt4 = 0, kInt4Values = 1, kInt4KeysValues = 2;

// Lane r of the result = the exact int32 dot of the 32 widened codes at
// k + r * HeadDim with q (q0: its first 16, q1: the next 16), r < 8. Each
// pair of rows is folded (hadd) as soon as both are done, so a few vectors
// are live, not eight: with eight (the two blocks of head_dim 64 unrolled)
// GCC spilled them inside the score loop. Any order gives the same integer.
template <int HeadDim>
__m256i block_dots8(const int16_t* k, __m256i q0, __m256i q1) {
  auto row = [&](int r) {
    const int16_t* kr = k + r * HeadDim;
    return _mm256_add_epi32(_mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(kr)), q0),
                            _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(kr + 16)), q1));
  };
  // 128-bit half h of u0: rows 0..3's sums of their half h; of u1: rows 4..7's.
  const __m256i u0 = _mm256_hadd_epi32(_mm256_hadd_epi32(row(0), row(1)), _mm256_hadd_epi32(row(2), row(3)));
  const __m256i u1 = _mm256_hadd_epi32(_mm256_hadd_epi32(row(4), row(5)), _mm256_hadd_epi32(row(6), row(7)));
  return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

// 16 int8 codes -> 16 int16.
__m256i widen16(const void* p) { return _mm256_cvtepi8_epi16(_mm_loadu_si128(static_cast<const __m128i*>(p))); }

// One call's tile, read from the store once for every position and head of
// the call: the rows of the union [u_lo, u_hi) of the positions' rows, in
// the 8-row groups [g_lo, g_hi) that cover it. Rows of those groups outside
// the union are never read from the store: their keys and scales are zeros,
// their value pairs repeat a row of the union. A head's rows outside its
// [lo, hi) never count: their scores are masked, their weight codes 0.
// HeadDim = head_dim, a multiple of kQ8Block.
template <int HeadDim>
struct Q8Tile {
  static constexpr int kGroups = HeadDim / kQ8Block;  // the most key or value groups (groups >= 32 dims)
  int g_lo = 0, g_hi = 0;
  alignas(32) int16_t keys[kTile * HeadDim];  // row r's codes at r * HeadDim, widened
  // Row pair p (rows 2p, 2p + 1, clamped into the union) at p * 2 * HeadDim:
  // dword d = (v_2p[d], v_2p+1[d]), dims in order.
  alignas(32) int16_t value_pairs[kTile * HeadDim];
  alignas(32) float key_scales[kGroups][kTile];    // [key group][row]
  alignas(32) float value_scales[kGroups][kTile];  // [value group][row]
  // INT4 only: the groups' mins' (mn + 8 scale), [group][row].
  alignas(32) float key_mins[kGroups][kTile];
  alignas(32) float value_mins[kGroups][kTile];
};

// The f16 scales of 8 consecutive rows, 2 groups per row (head_dim 64 in
// groups of 32: the common shape), as floats: out[g][i] = row i's group g.
// The 8 rows' 4-byte pairs go into two vectors (rows 0..3, 4..7), convert
// 8 at a time and deinterleave: scalar conversions cost 4 instructions per
// scale and were a tenth of the tile step.
void scales8_pairs(const uint16_t* first, int64_t row_stride, float* out0, float* out1) {
  auto pair = [&](int i) {
    int32_t x;
    std::memcpy(&x, first + i * row_stride, sizeof(x));
    return x;
  };
  // Lanes: (row i group 0, row i group 1), rows in order.
  const __m256 a = _mm256_cvtph_ps(_mm_setr_epi32(pair(0), pair(1), pair(2), pair(3)));
  const __m256 b = _mm256_cvtph_ps(_mm_setr_epi32(pair(4), pair(5), pair(6), pair(7)));
  // shuffle: rows (0 1 4 5 | 2 3 6 7) per 128-bit half; the permute puts them in order.
  const __m256 g0 = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
  const __m256 g1 = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
  _mm256_store_ps(out0, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(g0), _MM_SHUFFLE(3, 1, 2, 0))));
  _mm256_store_ps(out1, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(g1), _MM_SHUFFLE(3, 1, 2, 0))));
}

// Scales of rows [g0, g0 + 8) of one head (zeros outside [u_lo, u_hi)) into
// out[g][g0..]: whole groups of rows with 2 scale groups go 8 at a time.
template <int HeadDim>
void load_scales(const KvHeadRows& h, int64_t tile_row, int g0, int u_lo, int u_hi, float (*out)[kTile]) {
  const int groups = HeadDim / h.group;
  if (groups == 2 && g0 >= u_lo && g0 + 8 <= u_hi) {
    return scales8_pairs(h.scales + (tile_row + g0) * h.row_groups, h.row_groups, out[0] + g0, out[1] + g0);
  }
  for (int r = g0; r < g0 + 8; ++r) {
    const bool in = r >= u_lo && r < u_hi;
    for (int g = 0; g < groups; ++g) out[g][r] = in ? _cvtsh_ss(h.scales[(tile_row + r) * h.row_groups + g]) : 0.0f;
  }
}

// Rows a and b's value codes interleaved and widened: dword d of out =
// (a[d], b[d]), dims in order. 32 dims per step: the 256-bit unpacks
// interleave within each 128-bit half (dims 0..7 and 16..23 in lo, 8..15
// and 24..31 in hi).
template <int HeadDim>
void value_pair(const uint8_t* a, const uint8_t* b, int16_t* out) {
  static_assert(HeadDim % 32 == 0);
  for (int d = 0; d < HeadDim; d += 32) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + d));
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + d));
    const __m256i lo = _mm256_unpacklo_epi8(x, y), hi = _mm256_unpackhi_epi8(x, y);
    __m256i* o = reinterpret_cast<__m256i*>(out + 2 * d);
    _mm256_store_si256(o, _mm256_cvtepi8_epi16(_mm256_castsi256_si128(lo)));
    _mm256_store_si256(o + 1, _mm256_cvtepi8_epi16(_mm256_castsi256_si128(hi)));
    _mm256_store_si256(o + 2, _mm256_cvtepi8_epi16(_mm256_extracti128_si256(lo, 1)));
    _mm256_store_si256(o + 3, _mm256_cvtepi8_epi16(_mm256_extracti128_si256(hi, 1)));
  }
}

// INT4: 32 dims of a row (16 bytes at p) as their codes - 8, widened: the
// keys in the query's nibble order (q4_query_order: per 8 dims the low
// nibbles, then the high), out[0, 32).
inline void widen_key_nibbles32(const uint8_t* p, int16_t* out) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), nibble = _mm_set1_epi8(15);
  const __m128i lo = _mm_and_si128(x, nibble), hi = _mm_and_si128(_mm_srli_epi16(x, 4), nibble);
  const __m128i eight = _mm_set1_epi8(8);
  _mm256_store_si256(reinterpret_cast<__m256i*>(out),
                     _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_unpacklo_epi32(lo, hi), eight)));
  _mm256_store_si256(reinterpret_cast<__m256i*>(out + 16),
                     _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_unpackhi_epi32(lo, hi), eight)));
}

// INT4: rows a and b's value codes - 8 interleaved and widened, as
// value_pair (dword d of out = (a[d], b[d]), dims in order).
template <int HeadDim>
void value_pair_nibbles(const uint8_t* a, const uint8_t* b, int16_t* out) {
  const __m128i nibble = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
  // 32 dims of a row in order, as two 16-dim halves of codes - 8.
  auto dims = [&](const uint8_t* p, __m128i* d0, __m128i* d1) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i lo = _mm_and_si128(x, nibble), hi = _mm_and_si128(_mm_srli_epi16(x, 4), nibble);
    *d0 = _mm_sub_epi8(_mm_unpacklo_epi8(lo, hi), eight);
    *d1 = _mm_sub_epi8(_mm_unpackhi_epi8(lo, hi), eight);
  };
  for (int d = 0; d < HeadDim; d += 32) {
    __m128i a0, a1, b0, b1;
    dims(a + d / 2, &a0, &a1);
    dims(b + d / 2, &b0, &b1);
    __m256i* o = reinterpret_cast<__m256i*>(out + 2 * d);
    _mm256_store_si256(o, _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a0, b0)));
    _mm256_store_si256(o + 1, _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(a0, b0)));
    _mm256_store_si256(o + 2, _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a1, b1)));
    _mm256_store_si256(o + 3, _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(a1, b1)));
  }
}

// INT4: the mins' of rows [g0, g0 + 8) into out[g][g0..] (mins as the
// scales, load_scales, then + 8 x the scales already in scales[g]).
template <int HeadDim>
void load_mins(const KvHeadRows& h, int64_t tile_row, int g0, int u_lo, int u_hi, const float (*scales)[kTile],
               float (*out)[kTile]) {
  KvHeadRows mins = h;
  mins.scales = h.mins;
  load_scales<HeadDim>(mins, tile_row, g0, u_lo, u_hi, out);
  for (int g = 0; g < HeadDim / h.group; ++g) {
    _mm256_store_ps(out[g] + g0, _mm256_fmadd_ps(_mm256_set1_ps(8.0f), _mm256_load_ps(scales[g] + g0),
                                                 _mm256_load_ps(out[g] + g0)));
  }
}

// kInt4: which planes hold INT4 codes (Int4Planes).
template <int HeadDim, int kInt4 = kNoInt4>
void load_tile(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, int u_lo, int u_hi, Q8Tile<HeadDim>* t) {
  t->g_lo = u_lo / 8 * 8;
  t->g_hi = (u_hi + 7) / 8 * 8;
  for (int r = t->g_lo; r < t->g_hi; ++r) {
    int16_t* kr = t->keys + r * HeadDim;
    const bool in = r >= u_lo && r < u_hi;
    const int64_t row = tile_row + r;
    const uint8_t* codes = k.codes + row * k.row_code_bytes;
    if constexpr (kInt4 == kInt4KeysValues) {
      for (int d = 0; d < HeadDim; d += 32) {
        if (in) {
          widen_key_nibbles32(codes + d / 2, kr + d);
        } else {
          _mm256_store_si256(reinterpret_cast<__m256i*>(kr + d), _mm256_setzero_si256());
          _mm256_store_si256(reinterpret_cast<__m256i*>(kr + d + 16), _mm256_setzero_si256());
        }
      }
      continue;
    }
    for (int d = 0; d < HeadDim; d += 16) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(kr + d), in ? widen16(codes + d) : _mm256_setzero_si256());
    }
  }
  for (int g0 = t->g_lo; g0 < t->g_hi; g0 += 8) {
    load_scales<HeadDim>(k, tile_row, g0, u_lo, u_hi, t->key_scales);
    load_scales<HeadDim>(v, tile_row, g0, u_lo, u_hi, t->value_scales);
    if constexpr (kInt4 == kInt4KeysValues) load_mins<HeadDim>(k, tile_row, g0, u_lo, u_hi, t->key_scales, t->key_mins);
    if constexpr (kInt4 != kNoInt4) load_mins<HeadDim>(v, tile_row, g0, u_lo, u_hi, t->value_scales, t->value_mins);
  }
  // Pairs with both rows in the union go by pointer steps; the ends clamp.
  const int64_t stride = v.row_code_bytes;
  const int p_in_lo = std::max((u_lo + 1) / 2, t->g_lo / 2), p_in_hi = std::max(u_hi / 2, p_in_lo);
  auto pair = [](const uint8_t* a, const uint8_t* b, int16_t* out) {
    if constexpr (kInt4 != kNoInt4) {
      value_pair_nibbles<HeadDim>(a, b, out);
    } else {
      value_pair<HeadDim>(a, b, out);
    }
  };
  auto clamped_pair = [&](int p) {
    const int64_t r0 = tile_row + std::clamp(2 * p, u_lo, u_hi - 1), r1 = tile_row + std::clamp(2 * p + 1, u_lo, u_hi - 1);
    pair(v.codes + r0 * stride, v.codes + r1 * stride, t->value_pairs + p * 2 * HeadDim);
  };
  for (int p = t->g_lo / 2; p < p_in_lo; ++p) clamped_pair(p);
  const uint8_t* a = v.codes + (tile_row + 2 * p_in_lo) * stride;
  int16_t* out = t->value_pairs + p_in_lo * 2 * HeadDim;
  for (int p = p_in_lo; p < p_in_hi; ++p, a += 2 * stride, out += 2 * HeadDim) pair(a, a + stride, out);
  for (int p = p_in_hi; p < t->g_hi / 2; ++p) clamped_pair(p);
}

// The per-position part of the weight codes over rows [lo, hi) (kv_kernels.h,
// kQ8WeightMax): per value group, vs_max and ratio = kQ8WeightMax / vs_max
// (0 when vs_max = 0).
struct PositionScales {
  int lo = -1, hi = -1;
  float vs_max[kQ8MaxHeadDim / 32];
  float ratio[kQ8MaxHeadDim / 32];
};

template <int HeadDim>
void position_scales(const Q8Tile<HeadDim>& t, int v_groups, int lo, int hi, PositionScales* out) {
  out->lo = lo, out->hi = hi;
  for (int g = 0; g < v_groups; ++g) {
    // Scales are >= 0: the masked lanes' 0 never raise the max (the scalar's starts at 0 too).
    __m256 vmax = _mm256_setzero_ps();
    for (int g0 = lo / 8 * 8; g0 < hi; g0 += 8) {
      vmax = _mm256_max_ps(vmax, _mm256_and_ps(rows_mask8(g0, lo, hi), _mm256_load_ps(t.value_scales[g] + g0)));
    }
    out->vs_max[g] = hmax256(vmax);
    out->ratio[g] = out->vs_max[g] > 0.0f ? static_cast<float>(kQ8WeightMax) / out->vs_max[g] : 0.0f;
  }
}

// Scores of one head over the 8-row groups of [lo, hi): s[r] = sum_b
// fma(float(q_b . k_r) * qs[b], ks_r[group(b)], ...) from 0, in block order
// (the scalar's), q_b . k_r the exact integer dot of block b. Lanes of rows
// outside [lo, hi) hold finite values the caller masks. Returns the max over
// [lo, hi).
// kInt4Keys: then per block in order fma(key_mins, qm[b], .) (qm: qs_b x
// the block's code sum).
template <int HeadDim, bool kInt4Keys = false>
float head_scores(const Q8Tile<HeadDim>& t, const int16_t* q16, const float* qs, int k_group, int lo, int hi,
                  float* s, const float* qm = nullptr) {
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  for (int g0 = lo / 8 * 8; g0 < hi; g0 += 8) {
    __m256 dot = _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int b = 0; b < HeadDim / kQ8Block; ++b) {
      const __m256i q0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(q16 + b * kQ8Block));
      const __m256i q1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(q16 + b * kQ8Block + 16));
      const __m256i dots = block_dots8<HeadDim>(t.keys + g0 * HeadDim + b * kQ8Block, q0, q1);
      const __m256 sum = _mm256_mul_ps(_mm256_cvtepi32_ps(dots), _mm256_set1_ps(qs[b]));
      dot = _mm256_fmadd_ps(sum, _mm256_load_ps(t.key_scales[b * kQ8Block / k_group] + g0), dot);
    }
    if constexpr (kInt4Keys) {
#pragma GCC unroll 8
      for (int b = 0; b < HeadDim / kQ8Block; ++b) {
        dot = _mm256_fmadd_ps(_mm256_load_ps(t.key_mins[b * kQ8Block / k_group] + g0), _mm256_set1_ps(qm[b]), dot);
      }
    }
    _mm256_store_ps(s + g0, dot);
    vmax = _mm256_blendv_ps(vmax, _mm256_max_ps(vmax, dot), rows_mask8(g0, lo, hi));
  }
  return hmax256(vmax);
}

// acc[d0, d0 + 8 NC) += the integer value product of one head over row
// pairs [p_lo, p_hi): block_w[b] the weight codes ([kTile] int16, 0 outside
// its rows) of the value group of the b-th 32-dim block from d0, block_step[b]
// their step (value groups are multiples of 32).
template <int HeadDim, int NC>
void head_values(const Q8Tile<HeadDim>& t, int d0, int p_lo, int p_hi, const int16_t* const* block_w,
                 const float* block_step, float* acc) {
  __m256i isum[NC];
  for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256();
  const int16_t* w0 = block_w[0];
  const int16_t* w1 = NC > 4 ? block_w[1] : w0;  // chunks 4..7
  for (int p = p_lo; p < p_hi; ++p) {
    int32_t pair0, pair1;
    std::memcpy(&pair0, w0 + 2 * p, sizeof(pair0));
    std::memcpy(&pair1, w1 + 2 * p, sizeof(pair1));
    const __m256i c0 = _mm256_set1_epi32(pair0), c1 = _mm256_set1_epi32(pair1);
    const int16_t* x = t.value_pairs + p * 2 * HeadDim + 2 * d0;
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      const __m256i xc = _mm256_load_si256(reinterpret_cast<const __m256i*>(x + 16 * c));
      isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(xc, c < 4 ? c0 : c1));
    }
  }
  for (int c = 0; c < NC; ++c) {
    float* a = acc + d0 + 8 * c;
    const __m256 st = _mm256_set1_ps(block_step[c / 4]);
    _mm256_storeu_ps(a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), st, _mm256_loadu_ps(a)));
  }
}

// The value group of each 32-dim block, found once per call (no division in
// the per-head steps).
struct GroupMap {
  int v_groups = 0;
  int block_group[kQ8MaxHeadDim / kQ8Block] = {};
};

GroupMap group_map(int head_dim, int v_group) {
  GroupMap map;
  map.v_groups = head_dim / v_group;
  for (int b = 0; b < head_dim / kQ8Block; ++b) map.block_group[b] = b * kQ8Block / v_group;
  return map;
}

// One query head's tile step over rows [lo, hi) of the prepared tile:
// scores, the online-softmax step (m, l, the rescaled acc), the weight codes
// and the value product. Reads only its own q, state and rows; each 8-row
// step also issues its share of the call's prefetch (next).
template <int HeadDim, int kInt4 = kNoInt4>
void head_step(const Q8Tile<HeadDim>& t, const int8_t* qc, const float* qs, const int32_t* qb, int k_group,
               const GroupMap& map, const PositionScales& ps, int lo, int hi, float* m, float* l, float* acc,
               TilePrefetchSpread& next) {
  constexpr int kGroups = HeadDim / kQ8Block;
  alignas(32) int16_t q16[HeadDim];
  for (int d = 0; d < HeadDim; d += 16) _mm256_store_si256(reinterpret_cast<__m256i*>(q16 + d), widen16(qc + d));
  alignas(32) float s[kTile];
  float qm[kGroups] = {};  // INT4 keys: qs_b x the block's code sum (bias_b / -128)
  if constexpr (kInt4 == kInt4KeysValues) {
    for (int b = 0; b < kGroups; ++b) qm[b] = qs[b] * static_cast<float>(qb[b] / -128);
  }
  const float tile_max = head_scores<HeadDim, kInt4 == kInt4KeysValues>(t, q16, qs, k_group, lo, hi, s, qm);
  const float m_new = std::max(*m, tile_max);
  // 0 for the empty state (m = -inf); exactly 1 when the max holds, the
  // common case: no exp call, no rescale (x * 1 == x).
  const float alpha = m_new == *m ? 1.0f : std::exp(*m - m_new);
  const float p_ref = tile_max == m_new ? 1.0f : std::exp(tile_max - m_new);
  const float c = p_ref > kQ8WeightTiny ? 1.0f / p_ref : 0.0f;
  const int v_groups = map.v_groups;
  float step[kGroups] = {};
  for (int g = 0; g < v_groups; ++g) step[g] = p_ref * (ps.vs_max[g] / static_cast<float>(kQ8WeightMax));
  alignas(32) int16_t wq[kGroups][kTile];
  const __m256 vm = _mm256_set1_ps(m_new), vc = _mm256_set1_ps(c);
  __m256 vsum = _mm256_setzero_ps();
  __m256 msum[kInt4 != kNoInt4 ? kGroups : 1];  // INT4 values: sum_r p_r mn'_r(g), 8 lanes
  for (__m256& x : msum) x = _mm256_setzero_ps();
  for (int g0 = lo / 8 * 8; g0 < hi; g0 += 8) {
    next.step();
    // Rows outside [lo, hi) weigh exactly 0, so their codes are 0.
    const __m256 p = _mm256_and_ps(rows_mask8(g0, lo, hi), exp256(_mm256_sub_ps(_mm256_load_ps(s + g0), vm)));
    vsum = _mm256_add_ps(vsum, p);
    if constexpr (kInt4 != kNoInt4) {
      for (int g = 0; g < v_groups; ++g) msum[g] = _mm256_fmadd_ps(p, _mm256_load_ps(t.value_mins[g] + g0), msum[g]);
    }
    const __m256 a = _mm256_mul_ps(p, vc);
    for (int g = 0; g < v_groups; ++g) {
      const __m256 u = _mm256_mul_ps(_mm256_load_ps(t.value_scales[g] + g0), _mm256_set1_ps(ps.ratio[g]));
      // lrint (the rounding mode's nearest even), then min(code, kQ8WeightMax):
      // codes are >= 0, so the saturating pack is that min.
      const __m256i code = _mm256_cvtps_epi32(_mm256_mul_ps(a, u));
      _mm_store_si128(reinterpret_cast<__m128i*>(wq[g] + g0),
                      _mm_packs_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1)));
    }
  }
  *m = m_new;
  *l = *l * alpha + hsum256(vsum);
  if (alpha != 1.0f) {
    const __m256 va = _mm256_set1_ps(alpha);
    for (int d = 0; d < HeadDim; d += 8) _mm256_storeu_ps(acc + d, _mm256_mul_ps(va, _mm256_loadu_ps(acc + d)));
  }
  float block_step[kGroups];
  const int16_t* block_w[kGroups];
  for (int b = 0; b < kGroups; ++b) block_step[b] = step[map.block_group[b]], block_w[b] = wq[map.block_group[b]];
  const int p_lo = lo / 2, p_hi = (hi + 1) / 2;
  for (int d0 = 0; d0 < HeadDim; d0 += 64) {
    const int b0 = d0 / kQ8Block;
    if (HeadDim - d0 >= 64) {
      head_values<HeadDim, 8>(t, d0, p_lo, p_hi, block_w + b0, block_step + b0, acc);
    } else {
      head_values<HeadDim, 4>(t, d0, p_lo, p_hi, block_w + b0, block_step + b0, acc);
    }
  }
  if constexpr (kInt4 != kNoInt4) {
    const int v_group = HeadDim / v_groups;
    for (int g = 0; g < v_groups; ++g) {
      const __m256 add = _mm256_set1_ps(hsum256(msum[g]));
      for (int d = g * v_group; d < (g + 1) * v_group; d += 8) {
        _mm256_storeu_ps(acc + d, _mm256_add_ps(_mm256_loadu_ps(acc + d), add));
      }
    }
  }
}

template <int NB, int kInt4 = kNoInt4>
void q8_tile_positions(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const QueryQ8& q,
                       const TilePositions& pos, int n_q, float* m, float* l, float* acc) {
  constexpr int head_dim = NB * kQ8Block;
  int u_lo = kTile, u_hi = 0;
  for (int j = 0; j < pos.n; ++j) u_lo = std::min(u_lo, pos.lo[j]), u_hi = std::max(u_hi, pos.hi[j]);
  Q8Tile<head_dim> tile;
  load_tile<head_dim, kInt4>(k, v, tile_row, u_lo, u_hi, &tile);
  const GroupMap map = group_map(head_dim, v.group);
  PositionScales ps;
  // Over the 32 steps of a decode call (4 heads x 8 steps of 8 rows).
  TilePrefetchSpread next(pos.next, /*steps=*/n_q * kTile / 8);
  for (int j = 0; j < pos.n; ++j) {
    const int lo = pos.lo[j], hi = pos.hi[j];
    // Neighbouring positions mostly share their rows (the whole tile).
    if (lo != ps.lo || hi != ps.hi) position_scales(tile, map.v_groups, lo, hi, &ps);
    for (int i = 0; i < n_q; ++i) {
      const int64_t qh = j * pos.q_heads_stride + i, sh = j * pos.state_stride + i;
      head_step<head_dim, kInt4>(tile, q.codes + qh * head_dim, q.scales + qh * NB, q.bias + qh * NB, k.group, map,
                                 ps, lo, hi, m + sh, l + sh, acc + sh * head_dim, next);
    }
  }
  next.finish();  // a call of fewer rows has fewer steps
}

// q8_tile_positions for head_dim = NB * kQ8Block, NB from head_dim.
template <int kInt4>
void tile_positions(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const QueryQ8& q,
                    const TilePositions& pos, int n_q, int head_dim, float* m, float* l, float* acc) {
  switch (head_dim / kQ8Block) {
    case 1: return q8_tile_positions<1, kInt4>(k, v, tile_row, q, pos, n_q, m, l, acc);
    case 2: return q8_tile_positions<2, kInt4>(k, v, tile_row, q, pos, n_q, m, l, acc);
    case 3: return q8_tile_positions<3, kInt4>(k, v, tile_row, q, pos, n_q, m, l, acc);
    case 4: return q8_tile_positions<4, kInt4>(k, v, tile_row, q, pos, n_q, m, l, acc);
    case 5: return q8_tile_positions<5, kInt4>(k, v, tile_row, q, pos, n_q, m, l, acc);
    case 6: return q8_tile_positions<6, kInt4>(k, v, tile_row, q, pos, n_q, m, l, acc);
    case 7: return q8_tile_positions<7, kInt4>(k, v, tile_row, q, pos, n_q, m, l, acc);
    default: return q8_tile_positions<8, kInt4>(k, v, tile_row, q, pos, n_q, m, l, acc);
  }
}

}  // namespace

void attend_tile_q8_positions_avx2(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const QueryQ8& q,
                                   const TilePositions& pos, int n_q, int head_dim, float* m, float* l, float* acc,
                                   float* /*scratch*/) {
  tile_positions<kNoInt4>(k, v, tile_row, q, pos, n_q, head_dim, m, l, acc);
}

void attend_tile_q4_positions_avx2(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const QueryQ8& q,
                                   const TilePositions& pos, int n_q, int head_dim, float* m, float* l, float* acc,
                                   float* /*scratch*/) {
  // int4-k8: INT8 keys (in rows here), INT4 values.
  if (k.bits == 8) return tile_positions<kInt4Values>(k, v, tile_row, q, pos, n_q, head_dim, m, l, acc);
  tile_positions<kInt4KeysValues>(k, v, tile_row, q, pos, n_q, head_dim, m, l, acc);
}

void attend_tile_q8_avx2(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const QueryQ8& q, int n_q,
                         int head_dim, int lo, int hi, float* m, float* l, float* acc, float* scratch) {
  TilePositions pos;
  pos.lo = &lo;
  pos.hi = &hi;
  attend_tile_q8_positions_avx2(k, v, tile_row, q, pos, n_q, head_dim, m, l, acc, scratch);
}

}  // namespace baton::kv_kernels_impl
