// AVX-512 kernels of the KV codec (see kv_kernels.h): the transform codec's
// affine_rows at 16 lanes and affine_u8_rows with VNNI (kAvx512 includes
// it); every other kernel of the set is the AVX2 one.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "common/kv_codec/kv_kernels.h"

namespace baton::kv_kernels_impl {
namespace {

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

}  // namespace

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

KvKernels kv_kernels_avx512() {
  KvKernels set = kv_kernels_avx2();
  set.affine_rows = affine_rows_avx512;
  set.affine_u8_rows = affine_u8_rows_avx512;
  return set;
}

}  // namespace baton::kv_kernels_impl
