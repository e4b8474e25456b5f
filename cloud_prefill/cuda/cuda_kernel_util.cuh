// Device-side helpers shared by the .cu kernels: 16-bit conversions, the
// typed view of the paged KV store, warp/block reductions, dtype dispatch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cloud_prefill/cuda/cuda_dtype.h"
#include "cloud_prefill/cuda/paged_kv.h"

namespace baton::cuda {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// PagedKvView with the element type known (see paged_kv.h for the layout).
template <typename T>
struct KvStore {
  T* pool;
  const int32_t* block_table;
  int block_tokens;
  int kv_dim;
  int64_t block_elements;

  // Row of K (kind 0) or V (kind 1) of `layer` at `pos`: [kv_dim].
  __device__ __forceinline__ T* row(int layer, int kind, int64_t pos) const {
    const int64_t block = block_table[pos / block_tokens];
    return pool + block * block_elements +
           ((int64_t{layer} * 2 + kind) * block_tokens + pos % block_tokens) * kv_dim;
  }
};

template <typename T>
KvStore<T> typed_store(const PagedKvView& v) {
  return KvStore<T>{static_cast<T*>(v.pool), v.block_table, v.block_tokens, v.kv_dim, v.block_elements()};
}

__device__ __forceinline__ int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, <= 1024), returned
// to every thread. `scratch`: shared [32]. Contains __syncthreads.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by an earlier call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = 0;
  for (int w = 0; w < n_warps; ++w) total += scratch[w];
  return total;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = scratch[0];
  for (int w = 1; w < n_warps; ++w) m = fmaxf(m, scratch[w]);
  return m;
}

}  // namespace baton::cuda

// Runs `...` with T bound to the C++ type of a 16-bit CudaDType `dtype`
// (F32 is not a storage type of these kernels); else sets `err`.
#define BATON_DISPATCH_HALF_TYPES(dtype, T, err, ...)                   \
  switch (dtype) {                                                      \
    case ::baton::cuda::CudaDType::kF16: {                              \
      using T = __half;                                                 \
      __VA_ARGS__;                                                      \
      break;                                                            \
    }                                                                   \
    case ::baton::cuda::CudaDType::kBF16: {                             \
      using T = __nv_bfloat16;                                          \
      __VA_ARGS__;                                                      \
      break;                                                            \
    }                                                                   \
    default:                                                            \
      err = cudaErrorInvalidValue;                                      \
  }

// Same with F32 allowed (outputs of norms and activations in tests).
#define BATON_DISPATCH_ALL_TYPES(dtype, T, err, ...) \
  if ((dtype) == ::baton::cuda::CudaDType::kF32) {   \
    using T = float;                                 \
    __VA_ARGS__;                                     \
  } else {                                           \
    BATON_DISPATCH_HALF_TYPES(dtype, T, err, __VA_ARGS__) \
  }
