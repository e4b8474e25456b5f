#include "common/kv_codec/kv_kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "common/util/cpu_features.h"
#include "common/util/fp16.h"

namespace baton::kv_kernels_impl {
namespace {

float dot_f16_scalar(const float* q, const uint16_t* x, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += q[i] * fp16_to_fp32(x[i]);
  return sum;
}

void axpy_f16_scalar(float p, const uint16_t* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] += p * fp16_to_fp32(x[i]);
}

void f32_to_f16_scalar(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = fp32_to_fp16(x[i]);
}

void f16_to_f32_scalar(const uint16_t* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_fp32(x[i]);
}

}  // namespace

float dot_int8_scalar(const float* q, const int8_t* codes, const uint16_t* scales, int64_t n, int group) {
  float sum = 0.0f;
  for (int64_t g = 0; g * group < n; ++g) {
    const int64_t base = g * group;
    float acc = 0.0f;
    for (int i = 0; i < group; ++i) acc += q[base + i] * static_cast<float>(codes[base + i]);
    sum += acc * fp16_to_fp32(scales[g]);
  }
  return sum;
}

float dot_int4_scalar(const float* q, const uint8_t* codes, const uint16_t* scales, const uint16_t* mins,
                      int64_t n, int group) {
  float sum = 0.0f;
  for (int64_t g = 0; g * group < n; ++g) {
    const int64_t base = g * group;
    float acc = 0.0f, q_sum = 0.0f;
    for (int i = 0; i < group; ++i) {
      const int64_t e = base + i;
      const int code = (codes[e >> 1] >> ((e & 1) * 4)) & 15;
      acc += q[e] * static_cast<float>(code);
      q_sum += q[e];
    }
    sum += acc * fp16_to_fp32(scales[g]) + q_sum * fp16_to_fp32(mins[g]);
  }
  return sum;
}

void axpy_int8_scalar(float p, const int8_t* codes, const uint16_t* scales, float* out, int64_t n, int group) {
  for (int64_t g = 0; g * group < n; ++g) {
    const int64_t base = g * group;
    const float ps = p * fp16_to_fp32(scales[g]);
    for (int i = 0; i < group; ++i) out[base + i] += ps * static_cast<float>(codes[base + i]);
  }
}

void axpy_int4_scalar(float p, const uint8_t* codes, const uint16_t* scales, const uint16_t* mins, float* out,
                      int64_t n, int group) {
  for (int64_t g = 0; g * group < n; ++g) {
    const int64_t base = g * group;
    const float ps = p * fp16_to_fp32(scales[g]);
    const float pm = p * fp16_to_fp32(mins[g]);
    for (int i = 0; i < group; ++i) {
      const int64_t e = base + i;
      const int code = (codes[e >> 1] >> ((e & 1) * 4)) & 15;
      out[e] += ps * static_cast<float>(code) + pm;
    }
  }
}

void dequantize_int8_scalar(const int8_t* codes, const uint16_t* scales, int64_t n, int group, float* out) {
  for (int64_t g = 0; g * group < n; ++g) {
    const float s = fp16_to_fp32(scales[g]);
    for (int i = 0; i < group; ++i) out[g * group + i] = s * static_cast<float>(codes[g * group + i]);
  }
}

void dequantize_int4_scalar(const uint8_t* codes, const uint16_t* scales, const uint16_t* mins, int64_t n, int group,
                            float* out) {
  // Groups are even (KvCodecConfig::validate), so a byte never straddles two.
  for (int64_t g = 0; g * group < n; ++g) {
    const float s = fp16_to_fp32(scales[g]);
    const float m = fp16_to_fp32(mins[g]);
    const uint8_t* c = codes + g * group / 2;
    float* o = out + g * group;
    for (int i = 0; i < group / 2; ++i) {
      o[2 * i] = s * static_cast<float>(c[i] & 15) + m;
      o[2 * i + 1] = s * static_cast<float>(c[i] >> 4) + m;
    }
  }
}

