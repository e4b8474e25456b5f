// Turns CUDA runtime errors into absl::Status naming the call, file and line.
#pragma once

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
