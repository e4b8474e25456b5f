// AVX-512 kernels of the KV codec (see kv_kernels.h): the transform codec's
// affine_rows at 16 lanes and affine_u8_rows with VNNI (kAvx512 includes
// it), and the attention tile step; every other kernel of the set is the
// AVX2 one.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/cpu/simd_avx2.h"
#include "common/kv_codec/kv_kernels.h"
#include "common/kv_codec/kv_quant.h"
#include "common/util/cpu_features.h"
#include "common/util/fp16.h"

namespace baton::kv_kernels_impl {
namespace {

// Where a call of the INT8 tile kernel issues its part of the next tile
// (TilePositions::next, TilePrefetchSpread): a step at each of these points,
// so that the prefetches run through the whole call at about the rate its
// phases consume rows, not in bursts. Per 16-row block of the key columns
// and of each pass of scores, per head of the softmax step, per 4 row pairs
// of the value pairs and per 4 of each value product: ~20 steps for a
// decode call's 64 lines of K (and of V). Three steps per block and head
// and one per 2 value pairs (~52) measured 84.6 against 81.8 us in cache
// (BM_TiledAttentionDecodeInCache, one thread: each step's bookkeeping for
// a line or two) and the same in `baton bench decode`. Measured against a
// step per row pair of the value pairs and value product only (where the
// prefetches came in two bursts, nothing during the key columns, scores and
// softmax): decode attention at context 16384, 2 threads, 12.95-13.88
// against 15.20-15.97 ms (BM_TiledAttentionDecode, 3 alternating runs);
// front-loaded (the lines issued in the first half of the call) 15.6-16.7.
constexpr int kKeyBlockSteps = 1, kScoreBlockSteps = 1, kSoftmaxHeadSteps = 1, kPairsPerStep = 4,
              kValuePairsPerStep = 4, kValueQuadsPerStep = 4;

__mmask16 lane_mask16(int width) {
  if (width <= 0) return 0;
  if (width >= 16) return 0xffff;
  return static_cast<__mmask16>((1u << width) - 1);
}

// Calls tile.template operator()<V>(j0) for the column tiles [j0, j0 + 64)
// of m columns, V = the 16-lane vectors the tile needs: the last tile is only
// as wide as the columns left (a head of 32 spends no work on masked lanes).
template <typename Tile>
void for_column_tiles(int m, Tile&& tile) {
  for (int j0 = 0; j0 < m; j0 += 64) {
    switch ((std::min(m - j0, 64) + 15) / 16) {
      case 1: tile.template operator()<1>(j0); break;
      case 2: tile.template operator()<2>(j0); break;
      case 3: tile.template operator()<3>(j0); break;
      default: tile.template operator()<4>(j0); break;
    }
  }
}

// R rows of c, columns [j0, j0 + 16V): RV accumulators over the k terms.
template <int R, int V>
void affine_tile(const float* a, int64_t lda, int k, const float* b, int m, const float* bias, float* c,
                 int64_t ldc, int j0) {
  __mmask16 mask[V];
  for (int v = 0; v < V; ++v) mask[v] = lane_mask16(m - j0 - 16 * v);
  __m512 acc[R][V];
  for (int v = 0; v < V; ++v) {
    const __m512 init = _mm512_maskz_loadu_ps(mask[v], bias + j0 + 16 * v);
    for (int r = 0; r < R; ++r) acc[r][v] = init;
  }
  for (int i = 0; i < k; ++i) {
    const float* bi = b + static_cast<int64_t>(i) * m + j0;
    __m512 w[V];
    for (int v = 0; v < V; ++v) w[v] = _mm512_maskz_loadu_ps(mask[v], bi + 16 * v);
    for (int r = 0; r < R; ++r) {
      const __m512 ar = _mm512_set1_ps(a[r * lda + i]);
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(ar, w[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) _mm512_mask_storeu_ps(c + r * ldc + j0 + 16 * v, mask[v], acc[r][v]);
  }
}

// R rows of c, columns [j0, j0 + 16V): one dpbusd per row and vector sums
// four components (u8 symbol x s8 weight) into each column's int32.
template <int R, int V>
void affine_u8_tile(const uint8_t* a, int64_t lda, int k, const int8_t* b, int m, const float* scale,
                    const float* bias, float* c, int64_t ldc, int j0) {
  __mmask16 mask[V];
  for (int v = 0; v < V; ++v) mask[v] = lane_mask16(m - j0 - 16 * v);
  __m512i acc[R][V];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_si512();
  }
  const int groups = (k + 3) / 4;
  for (int g = 0; g < groups; ++g) {
    const int8_t* bg = b + (int64_t{g} * m + j0) * 4;
    __m512i w[V];
    for (int v = 0; v < V; ++v) w[v] = _mm512_maskz_loadu_epi32(mask[v], bg + 64 * v);
    for (int r = 0; r < R; ++r) {
      int32_t word;
      std::memcpy(&word, a + r * lda + 4 * g, sizeof(word));
      const __m512i ar = _mm512_set1_epi32(word);
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], ar, w[v]);
    }
  }
  for (int v = 0; v < V; ++v) {
    const __m512 sv = _mm512_maskz_loadu_ps(mask[v], scale + j0 + 16 * v);
    const __m512 zv = _mm512_maskz_loadu_ps(mask[v], bias + j0 + 16 * v);
    // (maskz_cvt: GCC 12 takes the plain form's undefined source for an
    // uninitialized read.)
    for (int r = 0; r < R; ++r) {
      _mm512_mask_storeu_ps(c + r * ldc + j0 + 16 * v, mask[v],
                            _mm512_fmadd_ps(sv, _mm512_maskz_cvtepi32_ps(mask[v], acc[r][v]), zv));
    }
  }
}


// GCC 12 warns that the plain forms of several AVX-512 intrinsics read an
// uninitialized source (their undefined pass-through): the maskz forms with
// every lane set are the same instructions without it.
constexpr __mmask16 kAll = 0xffff;

// max / sum of the 16 lanes, by a fixed tree.
inline __m256 fold_halves(__m512 v, bool max) {
  // (The cast's plain form is an extract with an undefined source too.)
  const __m512 hi = _mm512_maskz_shuffle_f32x4(kAll, v, v, 0xEE);
  const __m512 folded = max ? _mm512_maskz_max_ps(kAll, v, hi) : _mm512_maskz_add_ps(kAll, v, hi);
  return _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, _mm512_castps_pd(folded), 0));
}

inline float reduce_max16(__m512 v) { return simd_avx2::hmax256(fold_halves(v, /*max=*/true)); }

inline float reduce_add16(__m512 v) { return simd_avx2::hsum256(fold_halves(v, /*max=*/false)); }

// exp of 16 floats (Cephes' polynomial, as exp256 in common/cpu/simd_avx2.h):
// relative error ~2e-7 for the x <= 0 that softmax passes.
inline __m512 exp512(__m512 x) {
  x = _mm512_maskz_min_ps(kAll, _mm512_maskz_max_ps(kAll, x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
  __m512 fx = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f));
  fx = _mm512_maskz_roundscale_ps(kAll, fx, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_scalef_ps(kAll, y, fx);
}

// exp of 16 floats x <= 0 (the weights of the INT8 tile, s - m' and t - m'),
// lanes outside `lanes` 0, in 8 instructions: t = x log2(e), f = t -
// floor(t) in [0, 1) (vreduceps, exact), 2^f by a degree-5 polynomial with
// constant term 1 (a weighted least-squares fit to the minimax: relative
// error under 1.6e-7 on [0, 1) in f32), then scalef by floor(t) (vscalefps
// takes the floor of its exponent itself). exp(0) is exactly 1; the rounding
// of t adds at most |t| 2^-24 (relative, under 1e-6 for every weight whose
// code is not 0), far below the weights' 15-bit codes. (The Cody-Waite
// reduction and degree-6 Taylor polynomial it replaced took 11.)
inline __m512 exp_weights512(__m512 x, __mmask16 lanes) {
  const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
  const __m512 f = _mm512_maskz_reduce_ps(kAll, t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 y = _mm512_set1_ps(0.001867130515165627f);
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(0.009017028845846653f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(0.05579991266131401f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(0.24016444385051727f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(0.6931512951850891f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(lanes, y, t);
}

// Lane r of the result = the sum (kMax: the max) of the 16 lanes of a[r], by
// the same tree for every r (each step joins partial results of one vector
// only, so a lane never sees another row's values).
template <bool kMax = false>
inline __m512 reduce16x16(const __m512 (&a)[16]) {
  const auto join = [](__m512 x, __m512 y) { return kMax ? _mm512_maskz_max_ps(kAll, x, y) : _mm512_add_ps(x, y); };
  __m512 b[8], c[4], d[2];
  for (int i = 0; i < 8; ++i) {
    // Low 256 bits: a[2i]'s halves joined; high: a[2i+1]'s.
    b[i] = join(_mm512_maskz_shuffle_f32x4(kAll, a[2 * i], a[2 * i + 1], 0x44),
                _mm512_maskz_shuffle_f32x4(kAll, a[2 * i], a[2 * i + 1], 0xEE));
  }
  for (int i = 0; i < 4; ++i) {
    // 128-bit block j: four partial results of row 4i + j.
    c[i] = join(_mm512_maskz_shuffle_f32x4(kAll, b[2 * i], b[2 * i + 1], 0x88),
                _mm512_maskz_shuffle_f32x4(kAll, b[2 * i], b[2 * i + 1], 0xDD));
  }
  for (int i = 0; i < 2; ++i) {
    // Block j: two partial results of row 8i + j, then two of row 8i + 4 + j.
    d[i] = join(_mm512_shuffle_ps(c[2 * i], c[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                _mm512_shuffle_ps(c[2 * i], c[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // Block j: rows j, 4 + j, 8 + j, 12 + j; lane 4j + t holds row 4t + j.
  const __m512 e = join(_mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)),
                        _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_maskz_permutexvar_ps(kAll, order, e);
}

// reduce16x16's lanes 0..3 from a[0..3] alone (a decode call's heads: up
// to 4), by the same joins in the same order; lanes 4..15 are not
// defined. The tree of reduce16x16 with its rows 4..15 left out: a quarter
// of its shuffles and joins.
template <bool kMax = false>
inline __m512 reduce4x16(const __m512 (&a)[16]) {
  const auto join = [](__m512 x, __m512 y) { return kMax ? _mm512_maskz_max_ps(kAll, x, y) : _mm512_add_ps(x, y); };
  const __m512 b0 = join(_mm512_maskz_shuffle_f32x4(kAll, a[0], a[1], 0x44),
                         _mm512_maskz_shuffle_f32x4(kAll, a[0], a[1], 0xEE));
  const __m512 b1 = join(_mm512_maskz_shuffle_f32x4(kAll, a[2], a[3], 0x44),
                         _mm512_maskz_shuffle_f32x4(kAll, a[2], a[3], 0xEE));
  const __m512 c = join(_mm512_maskz_shuffle_f32x4(kAll, b0, b1, 0x88), _mm512_maskz_shuffle_f32x4(kAll, b0, b1, 0xDD));
  // (reduce16x16 pairs c with rows 4..7 and d with rows 8..15 here: lanes of those rows only.)
  const __m512 d =
      join(_mm512_shuffle_ps(c, c, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(c, c, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 e =
      join(_mm512_shuffle_ps(d, d, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(d, d, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_maskz_permutexvar_ps(kAll, order, e);
}

// Scores of tile rows [g0 + r_lo, g0 + r_hi) of one head, lane r = q . k_{g0+r}
// (lanes outside: 0): row r's dot is the chain of its NC chunk products, in
// chunk order, whatever rows are computed with it. NC = head_dim / 16 chunks
// (0: head_dim > 128, q read from memory).
template <int NC>
inline __m512 group_dots(const float* k, int64_t k_stride, const float* q, int head_dim, int g0, int r_lo, int r_hi) {
  __m512 qc[NC > 0 ? NC : 1];
  for (int c = 0; c < NC; ++c) qc[c] = _mm512_loadu_ps(q + 16 * c);
  const int chunks = NC > 0 ? NC : head_dim / 16;
  __m512 acc[16];
  const float* kg = k + g0 * k_stride;
#pragma GCC unroll 16
  for (int r = 0; r < 16; ++r) {
    acc[r] = _mm512_setzero_ps();
    if (r < r_lo || r >= r_hi) continue;
    const float* kr = kg + r * k_stride;
#pragma GCC unroll 8
    for (int c = 0; c < chunks; ++c) {
      const __m512 qv = NC > 0 ? qc[c] : _mm512_loadu_ps(q + 16 * c);
      acc[r] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(kr + 16 * c), acc[r]);
    }
  }
  return reduce16x16(acc);
}

// acc[i, d0 .. d0 + 16 NV) += sum_r p[i, r] v_r[d0 ..] for R heads, rows [lo, hi).
template <int R, int NV>
void accumulate_tile_values(const float* v, int64_t v_stride, const float* p, int lo, int hi, float* acc,
                            int head_dim, int d0) {
  __m512 a[R][NV];
  for (int i = 0; i < R; ++i) {
    for (int c = 0; c < NV; ++c) a[i][c] = _mm512_loadu_ps(acc + i * head_dim + d0 + 16 * c);
  }
  for (int r = lo; r < hi; ++r) {
    const float* vr = v + r * v_stride + d0;
    for (int i = 0; i < R; ++i) {
      const __m512 pr = _mm512_set1_ps(p[i * kAttentionTileRows + r]);
      for (int c = 0; c < NV; ++c) a[i][c] = _mm512_fmadd_ps(pr, _mm512_loadu_ps(vr + 16 * c), a[i][c]);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int c = 0; c < NV; ++c) _mm512_storeu_ps(acc + i * head_dim + d0 + 16 * c, a[i][c]);
  }
}

template <int R>
void accumulate_values(const float* v, int64_t v_stride, const float* p, int lo, int hi, float* acc, int head_dim) {
  for (int d0 = 0; d0 < head_dim; d0 += 128) {
    switch (std::min(head_dim - d0, 128) / 16) {
      case 1: accumulate_tile_values<R, 1>(v, v_stride, p, lo, hi, acc, head_dim, d0); break;
      case 2: accumulate_tile_values<R, 2>(v, v_stride, p, lo, hi, acc, head_dim, d0); break;
      case 3: accumulate_tile_values<R, 3>(v, v_stride, p, lo, hi, acc, head_dim, d0); break;
      case 4: accumulate_tile_values<R, 4>(v, v_stride, p, lo, hi, acc, head_dim, d0); break;
      case 5: accumulate_tile_values<R, 5>(v, v_stride, p, lo, hi, acc, head_dim, d0); break;
      case 6: accumulate_tile_values<R, 6>(v, v_stride, p, lo, hi, acc, head_dim, d0); break;
      case 7: accumulate_tile_values<R, 7>(v, v_stride, p, lo, hi, acc, head_dim, d0); break;
      default: accumulate_tile_values<R, 8>(v, v_stride, p, lo, hi, acc, head_dim, d0); break;
    }
  }
}

__mmask16 rows_mask(int g0, int lo, int hi) {
  const int r_lo = std::max(lo - g0, 0), r_hi = std::min(hi - g0, 16);
  return static_cast<__mmask16>(lane_mask16(r_hi) & ~lane_mask16(r_lo));
}

// The group scales (and mins) of one head's row as floats: out[g] for the
// group holding elements [g * group, (g + 1) * group). head_dim / group <= 16.
inline void row_scales(const uint16_t* halves, int n_groups, float* out) {
  const __m256i h = _mm256_maskz_loadu_epi16(static_cast<__mmask16>(lane_mask16(n_groups)), halves);
  _mm512_storeu_ps(out, _mm512_maskz_cvtph_ps(kAll, h));
}

// Prefetches row r + 4 of a head into L1 (run_segment brought the tile to
// L2). Past the plane's end harmless (a prefetch never faults); integer
// arithmetic keeps the address out of pointer arithmetic.
inline void prefetch_head_row(const KvHeadRows& h, int64_t r, int head_bytes) {
  const uintptr_t near = reinterpret_cast<uintptr_t>(h.codes) + static_cast<uintptr_t>((r + 4) * h.row_code_bytes);
  for (int b = 0; b < head_bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(near + b), _MM_HINT_T0);
}

// The online-softmax step of one head once its tile scores s[lo, hi) are in
// place and vmax holds their max (lanes outside [lo, hi) at -inf or below):
// s becomes the weights exp(s - m') (exactly 0 outside [lo, hi)); m, l and
// acc [head_dim] move to the new max m'.
inline float softmax_step(float* s, __m512 vmax, int lo, int hi, float* m, float* l, float* acc, int head_dim) {
  const float tile_max = reduce_max16(vmax);
  const float m_new = std::max(*m, tile_max);
  // 0 for the empty state (m = -inf); exactly 1 (exp(0)) when the max
  // holds, the common case: no exp call, no rescale (x * 1 == x).
  const float alpha = m_new == *m ? 1.0f : std::exp(*m - m_new);
  const __m512 vm = _mm512_set1_ps(m_new);
  __m512 vsum = _mm512_setzero_ps();
  for (int g0 = lo / 16 * 16; g0 < hi; g0 += 16) {
    // Rows outside [lo, hi) weigh exactly 0.
    const __m512 p = _mm512_maskz_mov_ps(rows_mask(g0, lo, hi), exp512(_mm512_sub_ps(_mm512_loadu_ps(s + g0), vm)));
    _mm512_storeu_ps(s + g0, p);
    vsum = _mm512_add_ps(vsum, p);
  }
  *m = m_new;
  *l = *l * alpha + reduce_add16(vsum);
  const __m512 valpha = _mm512_set1_ps(alpha);
  if (alpha != 1.0f) {
    for (int d = 0; d < head_dim; d += 16) _mm512_storeu_ps(acc + d, _mm512_mul_ps(valpha, _mm512_loadu_ps(acc + d)));
  }
  return tile_max;
}

// The online-softmax step of every head of an in-place tile: scores of head
// i at s + i * kAttentionTileRows, rows [lo, hi); each head's tile max, then
// softmax_step (exp(s - m') in place, m, l and the rescaled acc).
void tile_softmax(float* s, int n_q, int head_dim, int lo, int hi, float* m, float* l, float* acc) {
  const int g_first = lo / 16 * 16;
  for (int i = 0; i < n_q; ++i) {
    float* si = s + int64_t{i} * kAttentionTileRows;
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int g0 = g_first; g0 < hi; g0 += 16) {
      vmax = _mm512_mask_max_ps(vmax, rows_mask(g0, lo, hi), vmax, _mm512_loadu_ps(si + g0));
    }
    softmax_step(si, vmax, lo, hi, m + i, l + i, acc + int64_t{i} * head_dim, head_dim);
  }
}

}  // namespace

void dequantize_head_rows_avx512(const KvHeadRows& h, int64_t first_row, int64_t n_rows, int head_dim, float* out) {
  const bool quantized = h.bits != 16;
  if (head_dim % 16 != 0 || (quantized && (h.group % 16 != 0 || head_dim / h.group > 16 ||
                                            (h.group & (h.group - 1)) != 0))) {
    // The set's per-row kernels are the AVX2 ones: the same values.
    static const KvKernels avx2 = kv_kernels_avx2();
    return avx2.dequantize_head_rows(h, first_row, n_rows, head_dim, out);
  }
  const int n_groups = quantized ? head_dim / h.group : 0;
  const int chunk_shift = quantized ? __builtin_ctz(static_cast<unsigned>(h.group / 16)) : 0;
  const int head_bytes = head_dim * h.bits / 8;
  alignas(64) float scales[16], mins[16];
  for (int64_t r = first_row; r < first_row + n_rows; ++r, out += head_dim) {
    const uint8_t* codes = h.codes + r * h.row_code_bytes;
    prefetch_head_row(h, r, head_bytes);
    if (h.bits == 16) {
      const uint16_t* x = reinterpret_cast<const uint16_t*>(codes);
      for (int d = 0; d < head_dim; d += 16) {
        const __m256i halves = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + d));
        _mm512_storeu_ps(out + d, _mm512_maskz_cvtph_ps(kAll, halves));
      }
      continue;
    }
    row_scales(h.scales + r * h.row_groups, n_groups, scales);
    if (h.bits == 8) {
      for (int d = 0, c = 0; d < head_dim; d += 16, ++c) {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + d));
        const __m512i wide = _mm512_maskz_cvtepi8_epi32(kAll, bytes);
        const __m512 x = _mm512_maskz_cvtepi32_ps(kAll, wide);
        _mm512_storeu_ps(out + d, _mm512_mul_ps(_mm512_set1_ps(scales[c >> chunk_shift]), x));
      }
      continue;
    }
    row_scales(h.mins + r * h.row_groups, n_groups, mins);
    const __m128i low4 = _mm_set1_epi8(15);
    for (int d = 0, c = 0; d < head_dim; d += 16, ++c) {
      // 16 codes in 8 bytes, element 2i in the low nibble of byte i.
      const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + d / 2));
      const __m128i lo = _mm_and_si128(bytes, low4), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low4);
      const __m512 x = _mm512_maskz_cvtepi32_ps(kAll, _mm512_maskz_cvtepu8_epi32(kAll, _mm_unpacklo_epi8(lo, hi)));
      const int g = c >> chunk_shift;
      _mm512_storeu_ps(out + d, _mm512_fmadd_ps(_mm512_set1_ps(scales[g]), x, _mm512_set1_ps(mins[g])));
    }
  }
}

namespace {

// x[j] lane r <- x[r] lane j: a 16x16 transpose of dwords. In: 16 keys' code
// rows (16 four-byte chunks each); out: per chunk, that chunk of the 16 keys.
inline void transpose16x16_epi32(__m512i (&x)[16]) {
  __m512i a[16], b[16];
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_maskz_unpacklo_epi32(kAll, x[2 * i], x[2 * i + 1]);
    a[2 * i + 1] = _mm512_maskz_unpackhi_epi32(kAll, x[2 * i], x[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    b[4 * i] = _mm512_maskz_unpacklo_epi64(0xff, a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm512_maskz_unpackhi_epi64(0xff, a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm512_maskz_unpacklo_epi64(0xff, a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm512_maskz_unpackhi_epi64(0xff, a[4 * i + 1], a[4 * i + 3]);
  }
  // b[4i + c], 128-bit lane L: chunk 4L + c of rows 4i .. 4i + 3.
  for (int c = 0; c < 4; ++c) {
    const __m512i e0 = _mm512_maskz_shuffle_i32x4(kAll, b[c], b[4 + c], 0x44);
    const __m512i e1 = _mm512_maskz_shuffle_i32x4(kAll, b[c], b[4 + c], 0xEE);
    const __m512i e2 = _mm512_maskz_shuffle_i32x4(kAll, b[8 + c], b[12 + c], 0x44);
    const __m512i e3 = _mm512_maskz_shuffle_i32x4(kAll, b[8 + c], b[12 + c], 0xEE);
    x[c] = _mm512_maskz_shuffle_i32x4(kAll, e0, e2, 0x88);
    x[4 + c] = _mm512_maskz_shuffle_i32x4(kAll, e0, e2, 0xDD);
    x[8 + c] = _mm512_maskz_shuffle_i32x4(kAll, e1, e3, 0x88);
    x[12 + c] = _mm512_maskz_shuffle_i32x4(kAll, e1, e3, 0xDD);
  }
}

// The rows of a 16-row block of a tile [g0, g0 + 16), clamped into [lo, hi)
// (reads stay on rows the caller holds; lanes outside are masked later), as
// offsets from the tile's row 0.
struct BlockRows {
  alignas(64) int32_t row[16];
  bool full;  // every row of the block in [lo, hi): row[r] = g0 + r
  int g0;
  BlockRows(int g0_, int lo, int hi) : full(g0_ >= lo && g0_ + 16 <= hi), g0(g0_) {
    const __m512i r = _mm512_add_epi32(_mm512_set1_epi32(g0), _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                                                11, 12, 13, 14, 15));
    const __m512i low = _mm512_maskz_max_epi32(kAll, r, _mm512_set1_epi32(lo));
    _mm512_store_si512(row, _mm512_maskz_min_epi32(kAll, low, _mm512_set1_epi32(hi - 1)));
  }
};

// Lanes r: the f16 scales of the head's groups [0, n_groups) of the block's
// rows, as floats: out[g]. One dword gather per two groups.
template <int MaxGroups>
inline void block_scales16(const KvHeadRows& h, int64_t tile_row, const BlockRows& rows, int n_groups,
                           __m512 (&out)[MaxGroups]) {
  n_groups = std::min(n_groups, MaxGroups);
  const uint16_t* base = h.scales + tile_row * h.row_groups;
  const __m512i index = _mm512_maskz_mullo_epi32(kAll, _mm512_load_si512(rows.row), _mm512_set1_epi32(static_cast<int>(h.row_groups)));
  // A full block of a head whose rows are consecutive (the edge store) with
  // 2 or 4 groups a row: its scales are 64 or 128 contiguous bytes, loaded
  // (and for 4 groups permuted) instead of gathered.
  const bool contiguous = rows.full && (h.row_groups == 2 || h.row_groups == 4) && n_groups == h.row_groups;
  const auto* block = reinterpret_cast<const int32_t*>(base + int64_t{rows.g0} * h.row_groups);
  auto gather_pair = [&](int g, __m512* low, __m512* high) {
    // Entries g and g + 1 of each row (both of this head's row: never past it).
    __m512i pair;
    if (contiguous && h.row_groups == 2) {
      pair = _mm512_loadu_si512(block);
    } else if (contiguous) {  // dword g / 2 of each row's two: lanes r <- dword 2r + g / 2
      const __m512i pick = _mm512_add_epi32(_mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30),
                                            _mm512_set1_epi32(g / 2));
      pair = _mm512_maskz_permutex2var_epi32(kAll, _mm512_loadu_si512(block), pick, _mm512_loadu_si512(block + 16));
    } else {
      pair = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), kAll, index, base + g, 2);
    }
    if (low != nullptr) *low = _mm512_maskz_cvtph_ps(kAll, _mm512_maskz_cvtepi32_epi16(kAll, pair));
    *high = _mm512_maskz_cvtph_ps(kAll, _mm512_maskz_cvtepi32_epi16(kAll, _mm512_maskz_srli_epi32(kAll, pair, 16)));
  };
  int g = 0;
  if constexpr (MaxGroups >= 2) {  // (one group: no pair; -Warray-bounds saw out[1] in the dead loop)
    for (; g + 2 <= n_groups; g += 2) gather_pair(g, &out[g], &out[g + 1]);
  }
  if (g == n_groups) return;
  if (g > 0) return gather_pair(g - 1, nullptr, &out[g]);  // the last of an odd count: with the one before
  alignas(32) uint16_t halves[16];
  for (int r = 0; r < 16; ++r) halves[r] = base[int64_t{rows.row[r]} * h.row_groups];
  out[0] = _mm512_maskz_cvtph_ps(kAll, _mm256_load_si256(reinterpret_cast<const __m256i*>(halves)));
}

// Prefetches rows [r0, r1) of a head's INT8 codes into L1 (run_segment
// brought the tile to L2): one line per row when the rows sit on lines (the
// store aligns its planes), else both lines a row may straddle.
inline void prefetch_rows_l1(const KvHeadRows& h, int64_t tile_row, int r0, int r1, int head_bytes) {
  const uint8_t* row = h.codes + (tile_row + r0) * h.row_code_bytes;
  const bool on_lines = ((reinterpret_cast<uintptr_t>(row) | h.row_code_bytes) & 63) == 0;
  for (int r = r0; r < r1; ++r, row += h.row_code_bytes) {
    for (int b = 0; b < head_bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(row + b), _MM_HINT_T0);
    if (!on_lines) _mm_prefetch(reinterpret_cast<const char*>(row + head_bytes - 1), _MM_HINT_T0);
  }
}

// Key codes of the block's rows + 128, as u8, transposed: cols[j] lane r =
// bytes 4j .. 4j + 3 of row r of the block.
inline void load_key_columns(const KvHeadRows& k, int64_t tile_row, const BlockRows& rows, int head_dim,
                             __m512i* cols) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const uint8_t* base = k.codes + tile_row * k.row_code_bytes;
  const uint8_t* block = base + int64_t{rows.g0} * k.row_code_bytes;
  for (int d0 = 0; d0 < head_dim; d0 += 64) {
    const __mmask64 bytes = head_dim - d0 >= 64 ? ~__mmask64{0} : (__mmask64{1} << (head_dim - d0)) - 1;
    __m512i x[16];
    if (rows.full) {
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) {
        x[r] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(bytes, block + r * k.row_code_bytes + d0), flip);
      }
    } else {
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) {
        x[r] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(bytes, base + int64_t{rows.row[r]} * k.row_code_bytes + d0),
                                flip);
      }
    }
    transpose16x16_epi32(x);
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      if (d0 + 4 * j < head_dim) cols[d0 / 4 + j] = x[j];
    }
  }
}

// acc += x (u8) . (the dword at w, s8, broadcast): vpdpbusd with its memory
// operand broadcast, written out because GCC 12 compiles the intrinsic with
// a separate broadcast (and, in some loops, a register copy per instruction).
inline __m512i dpbusd_broadcast(__m512i acc, __m512i x, const void* w) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(x), "m"(*static_cast<const int32_t*>(w)));
  return acc;
}

