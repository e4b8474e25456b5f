#include "common/cpu/ops.h"

#include <cmath>
#include <vector>

#include "common/cpu/vec.h"
#include "common/util/check.h"

namespace baton {

void rmsnorm_rows(const float* x, const float* weight, float* out, int64_t n_rows, int64_t n, float eps) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    float* yr = out + r * n;
    double sum_sq = 0.0;
    for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(sum_sq / n + eps));
    for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale * weight[i];
  }
}

void rmsnorm_heads(float* x, int64_t n_rows, int n_heads, int head_dim, const float* weight, float eps) {
  // Each head is one row of head_dim elements; rmsnorm_rows allows out == x.
  rmsnorm_rows(x, weight, x, n_rows * n_heads, head_dim, eps);
}

namespace {

// One row of n_heads head vectors rotated by the angles whose cos and sin are given.
void rotate_row(float* row, int n_heads, int head_dim, int n_pairs, bool neox, const float* cos_t,
                const float* sin_t) {
  for (int h = 0; h < n_heads; ++h) {
    float* v = row + int64_t{h} * head_dim;
    for (int i = 0; i < n_pairs; ++i) {
      const int a = neox ? i : 2 * i;
      const int b = neox ? i + n_pairs : 2 * i + 1;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * cos_t[i] - x1 * sin_t[i];
      v[b] = x0 * sin_t[i] + x1 * cos_t[i];
    }
  }
}

}  // namespace

void rope_rows(float* x, int64_t n_rows, int n_heads, int head_dim, int n_rot, bool neox,
               int64_t pos0, const float* inv_freq, float attn_factor) {
  const int n_pairs = n_rot / 2;
  std::vector<float> cos_t(n_pairs), sin_t(n_pairs);
  for (int64_t r = 0; r < n_rows; ++r) {
    const double pos = static_cast<double>(pos0 + r);
    for (int i = 0; i < n_pairs; ++i) {
      const double theta = pos * inv_freq[i];
      cos_t[i] = static_cast<float>(std::cos(theta) * attn_factor);
      sin_t[i] = static_cast<float>(std::sin(theta) * attn_factor);
    }
    rotate_row(x + r * int64_t{n_heads} * head_dim, n_heads, head_dim, n_pairs, neox, cos_t.data(), sin_t.data());
  }
}

RopeTable make_rope_table(int64_t pos0, int64_t n, int n_rot, const float* inv_freq, float attn_factor) {
  RopeTable t;
  t.pos0 = pos0;
  t.n = n;
  t.n_pairs = n_rot / 2;
  t.cos.resize(static_cast<size_t>(n * t.n_pairs));
  t.sin.resize(t.cos.size());
  for (int64_t r = 0; r < n; ++r) {
    const double pos = static_cast<double>(pos0 + r);
    for (int i = 0; i < t.n_pairs; ++i) {
      const double theta = pos * inv_freq[i];
      t.cos[static_cast<size_t>(r * t.n_pairs + i)] = static_cast<float>(std::cos(theta) * attn_factor);
      t.sin[static_cast<size_t>(r * t.n_pairs + i)] = static_cast<float>(std::sin(theta) * attn_factor);
    }
  }
  return t;
}

void rope_rows_table(float* x, int64_t n_rows, int n_heads, int head_dim, bool neox, int64_t pos0,
                     const RopeTable& table) {
  BATON_CHECK(pos0 >= table.pos0 && pos0 + n_rows <= table.pos0 + table.n, "rope_rows_table: rows outside the table");
  const int n_pairs = table.n_pairs;
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* cos_t = table.cos.data() + (pos0 - table.pos0 + r) * n_pairs;
    const float* sin_t = table.sin.data() + (pos0 - table.pos0 + r) * n_pairs;
    rotate_row(x + r * int64_t{n_heads} * head_dim, n_heads, head_dim, n_pairs, neox, cos_t, sin_t);
  }
}

void silu_mul(float* gate, const float* up, int64_t n) { silu_mul_f32(gate, up, n); }

void gelu_mul(float* gate, const float* up, int64_t n) { gelu_mul_f32(gate, up, n); }

void scale_inplace(float* x, float factor, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void softmax_inplace(float* x, int64_t n) {
  float max_v = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max_v = x[i] > max_v ? x[i] : max_v;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_v);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace baton
