// Internal: per-ISA kernels of the KV codec and the quantized store
// (kv_kernels.cc holds the scalar set and the dispatch; *_avx2.cc the AVX2
// set). Same rules as common/cpu/matmul_kernels.h: ISA files keep helpers in
// an anonymous namespace and use no inline code from shared headers; call an
// ISA's functions only through kv_kernels().
//
// Shapes: q, out: [n] f32; codes as in kv_quant.h (INT8 [n] int8, INT4 [n/2]
// packed low nibble first); scales, mins: [n / group] f16. n % group == 0.
#pragma once

#include <cstdint>

namespace baton::kv_kernels_impl {

// One KV head's rows in a quantized store plane (QuantizedKvCache layout):
// row j's codes at codes + j * row_code_bytes, its group scales (and INT4
// mins) at scales + j * row_groups (mins + j * row_groups).
struct KvHeadRows {
  int bits = 16;                     // 32 (F32 rows, F32KvCache), 16 (F16), 8 (INT8) or 4 (INT4)
  const uint8_t* codes = nullptr;    // row 0 of this head
  int64_t row_code_bytes = 0;        // stride between rows, bytes
  const uint16_t* scales = nullptr;  // f16, INT8 / INT4; row 0 of this head
  const uint16_t* mins = nullptr;    // f16, INT4 only
  int64_t row_groups = 0;            // stride between rows, scale entries
  int group = 0;                     // elements per scale group (INT8 / INT4)
};

// Scratch floats attend_heads needs.
inline int64_t attend_heads_scratch_floats(int n_q, int head_dim, int64_t n_ctx) {
  return int64_t{n_q} * n_ctx + 2 * int64_t{head_dim};
}

// Positions of one attention tile (tiled_attention.h): tiles start at
// multiples of it in absolute positions, so a query's arithmetic never
// depends on the other queries of a call.
inline constexpr int kAttentionTileRows = 64;

struct KvKernels {
  // sum_i q[i] * x[i] for the dequantized x.
  float (*dot_f16)(const float* q, const uint16_t* x, int64_t n);
  float (*dot_int8)(const float* q, const int8_t* codes, const uint16_t* scales, int64_t n, int group);
  float (*dot_int4)(const float* q, const uint8_t* codes, const uint16_t* scales, const uint16_t* mins,
                    int64_t n, int group);
  // out[i] += p * x[i] for the dequantized x.
  void (*axpy_f16)(float p, const uint16_t* x, float* out, int64_t n);
  void (*axpy_int8)(float p, const int8_t* codes, const uint16_t* scales, float* out, int64_t n, int group);
  void (*axpy_int4)(float p, const uint8_t* codes, const uint16_t* scales, const uint16_t* mins, float* out,
                    int64_t n, int group);
  // out [n] = dequantized codes (per-token groups, as kv_quant.h).
  void (*dequantize_int8)(const int8_t* codes, const uint16_t* scales, int64_t n, int group, float* out);
  void (*dequantize_int4)(const uint8_t* codes, const uint16_t* scales, const uint16_t* mins, int64_t n, int group,
                          float* out);
  // In-place normalized Walsh-Hadamard transform of n_vectors vectors of n
  // floats (n a power of two).
  void (*hadamard_rows)(float* x, int64_t n_vectors, int n);
  // (The per-query kernel that QuantizedKvCache::attend ran before the tiled
  // attention; kept as the baseline of tests/bench/tiled_attention_bench.cc.)
  // Attention of n_q query heads that share one KV head (GQA) over rows
  // [0, n_ctx): out[i] = sum_j softmax_j(scale * q[i] . K_j) * V_j. Each K
  // and V row is dequantized once for all n_q heads, in one call per head
  // group (no per-row calls). q, out: [n_q, head_dim] f32 (consecutive heads);
  // scratch: attend_heads_scratch_floats() floats. head_dim % group == 0.
  void (*attend_heads)(const KvHeadRows& k, const KvHeadRows& v, const float* q, int n_q, int head_dim,
                       float scale, int64_t n_ctx, float* scratch, float* out);
  // Rows [first_row, first_row + n_rows) of one head (bits 16, 8 or 4),
  // dequantized: out [n_rows, head_dim]. Each row's values are those of
  // dequantize_int8 / dequantize_int4 / f16_to_f32 on it.
  void (*dequantize_head_rows)(const KvHeadRows& h, int64_t first_row, int64_t n_rows, int head_dim, float* out);
  // One tile step of online-softmax attention for n_q query heads that share
  // a KV head and one query position (GQA heads of one query): with rows
  // [lo, hi) of a tile (0 <= lo < hi <= kAttentionTileRows), s_r = scale *
  // q[i] . k_r, and per head i
  //   m' = max(m[i], max_r s_r); alpha = exp(m[i] - m')
  //   l[i] = alpha * l[i] + sum_r exp(s_r - m'); acc[i] = alpha * acc[i] + sum_r exp(s_r - m') v_r
  // (m = -inf, l = 0, acc = 0 is the empty state). Row r of the tile at
  // k + r * k_stride (v + r * v_stride), head_dim floats; rows outside
  // [lo, hi) are never read. A head's result depends only on its q, its
  // state, lo, hi and those rows (rows are grouped by their tile index),
  // never on n_q. q, acc: [n_q, head_dim]; m, l: [n_q]; scratch:
  // n_q * kAttentionTileRows floats.
  void (*attend_tile)(const float* k, int64_t k_stride, const float* v, int64_t v_stride, const float* q, int n_q,
                      int head_dim, float scale, int lo, int hi, float* m, float* l, float* acc, float* scratch);
  // Conversions, n elements.
  void (*f32_to_f16)(const float* x, uint16_t* out, int64_t n);
  void (*f16_to_f32)(const uint16_t* x, float* out, int64_t n);
  // c[t, j] = bias[j] + sum_i a[t, i] * b[i, j] for t < n, j < m: rows of a
  // at a + t * lda (k floats), b [k, m] row-major, rows of c at c + t * ldc.
  // The transform codec's projection and reconstruction (kv_transform_codec.cc).
  void (*affine_rows)(const float* a, int64_t lda, int64_t n, int k, const float* b, int m, const float* bias,
                      float* c, int64_t ldc);
  // The transform codec's reconstruction in integers:
  //   c[t, j] = fma(scale[j], float(sum_i a[t, i] * b[i, j]), bias[j])
  // for t < n, j < m, i < k: a rows of bytes at a + t * lda (the symbols), b
  // INT8 packed four components per column, [ceil(k / 4), m, 4] (zeros past
  // k: KvTransformHeadPlan::reconstruct_i8). Reads up to 3 bytes past each row's k (the caller
  // pads the last row). The integer sum is exact (k * 255 * 127 < 2^24, so
  // also as a float), so every set gives the same bits.
  void (*affine_u8_rows)(const uint8_t* a, int64_t lda, int64_t n, int k, const int8_t* b, int m,
                         const float* scale, const float* bias, float* c, int64_t ldc);
};

// The most components affine_u8_rows sums (its sums stay below 2^24).
inline constexpr int kAffineU8MaxK = 512;

// The set for active_simd_level(), chosen once.
const KvKernels& kv_kernels();

// Per-ISA sets. AVX2 kernels call the scalar ones below for groups that are
// not a multiple of 8 (Hadamard: n < 8), so every set handles every valid input.
KvKernels kv_kernels_scalar();
KvKernels kv_kernels_avx2();
// The AVX2 set with affine_rows at 16 lanes (kv_kernels_avx512.cc).
KvKernels kv_kernels_avx512();

float dot_int8_scalar(const float* q, const int8_t* codes, const uint16_t* scales, int64_t n, int group);
float dot_int4_scalar(const float* q, const uint8_t* codes, const uint16_t* scales, const uint16_t* mins,
                      int64_t n, int group);
void axpy_int8_scalar(float p, const int8_t* codes, const uint16_t* scales, float* out, int64_t n, int group);
void axpy_int4_scalar(float p, const uint8_t* codes, const uint16_t* scales, const uint16_t* mins, float* out,
                      int64_t n, int group);
void dequantize_int8_scalar(const int8_t* codes, const uint16_t* scales, int64_t n, int group, float* out);
void dequantize_int4_scalar(const uint8_t* codes, const uint16_t* scales, const uint16_t* mins, int64_t n, int group,
                            float* out);
void hadamard_rows_scalar(float* x, int64_t n_vectors, int n);
void affine_rows_scalar(const float* a, int64_t lda, int64_t n, int k, const float* b, int m, const float* bias,
                        float* c, int64_t ldc);
void affine_u8_rows_scalar(const uint8_t* a, int64_t lda, int64_t n, int k, const int8_t* b, int m,
                           const float* scale, const float* bias, float* c, int64_t ldc);
void dequantize_head_rows_scalar(const KvHeadRows& h, int64_t first_row, int64_t n_rows, int head_dim, float* out);
void attend_tile_scalar(const float* k, int64_t k_stride, const float* v, int64_t v_stride, const float* q, int n_q,
                        int head_dim, float scale, int lo, int hi, float* m, float* l, float* acc, float* scratch);
void attend_heads_scalar(const KvHeadRows& k, const KvHeadRows& v, const float* q, int n_q, int head_dim, float scale,
                         int64_t n_ctx, float* scratch, float* out);

}  // namespace baton::kv_kernels_impl