// The dword at w in every lane: vpbroadcastd from memory (a load, no vector
// ALU port), written out so that GCC does not route it through a general
// register.
inline __m512i broadcast_dword(const int32_t* w) {
  __m512i r;
  asm("vpbroadcastd %1, %0" : "=v"(r) : "m"(*w));
  return r;
}

// The float steps after the integer products, one form for both paths (the
// vector kernels here and the AMX tiles below), so their bits cannot part:
// a score folds block b's exact dot times the query block's scale, then
// times its key group's scales (the first block multiplies, the others add
// by FMA, in block order) ...
inline __m512 fold_block_score(__m512 out, __m512i dot, float q_scale, __m512 k_scales, int b) {
  const __m512 t = _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(kAll, dot), _mm512_set1_ps(q_scale));
  return b == 0 ? _mm512_mul_ps(t, k_scales) : _mm512_fmadd_ps(t, k_scales, out);
}

// ... and 16 dims of a head's state take the tile's exact value sums times
// the head's step of their group: acc = fma(float(sum), step, acc).
inline void add_value_sums(float* acc, __m512i sum, __m512 step) {
  _mm512_storeu_ps(acc, _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(kAll, sum), step, _mm512_loadu_ps(acc)));
}

// acc += x . w by int16 pairs, all in registers.
inline __m512i dpwssd(__m512i acc, __m512i x, __m512i w) {
  asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));
  return acc;
}

// acc += u (u8) . x (s8) by 4-byte lanes, all in registers.
inline __m512i dpbusd(__m512i acc, __m512i u, __m512i x) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(x));
  return acc;
}

// out byte j = x byte (idx byte j & 63): vpermb, AVX-512 VBMI, written out
// so that the file needs no VBMI flag; only the paths that
// q8_value_quads_active allows (kv_kernels.h) run it.
inline __m512i permute_bytes(__m512i idx, __m512i x) {
  __m512i r;
  asm("vpermb %2, %1, %0" : "=v"(r) : "v"(idx), "v"(x));
  return r;
}

// INT4 codes packed two a byte (low nibble first): each byte's low, or high,
// nibble, in [0, 15]; centred: codes - 8, the values' signed codes.
inline __m512i low_nibbles(__m512i x) { return _mm512_and_si512(x, _mm512_set1_epi8(15)); }
inline __m512i high_nibbles(__m512i x) { return low_nibbles(_mm512_maskz_srli_epi16(~__mmask32{0}, x, 4)); }
inline __m512i centred(__m512i codes) { return _mm512_sub_epi8(codes, _mm512_set1_epi8(8)); }

// Scores of 16 tile rows for heads [h0, h0 + R), NB = head_dim / kQ8Block
// blocks: out[i] lane r. Each block's integer dot is exact (its R x NB
// accumulators are independent chains, summed in chunk order); blocks are
// folded in order, so a head's score never depends on the other heads.
// Block b's key scales are ks[k_block[b]]. kBiasShift 4 (INT4 keys,
// attend_tile_q4_positions): the accumulators start at bias >> 4 (the codes
// - 8 where INT8's are + 128), and each score then takes the keys' mins'
// term, block by block in order: fma(kmin[k_block[b]], qs_b * sum(codes_b),
// score) (sum(codes_b) = bias_b / -128).
// kNibbles: cols is a block of INT4 keys in key column blocks (kv_kernels.h,
// blocked_from_rows: head_dim / 8 vectors, each a dword of the 16
// rows' packed bytes), split into its low- and high-nibble columns here, in
// registers (q4_key_columns_from_blocks' columns: the same products in the
// same order per accumulator).
template <int R, int NB, int kBiasShift = 0, bool kNibbles = false>
inline void q8_scores(const __m512i* cols, const QueryQ8& q, int h0, const __m512* ks, const int* k_block,
                      __m512* out, const __m512* kmin = nullptr) {
  constexpr int head_dim = NB * kQ8Block;
  __m512i acc[R][NB];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
    for (int b = 0; b < NB; ++b) acc[i][b] = _mm512_set1_epi32(q.bias[(h0 + i) * NB + b] >> kBiasShift);
  }
  // Four query codes as one dword, broadcast straight from memory.
  using Word = int32_t __attribute__((may_alias, aligned(1)));
  const Word* qw = reinterpret_cast<const Word*>(q.codes + h0 * head_dim);
  if constexpr (kNibbles) {
#pragma GCC unroll 4
    for (int j = 0; j < kQ8Block / 4; j += 2) {
#pragma GCC unroll 8
      for (int b = 0; b < NB; ++b) {
        const __m512i x = _mm512_loadu_si512(cols + b * (kQ8Block / 8) + j / 2);
        const __m512i low = low_nibbles(x), high = high_nibbles(x);
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) {
          const int w = i * (head_dim / 4) + b * (kQ8Block / 4) + j;
          acc[i][b] = dpbusd_broadcast(acc[i][b], low, &qw[w]);
          acc[i][b] = dpbusd_broadcast(acc[i][b], high, &qw[w + 1]);
        }
      }
    }
  } else {
#pragma GCC unroll 8
    for (int j = 0; j < kQ8Block / 4; ++j) {
#pragma GCC unroll 8
      for (int b = 0; b < NB; ++b) {
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) {
          const int w = i * (head_dim / 4) + b * (kQ8Block / 4) + j;
          acc[i][b] = dpbusd_broadcast(acc[i][b], cols[b * (kQ8Block / 4) + j], &qw[w]);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
    for (int b = 0; b < NB; ++b) out[i] = fold_block_score(out[i], acc[i][b], q.scales[(h0 + i) * NB + b], ks[k_block[b]], b);
  }
  if constexpr (kBiasShift != 0) {
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
      for (int b = 0; b < NB; ++b) {
        const int e = (h0 + i) * NB + b;
        const float qm = q.scales[e] * static_cast<float>(q.bias[e] / -128);
        out[i] = _mm512_fmadd_ps(kmin[k_block[b]], _mm512_set1_ps(qm), out[i]);
      }
    }
  }
}

// Position j's query heads of the call's query (QueryQ8 per head: head_dim
// codes, NB scales and biases).
template <int NB>
inline QueryQ8 position_query(const QueryQ8& q, const TilePositions& pos, int j) {
  const int64_t qh = j * pos.q_heads_stride;
  return QueryQ8{q.codes + qh * NB * kQ8Block, q.scales + qh * NB, q.bias + qh * NB};
}

// One 16-row block's scores of one position's query heads [i_begin, i_end)
// (its query qj): head i's 16 at out + i * kAttentionTileRows. R heads at a
// time, then one by one.
template <int R, int NB, int kBiasShift = 0, bool kNibbles = false>
inline void q8_block_scores(const __m512i* block, const QueryQ8& qj, int i_begin, int i_end, const __m512* kb,
                            const int* k_block, float* out, const __m512* kmin = nullptr) {
  __m512 x[R];
  int i = i_begin;
  for (; i + R <= i_end; i += R) {
    q8_scores<R, NB, kBiasShift, kNibbles>(block, qj, i, kb, k_block, x, kmin);
    for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + (i + r) * kAttentionTileRows, x[r]);
  }
  for (; i < i_end; ++i) {
    q8_scores<1, NB, kBiasShift, kNibbles>(block, qj, i, kb, k_block, x, kmin);
    _mm512_storeu_ps(out + i * kAttentionTileRows, x[0]);
  }
}

