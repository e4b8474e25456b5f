#include "cloud_prefill/cuda/cuda_kernel_util.cuh"
#include "cloud_prefill/cuda/cuda_ops.h"

namespace baton::cuda {
namespace {

// One block per token row: out[t, i] = silu(gate) * up, as silu_mul (ops.cc).
template <typename TI, typename T>
__global__ void swiglu_kernel(const TI* __restrict__ gate_up, int n_ff, T* __restrict__ out) {
  const int64_t t = blockIdx.x;
  const TI* gate = gate_up + t * 2 * n_ff;
  const TI* up = gate + n_ff;
  T* o = out + t * n_ff;
  for (int i = threadIdx.x; i < n_ff; i += blockDim.x) {
    const float g = to_float(gate[i]);
    o[i] = from_float<T>(g / (1.0f + expf(-g)) * to_float(up[i]));
  }
}

}  // namespace

cudaError_t launch_swiglu(CudaDType in_dtype, const void* gate_up, int64_t n_tokens, int n_ff, CudaDType out_dtype,
                          void* out, cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  cudaError_t err = cudaSuccess;
  BATON_DISPATCH_ALL_TYPES(in_dtype, TI, err,
                           BATON_DISPATCH_ALL_TYPES(out_dtype, T, err,
                                                    swiglu_kernel<TI, T><<<static_cast<unsigned>(n_tokens), 256, 0,
                                                                           stream>>>(
                                                        static_cast<const TI*>(gate_up), n_ff, static_cast<T*>(out))));
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace baton::cuda
