// The CUDA backend's own kernels (everything but the GEMMs, which are
// cuBLAS: cuda_gemm.h). Host-side launchers: every pointer is device memory
// unless said otherwise, every launch is asynchronous on `stream` and returns
// the launch error (cudaGetLastError). Shapes are row-major.
//
// One kernel per file: embedding.cu, rmsnorm.cu, qkv_rope.cu, swiglu.cu,
// flash_attention.cu, flash_attention_wmma.cu, attention_simple.cu, kv_store.cu,
// kv_quant.cu.
// Each is tested against the CPU reference (common/cpu/ops.h, the F32 KV
// cache, the KV codec) in tests/cuda/cuda_kernels_test.cc.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cloud_prefill/cuda/cuda_dtype.h"
#include "cloud_prefill/cuda/paged_kv.h"

namespace baton::cuda {

// x[t, :] = float(table[tokens[t], :]).
//   table: table_dtype (F16/BF16) [n_vocab, n_embd]; tokens: int32 [n_tokens]
//   (validated by the caller); x: f32 [n_tokens, n_embd].
cudaError_t launch_embedding_gather(CudaDType table_dtype, const void* table, const int32_t* tokens,
                                    int64_t n_tokens, int n_embd, float* x, cudaStream_t stream);

// out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * weight  (sum of squares in double).
//   x: f32 [n_rows, n]; weight: f32 [n]; out: out_dtype (F32/F16/BF16) [n_rows, n].
cudaError_t launch_rmsnorm(const float* x, const float* weight, int64_t n_rows, int n, float eps,
                           CudaDType out_dtype, void* out, cudaStream_t stream);

struct QkvRopeParams {
  int64_t n_tokens = 0;
  int64_t pos0 = 0;                 // position of token 0
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_rot = 0;                    // rotated dims per head (even, <= head_dim)
  bool neox = false;                // pairs (i, i + n_rot/2) instead of (2i, 2i+1)
  const float* inv_freq = nullptr;  // device f32 [n_rot / 2]; theta_i = pos * inv_freq[i]
  const float* bias = nullptr;      // device f32 [q_dim + 2 * kv_dim] (q | k | v), or nullptr
  int layer = 0;                    // layer of the paged store
};

// The step between the QKV GEMM and attention, fused: bias, RoPE of q and k
// (angles in double, as rope_rows), then
//   q_out: q_dtype [n_tokens, q_dim]                       (rotated q)
//   k_out, v_out: f32 [n_tokens, kv_dim], or nullptr       (for the host KV)
//   kv (pool != nullptr): K/V in kv.dtype at positions pos0.. of `layer`.
// qkv: f32 [n_tokens, q_dim + 2 * kv_dim], each row q | k | v (the GEMM output).
cudaError_t launch_qkv_bias_rope(const QkvRopeParams& params, const float* qkv, CudaDType q_dtype, void* q_out,
                                 float* k_out, float* v_out, const PagedKvView& kv, cudaStream_t stream);

// Copies f32 K/V rows [n_tokens, kv_dim] to the paged store at positions
// pos0.. of `layer` (used to bring host KV of earlier requests to the device).
cudaError_t launch_kv_store(const float* k, const float* v, int64_t n_tokens, int64_t pos0, int layer,
                            const PagedKvView& kv, cudaStream_t stream);

struct AttentionParams {
  int64_t n_queries = 0;  // queries at positions pos0 .. pos0 + n_queries - 1
  int64_t pos0 = 0;       // query i attends to keys [0, pos0 + i] (earlier chunks included)
  int n_head = 0;
  int n_head_kv = 0;      // GQA: query head h reads kv head h / (n_head / n_head_kv)
  int head_dim = 0;
  int layer = 0;
  float scale = 0.0f;     // 1 / sqrt(head_dim)
};

// Causal GQA attention of prefill, FlashAttention-2 style: blocks of 64
// queries over tiles of 64 keys in shared memory, tensor-core (mma.sync) Q K^T
// and P V with f32 accumulation, online softmax in f32 on the accumulators in
// registers; never materializes the scores of all keys.
//   q, out: kv.dtype [n_queries, n_head * head_dim]. head_dim in {16, 32, 64, 128}.
cudaError_t launch_flash_attention(const AttentionParams& params, const void* q, const PagedKvView& kv, void* out,
                                   cudaStream_t stream);
bool flash_attention_supports(int head_dim);

// The backend's default: the same scheme with its K/V tiles pipelined
// (flash_attention_pipelined.cu): double-buffered in shared memory by
// cp.async, K and V fragments by ldmatrix, 128 queries per block, masks only
// on the diagonal tiles. Same head_dims; P rounded as in flash. 3.0x flash's
// attention rate on the H200 at 8K tokens of the 3B shape.
cudaError_t launch_flash_attention_pipelined(const AttentionParams& params, const void* q, const PagedKvView& kv,
                                             void* out, cudaStream_t stream);

// The same tiling through the WMMA API with S, P and O in shared memory: the
// first tensor-core version, kept as a cross-check and fallback (same head_dims).
cudaError_t launch_flash_attention_wmma(const AttentionParams& params, const void* q, const PagedKvView& kv,
                                        void* out, cudaStream_t stream);

// The same result on CUDA cores, one block per (query, head): the simple
// version the flash kernel is checked against on the device, and the
// fallback for other head sizes (head_dim <= 256).
cudaError_t launch_attention_simple(const AttentionParams& params, const void* q, const PagedKvView& kv,
                                    void* out, cudaStream_t stream);

// out[t, i] = silu(gate_up[t, i]) * gate_up[t, n_ff + i], in f32.
//   gate_up: in_dtype [n_tokens, 2 * n_ff] (one GEMM over the stacked gate and
//   up weights); out: out_dtype [n_tokens, n_ff].
cudaError_t launch_swiglu(CudaDType in_dtype, const void* gate_up, int64_t n_tokens, int n_ff, CudaDType out_dtype,
                          void* out, cudaStream_t stream);

// The KV codec's INT8 per-token groups (kv_quant::quantize_int8_groups), bit
// for bit: x [n] f32 in groups of `group`; codes int8 [n]; scales f16 [n / group]
// (amax / 127 rounded to nearest even; code = clamp(rint(x / scale), -127, 127)).
// x must be finite (the host codec checks that; callers here pass our own K/V).
cudaError_t launch_quantize_int8_groups(const float* x, int64_t n, int group, int8_t* codes, uint16_t* scales,
                                        cudaStream_t stream);
// x [n] f32 -> out [n] f16 bits (round to nearest even, as kv_quant::f32_to_f16).
cudaError_t launch_f32_to_f16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream);

}  // namespace baton::cuda
