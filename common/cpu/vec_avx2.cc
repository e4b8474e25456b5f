// AVX2 + FMA vec kernels. Entered only when best_simd_level() >= kAvx2.
#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "common/cpu/matmul_kernels.h"
#include "common/cpu/simd_avx2.h"
#include "common/cpu/silu_exp.h"

namespace baton::cpu_kernels {
using simd_avx2::hsum256;

float dot_f32_avx2(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8)
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float sum = hsum256(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void axpy_f32_avx2(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

void scale_f32_avx2(float* y, float a, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] *= a;
}

namespace {

// g / (1 + e^x) * up over 8 lanes, e^x as silu_exp::exp step by step
// (vmaxps / vminps pick as its scalar form does): silu at x = -g, gelu at
// x = silu_exp::gelu_exp_arg(g).
inline __m256 sigmoid_gate8(__m256 g, __m256 x, __m256 up) {
  namespace se = silu_exp;
  x = _mm256_max_ps(x, _mm256_set1_ps(se::kLo));
  const __m256 overflow = _mm256_cmp_ps(x, _mm256_set1_ps(se::kHi), _CMP_GT_OQ);
  x = _mm256_min_ps(x, _mm256_set1_ps(se::kHi));
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(se::kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(k, _mm256_set1_ps(-se::kLn2Hi), x);
  r = _mm256_fmadd_ps(k, _mm256_set1_ps(-se::kLn2Lo), r);
  __m256 p = _mm256_set1_ps(se::kC[7]);
  for (int c = 6; c >= 0; --c) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(se::kC[c]));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  const __m256 e = _mm256_blendv_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(bits)),
                                    _mm256_set1_ps(std::numeric_limits<float>::infinity()), overflow);
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), up);
}

inline __m256 silu8(__m256 g, __m256 up) { return sigmoid_gate8(g, _mm256_sub_ps(_mm256_setzero_ps(), g), up); }

inline __m256 gelu8(__m256 g, __m256 up) {
  namespace se = silu_exp;
  const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
  const __m256 x = _mm256_mul_ps(_mm256_fmadd_ps(_mm256_set1_ps(se::kGeluCubic), cube, g),
                                 _mm256_set1_ps(se::kGeluMinusTwoSqrtTwoOverPi));
  return sigmoid_gate8(g, x, up);
}

// gate[i] = lanes(gate[i], up[i]) over n elements.
template <__m256 (*kLanes)(__m256, __m256)>
void gate_mul(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(gate + i, kLanes(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  if (i == n) return;
  // The tail through the same lanes (silu_exp.h's scalar form is not
  // called from this AVX2 file: its inline copy could stand in for the
  // scalar level's, which must run on any x86-64).
  float g[8] = {}, u[8] = {};
  std::copy(gate + i, gate + n, g);
  std::copy(up + i, up + n, u);
  _mm256_storeu_ps(g, kLanes(_mm256_loadu_ps(g), _mm256_loadu_ps(u)));
  std::copy(g, g + (n - i), gate + i);
}

}  // namespace

void silu_mul_f32_avx2(float* gate, const float* up, int64_t n) { gate_mul<silu8>(gate, up, n); }
void gelu_mul_f32_avx2(float* gate, const float* up, int64_t n) { gate_mul<gelu8>(gate, up, n); }

}  // namespace baton::cpu_kernels
