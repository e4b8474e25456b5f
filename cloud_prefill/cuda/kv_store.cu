#include "cloud_prefill/cuda/cuda_kernel_util.cuh"
#include "cloud_prefill/cuda/cuda_ops.h"

namespace baton::cuda {
namespace {

// One block per token: K/V rows f32 -> the paged store's type.
template <typename T>
__global__ void kv_store_kernel(const float* __restrict__ k, const float* __restrict__ v, int64_t pos0, int layer,
                                KvStore<T> store) {
  const int64_t t = blockIdx.x;
  T* k_dst = store.row(layer, 0, pos0 + t);
  T* v_dst = store.row(layer, 1, pos0 + t);
  for (int i = threadIdx.x; i < store.kv_dim; i += blockDim.x) {
    k_dst[i] = from_float<T>(k[t * store.kv_dim + i]);
    v_dst[i] = from_float<T>(v[t * store.kv_dim + i]);
  }
}

}  // namespace

cudaError_t launch_kv_store(const float* k, const float* v, int64_t n_tokens, int64_t pos0, int layer,
                            const PagedKvView& kv, cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  cudaError_t err = cudaSuccess;
  BATON_DISPATCH_HALF_TYPES(kv.dtype, T, err,
                            kv_store_kernel<T><<<static_cast<unsigned>(n_tokens), 128, 0, stream>>>(
                                k, v, pos0, layer, typed_store<T>(kv)));
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace baton::cuda
