// The launch of a tiled attention kernel (flash_attention.cu,
// flash_attention_pipelined.cu, flash_attention_wmma.cu): checks, the dtype
// and head_dim dispatch, the dynamic shared memory opt-in, and a grid of
// query blocks x heads. Each kernel describes itself as
//   template <typename T, int kHeadDim> struct K {
//     static auto kernel();                 // its __global__ instantiation
//     static constexpr size_t kSmemBytes;   // dynamic shared memory
//     static constexpr int kBlockQueries, kBlockThreads;
//   };
#pragma once

#include "cloud_prefill/cuda/cuda_kernel_util.cuh"
#include "cloud_prefill/cuda/cuda_ops.h"

namespace baton::cuda {

template <template <typename, int> class K, typename T, int kHeadDim>
cudaError_t launch_attention_typed(const AttentionParams& p, const void* q, const PagedKvView& kv, void* out,
                                   cudaStream_t stream) {
  using Kernel = K<T, kHeadDim>;
  auto kernel = Kernel::kernel();
  if (Kernel::kSmemBytes > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(Kernel::kSmemBytes));
    if (err != cudaSuccess) return err;
  }
  const dim3 grid(static_cast<unsigned>((p.n_queries + Kernel::kBlockQueries - 1) / Kernel::kBlockQueries),
                  static_cast<unsigned>(p.n_head));
  kernel<<<grid, Kernel::kBlockThreads, Kernel::kSmemBytes, stream>>>(p, static_cast<const T*>(q), typed_store<T>(kv),
                                                                 static_cast<T*>(out));
  return cudaGetLastError();
}

// K<T, head_dim> for params.head_dim in {16, 32, 64, 128} and kv.dtype F16 or
// BF16; cudaErrorInvalidValue for anything else.
template <template <typename, int> class K>
cudaError_t launch_attention_kernel(const AttentionParams& params, const void* q, const PagedKvView& kv, void* out,
                                    cudaStream_t stream) {
  if (params.n_queries == 0) return cudaSuccess;
  if (!flash_attention_supports(params.head_dim) || params.n_head_kv <= 0 ||
      params.n_head % params.n_head_kv != 0) {
    return cudaErrorInvalidValue;
  }
  const auto by_head_dim = [&](auto type_tag) -> cudaError_t {
    using T = decltype(type_tag);
    switch (params.head_dim) {
      case 16: return launch_attention_typed<K, T, 16>(params, q, kv, out, stream);
      case 32: return launch_attention_typed<K, T, 32>(params, q, kv, out, stream);
      case 64: return launch_attention_typed<K, T, 64>(params, q, kv, out, stream);
      case 128: return launch_attention_typed<K, T, 128>(params, q, kv, out, stream);
      default: return cudaErrorInvalidValue;
    }
  };
  cudaError_t err = cudaSuccess;
  BATON_DISPATCH_HALF_TYPES(kv.dtype, T, err, err = by_head_dim(T{}));
  return err;
}

}  // namespace baton::cuda
