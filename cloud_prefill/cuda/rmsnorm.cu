#include "cloud_prefill/cuda/cuda_kernel_util.cuh"
#include "cloud_prefill/cuda/cuda_ops.h"

namespace baton::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row; the sum of squares in double like rmsnorm_rows (ops.cc).
template <typename T>
__global__ void rmsnorm_kernel(const float* __restrict__ x, const float* __restrict__ weight, int n, float eps,
                               T* __restrict__ out) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * n;
  double sum_sq = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) sum_sq += static_cast<double>(xr[i]) * xr[i];
  sum_sq = block_sum(sum_sq, scratch);
  const float scale = static_cast<float>(1.0 / sqrt(sum_sq / n + static_cast<double>(eps)));
  T* yr = out + r * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = from_float<T>(xr[i] * scale * weight[i]);
}

}  // namespace

cudaError_t launch_rmsnorm(const float* x, const float* weight, int64_t n_rows, int n, float eps, CudaDType out_dtype,
                           void* out, cudaStream_t stream) {
  if (n_rows == 0) return cudaSuccess;
  cudaError_t err = cudaSuccess;
  BATON_DISPATCH_ALL_TYPES(out_dtype, T, err,
                           rmsnorm_kernel<T><<<static_cast<unsigned>(n_rows), kThreads, 0, stream>>>(
                               x, weight, n, eps, static_cast<T*>(out)));
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace baton::cuda