void hadamard_rows_scalar(float* x, int64_t n_vectors, int n) {
  const float norm = 1.0f / std::sqrt(static_cast<float>(n));
  for (int64_t v = 0; v < n_vectors; ++v) {
    float* y = x + v * n;
    for (int len = 1; len < n; len <<= 1) {
      for (int i = 0; i < n; i += 2 * len) {
        for (int j = i; j < i + len; ++j) {
          const float a = y[j], b = y[j + len];
          y[j] = a + b;
          y[j + len] = a - b;
        }
      }
    }
    for (int i = 0; i < n; ++i) y[i] *= norm;
  }
}

namespace {

// Row j of a head, dequantized: [head_dim] floats.
void dequantize_head_row_scalar(const KvHeadRows& h, int64_t j, int head_dim, float* out) {
  const uint8_t* codes = h.codes + j * h.row_code_bytes;
  switch (h.bits) {
    case 16:
      f16_to_f32_scalar(reinterpret_cast<const uint16_t*>(codes), out, head_dim);
      return;
    case 8:
      dequantize_int8_scalar(reinterpret_cast<const int8_t*>(codes), h.scales + j * h.row_groups, head_dim, h.group,
                             out);
      return;
    default:
      dequantize_int4_scalar(codes, h.scales + j * h.row_groups, h.mins + j * h.row_groups, head_dim, h.group, out);
      return;
  }
}

}  // namespace

void attend_heads_scalar(const KvHeadRows& k, const KvHeadRows& v, const float* q, int n_q, int head_dim, float scale,
                         int64_t n_ctx, float* scratch, float* out) {
  float* scores = scratch;                       // [n_q, n_ctx]
  float* row = scratch + int64_t{n_q} * n_ctx;   // [head_dim]
  for (int64_t j = 0; j < n_ctx; ++j) {
    dequantize_head_row_scalar(k, j, head_dim, row);
    for (int i = 0; i < n_q; ++i) {
      const float* qi = q + int64_t{i} * head_dim;
      float dot = 0.0f;
      for (int d = 0; d < head_dim; ++d) dot += qi[d] * row[d];
      scores[i * n_ctx + j] = dot * scale;
    }
  }
  for (int i = 0; i < n_q; ++i) {
    float* s = scores + i * n_ctx;
    float max_score = -INFINITY;
    for (int64_t j = 0; j < n_ctx; ++j) max_score = std::max(max_score, s[j]);
    double sum = 0.0;
    for (int64_t j = 0; j < n_ctx; ++j) {
      s[j] = std::exp(s[j] - max_score);
      sum += s[j];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < n_ctx; ++j) s[j] *= inv;
  }
  for (int64_t e = 0; e < int64_t{n_q} * head_dim; ++e) out[e] = 0.0f;
  for (int64_t j = 0; j < n_ctx; ++j) {
    dequantize_head_row_scalar(v, j, head_dim, row);
    for (int i = 0; i < n_q; ++i) {
      const float p = scores[i * n_ctx + j];
      float* oi = out + int64_t{i} * head_dim;
      for (int d = 0; d < head_dim; ++d) oi[d] += p * row[d];
    }
  }
}

void dequantize_head_rows_scalar(const KvHeadRows& h, int64_t first_row, int64_t n_rows, int head_dim, float* out) {
  for (int64_t r = 0; r < n_rows; ++r) dequantize_head_row_scalar(h, first_row + r, head_dim, out + r * head_dim);
}

void attend_tile_scalar(const float* k, int64_t k_stride, const float* v, int64_t v_stride, const float* q, int n_q,
                        int head_dim, float scale, int lo, int hi, float* m, float* l, float* acc, float* scratch) {
  for (int i = 0; i < n_q; ++i) {
    const float* qi = q + int64_t{i} * head_dim;
    float* s = scratch + int64_t{i} * kAttentionTileRows;  // [kAttentionTileRows], rows [lo, hi) used
    float tile_max = -INFINITY;
    for (int r = lo; r < hi; ++r) {
      const float* kr = k + r * k_stride;
      // Eight partial sums in a fixed order: the compiler keeps them in one
      // vector, and the result does not depend on how it vectorizes.
      float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int d = 0;
      for (; d + 8 <= head_dim; d += 8) {
        for (int e = 0; e < 8; ++e) part[e] += qi[d + e] * kr[d + e];
      }
      float dot = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
      for (; d < head_dim; ++d) dot += qi[d] * kr[d];
      s[r] = dot * scale;
      tile_max = std::max(tile_max, s[r]);
    }
    float* ai = acc + int64_t{i} * head_dim;
    online_softmax_step(s, lo, hi, tile_max, m + i, l + i, ai, head_dim);
    for (int r = lo; r < hi; ++r) {
      const float* vr = v + r * v_stride;
      const float p = s[r];
      for (int d = 0; d < head_dim; ++d) ai[d] += p * vr[d];
    }
  }
}