// The key columns of the union's 16-row blocks [u_lo, u_hi) of the tile,
// once for every head of the call: block bi (row 16 (bi + u_lo / 16) of the
// tile) at cols + bi * (head_dim / 4) (load_key_columns; keys in key column
// blocks are already so in the store: only their scales), its rows' key
// group scales at ks + bi * NB.
template <int NB>
void q8_key_columns(const KvHeadRows& k, int64_t tile_row, int u_lo, int u_hi, __m512i* cols, __m512* ks,
                    TilePrefetchSpread& next) {
  constexpr int head_dim = NB * kQ8Block;
  const int k_groups = head_dim / k.group;
  // No L1 prefetches of the rows: the call before brought them to L2
  // (TilePositions::next), and prefetches of the next block's keys and this
  // block's values, 32 lines per block, measured 3.85-3.94 against 3.50-3.53
  // ms (decode attention, context 4096, 2 threads; 16384 16.9-17.3 against
  // 16.7-17.1; prefill calls unchanged).
  for (int g0 = u_lo / 16 * 16, bi = 0; g0 < u_hi; g0 += 16, ++bi) {
    const BlockRows rows(g0, u_lo, u_hi);
    for (int x = 0; x < kKeyBlockSteps; ++x) next.step();
    if (!k.key_blocks) load_key_columns(k, tile_row, rows, head_dim, cols + bi * (head_dim / 4));
    __m512 block[NB] = {};  // k_groups <= NB: key groups hold whole query blocks
    block_scales16(k, tile_row, rows, k_groups, block);
    for (int b = 0; b < NB; ++b) ks[bi * NB + b] = block[b];
  }
}

// Scores of heads [h0, h0 + nh) of the call (head h = j * n_q + i: position
// j's query head i) at s + h * kAttentionTileRows, from the union's key
// columns (q8_key_columns). A position skips the blocks outside its own
// rows (their lanes are masked later); a lane depends only on its row and
// head, so a head's scores are the same bits whatever else the call holds.
// kNibbles: cols the union's INT4 key column blocks as the store holds them
// (q8_scores' kNibbles), a call of one position only.
template <int NB, int kBiasShift = 0, bool kNibbles = false>
void q8_head_scores(const __m512i* cols, const __m512* ks, int k_group, const QueryQ8& q, const TilePositions& pos,
                    int n_q, int u_lo, int u_hi, int h0, int nh, float* s, TilePrefetchSpread& next,
                    const __m512* kmin = nullptr) {
  constexpr int head_dim = NB * kQ8Block;
  constexpr int R = NB <= 2 ? 4 : NB <= 4 ? 2 : 1;  // R x NB accumulators in registers, next to the columns
  int k_block[NB];  // query block b's key group (its scale in ks): once here, not a division per block and head
  for (int b = 0; b < NB; ++b) k_block[b] = b * kQ8Block / k_group;
  if (const int j = h0 / n_q; (h0 + nh - 1) / n_q == j) {
    // Every head of the call one position's (a decode step's call): that
    // position's blocks in one loop, nothing looked up or decided per block
    // but the prefetch step. The same products and float steps per head and
    // block as below, so the same bits. Measured (Zen 5,
    // BM_TiledAttentionDecodeInCache, 3 alternating runs, median of 3)
    // context 512 / 1024 on one thread 16.8-17.8 / 33.8-36.2 against
    // 18.5-20.0 / 36.9-40.2 us. (Decode at 16384 in this host's slow memory
    // phases did not move: the kernel's prefetched KV stream runs at
    // ~0.65-0.75 of the read pass with this kernel's rate either way; see
    // README, "Fortieth session".)
    const int i_begin = h0 - j * n_q, i_end = i_begin + nh;
    const QueryQ8 qj = position_query<NB>(q, pos, j);
    float* sj = s + int64_t{j} * n_q * kAttentionTileRows;
    const int first = u_lo / 16, b_lo = std::max(pos.lo[j] / 16, first), b_hi = (pos.hi[j] + 15) / 16;
    const int b_end = (u_hi + 15) / 16;
    for (int b = first; b < b_end; ++b) {
      for (int x = 0; x < kScoreBlockSteps; ++x) next.step();  // (every block of the union, as below)
      if (b < b_lo || b >= b_hi) continue;
      q8_block_scores<R, NB, kBiasShift, kNibbles>(cols + (b - first) * (head_dim / (kNibbles ? 8 : 4)), qj, i_begin,
                                                   i_end, ks + (b - first) * NB, k_block, sj + 16 * b,
                                                   kmin == nullptr ? nullptr : kmin + (b - first) * NB);
    }
    return;
  }
  // The caller's calls over INT4 key blocks are one position's (above);
  // the blocks' columns are made into cols for any other.
  if constexpr (kNibbles) __builtin_trap();
  // Block by block, every position of the step over it: for head_dim <= 64
  // the block's key columns (NB x 8 vectors) go to registers once for all
  // of them, not once per position.
  for (int g0 = u_lo / 16 * 16, bi = 0; g0 < u_hi; g0 += 16, ++bi) {
    const __m512i* block = cols + bi * (head_dim / 4);
    __m512i c[NB <= 2 ? NB * 8 : 1];
    if constexpr (NB <= 2) {
#pragma GCC unroll 16
      for (int x = 0; x < NB * 8; ++x) c[x] = block[x];
      block = c;
    }
    const __m512* kb = ks + bi * NB;
    for (int x = 0; x < kScoreBlockSteps; ++x) next.step();
    for (int j = h0 / n_q; j * n_q < h0 + nh; ++j) {
      if (g0 + 16 <= pos.lo[j] || g0 >= pos.hi[j]) continue;
      const int i_begin = std::max(h0 - j * n_q, 0), i_end = std::min(h0 + nh - j * n_q, n_q);
      q8_block_scores<R, NB, kBiasShift>(block, position_query<NB>(q, pos, j), i_begin, i_end, kb, k_block,
                                         s + int64_t{j} * n_q * kAttentionTileRows + g0,
                                         kmin == nullptr ? nullptr : kmin + bi * NB);
    }
  }
}

// The value rows of the union [u_lo, u_hi) as int16 row pairs for vpdpwssd,
// once per tile for every head: vp[(k - k_lo) * (head_dim / 16) + c] holds
// rows 2k and 2k + 1 (clamped into the union: rows outside it weigh 0) of 16
// dims, dword lane t = (v_2k, v_2k+1) of one dim. Chunk pair (2c2, 2c2 + 1)
// covers dims [32 c2, 32 c2 + 32) in unpack order: 128-bit lane L of chunk
// 2c2 holds dims 32 c2 + 8L + [0, 4), of chunk 2c2 + 1 dims 32 c2 + 8L + [4, 8)
// (unpermute_chunk puts them back).
struct ValueRows {
  const uint8_t* base;  // the tile's row 0
  int64_t stride;
  int u_lo, u_hi;
  bool quads;    // value quads (kv_kernels.h), read by q8_values_quads only
  bool nibbles;  // INT4 values in nibble quads (blocked_from_rows), read so too
  ValueRows(const KvHeadRows& v, int64_t tile_row, int lo, int hi)
      : base(v.codes + tile_row * v.row_code_bytes), stride(v.row_code_bytes), u_lo(lo), u_hi(hi),
        quads(v.value_quads), nibbles(v.value_quads && v.bits == 4) {}
  // Pair k (rows 2k and 2k + 1, clamped into the union) as vp[(k - k_lo) *
  // (head_dim / 16) + c], c = 0 .. head_dim / 16 - 1.
  inline void pair(int k, int head_dim, __m512i* out) const {
    constexpr __mmask32 kAll32 = 0xffffffffu;
    const uint8_t* r0 = base + int64_t{std::max(2 * k, u_lo)} * stride;
    const uint8_t* r1 = base + int64_t{std::min(2 * k + 1, u_hi - 1)} * stride;
    for (int d0 = 0; d0 < head_dim; d0 += 32, out += 2) {
      const __m512i a =
          _mm512_maskz_cvtepi8_epi16(kAll32, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + d0)));
      const __m512i b =
          _mm512_maskz_cvtepi8_epi16(kAll32, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1 + d0)));
      out[0] = _mm512_maskz_unpacklo_epi16(kAll32, a, b);
      out[1] = _mm512_maskz_unpackhi_epi16(kAll32, a, b);
    }
  }
};

void interleave_value_pairs(const KvHeadRows& v, int64_t tile_row, int u_lo, int u_hi, int head_dim, __m512i* vp,
                            TilePrefetchSpread& next) {
  const ValueRows rows(v, tile_row, u_lo, u_hi);
  const int k_lo = u_lo / 2, k_hi = (u_hi + 1) / 2;
  __m512i* out = vp;
  for (int k = k_lo; k < k_hi; ++k, out += head_dim / 16) {
    if ((k - k_lo) % kPairsPerStep == 0) next.step();
    rows.pair(k, head_dim, out);
  }
}

// Split weight codes (softmax_codes16<..., kSplit>, read by
// q8_values_quads): a head's [kAttentionTileRows] codes of one value group,
// in the same 2 x kAttentionTileRows bytes as the int16 codes, as chunks of
// 32 rows: the rows' low bytes (code & 255), then their high bytes (code >>
// 8; codes are in [0, kQ8WeightMax], so code = 256 high + low with both
// unsigned). Quad q (rows 4q .. 4q + 3) has its low bytes as one dword at
// split_quad_offset(q), its high bytes 32 bytes on.
inline int split_quad_offset(int q) { return 4 * q + 32 * (q >> 3); }

// Where block b (rows 16b .. 16b + 15) of the split codes at w (a head's
// group) puts its 16 low bytes (the high bytes 32 on).
inline uint8_t* split_block_codes(int16_t* w, int b) {
  return reinterpret_cast<uint8_t*>(w) + 64 * (b / 2) + 16 * (b % 2);
}

// vpermb's index from the int16 codes of 32 rows as vpackssdw leaves them
// (128-bit lane L: words 0-3 rows 4L + [0, 4), words 4-7 rows 16 + 4L + [0,
// 4)) to a split chunk: byte j < 32 the low byte of row j, byte 32 + j its
// high byte.
struct alignas(64) ByteIndex {
  uint8_t idx[64];
};

constexpr ByteIndex make_split_code_order() {
  ByteIndex x{};
  for (int j = 0; j < 64; ++j) {
    const int row = j % 32, high = j / 32, r = row % 16;
    const int word = 8 * (r / 4) + (row >= 16 ? 4 : 0) + r % 4;
    x.idx[j] = static_cast<uint8_t>(2 * word + high);
  }
  return x;
}
constexpr ByteIndex kSplitCodeOrder = make_split_code_order();

inline __m512i split_code_order() { return _mm512_load_si512(kSplitCodeOrder.idx); }

// The per-position part of the weight codes (kv_kernels.h, kQ8WeightMax)
// over rows [lo, hi): vs_max[g] per value group and ratio[g] = kQ8WeightMax
// / vs_max[g] (0 when vs_max[g] = 0), from vs the union blocks' value group
// scales (vs[b][g] lane r: row 16 (b + u_lo / 16) + r of the tile).
struct PositionScales {
  float vs_max[kQ8MaxHeadDim / 32];
  float ratio[kQ8MaxHeadDim / 32];
  float unit[kQ8MaxHeadDim / 32];  // vs_max[g] / kQ8WeightMax: a head's step over p_ref
};

void position_weight_scales(const __m512 (*vs)[kQ8MaxHeadDim / 32], int lo, int hi, int u_lo, int u_hi, int v_groups,
                            PositionScales* out) {
  const int b_first = u_lo / 16, b_end = (u_hi + 15) / 16;
  for (int g = 0; g < v_groups; ++g) {
    __m512 vmax = _mm512_setzero_ps();
    for (int b = b_first; b < b_end; ++b) {
      vmax = _mm512_mask_max_ps(vmax, rows_mask(16 * b, lo, hi), vmax, vs[b - b_first][g]);
    }
    out->vs_max[g] = reduce_max16(vmax);
    out->ratio[g] = out->vs_max[g] > 0.0f ? static_cast<float>(kQ8WeightMax) / out->vs_max[g] : 0.0f;
    out->unit[g] = out->vs_max[g] / static_cast<float>(kQ8WeightMax);
  }
}

// position_weight_scales of every position of a call (out[j]); rows [lo,
// hi) of neighbouring positions are mostly the same (the whole tile).
void positions_weight_scales(const __m512 (*vs)[kQ8MaxHeadDim / 32], const TilePositions& pos, int u_lo, int u_hi,
                             int v_groups, PositionScales* out) {
  for (int j = 0; j < pos.n; ++j) {
    if (j > 0 && pos.lo[j] == pos.lo[j - 1] && pos.hi[j] == pos.hi[j - 1]) {
      out[j] = out[j - 1];
      continue;
    }
    position_weight_scales(vs, pos.lo[j], pos.hi[j], u_lo, u_hi, v_groups, &out[j]);
  }
}

