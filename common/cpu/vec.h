// Small dispatched f32 vector kernels (attention's inner loops).
// Dispatched on active_simd_level(); results differ across levels only by
// float summation order (silu_mul_f32, gelu_mul_f32: not at all).
#pragma once

#include <cstdint>

namespace baton {

// sum_i a[i] * b[i]; a, b: [n] f32.
float dot_f32(const float* a, const float* b, int64_t n);
// y[i] += a * x[i]; x, y: [n] f32.
void axpy_f32(float a, const float* x, float* y, int64_t n);
// y[i] *= a; y: [n] f32.
void scale_f32(float* y, float a, int64_t n);
// gate[i] = silu(gate[i]) * up[i] (SwiGLU), exp as silu_exp.h computes it:
// the same bits at every level.
void silu_mul_f32(float* gate, const float* up, int64_t n);
// gate[i] = gelu(gate[i]) * up[i] (GeGLU, GELU in its tanh approximation),
// as silu_exp.h's gelu_times: the same bits at every level.
void gelu_mul_f32(float* gate, const float* up, int64_t n);

}  // namespace baton
