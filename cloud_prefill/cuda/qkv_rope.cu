#include "cloud_prefill/cuda/cuda_kernel_util.cuh"
#include "cloud_prefill/cuda/cuda_ops.h"

namespace baton::cuda {
namespace {

// Element d of a head (x: the head's first element, bias added) after RoPE at
// `pos`, with rope_rows' pairing and arithmetic (angle and sin/cos in double,
// rotation in float).
__device__ __forceinline__ float rotated(const float* x, const float* bias, int d, int64_t pos,
                                         const QkvRopeParams& p) {
  auto at = [&](int i) { return bias != nullptr ? x[i] + bias[i] : x[i]; };
  if (d >= p.n_rot) return at(d);
  const int half = p.n_rot / 2;
  int pair, a, b;
  if (p.neox) {
    pair = d < half ? d : d - half;
    a = pair;
    b = pair + half;
  } else {
    pair = d / 2;
    a = 2 * pair;
    b = a + 1;
  }
  double s, c;
  sincos(static_cast<double>(pos) * p.inv_freq[pair], &s, &c);
  const float cos_t = static_cast<float>(c), sin_t = static_cast<float>(s);
  const float x0 = at(a), x1 = at(b);
  return d == a ? __fsub_rn(__fmul_rn(x0, cos_t), __fmul_rn(x1, sin_t))
                : __fadd_rn(__fmul_rn(x0, sin_t), __fmul_rn(x1, cos_t));
}

// One block per token; threads stride over the row's q | k | v elements.
template <typename QT, typename KT>
__global__ void qkv_bias_rope_kernel(QkvRopeParams p, const float* __restrict__ qkv, QT* __restrict__ q_out,
                                     float* __restrict__ k_out, float* __restrict__ v_out, KvStore<KT> store,
                                     bool to_store) {
  const int64_t t = blockIdx.x;
  const int64_t pos = p.pos0 + t;
  const int q_dim = p.n_head * p.head_dim;
  const int kv_dim = p.n_head_kv * p.head_dim;
  const float* row = qkv + t * (q_dim + 2 * kv_dim);
  KT* k_dst = to_store ? store.row(p.layer, 0, pos) : nullptr;
  KT* v_dst = to_store ? store.row(p.layer, 1, pos) : nullptr;
  for (int e = threadIdx.x; e < q_dim + 2 * kv_dim; e += blockDim.x) {
    if (e < q_dim) {
      const int head_start = e / p.head_dim * p.head_dim;
      const float value = rotated(row + head_start, p.bias != nullptr ? p.bias + head_start : nullptr,
                                  e - head_start, pos, p);
      q_out[t * q_dim + e] = from_float<QT>(value);
    } else if (e < q_dim + kv_dim) {
      const int i = e - q_dim;
      const int head_start = q_dim + i / p.head_dim * p.head_dim;
      const float value = rotated(row + head_start, p.bias != nullptr ? p.bias + head_start : nullptr,
                                  e - head_start, pos, p);
      if (k_out != nullptr) k_out[t * kv_dim + i] = value;
      if (to_store) k_dst[i] = from_float<KT>(value);
    } else {
      const int i = e - q_dim - kv_dim;
      const float value = p.bias != nullptr ? row[e] + p.bias[e] : row[e];
      if (v_out != nullptr) v_out[t * kv_dim + i] = value;
      if (to_store) v_dst[i] = from_float<KT>(value);
    }
  }
}

template <typename QT, typename KT>
cudaError_t launch_typed(const QkvRopeParams& p, const float* qkv, void* q_out, float* k_out, float* v_out,
                         const PagedKvView& kv, cudaStream_t stream) {
  KvStore<KT> store{};
  if (kv.pool != nullptr) store = typed_store<KT>(kv);
  qkv_bias_rope_kernel<QT, KT><<<static_cast<unsigned>(p.n_tokens), 256, 0, stream>>>(
      p, qkv, static_cast<QT*>(q_out), k_out, v_out, store, kv.pool != nullptr);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_qkv_bias_rope(const QkvRopeParams& params, const float* qkv, CudaDType q_dtype, void* q_out,
                                 float* k_out, float* v_out, const PagedKvView& kv, cudaStream_t stream) {
  if (params.n_tokens == 0) return cudaSuccess;
  if (params.n_rot % 2 != 0 || params.n_rot > params.head_dim) return cudaErrorInvalidValue;
  cudaError_t err = cudaSuccess;
  // The store's type is needed even when there is no store: default to BF16.
  const CudaDType kv_dtype = kv.pool != nullptr ? kv.dtype : CudaDType::kBF16;
  BATON_DISPATCH_ALL_TYPES(q_dtype, QT, err,
                           BATON_DISPATCH_HALF_TYPES(kv_dtype, KT, err,
                                                     err = (launch_typed<QT, KT>(params, qkv, q_out, k_out,
                                                                                 v_out, kv, stream))));
  return err;
}

}  // namespace baton::cuda