// The online-softmax step and the weight codes of heads [h0, h0 + nh) of a
// call (nh <= 16; head h = j * n_q + i is position j's query head i, its
// scores at s + h * kAttentionTileRows, its state at j * state_stride + i),
// the per-head scalars one head per lane: the tile max t (a max tree per
// lane), m' = max(m, t), alpha = exp(m - m') (exactly 1 where the max held:
// no rescale; 0 for the empty state; exp512), p_ref = exp(t - m') (exactly
// 1 where t = m'; exp_weights512, as the weights: the best row's p_r * c is
// 1) and c = 1 / p_ref. Then per head the weights p_r = exp(s_r - m') (rows
// outside [lo, hi) exactly 0), summed for l (an add tree per lane: the tree
// of reduce_add16)
// and quantized to codes straight from registers: wq [v_groups,
// kAttentionTileRows] int16 per head, written for every row of the union
// blocks, and step [v_groups] per head (kv_kernels.h, kQ8WeightMax). No
// lane's arithmetic reads another's, so a head's bits never depend on the
// other heads or positions of the call. kFull: every head of the step sees
// the whole tile (lo = 0, hi = kAttentionTileRows, the union too), as all
// but a prefill's diagonal tiles and a decode's last tile do: the same
// operations with every row mask all ones, known to the compiler (no mask
// arithmetic, no branch per block, the block loops unrolled).
//
// kMins (INT4 values, attend_tile_q4_positions): also each head's sums
// sum_r p_r vmn[b][g] lane r per value group (a lane per row, then the add
// tree of reduce_add16) at msums[h * v_groups + g], vmn the union blocks'
// value mins (mn').
template <bool kFull, int VG, bool kSplit = false, bool kMins = false>
void softmax_codes16(const float* s, const TilePositions& pos, int n_q, int head_dim, int h0, int nh, int u_lo,
                     int u_hi, const __m512 (*vs)[kQ8MaxHeadDim / 32], const PositionScales* ps, int v_groups_run,
                     float* m, float* l, float* acc, int16_t* wq, float* steps, TilePrefetchSpread& next,
                     const __m512 (*vmn)[kQ8MaxHeadDim / 32] = nullptr, float* msums = nullptr) {
  const int v_groups = VG > 0 ? VG : v_groups_run;  // VG > 0: known to the compiler
  int64_t state[16];
  int lo[16], hi[16], position[16];
  __m512 part[16];
  alignas(64) float m_old[16], l_old[16];
  int j = h0 / n_q, i = h0 % n_q;  // head h0 + r: position j's query head i, counted (no division per head)
  for (int r = 0; r < 16; ++r) {
    part[r] = _mm512_set1_ps(-INFINITY);
    m_old[r] = -INFINITY, l_old[r] = 0.0f;
    if (r >= nh) continue;
    const int h = h0 + r;
    position[r] = j, lo[r] = pos.lo[j], hi[r] = pos.hi[j];
    state[r] = j * pos.state_stride + i;
    if (++i == n_q) i = 0, ++j;
    m_old[r] = m[state[r]], l_old[r] = l[state[r]];
    const float* sh = s + int64_t{h} * kAttentionTileRows;
    if constexpr (kFull) {
#pragma GCC unroll 4
      for (int g0 = 0; g0 < kAttentionTileRows; g0 += 16) {
        part[r] = _mm512_mask_max_ps(part[r], kAll, part[r], _mm512_loadu_ps(sh + g0));
      }
    } else {
      for (int g0 = lo[r] / 16 * 16; g0 < hi[r]; g0 += 16) {
        part[r] = _mm512_mask_max_ps(part[r], rows_mask(g0, lo[r], hi[r]), part[r], _mm512_loadu_ps(sh + g0));
      }
    }
  }
  const __m512 t = nh <= 4 ? reduce4x16<true>(part) : reduce16x16<true>(part);
  const __m512 vm_old = _mm512_load_ps(m_old), minus_inf = _mm512_set1_ps(-INFINITY);
  const __m512 vm_new = _mm512_maskz_max_ps(kAll, vm_old, t);
  const __mmask16 moved = _mm512_cmp_ps_mask(vm_new, vm_old, _CMP_NEQ_UQ);
  const __mmask16 empty = _mm512_cmp_ps_mask(vm_old, minus_inf, _CMP_EQ_OQ);
  const __m512 alpha = _mm512_mask_blend_ps(
      moved, _mm512_set1_ps(1.0f),
      _mm512_maskz_mov_ps(static_cast<__mmask16>(~empty), exp512(_mm512_maskz_sub_ps(moved, vm_old, vm_new))));
  const __mmask16 below = _mm512_cmp_ps_mask(t, vm_new, _CMP_NEQ_UQ);
  const __m512 p_ref =
      _mm512_mask_blend_ps(below, _mm512_set1_ps(1.0f), exp_weights512(_mm512_maskz_sub_ps(below, t, vm_new), kAll));
  const __mmask16 weighs = _mm512_cmp_ps_mask(p_ref, _mm512_set1_ps(kQ8WeightTiny), _CMP_GT_OQ);
  alignas(64) float m_new[16], alphas[16], p_refs[16], c[16];
  _mm512_store_ps(m_new, vm_new);
  _mm512_store_ps(alphas, alpha);
  _mm512_store_ps(p_refs, p_ref);
  _mm512_store_ps(c, _mm512_maskz_div_ps(weighs, _mm512_set1_ps(1.0f), p_ref));
  const int b_first = kFull ? 0 : u_lo / 16, b_end = kFull ? kAttentionTileRows / 16 : (u_hi + 15) / 16;
  __m512 sums[16], u[kAttentionTileRows / 16][kQ8MaxHeadDim / 32];
  for (int r = 0; r < 16; ++r) {
    sums[r] = _mm512_setzero_ps();
    if (r >= nh) continue;
    const int64_t h = h0 + r;
    for (int x = 0; x < kSoftmaxHeadSteps; ++x) next.step();
    const PositionScales& scales = ps[position[r]];
    if (r == 0 || position[r] != position[r - 1]) {
      // u = vs_r[g] * ratio_g of the position's blocks (kv_kernels.h, kQ8WeightMax), for its heads.
      for (int b = b_first; b < b_end; ++b) {
        for (int g = 0; g < v_groups; ++g) u[b - b_first][g] = _mm512_mul_ps(vs[b - b_first][g], _mm512_set1_ps(scales.ratio[g]));
      }
    }
    for (int g = 0; g < v_groups; ++g) steps[h * v_groups + g] = p_refs[r] * scales.unit[g];
    const float* sh = s + h * kAttentionTileRows;
    int16_t* wh = wq + h * v_groups * kAttentionTileRows;
    const __m512 vm = _mm512_set1_ps(m_new[r]), vc = _mm512_set1_ps(c[r]);
    __m512 sum = _mm512_setzero_ps();  // (in a register: sums[r] would go through memory)
    __m512 mt[kMins ? kQ8MaxHeadDim / 32 : 1];
    if constexpr (kMins) {
      for (int g = 0; g < v_groups; ++g) mt[g] = _mm512_setzero_ps();
    }
    auto write_mins = [&] {
      if constexpr (kMins) {
        for (int g = 0; g < v_groups; ++g) msums[h * v_groups + g] = reduce_add16(mt[g]);
      }
    };
    if constexpr (kFull) {
      // Two blocks at a time: a group's 32 codes narrowed by one signed
      // pack (vpackssdw: the saturation of vpmovsdw, one uop for two
      // vectors where vpmovsdw takes two for one) and put back in row order
      // by one qword permute; the same codes in the same places.
      // kSplit: one byte permute instead of the qword permute, the codes'
      // low bytes then their high bytes in row order (split_code_order).
      const __m512i row_order = kSplit ? split_code_order() : _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
#pragma GCC unroll 2
      for (int b = 0; b < kAttentionTileRows / 16; b += 2) {
        const __m512 p0 = exp_weights512(_mm512_sub_ps(_mm512_loadu_ps(sh + 16 * b), vm), kAll);
        const __m512 p1 = exp_weights512(_mm512_sub_ps(_mm512_loadu_ps(sh + 16 * b + 16), vm), kAll);
        sum = _mm512_add_ps(_mm512_add_ps(sum, p0), p1);
        if constexpr (kMins) {
          for (int g = 0; g < v_groups; ++g) {
            mt[g] = _mm512_fmadd_ps(p1, vmn[b + 1][g], _mm512_fmadd_ps(p0, vmn[b][g], mt[g]));
          }
        }
        const __m512 a0 = _mm512_mul_ps(p0, vc), a1 = _mm512_mul_ps(p1, vc);
        for (int g = 0; g < v_groups; ++g) {
          const __m512i c0 = _mm512_maskz_cvtps_epi32(kAll, _mm512_mul_ps(a0, u[b][g]));
          const __m512i c1 = _mm512_maskz_cvtps_epi32(kAll, _mm512_mul_ps(a1, u[b + 1][g]));
          const __m512i words = _mm512_packs_epi32(c0, c1);
          _mm512_storeu_si512(wh + g * kAttentionTileRows + 16 * b,
                              kSplit ? permute_bytes(row_order, words)
                                     : _mm512_maskz_permutexvar_epi64(0xff, row_order, words));
        }
      }
      sums[r] = sum;
      write_mins();
      continue;
    }
    for (int b = b_first; b < b_end; ++b) {
      const __mmask16 rows = rows_mask(16 * b, lo[r], hi[r]);
      if (rows == 0) {
        for (int g = 0; g < v_groups; ++g) {
          if constexpr (kSplit) {
            uint8_t* w8 = split_block_codes(wh + g * kAttentionTileRows, b);
            _mm_storeu_si128(reinterpret_cast<__m128i*>(w8), _mm_setzero_si128());
            _mm_storeu_si128(reinterpret_cast<__m128i*>(w8 + 32), _mm_setzero_si128());
          } else {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(wh + g * kAttentionTileRows + 16 * b),
                                _mm256_setzero_si256());
          }
        }
        continue;
      }
      const __m512 p = exp_weights512(_mm512_sub_ps(_mm512_loadu_ps(sh + 16 * b), vm), rows);
      sum = _mm512_add_ps(sum, p);
      if constexpr (kMins) {
        for (int g = 0; g < v_groups; ++g) mt[g] = _mm512_fmadd_ps(p, vmn[b - b_first][g], mt[g]);
      }
      const __m512 a = _mm512_mul_ps(p, vc);
      for (int g = 0; g < v_groups; ++g) {
        // Codes >= 0: the saturating narrowing is min(code, kQ8WeightMax).
        const __m512i codes = _mm512_maskz_cvtps_epi32(kAll, _mm512_mul_ps(a, u[b - b_first][g]));
        if constexpr (kSplit) {
          const __m512i held = _mm512_maskz_min_epi32(kAll, codes, _mm512_set1_epi32(kQ8WeightMax));
          uint8_t* w8 = split_block_codes(wh + g * kAttentionTileRows, b);
          _mm_storeu_si128(reinterpret_cast<__m128i*>(w8), _mm512_maskz_cvtepi32_epi8(kAll, held));
          _mm_storeu_si128(reinterpret_cast<__m128i*>(w8 + 32),
                           _mm512_maskz_cvtepi32_epi8(kAll, _mm512_maskz_srli_epi32(kAll, held, 8)));
        } else {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(wh + g * kAttentionTileRows + 16 * b),
                              _mm512_maskz_cvtsepi32_epi16(kAll, codes));
        }
      }
    }
    sums[r] = sum;
    write_mins();
  }
  alignas(64) float l_new[16];
  _mm512_store_ps(l_new, _mm512_fmadd_ps(_mm512_load_ps(l_old), alpha, nh <= 4 ? reduce4x16(sums) : reduce16x16(sums)));
  for (int r = 0; r < nh; ++r) {
    m[state[r]] = m_new[r], l[state[r]] = l_new[r];
    if (alphas[r] == 1.0f) continue;
    float* a = acc + state[r] * head_dim;
    const __m512 va = _mm512_set1_ps(alphas[r]);
    for (int d = 0; d < head_dim; d += 16) _mm512_storeu_ps(a + d, _mm512_mul_ps(va, _mm512_loadu_ps(a + d)));
  }
}

// Dims [32 c2, 32 c2 + 32) of a head in order from the unpack-ordered
// chunk pair (lo, hi) of interleave_value_pairs: first, then second 16.
inline void unpermute_chunk(__m512i lo, __m512i hi, __m512i* first, __m512i* second) {
  const __m512i idx0 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i idx1 = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  *first = _mm512_maskz_permutex2var_epi32(kAll, lo, idx0, hi);
  *second = _mm512_maskz_permutex2var_epi32(kAll, lo, idx1, hi);
}

// acc of R heads += the integer value product over pairs [k_lo, k_hi) (the
// pairs of the heads' rows; pairs outside a head's rows have weight codes
// 0): head i's codes ([v_groups, kAttentionTileRows] int16) at wq0 + i *
// v_groups * kAttentionTileRows (the R heads are consecutive), steps at
// step[i]. NCH = head_dim / 16 int32 accumulators per head, exact. VG > 0 is v_groups known at compile time: every
// broadcast then reads wq0 + k plus a constant, one base register for the 4R
// of a step (a pointer per head and group spilled and was reloaded per
// broadcast). VG = 0: the offsets at run time. The same products in the same
// order either way. kRows: each pair's vectors are made from the value rows
// (rows->pair) as the loop reaches it instead of read from vp: for a call
// whose heads all go in one run (a decode step's), interleave_value_pairs
// would store the tile's pairs only for this loop to load them once.
template <int R, int NCH, int VG = 0, bool kRows = false>
void q8_values(const __m512i* vp, int vp_k_lo, int k_lo, int k_hi, const int16_t* wq0, int v_groups,
               const float* const* step, int v_group, float* const* acc, TilePrefetchSpread& next,
               const ValueRows* rows = nullptr) {
  const int groups = VG > 0 ? VG : v_groups, group_dims = VG > 0 ? NCH * 16 / VG : v_group;
  // Dword offset, from head 0's codes, of head i's group for chunk pair c2:
  // its dword k holds the codes of rows 2k and 2k + 1 (read only by the
  // asm's memory operand).
  int offset[R][NCH / 2];
  for (int i = 0; i < R; ++i) {
    for (int c2 = 0; c2 < NCH / 2; ++c2) offset[i][c2] = (i * groups + c2 * 32 / group_dims) * (kAttentionTileRows / 2);
  }
  // Every loop over isum unrolled (its indices constants), so that it lives
  // in registers: with the epilogue's loops left rolled, GCC 12 kept the
  // array on the stack and stored all R x NCH accumulators back on every
  // pair (16 zmm stores per pair at R = NCH = 4: the loop's bound).
  __m512i isum[R][NCH];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < NCH; ++c) isum[i][c] = _mm512_setzero_si512();
  }
  const __m512i* x = vp + (k_lo - vp_k_lo) * NCH;
  const int32_t* w = reinterpret_cast<const int32_t*>(wq0) + k_lo;
  for (int k = k_lo; k < k_hi; ++k, x += NCH, ++w) {
    if ((k - k_lo) % kValuePairsPerStep == 0) next.step();
    __m512i pair[kRows ? NCH : 1];
    if constexpr (kRows) rows->pair(k, NCH * 16, pair);
    // A chunk pair (32 dims) shares its group's codes: one broadcast each.
    __m512i wb[R][NCH / 2];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
      for (int c2 = 0; c2 < NCH / 2; ++c2) wb[i][c2] = broadcast_dword(w + offset[i][c2]);
    }
#pragma GCC unroll 16
    for (int c = 0; c < NCH; ++c) {
      const __m512i xc = kRows ? pair[c] : _mm512_load_si512(x + c);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) isum[i][c] = dpwssd(isum[i][c], xc, wb[i][c / 2]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
    for (int c2 = 0; c2 < NCH / 2; ++c2) {
      __m512i first, second;
      unpermute_chunk(isum[i][2 * c2], isum[i][2 * c2 + 1], &first, &second);
      const __m512 st = _mm512_set1_ps(step[i][c2 * 32 / group_dims]);
      add_value_sums(acc[i] + 32 * c2, first, st);
      add_value_sums(acc[i] + 32 * c2 + 16, second, st);
    }
  }
}

// Heads a value product runs at a time for NCH chunks of 16 dims
// (q8_values' R: R x NCH accumulators in registers).
constexpr int value_heads(int nch) { return nch <= 4 ? 4 : nch <= 8 ? 2 : 1; }

// Heads [h_begin, h_end) of the call (h = j * n_q + i, as q8_head_scores):
// R at a time, each V pair loaded once for the R.
template <int NCH>
void q8_values_heads(const __m512i* vp, int u_lo, const TilePositions& pos, int n_q, int h_begin, int h_end,
                     const int16_t* wq, const float* steps, int v_groups, int v_group, float* acc, int head_dim,
                     TilePrefetchSpread& next, const ValueRows* rows = nullptr) {
  constexpr int R = value_heads(NCH);
  auto run = [&]<int RR>(int h0) {
    const float* step_i[RR];
    float* acc_i[RR];
    int k_lo = kAttentionTileRows, k_hi = 0;
    int j = h0 / n_q, jh = h0 % n_q;  // head h0 + i: position j's query head jh, counted
    for (int i = 0; i < RR; ++i) {
      const int h = h0 + i;
      step_i[i] = steps + int64_t{h} * v_groups;
      acc_i[i] = acc + (j * pos.state_stride + jh) * head_dim;
      k_lo = std::min(k_lo, pos.lo[j] / 2);
      k_hi = std::max(k_hi, (pos.hi[j] + 1) / 2);
      if (++jh == n_q) jh = 0, ++j;
    }
    // Heads h0.. consecutive: their codes at a constant stride (q8_values' VG).
    const int16_t* wq0 = wq + int64_t{h0} * v_groups * kAttentionTileRows;
    if (rows != nullptr) {  // v_groups 1 or 2 (q8_tile_positions' fused)
      return v_groups == 1
                 ? q8_values<RR, NCH, 1, true>(vp, u_lo / 2, k_lo, k_hi, wq0, v_groups, step_i, v_group, acc_i, next,
                                               rows)
                 : q8_values<RR, NCH, 2, true>(vp, u_lo / 2, k_lo, k_hi, wq0, v_groups, step_i, v_group, acc_i, next,
                                               rows);
    }
    switch (v_groups) {
      case 1: return q8_values<RR, NCH, 1>(vp, u_lo / 2, k_lo, k_hi, wq0, v_groups, step_i, v_group, acc_i, next);
      case 2: return q8_values<RR, NCH, 2>(vp, u_lo / 2, k_lo, k_hi, wq0, v_groups, step_i, v_group, acc_i, next);
      case 4:
        return q8_values<RR, NCH, (NCH >= 8 ? 4 : 0)>(vp, u_lo / 2, k_lo, k_hi, wq0, v_groups, step_i, v_group, acc_i,
                                                     next);
      default: return q8_values<RR, NCH>(vp, u_lo / 2, k_lo, k_hi, wq0, v_groups, step_i, v_group, acc_i, next);
    }
  };
  int h0 = h_begin;
  for (; h0 + R <= h_end; h0 += R) run.template operator()<R>(h0);
  for (; h0 < h_end; ++h0) run.template operator()<1>(h0);
}

// vpermb's index from 32 dims of two value rows, a then b (bytes 0-31 row
// a, 32-63 row b), to their (a, b) byte pairs as words: 128-bit lane L
// holds dims 4L + [0, 4) in words 0-3 and 16 + 4L + [0, 4) in words 4-7, so
// that the word unpacks of two such vectors (rows a, b and rows c, d) give
// dims [0, 16) and [16, 32) in order, 4 rows to a dword.
constexpr ByteIndex make_quad_pair_order() {
  ByteIndex x{};
  for (int lane = 0; lane < 4; ++lane) {
    for (int word = 0; word < 8; ++word) {
      const int dim = (word < 4 ? 4 * lane + word : 16 + 4 * lane + word - 4);
      x.idx[16 * lane + 2 * word] = static_cast<uint8_t>(dim);
      x.idx[16 * lane + 2 * word + 1] = static_cast<uint8_t>(32 + dim);
    }
  }
  return x;
}
constexpr ByteIndex kQuadPairOrder = make_quad_pair_order();

// 32 bytes of two value rows in one vector: a's, then b's (written out:
// GCC 12's insert intrinsics warn of an undefined upper half).
inline __m512i two_rows32(const uint8_t* a, const uint8_t* b) {
  __m512i r;
  asm("vmovdqu64 %1, %t0\n\tvinserti64x4 $1, %2, %0, %0"
      : "=v"(r)
      : "m"(*reinterpret_cast<const __m256i*>(a)), "m"(*reinterpret_cast<const __m256i*>(b)));
  return r;
}

// 16 bytes of two rows at bytes 0 and 32 of one vector (the rest 0).
inline __m512i two_rows16(const uint8_t* a, const uint8_t* b) {
  const __m512i x = _mm512_zextsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
  return _mm512_mask_broadcast_i32x4(x, 0x0f00, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
}

// One quad's 32 dims (x0: dims 32s + t, x1: 32s + 16 + t; a dword the 4
// rows of a dim) against R heads' split weight codes (w: head 0's low bytes
// of the quad, head i's kHeadBytes on; the high bytes 32 on): the low and
// high sums of q8_values_quads.
template <int R, int64_t kHeadBytes>
__attribute__((always_inline)) inline void quad_products(__m512i x0, __m512i x1, const uint8_t* w,
                                                         __m512i (&low)[R][2], __m512i (&high)[R][2]) {
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    const __m512i wl = broadcast_dword(reinterpret_cast<const int32_t*>(w + i * kHeadBytes));
    const __m512i wh = broadcast_dword(reinterpret_cast<const int32_t*>(w + i * kHeadBytes + 32));
    low[i][0] = dpbusd(low[i][0], wl, x0);
    low[i][1] = dpbusd(low[i][1], wl, x1);
    high[i][0] = dpbusd(high[i][0], wh, x0);
    high[i][1] = dpbusd(high[i][1], wh, x1);
  }
}

// The R heads' sums of one 32-dim block (dims d0 .. d0 + 31) into their
// states: 256 x high + low (exact), times the step of value group g.
template <int R>
__attribute__((always_inline)) inline void add_quad_sums(const __m512i (&low)[R][2], const __m512i (&high)[R][2],
                                                         const float* const* step, int g, float* const* acc, int d0) {
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    const __m512 st = _mm512_set1_ps(step[i][g]);
#pragma GCC unroll 2
    for (int c = 0; c < 2; ++c) {
      const __m512i sum = _mm512_add_epi32(_mm512_maskz_slli_epi32(kAll, high[i][c], 8), low[i][c]);
      add_value_sums(acc[i] + d0 + 16 * c, sum, st);
    }
  }
}

