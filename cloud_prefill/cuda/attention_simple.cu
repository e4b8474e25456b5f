#include "cloud_prefill/cuda/cuda_kernel_util.cuh"
#include "cloud_prefill/cuda/cuda_ops.h"

namespace baton::cuda {
namespace {

constexpr int kThreads = 128;    // keys per step; each thread also owns output dims
constexpr int kMaxHeadDim = 256;

// One block per (query, head). Per step of kThreads keys: each thread scores
// one key, the block takes the max and the sum (online softmax), then each
// thread accumulates its own output dims over the step's keys.
template <typename T>
__global__ void attention_simple_kernel(AttentionParams p, const T* __restrict__ q, KvStore<T> store,
                                        T* __restrict__ out) {
  __shared__ float q_row[kMaxHeadDim];
  __shared__ float probs[kThreads];
  __shared__ float scratch[32];
  const int64_t qi = blockIdx.x;
  const int h = blockIdx.y;
  const int hd = p.head_dim;
  const int kv_head = h / (p.n_head / p.n_head_kv);
  const int q_dim = p.n_head * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) q_row[d] = to_float(q[qi * q_dim + int64_t{h} * hd + d]);
  __syncthreads();

  const int64_t n_ctx = p.pos0 + qi + 1;  // keys [0, pos0 + qi]
  float running_max = -INFINITY, running_sum = 0.0f;
  float acc[kMaxHeadDim / kThreads] = {};  // dims threadIdx.x + j * kThreads
  for (int64_t k0 = 0; k0 < n_ctx; k0 += kThreads) {
    const int64_t key = k0 + threadIdx.x;
    float score = -INFINITY;
    if (key < n_ctx) {
      const T* k_row = store.row(p.layer, 0, key) + int64_t{kv_head} * hd;
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d) dot += q_row[d] * to_float(k_row[d]);
      score = dot * p.scale;
    }
    const float new_max = fmaxf(running_max, block_max(score, scratch));  // finite: key 0 is in step 0
    const float prob = key < n_ctx ? expf(score - new_max) : 0.0f;
    const float alpha = expf(running_max - new_max);
    running_sum = running_sum * alpha + block_sum(prob, scratch);
    probs[threadIdx.x] = prob;
    __syncthreads();
    const int n_keys = static_cast<int>(min_i64(kThreads, n_ctx - k0));
    for (int j = 0; j * kThreads + static_cast<int>(threadIdx.x) < hd; ++j) {
      const int d = j * kThreads + threadIdx.x;
      float sum = 0.0f;
      for (int i = 0; i < n_keys; ++i) sum += probs[i] * to_float(store.row(p.layer, 1, k0 + i)[int64_t{kv_head} * hd + d]);
      acc[j] = acc[j] * alpha + sum;
    }
    running_max = new_max;
    __syncthreads();  // probs is rewritten by the next step
  }
  for (int j = 0; j * kThreads + static_cast<int>(threadIdx.x) < hd; ++j) {
    const int d = j * kThreads + threadIdx.x;
    out[qi * q_dim + int64_t{h} * hd + d] = from_float<T>(acc[j] / running_sum);
  }
}

}  // namespace

cudaError_t launch_attention_simple(const AttentionParams& params, const void* q, const PagedKvView& kv, void* out,
                                    cudaStream_t stream) {
  if (params.n_queries == 0) return cudaSuccess;
  if (params.head_dim > kMaxHeadDim || params.n_head_kv <= 0 || params.n_head % params.n_head_kv != 0) {
    return cudaErrorInvalidValue;
  }
  cudaError_t err = cudaSuccess;
  const dim3 grid(static_cast<unsigned>(params.n_queries), static_cast<unsigned>(params.n_head));
  BATON_DISPATCH_HALF_TYPES(kv.dtype, T, err,
                            attention_simple_kernel<T><<<grid, kThreads, 0, stream>>>(
                                params, static_cast<const T*>(q), typed_store<T>(kv), static_cast<T*>(out)));
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace baton::cuda
