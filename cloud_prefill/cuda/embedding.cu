#include "cloud_prefill/cuda/cuda_kernel_util.cuh"
#include "cloud_prefill/cuda/cuda_ops.h"

namespace baton::cuda {
namespace {

// One block per token: x[t, :] = table[tokens[t], :].
template <typename T>
__global__ void embedding_gather_kernel(const T* __restrict__ table, const int32_t* __restrict__ tokens, int n_embd,
                                        float* __restrict__ x) {
  const int64_t t = blockIdx.x;
  const T* row = table + int64_t{tokens[t]} * n_embd;
  float* out = x + t * n_embd;
  for (int i = threadIdx.x; i < n_embd; i += blockDim.x) out[i] = to_float(row[i]);
}

}  // namespace

cudaError_t launch_embedding_gather(CudaDType table_dtype, const void* table, const int32_t* tokens,
                                    int64_t n_tokens, int n_embd, float* x, cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  cudaError_t err = cudaSuccess;
  BATON_DISPATCH_HALF_TYPES(table_dtype, T, err,
                            embedding_gather_kernel<T><<<static_cast<unsigned>(n_tokens), 256, 0, stream>>>(
                                static_cast<const T*>(table), tokens, n_embd, x));
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace baton::cuda
