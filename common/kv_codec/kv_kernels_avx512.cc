// AVX-512 kernels of the KV codec (see kv_kernels.h): the transform codec's
// affine_rows at 16 lanes; every other kernel of the set is the AVX2 one.
#include <immintrin.h>

#include "common/kv_codec/kv_kernels.h"

namespace baton::kv_kernels_impl {
namespace {

__mmask16 lane_mask16(int width) {
  if (width <= 0) return 0;
  if (width >= 16) return 0xffff;
  return static_cast<__mmask16>((1u << width) - 1);
}

// R rows of c, columns [j0, j0 + 64): 4R accumulators over the k terms.
template <int R>
void affine_tile(const float* a, int64_t lda, int k, const float* b, int m, const float* bias, float* c,
                 int64_t ldc, int j0) {
  __mmask16 mask[4];
  for (int v = 0; v < 4; ++v) mask[v] = lane_mask16(m - j0 - 16 * v);
  __m512 acc[R][4];
  for (int v = 0; v < 4; ++v) {
    const __m512 init = _mm512_maskz_loadu_ps(mask[v], bias + j0 + 16 * v);
    for (int r = 0; r < R; ++r) acc[r][v] = init;
  }
  for (int i = 0; i < k; ++i) {
    const float* bi = b + static_cast<int64_t>(i) * m + j0;
    __m512 w[4];
    for (int v = 0; v < 4; ++v) w[v] = _mm512_maskz_loadu_ps(mask[v], bi + 16 * v);
    for (int r = 0; r < R; ++r) {
      const __m512 ar = _mm512_set1_ps(a[r * lda + i]);
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_fmadd_ps(ar, w[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < 4; ++v) _mm512_mask_storeu_ps(c + r * ldc + j0 + 16 * v, mask[v], acc[r][v]);
  }
}

}  // namespace

void affine_rows_avx512(const float* a, int64_t lda, int64_t n, int k, const float* b, int m, const float* bias,
                        float* c, int64_t ldc) {
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) {
    for (int j0 = 0; j0 < m; j0 += 64) affine_tile<4>(a + t * lda, lda, k, b, m, bias, c + t * ldc, ldc, j0);
  }
  for (; t < n; ++t) {
    for (int j0 = 0; j0 < m; j0 += 64) affine_tile<1>(a + t * lda, lda, k, b, m, bias, c + t * ldc, ldc, j0);
  }
}

KvKernels kv_kernels_avx512() {
  KvKernels set = kv_kernels_avx2();
  set.affine_rows = affine_rows_avx512;
  return set;
}

}  // namespace baton::kv_kernels_impl