// acc of R heads += the integer value product over the quads of the union
// (rows 4q .. 4q + 3, clamped into [u_lo, u_hi): rows outside it weigh 0),
// on vpdpbusd: the 32 dims of block s of each quad as two vectors (dword t:
// the 4 rows of dim 32s + t and of 32s + 16 + t; vpermb and a word unpack),
// against each head's split weight codes (split_quad_offset: low and high
// bytes broadcast as dwords) into a low and a high sum per 16 dims, exact;
// 256 x high + low is q8_values' int32 sum, added to acc as it adds its (the
// same float steps). Head i's split codes at w0 + i * VG *
// kAttentionTileRows (int16 units, as the int16 codes), its step of group
// g at step[i][g]. One pass per block: 4R sums in registers. kDense: the
// rows are NB * 32 bytes apart (a head's consecutive rows, the edge
// store's), so that a quad's addresses are constants from one row pointer
// and one code pointer (with the stride and the offsets at run time GCC 12
// spilled them and rebuilt each quad's 12 addresses).
template <int R, int NB, int VG, bool kDense>
void q8_values_quads(const ValueRows& rows, const int16_t* w0, int v_group, const float* const* step,
                     float* const* acc, TilePrefetchSpread& next) {
  constexpr int64_t kHeadBytes = int64_t{VG} * kAttentionTileRows * 2;
  const int u_lo = rows.u_lo, u_hi = rows.u_hi;
  const int q_lo = u_lo / 4, q_hi = (u_hi + 3) / 4;
  // Quads whose 4 rows are all in the union: read at a stride, no clamps.
  const int q_in = (u_lo + 3) / 4, q_in_end = std::max(u_hi / 4, q_in);
  const __m512i order = _mm512_load_si512(kQuadPairOrder.idx);
  const int64_t stride = kDense ? NB * kQ8Block : rows.stride;
  for (int s = 0; s < NB; ++s) {
    const uint8_t* wg = reinterpret_cast<const uint8_t*>(w0) + int64_t{s * kQ8Block / v_group} * kAttentionTileRows * 2;
    __m512i low[R][2], high[R][2];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      low[i][0] = low[i][1] = high[i][0] = high[i][1] = _mm512_setzero_si512();
    }
    // w: the quad's low bytes of head 0 (wg + split_quad_offset(q)).
    auto quad = [&](const uint8_t* r0, const uint8_t* r1, const uint8_t* r2, const uint8_t* r3, const uint8_t* w)
                    __attribute__((always_inline)) {
      const __m512i ab = permute_bytes(order, two_rows32(r0, r1));
      const __m512i cd = permute_bytes(order, two_rows32(r2, r3));
      constexpr __mmask32 kAll32 = 0xffffffffu;
      const __m512i x0 = _mm512_maskz_unpacklo_epi16(kAll32, ab, cd), x1 = _mm512_maskz_unpackhi_epi16(kAll32, ab, cd);
      quad_products<R, kHeadBytes>(x0, x1, w, low, high);
    };
    auto clamped = [&](int q) {
      if (q % kValueQuadsPerStep == 0) next.step();
      auto row = [&](int r) { return rows.base + int64_t{std::min(std::max(r, u_lo), u_hi - 1)} * stride + 32 * s; };
      quad(row(4 * q), row(4 * q + 1), row(4 * q + 2), row(4 * q + 3), wg + split_quad_offset(q));
    };
    for (int q = q_lo; q < std::min(q_in, q_hi); ++q) clamped(q);
    const uint8_t* p = rows.base + int64_t{4 * q_in} * stride + 32 * s;
    int q = q_in;
    while (q < q_in_end) {
      if (q % 8 == 0 && q + 8 <= q_in_end) {
        // A chunk of the split codes (32 rows): 8 quads, their codes 4 bytes
        // apart. Not unrolled: the 8 quads unrolled measured 71.4-72.1
        // against 69.3-71.1 us (BM_TiledAttentionDecodeInCache, 3
        // alternating pairs, best of 5), a smaller loop for the front end.
        const uint8_t* w = wg + split_quad_offset(q);
#pragma GCC unroll 1
        for (int x = 0; x < 8; ++x, w += 4, p += 4 * stride) {
          if (x % kValueQuadsPerStep == 0) next.step();
          quad(p, p + stride, p + 2 * stride, p + 3 * stride, w);
        }
        q += 8;
        continue;
      }
      if (q % kValueQuadsPerStep == 0) next.step();
      quad(p, p + stride, p + 2 * stride, p + 3 * stride, wg + split_quad_offset(q));
      p += 4 * stride, ++q;
    }
    for (q = std::max(q_in_end, std::min(q_in, q_hi)); q < q_hi; ++q) clamped(q);
    add_quad_sums<R>(low, high, step, s * kQ8Block / v_group, acc, kQ8Block * s);
  }
}

// q8_values_quads over values in value quads (kv_kernels.h), read in place:
// each quad's 32 dims of block s are its two vectors 128 s bytes on, the
// vectors the quad loads above make from rows (rows outside the union weigh
// 0: the softmax step writes the codes of the union's every block). The
// same products in the same order, so the same bits. kNibbles: INT4 values
// in nibble quads (ValueRows::nibbles), each quad's block one vector whose
// low nibbles - 8 are its first vector and high nibbles - 8 its second.
template <int R, int NB, int VG, bool kNibbles = false>
void q8_values_quads_in_place(const ValueRows& rows, const int16_t* w0, int v_group, const float* const* step,
                              float* const* acc, TilePrefetchSpread& next) {
  constexpr int64_t kHeadBytes = int64_t{VG} * kAttentionTileRows * 2;
  constexpr int64_t kQuadBytes = (kNibbles ? 2 : 4) * NB * kQ8Block, kBlockBytes = kNibbles ? 64 : 128;
  const int q_lo = rows.u_lo / 4, q_hi = (rows.u_hi + 3) / 4;
  for (int s = 0; s < NB; ++s) {
    const uint8_t* wg = reinterpret_cast<const uint8_t*>(w0) + int64_t{s * kQ8Block / v_group} * kAttentionTileRows * 2;
    __m512i low[R][2], high[R][2];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      low[i][0] = low[i][1] = high[i][0] = high[i][1] = _mm512_setzero_si512();
    }
    const uint8_t* p = rows.base + int64_t{q_lo} * kQuadBytes + kBlockBytes * s;
    for (int q = q_lo; q < q_hi; ++q, p += kQuadBytes) {
      if (q % kValueQuadsPerStep == 0) next.step();
      __m512i x0, x1;
      if constexpr (kNibbles) {
        const __m512i x = _mm512_loadu_si512(p);
        x0 = centred(low_nibbles(x)), x1 = centred(high_nibbles(x));
      } else {
        x0 = _mm512_load_si512(p), x1 = _mm512_load_si512(p + 64);
      }
      const uint8_t* w = wg + split_quad_offset(q);
      quad_products<R, kHeadBytes>(x0, x1, w, low, high);
    }
    add_quad_sums<R>(low, high, step, s * kQ8Block / v_group, acc, kQ8Block * s);
  }
}

// q8_values_quads for the heads [h0, h0 + R) of a call (h = j * n_q + i, as
// q8_head_scores), every head in one run; v_groups 1 or 2.
template <int R, int NB>
void q8_values_quads_heads(const ValueRows& rows, const TilePositions& pos, int n_q, int h0, const int16_t* wq,
                           const float* steps, int v_groups, int v_group, float* acc, TilePrefetchSpread& next) {
  constexpr int head_dim = NB * kQ8Block;
  const float* step_i[R];
  float* acc_i[R];
  int j = h0 / n_q, jh = h0 % n_q;  // head h0 + i: position j's query head jh, counted
  for (int i = 0; i < R; ++i) {
    step_i[i] = steps + int64_t{h0 + i} * v_groups;
    acc_i[i] = acc + (j * pos.state_stride + jh) * head_dim;
    if (++jh == n_q) jh = 0, ++j;
  }
  const int16_t* w0 = wq + int64_t{h0} * v_groups * kAttentionTileRows;
  if (rows.quads) {
    auto in_place = [&]<int VG>() {
      return rows.nibbles ? q8_values_quads_in_place<R, NB, VG, true>(rows, w0, v_group, step_i, acc_i, next)
                          : q8_values_quads_in_place<R, NB, VG>(rows, w0, v_group, step_i, acc_i, next);
    };
    // VG: the heads' stride in the weight codes, so every count of value
    // groups a run of R > 1 heads can meet (groups of whole 32-dim blocks:
    // head_dim 96 in 3, 128 in 4, 192 in 6, 256 in 8); a run of one head
    // (head_dim 160 / 224: R = 1) never strides.
    if constexpr (NB >= 3) {
      if (v_groups == 3) return in_place.template operator()<3>();
    }
    if constexpr (NB >= 4) {
      if (v_groups == 4) return in_place.template operator()<4>();
    }
    if constexpr (NB >= 6) {
      if (v_groups == 6) return in_place.template operator()<6>();
    }
    if constexpr (NB >= 8) {
      if (v_groups == 8) return in_place.template operator()<8>();
    }
    return v_groups == 2 ? in_place.template operator()<2>() : in_place.template operator()<1>();
  }
  const bool dense = rows.stride == head_dim;
  if (v_groups == 2) {
    return dense ? q8_values_quads<R, NB, 2, true>(rows, w0, v_group, step_i, acc_i, next)
                 : q8_values_quads<R, NB, 2, false>(rows, w0, v_group, step_i, acc_i, next);
  }
  return dense ? q8_values_quads<R, NB, 1, true>(rows, w0, v_group, step_i, acc_i, next)
               : q8_values_quads<R, NB, 1, false>(rows, w0, v_group, step_i, acc_i, next);
}

// acc[i, d0 .. d0 + 16 NV) += sum_r p_i[r] v_r[d0 ..] for R heads, rows
// [lo, hi) of F16 values read in place: head i's weights p_r at w + i *
// w_head ([kAttentionTileRows]).
template <int R, int NV>
void rows_accumulate_values(const KvHeadRows& v, int64_t tile_row, const float* w, int64_t w_head, int lo, int hi,
                            float* acc, int head_dim, int d0, TilePrefetchSpread& next) {
  __m512 a[R][NV];
  const float* wi[R];
  for (int i = 0; i < R; ++i) {
    wi[i] = w + i * w_head;
    for (int c = 0; c < NV; ++c) a[i][c] = _mm512_loadu_ps(acc + i * head_dim + d0 + 16 * c);
  }
  const uint8_t* vr = v.codes + (tile_row + lo) * v.row_code_bytes + d0 * 2;
  for (int r = lo; r < hi; ++r, vr += v.row_code_bytes) {
    next.step();
    __m512 x[NV];
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) {
      x[c] = _mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(vr + 32 * c)));
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) a[i][c] = _mm512_fmadd_ps(_mm512_set1_ps(wi[i][r]), x[c], a[i][c]);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int c = 0; c < NV; ++c) _mm512_storeu_ps(acc + i * head_dim + d0 + 16 * c, a[i][c]);
  }
}

template <int R>
void rows_values(const KvHeadRows& v, int64_t tile_row, const float* w, int64_t w_head, int lo, int hi, float* acc,
                 int head_dim, TilePrefetchSpread& next) {
  for (int d0 = 0; d0 < head_dim; d0 += 64) {
    switch (std::min(head_dim - d0, 64) / 16) {
      case 1: rows_accumulate_values<R, 1>(v, tile_row, w, w_head, lo, hi, acc, head_dim, d0, next); break;
      case 2: rows_accumulate_values<R, 2>(v, tile_row, w, w_head, lo, hi, acc, head_dim, d0, next); break;
      case 3: rows_accumulate_values<R, 3>(v, tile_row, w, w_head, lo, hi, acc, head_dim, d0, next); break;
      default: rows_accumulate_values<R, 4>(v, tile_row, w, w_head, lo, hi, acc, head_dim, d0, next); break;
    }
  }
}

// F16 values of every head, four at a time: each row converted once for the
// four. Each row step issues a part of `next` (the first pass over the rows
// issues it all).
void rows_values_all(const KvHeadRows& v, int64_t tile_row, const float* w, int64_t w_head, int n_q, int lo, int hi,
                     float* acc, int head_dim, TilePrefetchSpread& next) {
  int i = 0;
  for (; i + 4 <= n_q; i += 4) {
    rows_values<4>(v, tile_row, w + i * w_head, w_head, lo, hi, acc + int64_t{i} * head_dim, head_dim, next);
  }
  for (; i + 2 <= n_q; i += 2) {
    rows_values<2>(v, tile_row, w + i * w_head, w_head, lo, hi, acc + int64_t{i} * head_dim, head_dim, next);
  }
  for (; i < n_q; ++i) {
    rows_values<1>(v, tile_row, w + i * w_head, w_head, lo, hi, acc + int64_t{i} * head_dim, head_dim, next);
  }
}

}  // namespace

namespace {

// ---- AMX-INT8 tiles for calls of kQ8AmxMinHeads heads or more (kv_kernels.h,
// q8_amx_active). The two products of a step of 16 heads on tiles, the rest
// (the float steps of the scores, the softmax step and weight codes, the
// float multiply-add of the value sums) as on the vector path, in the same
// order: the same bits.
//
// The tile registers, one configuration for every call, loaded at the
// call's start (not once per thread: other code in the process, oneDNN's
// AMX kernels in the benchmarks, may load its own between two calls):
// tmm0 the 16 heads' query codes of one block (16 rows x 32 bytes), tmm1
// the signed key codes of one block of 16 rows (8 rows x 64 bytes: the key
// columns' layout, 4 dims of 16 keys per row), tmm2 / tmm3 int32 results
// (16 x 16), tmm4 / tmm5 the 16 heads' weight codes' high and low bits over
// 64 of the tile's rows (16 x 64 bytes), tmm6 the value codes of 16 dims (16
// rows x 64 bytes: 4 rows of 16 dims per row).
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

[[gnu::target("amx-tile")]] void amx_configure() {
  static const AmxTileConfig config = [] {
    AmxTileConfig c;
    const int shapes[7][2] = {{16, 32}, {8, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}};
    for (int t = 0; t < 7; ++t) {
      c.rows[t] = static_cast<uint8_t>(shapes[t][0]);
      c.colsb[t] = static_cast<uint16_t>(shapes[t][1]);
    }
    return c;
  }();
  // (GCC 12's _tile_loadconfig names only the first 8 bytes as read, so the
  // shapes' stores were dropped: the whole configuration as the operand.)
  asm volatile("ldtilecfg %0" : : "m"(config));
}

// The tile's value rows as tdpbusd's B operand, per 16 dims: quads[c][q]
// (64 bytes) holds rows 4q .. 4q + 3 of dims 16c .. 16c + 15, byte 4n + r =
// row 4q + r of dim 16c + n. Rows outside [u_lo, u_hi) are zeros (their
// weight codes are 0 or never written; a zero row adds nothing whatever they
// hold).
void amx_value_quads(const KvHeadRows& v, int64_t tile_row, int u_lo, int u_hi, int head_dim, int8_t* quads,
                     TilePrefetchSpread& next) {
  const uint8_t* base = v.codes + tile_row * v.row_code_bytes;
  for (int q = 0; q < kAttentionTileRows / 4; ++q) {
    next.step();
    for (int d0 = 0; d0 < head_dim; d0 += 64) {
      const __mmask64 bytes = head_dim - d0 >= 64 ? ~__mmask64{0} : (__mmask64{1} << (head_dim - d0)) - 1;
      __m512i x[4];
      for (int r = 0; r < 4; ++r) {
        const int row = 4 * q + r;
        x[r] = row >= u_lo && row < u_hi ? _mm512_maskz_loadu_epi8(bytes, base + int64_t{row} * v.row_code_bytes + d0)
                                         : _mm512_setzero_si512();
      }
      // Per 128-bit lane L (dims 16L ..): bytes of rows 0/1 and 2/3
      // interleaved, then words: u[m] lane L = dims 16L + 4m .. + 3, 4 rows each.
      const __m512i t0 = _mm512_unpacklo_epi8(x[0], x[1]), t1 = _mm512_unpackhi_epi8(x[0], x[1]);
      const __m512i t2 = _mm512_unpacklo_epi8(x[2], x[3]), t3 = _mm512_unpackhi_epi8(x[2], x[3]);
      const __m512i u0 = _mm512_unpacklo_epi16(t0, t2), u1 = _mm512_unpackhi_epi16(t0, t2);
      const __m512i u2 = _mm512_unpacklo_epi16(t1, t3), u3 = _mm512_unpackhi_epi16(t1, t3);
      // out[L] = lanes L of u0, u1, u2, u3: dims 16L .. 16L + 15 in order.
      constexpr __mmask8 kAll8 = 0xff;
      const __m512i a0 = _mm512_maskz_shuffle_i64x2(kAll8, u0, u1, 0x44);
      const __m512i a1 = _mm512_maskz_shuffle_i64x2(kAll8, u0, u1, 0xEE);
      const __m512i a2 = _mm512_maskz_shuffle_i64x2(kAll8, u2, u3, 0x44);
      const __m512i a3 = _mm512_maskz_shuffle_i64x2(kAll8, u2, u3, 0xEE);
      const __m512i out[4] = {
          _mm512_maskz_shuffle_i64x2(kAll8, a0, a2, 0x88), _mm512_maskz_shuffle_i64x2(kAll8, a0, a2, 0xDD),
          _mm512_maskz_shuffle_i64x2(kAll8, a1, a3, 0x88), _mm512_maskz_shuffle_i64x2(kAll8, a1, a3, 0xDD)};
      for (int l = 0; l < 4 && d0 + 16 * l < head_dim; ++l) {
        _mm512_store_si512(quads + (int64_t{d0 / 16 + l} * (kAttentionTileRows / 4) + q) * 64, out[l]);
      }
    }
  }
}

// The key columns of the union's blocks (q8_key_columns: the codes + 128)
// back to signed codes, as tdpbssd's B operand: the same 64-byte rows.
void amx_signed_key_columns(const __m512i* cols, int n_vectors, int8_t* out) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int x = 0; x < n_vectors; ++x) _mm512_store_si512(out + 64 * x, _mm512_xor_si512(cols[x], flip));
}

// Position j and query head i of the call's heads h0, h0 + 1, ..., counted
// (one division for the first, none per head), and the head's offset in the
// QueryQ8 and in the states.
class CallHeads {
 public:
  CallHeads(const TilePositions& pos, int n_q, int h0) : pos_(pos), n_q_(n_q), j_(h0 / n_q), i_(h0 % n_q) {}
  int64_t q_head() const { return j_ * pos_.q_heads_stride + i_; }
  int64_t state() const { return j_ * pos_.state_stride + i_; }
  void next() {
    if (++i_ == n_q_) i_ = 0, ++j_;
  }

 private:
  const TilePositions& pos_;
  int n_q_, j_, i_;
};

