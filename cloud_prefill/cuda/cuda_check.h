// Turns CUDA runtime and cuBLAS errors into absl::Status naming the call,
// file and line. Every CUDA and cuBLAS call of the backend goes through these.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

#define BATON_CUDA_RETURN_IF_ERROR(call)                                                 \
  do {                                                                                   \
    cudaError_t baton_cuda_err_ = (call);                                                \
    if (baton_cuda_err_ != cudaSuccess)                                                  \
      return absl::InternalError(absl::StrFormat("%s failed at %s:%d: %s", #call,       \
                                                 __FILE__, __LINE__,                     \
                                                 cudaGetErrorString(baton_cuda_err_))); \
  } while (0)

#define BATON_CUBLAS_RETURN_IF_ERROR(call)                                                   \
  do {                                                                                       \
    cublasStatus_t baton_cublas_err_ = (call);                                               \
    if (baton_cublas_err_ != CUBLAS_STATUS_SUCCESS)                                          \
      return absl::InternalError(absl::StrFormat("%s failed at %s:%d: %s", #call, __FILE__, \
                                                 __LINE__,                                   \
                                                 cublasGetStatusString(baton_cublas_err_))); \
  } while (0)
