#include "cloud_prefill/cuda/cuda_check.h"
#include "cloud_prefill/cuda/cuda_device.h"

namespace baton::cuda {
namespace {

__global__ void saxpy_kernel(float a, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

}  // namespace

absl::StatusOr<CudaDeviceInfo> probe_devices() {
  CudaDeviceInfo info;
  cudaError_t err = cudaGetDeviceCount(&info.device_count);
  if (err != cudaSuccess || info.device_count == 0) {
    return absl::UnavailableError(absl::StrFormat(
        "no CUDA device: %s", err != cudaSuccess ? cudaGetErrorString(err) : "count is 0"));
  }
  cudaDeviceProp prop{};
  BATON_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, 0));
  info.name = prop.name;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.total_memory_bytes = prop.totalGlobalMem;
  return info;
}

absl::Status saxpy_on_device(float a, const float* x, float* y, int n) {
  float* dx = nullptr;
  float* dy = nullptr;
  const size_t bytes = sizeof(float) * static_cast<size_t>(n);
  BATON_CUDA_RETURN_IF_ERROR(cudaMalloc(&dx, bytes));
  absl::Status status = [&]() -> absl::Status {
    BATON_CUDA_RETURN_IF_ERROR(cudaMalloc(&dy, bytes));
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice));
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice));
    saxpy_kernel<<<(n + 255) / 256, 256>>>(a, dx, dy, n);
    BATON_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpy(y, dy, bytes, cudaMemcpyDeviceToHost));
    return absl::OkStatus();
  }();
  cudaFree(dx);
  if (dy != nullptr) cudaFree(dy);
  return status;
}

}  // namespace baton::cuda