// q8_head_scores on tiles for heads [h0, h0 + nh) (nh <= 16): every block of
// the union for every head (a position's lanes outside its rows are never
// read: the softmax step masks them, as it does the vector path's unwritten
// ones). Block b's integer dot is tdpbssd of the signed query and key codes
// (sum q k: the vector path's bias + sum q (k + 128)); then q8_scores' float
// steps (fold_block_score). Every product of the step is issued before the float
// steps read the first (two result tiles in turn), so the tile unit runs
// ahead of the vector work instead of waiting on each store.
template <int NB>
[[gnu::target("amx-tile,amx-int8")]] void amx_head_scores(const int8_t* keys, int n_bi, const __m512* ks,
                                                           int k_group, const QueryQ8& q, const TilePositions& pos,
                                                           int n_q, int u_lo, int h0, int nh, float* s,
                                                           TilePrefetchSpread& next) {
  constexpr int head_dim = NB * kQ8Block, kBlocks = kAttentionTileRows / 16;
  alignas(64) int8_t codes[16 * head_dim];  // the 16 heads' query codes, one row each
  alignas(64) int32_t dots[kBlocks][NB][16 * 16];
  float scales[16][NB];
  CallHeads heads(pos, n_q, h0);
  for (int r = 0; r < 16; ++r, heads.next()) {
    if (r >= nh) {
      std::memset(codes + r * head_dim, 0, head_dim);
      continue;
    }
    const int64_t q_head = heads.q_head();
    std::memcpy(codes + r * head_dim, q.codes + q_head * head_dim, head_dim);
    for (int b = 0; b < NB; ++b) scales[r][b] = q.scales[q_head * NB + b];
  }
  for (int b = 0, t = 0; b < NB; ++b) {
    _tile_loadd(0, codes + b * kQ8Block, head_dim);
    for (int bi = 0; bi < n_bi; ++bi, ++t) {
      _tile_loadd(1, keys + (int64_t{bi} * NB + b) * 512, 64);
      if (t % 2 == 0) {
        _tile_zero(2);
        _tile_dpbssd(2, 0, 1);
        _tile_stored(2, dots[bi][b], 64);
      } else {
        _tile_zero(3);
        _tile_dpbssd(3, 0, 1);
        _tile_stored(3, dots[bi][b], 64);
      }
    }
  }
  int k_block[NB];
  for (int b = 0; b < NB; ++b) k_block[b] = b * kQ8Block / k_group;
  for (int bi = 0; bi < n_bi; ++bi) {
    for (int x = 0; x < kScoreBlockSteps; ++x) next.step();
    const int g0 = (u_lo / 16 + bi) * 16;
    const __m512* kb = ks + bi * NB;
    for (int r = 0; r < nh; ++r) {
      __m512 out = _mm512_setzero_ps();
      for (int b = 0; b < NB; ++b) {
        out = fold_block_score(out, _mm512_load_si512(dots[bi][b] + 16 * r), scales[r][b], kb[k_block[b]], b);
      }
      _mm512_storeu_ps(s + int64_t{h0 + r} * kAttentionTileRows + g0, out);
    }
  }
}

// q8_values for heads [h0, h0 + nh) (nh <= 16) on tiles: each head's weight
// codes (15 bits) split into high (code >> 7) and low (code & 127) bytes,
// then per 16 dims two tdpbusd against the value quads: 128 x high + low
// is the vector path's exact int32 sum (|high sum| x 128 < 2^31); then its
// float multiply-add by the head's step of the dims' group. The products
// of every 16 dims are issued before the first sum is read.
template <int NB>
[[gnu::target("amx-tile,amx-int8")]] void amx_head_values(const int8_t* quads, const int16_t* wq, const float* steps,
                                                           int v_group, const TilePositions& pos, int n_q, int h0,
                                                           int nh, float* acc, TilePrefetchSpread& next) {
  constexpr int head_dim = NB * kQ8Block, kChunks = head_dim / 16;
  const int v_groups = head_dim / v_group;
  alignas(64) uint8_t high[NB][16 * kAttentionTileRows];  // per value group (<= NB of them)
  alignas(64) uint8_t low[NB][16 * kAttentionTileRows];
  alignas(64) int32_t sums[kChunks][2][16 * 16];
  const __m512i seven_bits = _mm512_set1_epi16(0x7f);
  // packus orders each 128-bit lane's 8 + 8 bytes; the qword permute puts the rows back in order.
  const __m512i row_order = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
  // A tile row holds at most 64 bytes: the tile's rows go in 64-row halves,
  // both products into the same sums (tdpbusd accumulates).
  static_assert(kAttentionTileRows % 64 == 0, "whole 64-byte tile rows of codes per head");
  constexpr int kHalves = kAttentionTileRows / 64;
  for (int g = 0; g < v_groups; ++g) {
    for (int r = 0; r < 16; ++r) {
      uint8_t* hi_row = high[g] + r * kAttentionTileRows;
      uint8_t* lo_row = low[g] + r * kAttentionTileRows;
      for (int x = 0; x < kAttentionTileRows; x += 64) {
        if (r >= nh) {
          _mm512_store_si512(hi_row + x, _mm512_setzero_si512());
          _mm512_store_si512(lo_row + x, _mm512_setzero_si512());
          continue;
        }
        const int16_t* codes = wq + (int64_t{h0 + r} * v_groups + g) * kAttentionTileRows + x;
        const __m512i c0 = _mm512_loadu_si512(codes), c1 = _mm512_loadu_si512(codes + 32);
        _mm512_store_si512(hi_row + x, _mm512_maskz_permutexvar_epi64(0xff, row_order,
                                                                      _mm512_packus_epi16(_mm512_srli_epi16(c0, 7),
                                                                                          _mm512_srli_epi16(c1, 7))));
        _mm512_store_si512(lo_row + x, _mm512_maskz_permutexvar_epi64(
                                           0xff, row_order, _mm512_packus_epi16(_mm512_and_si512(c0, seven_bits),
                                                                                _mm512_and_si512(c1, seven_bits))));
      }
    }
  }
  for (int c = 0; c < kChunks; ++c) {
    const int g = c * 16 / v_group;
    _tile_zero(2);
    _tile_zero(3);
    for (int half = 0; half < kHalves; ++half) {
      _tile_loadd(4, high[g] + 64 * half, kAttentionTileRows);
      _tile_loadd(5, low[g] + 64 * half, kAttentionTileRows);
      _tile_loadd(6, quads + (int64_t{c} * (kAttentionTileRows / 4) + 16 * half) * 64, 64);
      _tile_dpbusd(2, 4, 6);
      _tile_dpbusd(3, 5, 6);
    }
    _tile_stored(2, sums[c][0], 64);
    _tile_stored(3, sums[c][1], 64);
  }
  float* state[16];
  CallHeads heads(pos, n_q, h0);
  for (int r = 0; r < nh; ++r, heads.next()) state[r] = acc + heads.state() * head_dim;
  for (int c = 0; c < kChunks; ++c) {
    next.step();
    const int g = c * 16 / v_group;
    for (int r = 0; r < nh; ++r) {
      const __m512i sum = _mm512_add_epi32(_mm512_maskz_slli_epi32(kAll, _mm512_load_si512(sums[c][0] + 16 * r), 7),
                                           _mm512_load_si512(sums[c][1] + 16 * r));
      add_value_sums(state[r] + 16 * c, sum, _mm512_set1_ps(steps[int64_t{h0 + r} * v_groups + g]));
    }
  }
}

// attend_tile_q8_positions for head_dim = NB * kQ8Block. The tile's key
// columns and value pairs are made once for the call; then the heads go
// through scores, softmax step with weight codes and value product 16 at a
// time, so the scores, codes and states a step reads are still in L1 (the
// whole call's would not fit).
template <int NB>
void q8_tile_positions(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const QueryQ8& q,
                       const TilePositions& pos, int n_q, float* m, float* l, float* acc, float* scratch) {
  constexpr int head_dim = NB * kQ8Block, kBlocks = kAttentionTileRows / 16;
  int u_lo = kAttentionTileRows, u_hi = 0;
  for (int j = 0; j < pos.n; ++j) u_lo = std::min(u_lo, pos.lo[j]), u_hi = std::max(u_hi, pos.hi[j]);
  const int heads = pos.n * n_q, v_groups = head_dim / v.group;
  float* s = scratch;  // [heads, kAttentionTileRows]: scores
  auto* wq = reinterpret_cast<int16_t*>(scratch + int64_t{heads} * kAttentionTileRows);  // [heads, v_groups, 64]
  float* steps = scratch + int64_t{heads} * kAttentionTileRows * (1 + v_groups);          // [heads, v_groups]
  alignas(64) __m512i cols[kBlocks * head_dim / 4];
  __m512 ks[kBlocks * NB];
  // The steps (kKeyBlockSteps and the rest) up to the end of the first pass
  // of 16 heads, so that they issue the next tile's part evenly: a decode
  // call's whole length, a prefill call's start (spread over a whole 64-position
  // call, its last lines came too late for the next tile's call: INT8 prefill
  // attention at context 8192 was ~10% slower). Value products by R heads'
  // runs over at most every pair.
  constexpr int kValueHeads = value_heads(2 * NB);  // q8_values_heads' R
  const int n_blocks = (u_hi - u_lo / 16 * 16 + 15) / 16, pairs = (u_hi + 1) / 2 - u_lo / 2;
  const int first_pass = std::min(heads, 16), value_runs = first_pass / kValueHeads + first_pass % kValueHeads;
  // AMX tiles (kv_kernels.h, q8_amx_active): the steps of the value quads (one
  // per 4 rows) and of the first pass's value products (one per 16 dims)
  // instead of the value pairs' and the vector value products'.
  const bool amx = heads >= kQ8AmxMinHeads && q8_amx_active();
  // One run of value products for every head (a decode step: 4 query heads
  // per KV head at head_dim <= 64): the value pairs are made inside it
  // instead of stored by interleave_value_pairs and loaded back (decode
  // attention, one thread, context 4096 / 16384: 6.26-6.31 / 26.0-26.8
  // against 6.79-6.90 / 28.6-28.9 ms; two threads 3.70-3.71 / 13.98-14.36
  // against 3.96-4.28 / 14.85-15.28; BM_TiledAttentionDecode, 2 alternating
  // runs, the AVX-512 host without AMX). The same products in the same order.
  const bool fused = !amx && heads == kValueHeads && (v_groups == 1 || v_groups == 2);
  // Where the CPU has VBMI (kv_kernels.h, q8_value_quads_active) and every
  // value group is whole 32-dim blocks: that run in 4-row quads on
  // vpdpbusd (q8_values_quads), the weight codes split in bytes by the
  // softmax step: per 4 rows of 64 dims 12 shuffles (4 of them inserts that
  // port 0 can take) and 32 vpdpbusd against 16 port-5 shuffles and 32
  // vpdpwssd. Measured (AVX-512 host without AMX, 3 alternating pairs, best
  // of 5 each): BM_TiledAttentionDecodeInCache (context 1024, 1 thread)
  // 71.2-71.5 against 73.1-73.8 us (69.3-71.1 with q8_values_quads' loop
  // rolled); BM_TiledAttentionDecode (context 16384, 1 thread) 21.5-22.0
  // against 22.3-22.5 ms. The same bits.
  // Values stored in value quads (kv_kernels.h) take that path in every call
  // that fits it, a prefill's too (several positions: R heads' runs, then
  // single heads), read in place: no value pairs made per call, the same
  // integer sums. Measured before, with the pairs made from the quads
  // turned back into rows per call: BM_TiledAttentionPrefill/pos:8192 (1
  // thread, min of 3, 3 runs) 22.0-23.4 against 21.4-21.9 ms over rows;
  // `baton bench prefill` at 8192 245.6-246.0 against 248.6-261.0 tok/s.
  // Stored quads take any number of value groups (head_dim 128 / 256 in
  // groups of 32: 4 / 8); until the forty-fourth session only 1 or 2 did, and
  // a decode step at head_dim 128 over int8-g32 turned every tile's quads
  // back into rows for the int16 row pairs: BM_TiledAttentionDecode (INT8,
  // head_dim 128, context 16384, 2 threads) 26.8-27.2 ms, against INT4's
  // 13.1-13.5.
  const bool value_quads = (fused || (v.value_quads && !amx)) && v.group % kQ8Block == 0 && q8_value_quads_active();
  const int n_quads = (u_hi + 3) / 4 - u_lo / 4;
  TilePrefetchSpread next(pos.next,
                          n_blocks * (kKeyBlockSteps + kScoreBlockSteps) + first_pass * kSoftmaxHeadSteps +
                              (amx           ? kAttentionTileRows / 4 + head_dim / 16
                               : value_quads ? value_runs * NB * ((n_quads + kValueQuadsPerStep - 1) / kValueQuadsPerStep)
                                             : (fused ? 0 : (pairs + kPairsPerStep - 1) / kPairsPerStep) +
                                                   value_runs * ((pairs + kValuePairsPerStep - 1) / kValuePairsPerStep)));
  // The tile's values, row 0 = the tile's first. Values in value quads
  // (kv_kernels.h) are read in place by the quads' value product; for every
  // other path the union's rows are turned back into rows here.
  KvHeadRows vt = v;
  vt.codes += tile_row * v.row_code_bytes;
  vt.scales += tile_row * v.row_groups;
  alignas(64) int8_t value_rows_buffer[kAttentionTileRows * head_dim];
  if (v.value_quads && !value_quads) {
    value_rows_from_quads(vt.codes, u_lo, u_hi - u_lo, head_dim, value_rows_buffer + u_lo * head_dim, head_dim);
    vt.codes = reinterpret_cast<const uint8_t*>(value_rows_buffer);
    vt.value_quads = false;
  }
  q8_key_columns<NB>(k, tile_row, u_lo, u_hi, cols, ks, next);
  // Keys in key column blocks (kv_kernels.h): the union's blocks as they lie
  // in the store (tile_row on a block edge, a head's rows consecutive),
  // every lane of a block a row of it (rows outside the union are masked
  // later, as load_key_columns' clamped rows).
  const __m512i* key_cols =
      k.key_blocks ? reinterpret_cast<const __m512i*>(k.codes + (tile_row + u_lo / 16 * 16) * head_dim) : cols;
  // The value group scales of the union's blocks, once for every head.
  __m512 vs[kBlocks][kQ8MaxHeadDim / 32];
  for (int g0 = u_lo / 16 * 16; g0 < u_hi; g0 += 16) {
    block_scales16(vt, 0, BlockRows(g0, u_lo, u_hi), v_groups, vs[g0 / 16 - u_lo / 16]);
  }
  PositionScales ps[kQ8MaxPositions];
  positions_weight_scales(vs, pos, u_lo, u_hi, v_groups, ps);
  alignas(64) __m512i vp[kAttentionTileRows / 2 * (head_dim / 16)];
  alignas(64) int8_t keys[kBlocks * head_dim / 4 * 64];       // AMX: the signed key columns
  alignas(64) int8_t quads[head_dim / 16 * (kAttentionTileRows / 4) * 64];  // AMX: the value quads
  if (amx) {
    amx_configure();
    amx_signed_key_columns(key_cols, n_blocks * head_dim / 4, keys);
    amx_value_quads(vt, 0, u_lo, u_hi, head_dim, quads, next);
  } else if (!fused && !value_quads) {
    interleave_value_pairs(vt, 0, u_lo, u_hi, head_dim, vp, next);
  }
  const ValueRows value_rows(vt, 0, u_lo, u_hi);
  for (int h0 = 0; h0 < heads; h0 += 16) {
    const int nh = std::min(16, heads - h0);
    if (amx) {
      amx_head_scores<NB>(keys, n_blocks, ks, k.group, q, pos, n_q, u_lo, h0, nh, s, next);
    } else {
      q8_head_scores<NB>(key_cols, ks, k.group, q, pos, n_q, u_lo, u_hi, h0, nh, s, next);
    }
    bool full = u_lo == 0 && u_hi == kAttentionTileRows;
    for (int j = h0 / n_q; full && j * n_q < h0 + nh; ++j) full = pos.lo[j] == 0 && pos.hi[j] == kAttentionTileRows;
    auto softmax = [&]<bool kFull, int VG, bool kSplit = false>() {
      softmax_codes16<kFull, VG, kSplit>(s, pos, n_q, head_dim, h0, nh, u_lo, u_hi, vs, ps, v_groups, m, l, acc, wq,
                                         steps, next);
    };
    if (value_quads) {
      if (!full) {
        softmax.template operator()<false, 0, true>();
      } else if (v_groups == 2) {
        softmax.template operator()<true, 2, true>();
      } else if (v_groups == 1) {
        softmax.template operator()<true, 1, true>();
      } else {
        softmax.template operator()<true, 0, true>();
      }
    } else if (full) {
      if (v_groups == 2) {
        softmax.template operator()<true, 2>();
      } else if (v_groups == 1) {
        softmax.template operator()<true, 1>();
      } else {
        softmax.template operator()<true, 0>();
      }
    } else {
      softmax.template operator()<false, 0>();
    }
    if (amx) {
      amx_head_values<NB>(quads, wq, steps, v.group, pos, n_q, h0, nh, acc, next);
    } else if (value_quads) {  // (a decode step: one run of kValueHeads)
      int h = h0;
      for (; h + kValueHeads <= h0 + nh; h += kValueHeads) {
        q8_values_quads_heads<kValueHeads, NB>(value_rows, pos, n_q, h, wq, steps, v_groups, v.group, acc, next);
      }
      for (; h < h0 + nh; ++h) {
        q8_values_quads_heads<1, NB>(value_rows, pos, n_q, h, wq, steps, v_groups, v.group, acc, next);
      }
    } else {
      q8_values_heads<2 * NB>(vp, u_lo, pos, n_q, h0, h0 + nh, wq, steps, v_groups, v.group, acc, head_dim, next,
                              fused ? &value_rows : nullptr);
    }
  }
  next.finish();
}

// ---- INT4 K and V read in place (kv_kernels.h, attend_tile_q4_positions) ----

// vpermi2b: out byte j = (idx byte j bit 6 ? b : a) byte (idx byte j & 63),
// AVX-512 VBMI, written out as permute_bytes is.
inline __m512i permute2_bytes(__m512i a, __m512i idx, __m512i b) {
  __m512i r = idx;
  asm("vpermi2b %2, %1, %0" : "+v"(r) : "v"(a), "v"(b));
  return r;
}

// Value quads from 4-bit rows: of 4 rows' 64 dims (a = rows 0, 1; b = rows
// 2, 3; 32 bytes a row), the vector of block `half_block` (dims 32 s' + 16
// h + t, s' = half_block / 2, h = half_block % 2): byte 4t + i is the byte
// of row i holding dim 32 s' + 16 h + t, its low nibble for even t (even
// dwords), its high nibble for odd t (odd dwords).
constexpr ByteIndex make_quad_nibble_source(int half_block) {
  ByteIndex x{};
  const int sb = half_block / 2, h = half_block % 2;
  for (int t = 0; t < 16; ++t) {
    for (int i = 0; i < 4; ++i) {
      x.idx[4 * t + i] = static_cast<uint8_t>(64 * (i / 2) + 32 * (i % 2) + 16 * sb + 8 * h + t / 2);
    }
  }
  return x;
}
constexpr ByteIndex kQuadNibbleSource[4] = {make_quad_nibble_source(0), make_quad_nibble_source(1),
                                            make_quad_nibble_source(2), make_quad_nibble_source(3)};

