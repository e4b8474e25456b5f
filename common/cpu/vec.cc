#include "common/cpu/vec.h"

#include "common/cpu/matmul_kernels.h"
#include "common/cpu/silu_exp.h"
#include "common/util/cpu_features.h"

namespace baton {
namespace {

struct VecKernels {
  float (*dot)(const float*, const float*, int64_t);
  void (*axpy)(float, const float*, float*, int64_t);
  void (*scale)(float*, float, int64_t);
  void (*silu_mul)(float*, const float*, int64_t);
  void (*gelu_mul)(float*, const float*, int64_t);
};

const VecKernels& vec_kernels() {
  static const VecKernels kernels = [] {
    switch (active_simd_level()) {
      case SimdLevel::kAvx512:
        return VecKernels{cpu_kernels::dot_f32_avx512, cpu_kernels::axpy_f32_avx512,
                          cpu_kernels::scale_f32_avx512, cpu_kernels::silu_mul_f32_avx512,
                          cpu_kernels::gelu_mul_f32_avx512};
      case SimdLevel::kAvx2:
        return VecKernels{cpu_kernels::dot_f32_avx2, cpu_kernels::axpy_f32_avx2,
                          cpu_kernels::scale_f32_avx2, cpu_kernels::silu_mul_f32_avx2,
                          cpu_kernels::gelu_mul_f32_avx2};
      case SimdLevel::kScalar:
        break;
    }
    return VecKernels{cpu_kernels::dot_f32_scalar, cpu_kernels::axpy_f32_scalar,
                      cpu_kernels::scale_f32_scalar, cpu_kernels::silu_mul_f32_scalar,
                      cpu_kernels::gelu_mul_f32_scalar};
  }();
  return kernels;
}

}  // namespace

float dot_f32(const float* a, const float* b, int64_t n) { return vec_kernels().dot(a, b, n); }
void axpy_f32(float a, const float* x, float* y, int64_t n) { vec_kernels().axpy(a, x, y, n); }
void scale_f32(float* y, float a, int64_t n) { vec_kernels().scale(y, a, n); }
void silu_mul_f32(float* gate, const float* up, int64_t n) { vec_kernels().silu_mul(gate, up, n); }
void gelu_mul_f32(float* gate, const float* up, int64_t n) { vec_kernels().gelu_mul(gate, up, n); }

namespace cpu_kernels {

float dot_f32_scalar(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void axpy_f32_scalar(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void scale_f32_scalar(float* y, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}

void silu_mul_f32_scalar(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = silu_exp::silu_times(gate[i], up[i]);
}

void gelu_mul_f32_scalar(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = silu_exp::gelu_times(gate[i], up[i]);
}

}  // namespace cpu_kernels
}  // namespace baton
