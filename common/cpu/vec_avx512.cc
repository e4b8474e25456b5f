// AVX-512 vec kernels: masked tails, no scalar remainder loop.
// Entered only when best_simd_level() == kAvx512.
// GCC 12's AVX-512 headers self-initialize _mm512_undefined_*() values, which
// -Wuninitialized reports at every inlined use; the warning is in the header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <limits>

#include "common/cpu/matmul_kernels.h"
#include "common/cpu/silu_exp.h"

namespace baton::cpu_kernels {
namespace {

inline __mmask16 tail_mask(int64_t left) {
  return static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1);
}

}  // namespace

float dot_f32_avx512(const float* a, const float* b, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

void axpy_f32_avx512(float a, const float* x, float* y, int64_t n) {
  const __m512 va = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 r = _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
    _mm512_mask_storeu_ps(y + i, m, r);
  }
}

void scale_f32_avx512(float* y, float a, int64_t n) {
  const __m512 va = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(va, _mm512_maskz_loadu_ps(m, y + i)));
  }
}

namespace {

// g / (1 + e^x) * up over 16 lanes, as vec_avx2.cc's sigmoid_gate8: silu at
// x = -g, gelu at x = silu_exp::gelu_exp_arg(g).
inline __m512 sigmoid_gate16(__m512 g, __m512 x, __m512 up) {
  namespace se = silu_exp;
  x = _mm512_max_ps(x, _mm512_set1_ps(se::kLo));
  const __mmask16 overflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(se::kHi), _CMP_GT_OQ);
  x = _mm512_min_ps(x, _mm512_set1_ps(se::kHi));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(se::kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(k, _mm512_set1_ps(-se::kLn2Hi), x);
  r = _mm512_fmadd_ps(k, _mm512_set1_ps(-se::kLn2Lo), r);
  __m512 p = _mm512_set1_ps(se::kC[7]);
  for (int c = 6; c >= 0; --c) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(se::kC[c]));
  const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
  const __m512 e = _mm512_mask_blend_ps(overflow, _mm512_mul_ps(p, _mm512_castsi512_ps(bits)),
                                        _mm512_set1_ps(std::numeric_limits<float>::infinity()));
  return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), up);
}

inline __m512 silu16(__m512 g, __m512 up) { return sigmoid_gate16(g, _mm512_sub_ps(_mm512_setzero_ps(), g), up); }

inline __m512 gelu16(__m512 g, __m512 up) {
  namespace se = silu_exp;
  const __m512 cube = _mm512_mul_ps(_mm512_mul_ps(g, g), g);
  const __m512 x = _mm512_mul_ps(_mm512_fmadd_ps(_mm512_set1_ps(se::kGeluCubic), cube, g),
                                 _mm512_set1_ps(se::kGeluMinusTwoSqrtTwoOverPi));
  return sigmoid_gate16(g, x, up);
}

// gate[i] = lanes(gate[i], up[i]) over n elements, the tail masked.
template <__m512 (*kLanes)(__m512, __m512)>
void gate_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(gate + i, m, kLanes(_mm512_maskz_loadu_ps(m, gate + i), _mm512_maskz_loadu_ps(m, up + i)));
  }
}

}  // namespace

void silu_mul_f32_avx512(float* gate, const float* up, int64_t n) { gate_mul<silu16>(gate, up, n); }
void gelu_mul_f32_avx512(float* gate, const float* up, int64_t n) { gate_mul<gelu16>(gate, up, n); }

}  // namespace baton::cpu_kernels