// The 16 rows of a block (clamped, BlockRows) of 4-bit keys as key columns
// in the query's nibble order (kv_kernels.h, q4_query_order): per 64 dims,
// the rows' 8 dwords transposed (vpermi2d per 4 rows, then 128-bit lanes),
// then dword k's low nibbles (dims 8k + 0, 2, 4, 6, one a byte, in [0, 15])
// are column 2k and its high nibbles (dims 8k + 1, 3, 5, 7) column 2k + 1.
inline void q4_key_columns_block(const KvHeadRows& k, int64_t tile_row, const BlockRows& rows, int head_dim,
                                 __m512i* cols) {
  const uint8_t* base = k.codes + tile_row * k.row_code_bytes;
  auto row = [&](int r) { return base + int64_t{rows.row[r]} * k.row_code_bytes; };
  // Y[2a] 128-bit lane k: dword k of rows 4a .. 4a + 3 (Y[2a + 1]: dword k + 4).
  const __m512i first = _mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27);
  const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(4));
  // Rows of 32 bytes (head_dim 64), the block whole: two rows per load.
  const bool dense = rows.full && k.row_code_bytes == 32 && head_dim == 64;
  for (int c = 0; c < head_dim / 64; ++c) {
    __m512i y[8];
#pragma GCC unroll 4
    for (int a = 0; a < 4; ++a) {
      const __m512i x0 = dense ? _mm512_loadu_si512(row(4 * a)) : two_rows32(row(4 * a) + 32 * c, row(4 * a + 1) + 32 * c);
      const __m512i x1 =
          dense ? _mm512_loadu_si512(row(4 * a + 2)) : two_rows32(row(4 * a + 2) + 32 * c, row(4 * a + 3) + 32 * c);
      y[2 * a] = _mm512_maskz_permutex2var_epi32(kAll, x0, first, x1);
      y[2 * a + 1] = _mm512_maskz_permutex2var_epi32(kAll, x0, second, x1);
    }
    __m512i* out = cols + 16 * c;
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      const __m512i e0 = _mm512_maskz_shuffle_i32x4(kAll, y[half], y[2 + half], 0x44);
      const __m512i e1 = _mm512_maskz_shuffle_i32x4(kAll, y[half], y[2 + half], 0xEE);
      const __m512i e2 = _mm512_maskz_shuffle_i32x4(kAll, y[4 + half], y[6 + half], 0x44);
      const __m512i e3 = _mm512_maskz_shuffle_i32x4(kAll, y[4 + half], y[6 + half], 0xEE);
      const __m512i t[4] = {_mm512_maskz_shuffle_i32x4(kAll, e0, e2, 0x88), _mm512_maskz_shuffle_i32x4(kAll, e0, e2, 0xDD),
                            _mm512_maskz_shuffle_i32x4(kAll, e1, e3, 0x88), _mm512_maskz_shuffle_i32x4(kAll, e1, e3, 0xDD)};
#pragma GCC unroll 4
      for (int kk = 0; kk < 4; ++kk) {  // dword 4 half + kk: dims 8 (4 half + kk) + [0, 8)
        const int col = 2 * (4 * half + kk);
        out[col] = low_nibbles(t[kk]);
        out[col + 1] = high_nibbles(t[kk]);
      }
    }
  }
  if (head_dim % 64 != 0) {
    // A last 32 dims (head_dim 96: Phi-3): each row's 4 dwords there, dword
    // k of the 16 rows gathered into one vector, its nibbles columns 2k and
    // 2k + 1 of the block (as the whole chunks': the query's nibble order is
    // per dword).
    const __m512i at = _mm512_maskz_mullo_epi32(kAll, _mm512_load_si512(rows.row),
                                                _mm512_set1_epi32(static_cast<int>(k.row_code_bytes / 4)));
    const auto* tail = reinterpret_cast<const int*>(base + head_dim / 64 * 32);
    __m512i* out = cols + 16 * (head_dim / 64);
#pragma GCC unroll 4
    for (int kk = 0; kk < 4; ++kk) {
      const __m512i d = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), kAll, at, tail + kk, 4);
      out[2 * kk] = low_nibbles(d);
      out[2 * kk + 1] = high_nibbles(d);
    }
  }
}

// q4_key_columns_block from keys in key column blocks (kv_kernels.h,
// blocked_from_rows): the block at row0 of the head (a multiple of
// kKeyBlockRows), each of its vectors already a dword of 16 rows, only split
// into its nibbles (rows outside the union are masked later, as with INT8
// key blocks).
inline void q4_key_columns_from_blocks(const KvHeadRows& k, int64_t row0, int head_dim, __m512i* cols) {
  const uint8_t* block = k.codes + row0 * (head_dim / 2);
  for (int x = 0; x < head_dim / 8; ++x) {
    const __m512i v = _mm512_loadu_si512(block + 64 * x);
    cols[2 * x] = low_nibbles(v);
    cols[2 * x + 1] = high_nibbles(v);
  }
}

// q4_value_quads from values in nibble quads (kv_kernels.h,
// blocked_from_rows; v's row 0 the tile's): each 64 bytes the low
// nibbles of a quad's first vector of a 32-dim block and the high of its
// second, each - 8. Whole quads: rows outside the union weigh 0.
inline void q4_value_quads_from_nibbles(const KvHeadRows& v, int u_lo, int u_hi, int head_dim, uint8_t* quads) {
  for (int q = u_lo / 4; q < (u_hi + 3) / 4; ++q) {
    const uint8_t* in = v.codes + int64_t{q} * 2 * head_dim;
    uint8_t* out = quads + int64_t{q} * 4 * head_dim;
    for (int s = 0; s < head_dim / 32; ++s, in += 64, out += 128) {
      const __m512i x = _mm512_loadu_si512(in);
      _mm512_store_si512(out, centred(low_nibbles(x)));
      _mm512_store_si512(out + 64, centred(high_nibbles(x)));
    }
  }
}

// The quads [q_lo, q_hi) of a tile's 4-bit values (rows clamped into [u_lo,
// u_hi): rows outside weigh 0) as INT8 value quads of the codes - 8
// (kv_kernels.h, value_quad_byte; quad q at quads + q * 4 * head_dim): per
// vector one vpermi2b, the odd dims' high nibbles shifted down and blended
// in (no second shuffle: the shuffle port bounds this conversion). Rows of
// 32 bytes (head_dim 64) in the union: two rows per load.
inline void q4_value_quads(const KvHeadRows& v, int64_t tile_row, int u_lo, int u_hi, int head_dim, uint8_t* quads) {
  const uint8_t* base = v.codes + tile_row * v.row_code_bytes;
  auto row = [&](int r) { return base + int64_t{std::min(std::max(r, u_lo), u_hi - 1)} * v.row_code_bytes; };
  constexpr __mmask16 kOddDwords = 0xAAAA;
  const bool dense = v.row_code_bytes == 32 && head_dim == 64;
  __m512i source[4];
  for (int x = 0; x < 4; ++x) source[x] = _mm512_load_si512(kQuadNibbleSource[x].idx);
  // The first kVectors vectors of a 64-dim chunk (a: rows 0, 1; b: rows 2, 3).
  auto chunk = [&]<int kVectors>(__m512i a, __m512i b, uint8_t* out) {
#pragma GCC unroll 4
    for (int x = 0; x < kVectors; ++x) {
      const __m512i bytes = permute2_bytes(a, source[x], b);
      const __m512i codes =
          _mm512_mask_blend_epi32(kOddDwords, bytes, _mm512_maskz_srli_epi16(~__mmask32{0}, bytes, 4));
      _mm512_store_si512(out + 64 * x, centred(low_nibbles(codes)));
    }
  };
  for (int q = u_lo / 4; q < (u_hi + 3) / 4; ++q) {
    uint8_t* out = quads + int64_t{q} * 4 * head_dim;
    const bool whole = dense && 4 * q >= u_lo && 4 * q + 4 <= u_hi;
    for (int c = 0; c < head_dim / 64; ++c, out += 256) {
      const __m512i a = whole ? _mm512_loadu_si512(row(4 * q)) : two_rows32(row(4 * q) + 32 * c, row(4 * q + 1) + 32 * c);
      const __m512i b =
          whole ? _mm512_loadu_si512(row(4 * q + 2)) : two_rows32(row(4 * q + 2) + 32 * c, row(4 * q + 3) + 32 * c);
      chunk.template operator()<4>(a, b, out);
    }
    if (head_dim % 64 != 0) {
      // A last 32 dims (head_dim 96): each row's 16 bytes there where a whole
      // chunk's first 16 lie (rows 0, 1 at bytes 0 and 32 of a; rows 2, 3 of
      // b), so the first two sources pick them.
      const int64_t c = head_dim / 64 * 32;
      chunk.template operator()<2>(two_rows16(row(4 * q) + c, row(4 * q + 1) + c),
                                   two_rows16(row(4 * q + 2) + c, row(4 * q + 3) + c), out);
    }
  }
}

// attend_tile_q4_positions for head_dim = NB * kQ8Block (NB even, or 3: a last
// 32 dims unpacked on their own): the
// tile's 4-bit keys made into key columns and its values into value quads
// once for the call, then q8_tile_positions' steps on them (the value-quad
// path), with the mins' terms (kv_kernels.h).
// kKeys4 false: int4-k8 (INT8 keys, as q8_tile_positions reads them: key
// column blocks in place, else rows made into columns; INT4 values).
template <int NB, bool kKeys4 = true>
void q4_tile_positions(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const QueryQ8& q,
                       const TilePositions& pos, int n_q, float* m, float* l, float* acc, float* scratch) {
  constexpr int head_dim = NB * kQ8Block, kBlocks = kAttentionTileRows / 16;
  int u_lo = kAttentionTileRows, u_hi = 0;
  for (int j = 0; j < pos.n; ++j) u_lo = std::min(u_lo, pos.lo[j]), u_hi = std::max(u_hi, pos.hi[j]);
  const int heads = pos.n * n_q, v_groups = head_dim / v.group, k_groups = head_dim / k.group;
  float* s = scratch;  // [heads, kAttentionTileRows]: scores
  auto* wq = reinterpret_cast<int16_t*>(scratch + int64_t{heads} * kAttentionTileRows);  // [heads, v_groups, 64]
  float* steps = scratch + int64_t{heads} * kAttentionTileRows * (1 + v_groups);          // [heads, v_groups]
  float* msums = steps + int64_t{heads} * v_groups;                                       // [heads, v_groups]
  constexpr int kValueHeads = value_heads(2 * NB);
  const int first = u_lo / 16, n_blocks = (u_hi + 15) / 16 - first;
  const int first_pass = std::min(heads, 16), value_runs = first_pass / kValueHeads + first_pass % kValueHeads;
  const int n_quads = (u_hi + 3) / 4 - u_lo / 4;
  TilePrefetchSpread next(pos.next, n_blocks * (kKeyBlockSteps + kScoreBlockSteps) + first_pass * kSoftmaxHeadSteps +
                                        value_runs * NB * ((n_quads + kValueQuadsPerStep - 1) / kValueQuadsPerStep));
  // Keys: columns, group scales and mins' = mins + 8 scales per union block.
  alignas(64) __m512i cols[kBlocks * head_dim / 4];
  __m512 ks[kBlocks * NB], kmin[kBlocks * NB];
  const __m512i* key_cols = cols;
  const __m512 eight = _mm512_set1_ps(8.0f);
  // A decode step's call (one position) over INT4 keys in key column blocks
  // and values in nibble quads: both read from the store as they lie, their
  // nibbles split in registers by the scores and the value product, nothing
  // written per call. A prefill call's positions read each block many times:
  // its columns and quads are made once into the call's buffers instead.
  const bool nibble_keys = kKeys4 && k.key_blocks && pos.n == 1;
  const bool nibble_values = v.value_quads && pos.n == 1;
  if (nibble_keys) key_cols = reinterpret_cast<const __m512i*>(k.codes + (tile_row + 16 * first) * (head_dim / 2));
  if constexpr (kKeys4) {
    KvHeadRows k_mins = k;
    k_mins.scales = k.mins;
    for (int bi = 0; bi < n_blocks; ++bi) {
      const BlockRows rows(16 * (first + bi), u_lo, u_hi);
      for (int x = 0; x < kKeyBlockSteps; ++x) next.step();
      if (k.key_blocks) {
        // (nibble_keys: the columns are split in the scores, q8_head_scores' kNibbles.)
        if (!nibble_keys) q4_key_columns_from_blocks(k, tile_row + 16 * (first + bi), head_dim, cols + bi * (head_dim / 4));
      } else {
        q4_key_columns_block(k, tile_row, rows, head_dim, cols + bi * (head_dim / 4));
      }
      __m512 sc[NB] = {}, mn[NB] = {};
      block_scales16(k, tile_row, rows, k_groups, sc);
      block_scales16(k_mins, tile_row, rows, k_groups, mn);
      for (int g = 0; g < k_groups; ++g) {
        ks[bi * NB + g] = sc[g];
        kmin[bi * NB + g] = _mm512_fmadd_ps(eight, sc[g], mn[g]);
      }
    }
  } else {
    q8_key_columns<NB>(k, tile_row, u_lo, u_hi, cols, ks, next);
    if (k.key_blocks) key_cols = reinterpret_cast<const __m512i*>(k.codes + (tile_row + u_lo / 16 * 16) * head_dim);
  }
  // Values: the quads of the union, group scales and mins' per union block.
  KvHeadRows vt = v;
  vt.codes += tile_row * v.row_code_bytes;
  vt.scales += tile_row * v.row_groups;
  vt.mins += tile_row * v.row_groups;
  KvHeadRows v_mins = vt;
  v_mins.scales = vt.mins;
  __m512 vs[kBlocks][kQ8MaxHeadDim / 32], vmin[kBlocks][kQ8MaxHeadDim / 32];
  for (int bi = 0; bi < n_blocks; ++bi) {
    const BlockRows rows(16 * (first + bi), u_lo, u_hi);
    block_scales16(vt, 0, rows, v_groups, vs[bi]);
    __m512 mn[kQ8MaxHeadDim / 32];
    block_scales16(v_mins, 0, rows, v_groups, mn);
    for (int g = 0; g < v_groups; ++g) vmin[bi][g] = _mm512_fmadd_ps(eight, vs[bi][g], mn[g]);
  }
  PositionScales ps[kQ8MaxPositions];
  positions_weight_scales(vs, pos, u_lo, u_hi, v_groups, ps);
  alignas(64) uint8_t quads[kAttentionTileRows * head_dim];
  KvHeadRows vq = vt;  // INT8 value quads of the codes - 8, or the store's nibble quads (nibble_values)
  if (!nibble_values) {
    if (v.value_quads) {
      q4_value_quads_from_nibbles(vt, u_lo, u_hi, head_dim, quads);
    } else {
      q4_value_quads(vt, 0, u_lo, u_hi, head_dim, quads);
    }
    vq.bits = 8;
    vq.codes = quads;
    vq.row_code_bytes = head_dim;
    vq.value_quads = true;
  }
  const ValueRows value_rows(vq, 0, u_lo, u_hi);
  for (int h0 = 0; h0 < heads; h0 += 16) {
    const int nh = std::min(16, heads - h0);
    // (The keys' mins' terms inside: q8_scores, kBiasShift 4.)
    if (nibble_keys) {
      q8_head_scores<NB, 4, true>(key_cols, ks, k.group, q, pos, n_q, u_lo, u_hi, h0, nh, s, next, kmin);
    } else {
      q8_head_scores<NB, kKeys4 ? 4 : 0>(key_cols, ks, k.group, q, pos, n_q, u_lo, u_hi, h0, nh, s, next,
                                         kKeys4 ? kmin : nullptr);
    }
    bool full = u_lo == 0 && u_hi == kAttentionTileRows;
    for (int j = h0 / n_q; full && j * n_q < h0 + nh; ++j) full = pos.lo[j] == 0 && pos.hi[j] == kAttentionTileRows;
    auto softmax = [&]<bool kFull, int VG>() {
      softmax_codes16<kFull, VG, true, true>(s, pos, n_q, head_dim, h0, nh, u_lo, u_hi, vs, ps, v_groups, m, l, acc,
                                             wq, steps, next, vmin, msums);
    };
    if (!full) {
      softmax.template operator()<false, 0>();
    } else if (v_groups == 2) {
      softmax.template operator()<true, 2>();
    } else if (v_groups == 1) {
      softmax.template operator()<true, 1>();
    } else {
      softmax.template operator()<true, 0>();
    }
    int h = h0;
    for (; h + kValueHeads <= h0 + nh; h += kValueHeads) {
      q8_values_quads_heads<kValueHeads, NB>(value_rows, pos, n_q, h, wq, steps, v_groups, v.group, acc, next);
    }
    for (; h < h0 + nh; ++h) {
      q8_values_quads_heads<1, NB>(value_rows, pos, n_q, h, wq, steps, v_groups, v.group, acc, next);
    }
    // The values' mins: acc[d] += sum_r p_r mn'_r(g) per value group.
    for (h = h0; h < h0 + nh; ++h) {
      const int j = h / n_q, i = h % n_q;
      float* a = acc + (j * pos.state_stride + i) * head_dim;
      for (int d = 0; d < head_dim; d += 16) {
        const __m512 add = _mm512_set1_ps(msums[int64_t{h} * v_groups + d / v.group]);
        _mm512_storeu_ps(a + d, _mm512_add_ps(_mm512_loadu_ps(a + d), add));
      }
    }
  }
  next.finish();
}

}  // namespace

