// Element-wise and row ops of the transformer forward pass (CPU, F32).
// Matmuls live in matmul.h; these are the cheap ops between them.
#pragma once

#include <cstdint>
#include <vector>

namespace baton {

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight, for n_rows rows of `n` elements.
void rmsnorm_rows(const float* x, const float* weight, float* out, int64_t n_rows, int64_t n, float eps);

// In place, per head: x[r, h, :] = x[r, h, :] / sqrt(mean(x[r, h, :]^2) + eps) * weight,
// for n_rows rows of [n_heads, head_dim]; weight: [head_dim], shared by all heads.
// QK-norm (qwen3, gemma3): applied to Q and K after their biases, before RoPE.
void rmsnorm_heads(float* x, int64_t n_rows, int n_heads, int head_dim, const float* weight, float eps);

// In-place RoPE on `n_rows` rows of [n_heads, head_dim] at positions
// pos0, pos0+1, ...; the first n_rot dims of each head are rotated.
// neox=false pairs (2i, 2i+1); neox=true pairs (i, i + n_rot/2).
// inv_freq: [n_rot/2], theta_i = pos * inv_freq[i].
// attn_factor multiplies cos and sin, so the rotated dims come out scaled by
// it (LongRoPE's attention magnitude factor, as llama.cpp's rope attn_factor;
// dims past n_rot are not scaled). 1 everywhere else.
void rope_rows(float* x, int64_t n_rows, int n_heads, int head_dim, int n_rot, bool neox,
               int64_t pos0, const float* inv_freq, float attn_factor = 1.0f);

// The cos and sin rope_rows computes, for positions [pos0, pos0 + n) once:
// a receiver that rotates the keys of every layer for the same positions
// (the KV handoff's pre-RoPE codecs) computes them once per segment.
struct RopeTable {
  int64_t pos0 = 0;
  int64_t n = 0;
  int n_pairs = 0;
  std::vector<float> cos, sin;  // [n, n_pairs]
};
RopeTable make_rope_table(int64_t pos0, int64_t n, int n_rot, const float* inv_freq, float attn_factor = 1.0f);
// rope_rows for rows at positions [pos0, pos0 + n_rows), which the table
// must cover (checked); bit-identical to rope_rows with the table's
// attn_factor (the same angles, products and roundings).
void rope_rows_table(float* x, int64_t n_rows, int n_heads, int head_dim, bool neox, int64_t pos0,
                     const RopeTable& table);

// gate[i] = silu(gate[i]) * up[i], n elements (silu_mul_f32: its exp is
// silu_exp.h's, the same bits at every SIMD level).
void silu_mul(float* gate, const float* up, int64_t n);

// gate[i] = gelu(gate[i]) * up[i], n elements, GELU in its tanh approximation
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GeGLU: gemma3), computed
// as x / (1 + e^(-2 sqrt(2/pi) (x + 0.044715 x^3))) (gelu_mul_f32: silu_exp.h's
// e^x, vectorized, the same bits at every SIMD level).
void gelu_mul(float* gate, const float* up, int64_t n);

// x[i] *= factor
void scale_inplace(float* x, float factor, int64_t n);

// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);

// In-place softmax over n elements; returns nothing. Max-subtracted.
void softmax_inplace(float* x, int64_t n);

}  // namespace baton