void affine_rows_scalar(const float* a, int64_t lda, int64_t n, int k, const float* b, int m, const float* bias,
                        float* c, int64_t ldc) {
  for (int64_t t = 0; t < n; ++t) {
    float* ct = c + t * ldc;
    for (int j = 0; j < m; ++j) ct[j] = bias[j];
    for (int i = 0; i < k; ++i) {
      const float ai = a[t * lda + i];
      const float* bi = b + static_cast<int64_t>(i) * m;
      for (int j = 0; j < m; ++j) ct[j] += ai * bi[j];
    }
  }
}

void affine_u8_rows_scalar(const uint8_t* a, int64_t lda, int64_t n, int k, const int8_t* b, int m,
                           const float* scale, const float* bias, float* c, int64_t ldc) {
  for (int64_t t = 0; t < n; ++t) {
    const uint8_t* at = a + t * lda;
    for (int j = 0; j < m; ++j) {
      int32_t sum = 0;
      for (int i = 0; i < k; ++i) sum += int32_t{at[i]} * b[(int64_t{i >> 2} * m + j) * 4 + (i & 3)];
      c[t * ldc + j] = std::fma(scale[j], static_cast<float>(sum), bias[j]);
    }
  }
}

KvKernels kv_kernels_scalar() {
  return KvKernels{dot_f16_scalar,         dot_int8_scalar,     dot_int4_scalar,
                   axpy_f16_scalar,        axpy_int8_scalar,    axpy_int4_scalar,
                   dequantize_int8_scalar, dequantize_int4_scalar, hadamard_rows_scalar,
                   attend_heads_scalar,    dequantize_head_rows_scalar, attend_tile_scalar,
                   f32_to_f16_scalar,      f16_to_f32_scalar,   affine_rows_scalar,
                   affine_u8_rows_scalar,  attend_tile_q8_scalar, attend_tile_q8_positions_scalar,
                   nullptr,                /*q8_spreads_prefetch=*/false};
}

const KvKernels& kv_kernels() {
  static const KvKernels kernels = [] {
    switch (active_simd_level()) {
      case SimdLevel::kAvx512:
        return kv_kernels_avx512();
      case SimdLevel::kAvx2:
        return kv_kernels_avx2();
      case SimdLevel::kScalar:
        break;
    }
    return kv_kernels_scalar();
  }();
  return kernels;
}

namespace {
std::atomic<bool> g_q8_amx_allowed{true};
std::atomic<bool> g_q8_value_quads_allowed{true};
std::atomic<bool> g_q8_key_blocks_allowed{true};
std::atomic<int> g_attention_prefetch_nta{-1};  // -1: the vendor default
// BATON_INT4_IN_PLACE=0 starts with it off (README, Build options: the
// dequantizing path, for comparisons).
bool int4_in_place_env() {
  const char* env = std::getenv("BATON_INT4_IN_PLACE");
  return env == nullptr || std::string_view(env) != "0";
}
std::atomic<bool> g_q4_in_place_allowed{int4_in_place_env()};
}  // namespace

bool q4_in_place_allowed() { return g_q4_in_place_allowed.load(std::memory_order_relaxed); }

void set_q4_in_place_allowed(bool allowed) { g_q4_in_place_allowed.store(allowed, std::memory_order_relaxed); }

void q4_query_order(int8_t* codes, int64_t n) {
  for (int64_t i = 0; i + 8 <= n; i += 8) {
    int8_t x[8];
    std::memcpy(x, codes + i, sizeof x);
    for (int j = 0; j < 4; ++j) codes[i + j] = x[2 * j], codes[i + 4 + j] = x[2 * j + 1];
  }
}