void attend_tile_q4_positions_avx512(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const QueryQ8& q,
                                     const TilePositions& pos, int n_q, int head_dim, float* m, float* l, float* acc,
                                     float* scratch) {
  if (k.bits == 8) {  // int4-k8
    switch (head_dim / kQ8Block) {
      case 2: return q4_tile_positions<2, false>(k, v, tile_row, q, pos, n_q, m, l, acc, scratch);
      case 3: return q4_tile_positions<3, false>(k, v, tile_row, q, pos, n_q, m, l, acc, scratch);
      case 4: return q4_tile_positions<4, false>(k, v, tile_row, q, pos, n_q, m, l, acc, scratch);
      case 6: return q4_tile_positions<6, false>(k, v, tile_row, q, pos, n_q, m, l, acc, scratch);
      case 8: return q4_tile_positions<8, false>(k, v, tile_row, q, pos, n_q, m, l, acc, scratch);
      default: return attend_tile_q4_positions_avx2(k, v, tile_row, q, pos, n_q, head_dim, m, l, acc, scratch);
    }
  }
  switch (head_dim / kQ8Block) {
    case 2: return q4_tile_positions<2>(k, v, tile_row, q, pos, n_q, m, l, acc, scratch);
    case 3: return q4_tile_positions<3>(k, v, tile_row, q, pos, n_q, m, l, acc, scratch);
    case 4: return q4_tile_positions<4>(k, v, tile_row, q, pos, n_q, m, l, acc, scratch);
    case 6: return q4_tile_positions<6>(k, v, tile_row, q, pos, n_q, m, l, acc, scratch);
    case 8: return q4_tile_positions<8>(k, v, tile_row, q, pos, n_q, m, l, acc, scratch);
    // Other head sizes (odd numbers of 32-dim blocks past 3): the AVX2 kernel.
    default: return attend_tile_q4_positions_avx2(k, v, tile_row, q, pos, n_q, head_dim, m, l, acc, scratch);
  }
}

void attend_tile_q8_positions_avx512(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const QueryQ8& q,
                                     const TilePositions& pos, int n_q, int head_dim, float* m, float* l, float* acc,
                                     float* scratch) {
  switch (head_dim / kQ8Block) {
    case 1: return q8_tile_positions<1>(k, v, tile_row, q, pos, n_q, m, l, acc, scratch);
    case 2: return q8_tile_positions<2>(k, v, tile_row, q, pos, n_q, m, l, acc, scratch);
    case 3: return q8_tile_positions<3>(k, v, tile_row, q, pos, n_q, m, l, acc, scratch);
    case 4: return q8_tile_positions<4>(k, v, tile_row, q, pos, n_q, m, l, acc, scratch);
    case 5: return q8_tile_positions<5>(k, v, tile_row, q, pos, n_q, m, l, acc, scratch);
    case 6: return q8_tile_positions<6>(k, v, tile_row, q, pos, n_q, m, l, acc, scratch);
    case 7: return q8_tile_positions<7>(k, v, tile_row, q, pos, n_q, m, l, acc, scratch);
    default: return q8_tile_positions<8>(k, v, tile_row, q, pos, n_q, m, l, acc, scratch);
  }
}

void attend_tile_q8_avx512(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const QueryQ8& q, int n_q,
                           int head_dim, int lo, int hi, float* m, float* l, float* acc, float* scratch) {
  TilePositions pos;
  pos.lo = &lo;
  pos.hi = &hi;
  attend_tile_q8_positions_avx512(k, v, tile_row, q, pos, n_q, head_dim, m, l, acc, scratch);
}

namespace {

// Rows of the block (clamped into [lo, hi)) of one head's F16 codes as f32:
// out [16, head_dim].
void convert_f16_block(const KvHeadRows& h, int64_t tile_row, const BlockRows& rows, int head_dim, float* out) {
  const uint8_t* base = h.codes + tile_row * h.row_code_bytes;
  for (int r = 0; r < 16; ++r) {
    const uint16_t* x = reinterpret_cast<const uint16_t*>(base + int64_t{rows.row[r]} * h.row_code_bytes);
    for (int d = 0; d < head_dim; d += 16) {
      _mm512_store_ps(out + r * head_dim + d,
                      _mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + d))));
    }
  }
}

template <int NC>
void f16_tile_scores(const KvHeadRows& k, int64_t tile_row, const float* q, int n_q, float scale, int lo, int hi,
                     float* s) {
  constexpr int head_dim = NC * 16;
  alignas(64) float kf[16 * head_dim];
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int g0 = lo / 16 * 16; g0 < hi; g0 += 16) {
    prefetch_rows_l1(k, tile_row, g0 + 16, std::min(hi, g0 + 32), head_dim * 2);
    const BlockRows rows(g0, lo, hi);
    convert_f16_block(k, tile_row, rows, head_dim, kf);
    const int r_lo = std::max(lo - g0, 0), r_hi = std::min(hi - g0, 16);
    for (int i = 0; i < n_q; ++i) {
      const __m512 dots = group_dots<NC>(kf, head_dim, q + int64_t{i} * head_dim, head_dim, 0, r_lo, r_hi);
      _mm512_storeu_ps(s + int64_t{i} * kAttentionTileRows + g0, _mm512_mul_ps(dots, vscale));
    }
  }
}

}  // namespace

void attend_tile_f16_avx512(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const float* q, int n_q,
                            int head_dim, float scale, int lo, int hi, float* m, float* l, float* acc,
                            float* scratch, const TilePrefetch& next_rows) {
  prefetch_rows_l1(k, tile_row, lo, std::min(hi, lo / 16 * 16 + 16), head_dim * 2);
  prefetch_rows_l1(v, tile_row, lo, hi, head_dim * 2);
  float* s = scratch;  // [n_q, kAttentionTileRows]: scores, then exp(s - m')
  switch (head_dim / 16) {
    case 1: f16_tile_scores<1>(k, tile_row, q, n_q, scale, lo, hi, s); break;
    case 2: f16_tile_scores<2>(k, tile_row, q, n_q, scale, lo, hi, s); break;
    case 3: f16_tile_scores<3>(k, tile_row, q, n_q, scale, lo, hi, s); break;
    case 4: f16_tile_scores<4>(k, tile_row, q, n_q, scale, lo, hi, s); break;
    case 5: f16_tile_scores<5>(k, tile_row, q, n_q, scale, lo, hi, s); break;
    case 6: f16_tile_scores<6>(k, tile_row, q, n_q, scale, lo, hi, s); break;
    case 7: f16_tile_scores<7>(k, tile_row, q, n_q, scale, lo, hi, s); break;
    default: f16_tile_scores<8>(k, tile_row, q, n_q, scale, lo, hi, s); break;
  }
  tile_softmax(s, n_q, head_dim, lo, hi, m, l, acc);
  // The next rows over the value product's row steps (a decode tile's 64).
  TilePrefetchSpread next(next_rows, /*steps=*/kAttentionTileRows);
  rows_values_all(v, tile_row, s, kAttentionTileRows, n_q, lo, hi, acc, head_dim, next);
  next.finish();
}

void attend_tile_avx512(const float* k, int64_t k_stride, const float* v, int64_t v_stride, const float* q, int n_q,
                        int head_dim, float scale, int lo, int hi, float* m, float* l, float* acc, float* scratch) {
  if (head_dim % 16 != 0) {
    return attend_tile_scalar(k, k_stride, v, v_stride, q, n_q, head_dim, scale, lo, hi, m, l, acc, scratch);
  }
  const __m512 vscale = _mm512_set1_ps(scale);
  const int g_first = lo / 16 * 16;
  for (int i = 0; i < n_q; ++i) {
    const float* qi = q + int64_t{i} * head_dim;
    float* s = scratch + int64_t{i} * kAttentionTileRows;
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int g0 = g_first; g0 < hi; g0 += 16) {
      const int r_lo = std::max(lo - g0, 0), r_hi = std::min(hi - g0, 16);
      __m512 dots;
      switch (head_dim / 16) {
        case 1: dots = group_dots<1>(k, k_stride, qi, head_dim, g0, r_lo, r_hi); break;
        case 2: dots = group_dots<2>(k, k_stride, qi, head_dim, g0, r_lo, r_hi); break;
        case 3: dots = group_dots<3>(k, k_stride, qi, head_dim, g0, r_lo, r_hi); break;
        case 4: dots = group_dots<4>(k, k_stride, qi, head_dim, g0, r_lo, r_hi); break;
        case 5: dots = group_dots<5>(k, k_stride, qi, head_dim, g0, r_lo, r_hi); break;
        case 6: dots = group_dots<6>(k, k_stride, qi, head_dim, g0, r_lo, r_hi); break;
        case 7: dots = group_dots<7>(k, k_stride, qi, head_dim, g0, r_lo, r_hi); break;
        case 8: dots = group_dots<8>(k, k_stride, qi, head_dim, g0, r_lo, r_hi); break;
        default: dots = group_dots<0>(k, k_stride, qi, head_dim, g0, r_lo, r_hi); break;
      }
      const __m512 scores = _mm512_mul_ps(dots, vscale);
      _mm512_storeu_ps(s + g0, scores);
      vmax = _mm512_mask_max_ps(vmax, rows_mask(g0, lo, hi), vmax, scores);
    }
    softmax_step(s, vmax, lo, hi, m + i, l + i, acc + int64_t{i} * head_dim, head_dim);
  }
  // Values, two heads at a time: each V row loaded once for both.
  int i = 0;
  for (; i + 2 <= n_q; i += 2) {
    accumulate_values<2>(v, v_stride, scratch + int64_t{i} * kAttentionTileRows, lo, hi, acc + int64_t{i} * head_dim,
                         head_dim);
  }
  if (i < n_q) {
    accumulate_values<1>(v, v_stride, scratch + int64_t{i} * kAttentionTileRows, lo, hi, acc + int64_t{i} * head_dim,
                         head_dim);
  }
}

void affine_u8_rows_avx512(const uint8_t* a, int64_t lda, int64_t n, int k, const int8_t* b, int m,
                           const float* scale, const float* bias, float* c, int64_t ldc) {
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) {
    for_column_tiles(m, [&]<int V>(int j0) {
      affine_u8_tile<4, V>(a + t * lda, lda, k, b, m, scale, bias, c + t * ldc, ldc, j0);
    });
  }
  for (; t < n; ++t) {
    for_column_tiles(m, [&]<int V>(int j0) {
      affine_u8_tile<1, V>(a + t * lda, lda, k, b, m, scale, bias, c + t * ldc, ldc, j0);
    });
  }
}

void affine_rows_avx512(const float* a, int64_t lda, int64_t n, int k, const float* b, int m, const float* bias,
                        float* c, int64_t ldc) {
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) {
    for_column_tiles(m, [&]<int V>(int j0) { affine_tile<4, V>(a + t * lda, lda, k, b, m, bias, c + t * ldc, ldc, j0); });
  }
  for (; t < n; ++t) {
    for_column_tiles(m, [&]<int V>(int j0) { affine_tile<1, V>(a + t * lda, lda, k, b, m, bias, c + t * ldc, ldc, j0); });
  }
}

// kv_quant.h's per-token group quantizers, 16 lanes at a time. The scale
// (and INT4's minimum) of each group is computed as the scalar code does, in
// scalar f32 from the group's max / min; each code is then
// clamp(rne(x * inverse)) (INT4: of (x - min) * inverse), where rne by
// vrndscaleps equals the scalar magic-number rounding for |v| < 2^22 (|v|
// stays under 255 here).

// The scalar code keeps the first element that attains a group's min or max
// (std::min / std::max keep the first of equal values), which decides the
// sign of a zero extreme and so the f16 bytes of a zero minimum or scale.
inline float first_zero_like(const float* x, int n, float extreme) {
  if (extreme != 0.0f) return extreme;
  for (int i = 0; i < n; ++i) {
    if (x[i] == 0.0f) return x[i];
  }
  return extreme;
}

inline float reduce_min16(__m512 v) {
  const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(0x80000000u)));
  return -reduce_max16(_mm512_maskz_xor_ps(kAll, v, sign));
}

// 16 codes clamp(rne(v), lo, hi) as bytes.
inline __m128i code_bytes(__m512 v, __m512 lo, __m512 hi) {
  v = _mm512_maskz_roundscale_ps(kAll, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  v = _mm512_maskz_min_ps(kAll, _mm512_maskz_max_ps(kAll, v, lo), hi);
  return _mm512_maskz_cvtepi32_epi8(kAll, _mm512_maskz_cvtps_epi32(kAll, v));
}

void quantize_int8_avx512(const float* x, int64_t n, int group, int8_t* codes, uint16_t* scales) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  for (int64_t g = 0; g * group < n; ++g) {
    const float* xg = x + g * group;
    __m512 m = _mm512_setzero_ps();
    for (int i = 0; i < group; i += 16) {
      m = _mm512_maskz_max_ps(kAll, m, _mm512_maskz_and_ps(kAll, _mm512_loadu_ps(xg + i), abs_mask));
    }
    const kv_quant::Scale s = kv_quant::make_scale(reduce_max16(m) / 127.0f);  // amax: |x| has no -0
    scales[g] = s.half;
    const __m512 inverse = _mm512_set1_ps(s.inverse);
    int8_t* out = codes + g * group;
    for (int i = 0; i < group; i += 16) {
      const __m512 v = _mm512_maskz_mul_ps(kAll, _mm512_loadu_ps(xg + i), inverse);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), code_bytes(v, lo, hi));
    }
  }
}

void quantize_int4_avx512(const float* x, int64_t n, int group, uint8_t* codes, uint16_t* scales,
                          uint16_t* mins) {
  const __m512 zero = _mm512_setzero_ps(), fifteen = _mm512_set1_ps(15.0f);
  const __m128i low_nibble = _mm_set1_epi16(0x000f), high_nibble = _mm_set1_epi16(0x00f0);
  for (int64_t g = 0; g * group < n; ++g) {
    const float* xg = x + g * group;
    __m512 vmin = _mm512_loadu_ps(xg), vmax = vmin;
    for (int i = 16; i < group; i += 16) {
      const __m512 v = _mm512_loadu_ps(xg + i);
      vmin = _mm512_maskz_min_ps(kAll, vmin, v);
      vmax = _mm512_maskz_max_ps(kAll, vmax, v);
    }
    const float lo = first_zero_like(xg, group, reduce_min16(vmin));
    const float hi = first_zero_like(xg, group, reduce_max16(vmax));
    const uint16_t min_half = fp32_to_fp16(lo);
    const float min = fp16_to_fp32(min_half);
    const kv_quant::Scale s = kv_quant::make_scale((hi - min) / 15.0f);
    scales[g] = s.half;
    mins[g] = min_half;
    const __m512 vmin_f = _mm512_set1_ps(min);
    const __m512 inverse = _mm512_set1_ps(s.inverse);
    uint8_t* out = codes + g * group / 2;
    for (int i = 0; i < group; i += 16) {
      const __m512 v =
          _mm512_maskz_mul_ps(kAll, _mm512_maskz_sub_ps(kAll, _mm512_loadu_ps(xg + i), vmin_f), inverse);
      // 16 codes as bytes; each 16-bit lane (even code, odd code) -> one
      // byte with the even code in the low nibble.
      const __m128i bytes = code_bytes(v, zero, fifteen);
      const __m128i pairs = _mm_or_si128(_mm_and_si128(bytes, low_nibble),
                                         _mm_and_si128(_mm_srli_epi16(bytes, 4), high_nibble));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i / 2), _mm_packus_epi16(pairs, pairs));
    }
  }
}

// quantize_query_q8 (kv_kernels_q8.cc) 16 dims at a time, the same float
// steps per dim: amax by max (exact in any order), inv = 127 / amax, y = q
// * inv, the code trunc(y) +- 1 where the fraction reaches +-0.5 (halves
// away from zero), clamped to [-127, 127]; the code sum in int32 (exact in
// any order).
void quantize_queries_q8_avx512(const float* q, int64_t n_heads, int head_dim, float scale, int8_t* codes,
                                float* scales, int32_t* bias) {
  const int n_blocks = head_dim / kQ8Block;
  const __m512 half = _mm512_set1_ps(0.5f), minus_half = _mm512_set1_ps(-0.5f);
  const __m512i one = _mm512_set1_epi32(1), lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (int64_t b = 0; b < n_heads * n_blocks; ++b) {
    const float* x = q + b * kQ8Block;
    const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
    const __m512 a0 = _mm512_abs_ps(x0), a1 = _mm512_abs_ps(x1);
    // (max(v, acc) keeps acc where v is NaN, as std::max(acc, v) does.)
    const float amax = reduce_max16(_mm512_maskz_max_ps(kAll, a1, _mm512_maskz_max_ps(kAll, a0, _mm512_setzero_ps())));
    const float s = amax / 127.0f;
    const __m512 inv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    __m512i sum = _mm512_setzero_si512();
    for (int half_block = 0; half_block < 2; ++half_block) {
      const __m512 y = _mm512_mul_ps(half_block == 0 ? x0 : x1, inv);
      __m512i code = _mm512_maskz_cvttps_epi32(kAll, y);
      const __m512 frac = _mm512_sub_ps(y, _mm512_maskz_cvtepi32_ps(kAll, code));
      code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(frac, half, _CMP_GE_OQ), code, one);
      code = _mm512_mask_sub_epi32(code, _mm512_cmp_ps_mask(frac, minus_half, _CMP_LE_OQ), code, one);
      code = _mm512_maskz_min_epi32(kAll, _mm512_maskz_max_epi32(kAll, code, lo), hi);
      sum = _mm512_add_epi32(sum, code);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + b * kQ8Block + 16 * half_block),
                       _mm512_maskz_cvtepi32_epi8(kAll, code));
    }
    scales[b] = s * scale;
    // (Not _mm512_reduce_add_epi32: its extract has an undefined source, -Wmaybe-uninitialized.)
    const __m256i s8 = _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(0xf, sum, 0),
                                        _mm512_maskz_extracti64x4_epi64(0xf, sum, 1));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
    bias[b] = -128 * _mm_cvtsi128_si32(s4);
  }
}

KvKernels kv_kernels_avx512() {
  KvKernels set = kv_kernels_avx2();
  set.quantize_int8 = quantize_int8_avx512;
  set.quantize_int4 = quantize_int4_avx512;
  set.quantize_queries_q8 = quantize_queries_q8_avx512;
  set.affine_rows = affine_rows_avx512;
  set.affine_u8_rows = affine_u8_rows_avx512;
  set.attend_tile = attend_tile_avx512;
  set.dequantize_head_rows = dequantize_head_rows_avx512;
  set.attend_tile_q8 = attend_tile_q8_avx512;
  set.attend_tile_q8_positions = attend_tile_q8_positions_avx512;
  // INT4 in place needs VBMI (vpermi2b); without it the AVX2 set's kernel.
  if (cpu_features().avx512vbmi) {
    set.attend_tile_q4_positions = attend_tile_q4_positions_avx512;
    set.q4_reads_blocks = true;
  }
  set.q8_spreads_prefetch = true;
  set.q8_reads_key_blocks = true;
  set.q8_reads_value_quads = true;
  set.attend_tile_f16 = attend_tile_f16_avx512;
  return set;
}

}  // namespace baton::kv_kernels_impl
