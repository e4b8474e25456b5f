#include "cloud_prefill/cuda/cuda_gemm.h"

#include <limits>

#include "absl/strings/str_format.h"
#include "cloud_prefill/cuda/cuda_check.h"

namespace baton::cuda {

absl::Status gemm_xwt(cublasHandle_t handle, CudaDType dtype, const void* w, int64_t rows, int64_t cols,
                      const void* x, int64_t n_tokens, CudaDType y_dtype, void* y, float beta) {
  if (dtype == CudaDType::kF32) return absl::InvalidArgumentError("gemm_xwt takes 16-bit weights, not f32");
  if (y_dtype != CudaDType::kF32 && y_dtype != dtype) {
    return absl::InvalidArgumentError(absl::StrFormat("gemm_xwt writes f32 or %s, not %s", dtype_name(dtype),
                                                      dtype_name(y_dtype)));
  }
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  if (rows > kMax || cols > kMax || n_tokens > kMax) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GEMM of [%d x %d] weights by %d tokens exceeds cuBLAS's int dims", rows, cols, n_tokens));
  }
  if (n_tokens == 0) return absl::OkStatus();
  const cudaDataType_t type = dtype == CudaDType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
  const float alpha = 1.0f;
  // Column-major view: W is [cols, rows] (ld cols), X is [cols, n] (ld cols),
  // Y is [rows, n] (ld rows); Y = W^T X.
  BATON_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows),
                                            static_cast<int>(n_tokens), static_cast<int>(cols), &alpha, w, type,
                                            static_cast<int>(cols), x, type, static_cast<int>(cols), &beta, y,
                                            y_dtype == CudaDType::kF32 ? CUDA_R_32F : type, static_cast<int>(rows),
                                            CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

}  // namespace baton::cuda