bool q4_tile_supported(const KvHeadRows& k, const KvHeadRows& v, int head_dim) {
  // Keys INT4 or INT8 (int4-k8, as the INT8 kernels take them), values
  // INT4. Keys in key column blocks and values in nibble quads only where
  // the AVX-512 kernel takes the head, head_dim a multiple of 64 or 96 (a
  // last 32 dims unpacked on their own): it hands the others to the AVX2
  // kernel, which reads rows.
  const bool whole = head_dim % 64 == 0 || head_dim == 3 * kQ8Block;
  const bool keys = (k.bits == 4 ? k.mins != nullptr : k.bits == 8) && (!k.key_blocks || whole);
  return keys && v.bits == 4 && v.mins != nullptr && k.scales != nullptr && v.scales != nullptr &&
         (!v.value_quads || whole) &&
         head_dim % kQ8Block == 0 && head_dim <= kQ8MaxHeadDim && k.group > 0 && k.group % kQ8Block == 0 &&
         head_dim % k.group == 0 && v.group > 0 && v.group % kQ8Block == 0 && head_dim % v.group == 0;
}

bool q8_amx_active() { return g_q8_amx_allowed.load(std::memory_order_relaxed) && amx_int8_usable(); }

void set_q8_amx_allowed(bool allowed) { g_q8_amx_allowed.store(allowed, std::memory_order_relaxed); }

bool q8_value_quads_active() {
  return g_q8_value_quads_allowed.load(std::memory_order_relaxed) && cpu_features().avx512vbmi;
}

void set_q8_value_quads_allowed(bool allowed) { g_q8_value_quads_allowed.store(allowed, std::memory_order_relaxed); }

bool q8_key_blocks_active() {
  return g_q8_key_blocks_allowed.load(std::memory_order_relaxed) && kv_kernels().q8_reads_key_blocks;
}

void set_q8_key_blocks_allowed(bool allowed) { g_q8_key_blocks_allowed.store(allowed, std::memory_order_relaxed); }

void set_attention_prefetch_nta(int nta) { g_attention_prefetch_nta.store(nta, std::memory_order_relaxed); }

bool attention_prefetch_nta() {
  const int nta = g_attention_prefetch_nta.load(std::memory_order_relaxed);
  return switch_or_amd_default(nta);
}

namespace {

// Rows of row_bytes bytes (row i at rows + i * row_stride) into key column
// blocks of those bytes (key_block_byte), each byte + offset (mod 256), and
// back: INT8 keys (offset 128: the codes as u8) and INT4 keys' packed bytes
// (offset 0).
void key_bytes_to_blocks(const uint8_t* rows, int64_t row_stride, int64_t first_row, int64_t n, int row_bytes,
                         uint8_t offset, uint8_t* blocks) {
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* row = rows + i * row_stride;
    for (int j = 0; j < row_bytes; ++j) {
      blocks[key_block_byte(first_row + i, j, row_bytes)] = static_cast<uint8_t>(row[j] + offset);
    }
  }
}

void key_bytes_from_blocks(const uint8_t* blocks, int64_t first_row, int64_t n, int row_bytes, uint8_t offset,
                           uint8_t* rows, int64_t row_stride) {
  for (int64_t i = 0; i < n; ++i) {
    uint8_t* row = rows + i * row_stride;
    for (int j = 0; j < row_bytes; ++j) {
      row[j] = static_cast<uint8_t>(blocks[key_block_byte(first_row + i, j, row_bytes)] - offset);
    }
  }
}

// INT4 values in nibble quads (kv_kernels.h, blocked_from_rows): the byte
// holding dim d of row r of the head, and the nibble (shift 0 or 4).
int64_t q4_value_quad_byte(int64_t r, int d, int head_dim) {
  return r / kValueQuadRows * (2 * int64_t{head_dim}) + (d / 32) * 64 + (d % 16) * 4 + r % kValueQuadRows;
}
int q4_value_quad_shift(int d) { return d % 32 >= 16 ? 4 : 0; }

