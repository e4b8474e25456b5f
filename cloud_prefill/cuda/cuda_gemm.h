// The backend's GEMMs through cuBLAS: 16-bit weights and activations (F16 or
// BF16, tensor cores), F32 accumulation and F32 output.
#pragma once

#include <cublas_v2.h>

#include <cstdint>

#include "absl/status/status.h"
#include "cloud_prefill/cuda/cuda_dtype.h"

namespace baton::cuda {

// y[t, r] = beta * y[t, r] + sum_c w[r, c] * x[t, c]   (y = x W^T, row-major).
//   w: dtype [rows, cols] (the GGUF row order); x: dtype [n_tokens, cols];
//   y: y_dtype [n_tokens, rows]: f32, or dtype (rounded once from the f32
//   accumulator). beta = 1 adds into y (the residual stream).
// Runs on the handle's stream.
absl::Status gemm_xwt(cublasHandle_t handle, CudaDType dtype, const void* w, int64_t rows, int64_t cols,
                      const void* x, int64_t n_tokens, CudaDType y_dtype, void* y, float beta);

}  // namespace baton::cuda