void q4_value_quads_from_rows(const uint8_t* rows, int64_t row_stride, int64_t first_row, int64_t n, int head_dim,
                              uint8_t* quads) {
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* row = rows + i * row_stride;
    for (int d = 0; d < head_dim; ++d) {
      uint8_t& byte = quads[q4_value_quad_byte(first_row + i, d, head_dim)];
      const int shift = q4_value_quad_shift(d);
      const int code = (row[d / 2] >> (4 * (d % 2))) & 15;
      byte = static_cast<uint8_t>((byte & ~(15 << shift)) | (code << shift));
    }
  }
}

void q4_value_rows_from_quads(const uint8_t* quads, int64_t first_row, int64_t n, int head_dim, uint8_t* rows,
                              int64_t row_stride) {
  for (int64_t i = 0; i < n; ++i) {
    uint8_t* row = rows + i * row_stride;
    for (int d = 0; d < head_dim; d += 2) {
      const int lo = (quads[q4_value_quad_byte(first_row + i, d, head_dim)] >> q4_value_quad_shift(d)) & 15;
      const int hi = (quads[q4_value_quad_byte(first_row + i, d + 1, head_dim)] >> q4_value_quad_shift(d + 1)) & 15;
      row[d / 2] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

}  // namespace

void key_blocks_from_rows(const int8_t* rows, int64_t row_stride, int64_t first_row, int64_t n, int head_dim,
                          uint8_t* blocks) {
  key_bytes_to_blocks(reinterpret_cast<const uint8_t*>(rows), row_stride, first_row, n, head_dim, 128, blocks);
}

void key_rows_from_blocks(const uint8_t* blocks, int64_t first_row, int64_t n, int head_dim, int8_t* rows,
                          int64_t row_stride) {
  key_bytes_from_blocks(blocks, first_row, n, head_dim, 128, reinterpret_cast<uint8_t*>(rows), row_stride);
}

void value_quads_from_rows(const int8_t* rows, int64_t row_stride, int64_t first_row, int64_t n, int head_dim,
                           uint8_t* quads) {
  for (int64_t i = 0; i < n; ++i) {
    const int8_t* row = rows + i * row_stride;
    for (int d = 0; d < head_dim; ++d) {
      quads[value_quad_byte(first_row + i, d, head_dim)] = static_cast<uint8_t>(row[d]);
    }
  }
}

void value_rows_from_quads(const uint8_t* quads, int64_t first_row, int64_t n, int head_dim, int8_t* rows,
                           int64_t row_stride) {
  for (int64_t i = 0; i < n; ++i) {
    int8_t* row = rows + i * row_stride;
    for (int d = 0; d < head_dim; ++d) row[d] = static_cast<int8_t>(quads[value_quad_byte(first_row + i, d, head_dim)]);
  }
}

void blocked_from_rows(int bits, bool keys, const uint8_t* rows, int64_t row_stride, int64_t first_row, int64_t n,
                       int head_dim, uint8_t* blocked) {
  if (bits == 4) {
    return keys ? key_bytes_to_blocks(rows, row_stride, first_row, n, head_dim / 2, 0, blocked)
                : q4_value_quads_from_rows(rows, row_stride, first_row, n, head_dim, blocked);
  }
  return keys ? key_bytes_to_blocks(rows, row_stride, first_row, n, head_dim, 128, blocked)
              : value_quads_from_rows(reinterpret_cast<const int8_t*>(rows), row_stride, first_row, n, head_dim,
                                      blocked);
}

void rows_from_blocked(int bits, bool keys, const uint8_t* blocked, int64_t first_row, int64_t n, int head_dim,
                       uint8_t* rows, int64_t row_stride) {
  if (bits == 4) {
    return keys ? key_bytes_from_blocks(blocked, first_row, n, head_dim / 2, 0, rows, row_stride)
                : q4_value_rows_from_quads(blocked, first_row, n, head_dim, rows, row_stride);
  }
  return keys ? key_bytes_from_blocks(blocked, first_row, n, head_dim, 128, rows, row_stride)
              : value_rows_from_quads(blocked, first_row, n, head_dim, reinterpret_cast<int8_t*>(rows), row_stride);
}

}  // namespace baton::kv_kernels_impl
