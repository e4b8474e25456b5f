// AVX2 + FMA + F16C kernels of the quantized KV store and codec. Entered only
// through kv_kernels() when best_simd_level() >= kAvx2.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/cpu/simd_avx2.h"
#include "common/kv_codec/kv_kernels.h"

namespace baton::kv_kernels_impl {
namespace {

using simd_avx2::exp256;
using simd_avx2::hmax256;
using simd_avx2::hsum256;
using simd_avx2::rows_mask8;

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// 8 int8 codes -> 8 floats.
inline __m256 load_int8x8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// 8 int4 codes (4 bytes, low nibble first) -> 8 floats in element order.
inline __m256 load_int4x8(const uint8_t* p) {
  int32_t word;
  __builtin_memcpy(&word, p, 4);
  const __m128i bytes = _mm_cvtsi32_si128(word);
  const __m128i mask = _mm_set1_epi8(15);
  const __m128i lo = _mm_and_si128(bytes, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)));
}

// 16 int4 codes (8 bytes) -> two vectors of 8 floats, element order.
inline void load_int4x16(const uint8_t* p, __m256* first, __m256* second) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i mask = _mm_set1_epi8(15);
  const __m128i lo = _mm_and_si128(bytes, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
  const __m128i inter = _mm_unpacklo_epi8(lo, hi);  // 16 codes in order
  *first = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(inter));
  *second = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(inter, 8)));
}

float dot_f16_avx2(const float* q, const uint16_t* x, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 x0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    const __m256 x1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i + 8)));
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), x0, acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), x1, acc1);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 x0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), x0, acc0);
  }
  float sum = hsum256(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += q[i] * half_to_float(x[i]);
  return sum;
}

void axpy_f16_avx2(float p, const uint16_t* x, float* out, int64_t n) {
  const __m256 vp = _mm256_set1_ps(p);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    _mm256_storeu_ps(out + i, _mm256_fmadd_ps(vp, x0, _mm256_loadu_ps(out + i)));
  }
  for (; i < n; ++i) out[i] += p * half_to_float(x[i]);
}

float dot_int8_avx2(const float* q, const int8_t* codes, const uint16_t* scales, int64_t n, int group) {
  if (group % 8 != 0) return dot_int8_scalar(q, codes, scales, n, group);
  __m256 total = _mm256_setzero_ps();
  for (int64_t g = 0, base = 0; base < n; ++g, base += group) {
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < group; i += 8) {
      acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + base + i), load_int8x8(codes + base + i), acc);
    }
    total = _mm256_fmadd_ps(acc, _mm256_set1_ps(half_to_float(scales[g])), total);
  }
  return hsum256(total);
}

float dot_int4_avx2(const float* q, const uint8_t* codes, const uint16_t* scales, const uint16_t* mins,
                    int64_t n, int group) {
  if (group % 8 != 0) return dot_int4_scalar(q, codes, scales, mins, n, group);
  __m256 total = _mm256_setzero_ps();
  for (int64_t g = 0, base = 0; base < n; ++g, base += group) {
    __m256 acc = _mm256_setzero_ps(), q_sum = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= group; i += 16) {
      __m256 c0, c1;
      load_int4x16(codes + (base + i) / 2, &c0, &c1);
      const __m256 q0 = _mm256_loadu_ps(q + base + i), q1 = _mm256_loadu_ps(q + base + i + 8);
      acc = _mm256_fmadd_ps(q0, c0, acc);
      acc = _mm256_fmadd_ps(q1, c1, acc);
      q_sum = _mm256_add_ps(q_sum, _mm256_add_ps(q0, q1));
    }
    for (; i < group; i += 8) {
      const __m256 q0 = _mm256_loadu_ps(q + base + i);
      acc = _mm256_fmadd_ps(q0, load_int4x8(codes + (base + i) / 2), acc);
      q_sum = _mm256_add_ps(q_sum, q0);
    }
    total = _mm256_fmadd_ps(acc, _mm256_set1_ps(half_to_float(scales[g])), total);
    total = _mm256_fmadd_ps(q_sum, _mm256_set1_ps(half_to_float(mins[g])), total);
  }
  return hsum256(total);
}

void axpy_int8_avx2(float p, const int8_t* codes, const uint16_t* scales, float* out, int64_t n, int group) {
  if (group % 8 != 0) return axpy_int8_scalar(p, codes, scales, out, n, group);
  for (int64_t g = 0, base = 0; base < n; ++g, base += group) {
    const __m256 ps = _mm256_set1_ps(p * half_to_float(scales[g]));
    for (int i = 0; i < group; i += 8) {
      float* o = out + base + i;
      _mm256_storeu_ps(o, _mm256_fmadd_ps(ps, load_int8x8(codes + base + i), _mm256_loadu_ps(o)));
    }
  }
}

void axpy_int4_avx2(float p, const uint8_t* codes, const uint16_t* scales, const uint16_t* mins, float* out,
                    int64_t n, int group) {
  if (group % 8 != 0) return axpy_int4_scalar(p, codes, scales, mins, out, n, group);
  for (int64_t g = 0, base = 0; base < n; ++g, base += group) {
    const __m256 ps = _mm256_set1_ps(p * half_to_float(scales[g]));
    const __m256 pm = _mm256_set1_ps(p * half_to_float(mins[g]));
    int i = 0;
    for (; i + 16 <= group; i += 16) {
      __m256 c0, c1;
      load_int4x16(codes + (base + i) / 2, &c0, &c1);
      float* o = out + base + i;
      _mm256_storeu_ps(o, _mm256_add_ps(_mm256_fmadd_ps(ps, c0, pm), _mm256_loadu_ps(o)));
      _mm256_storeu_ps(o + 8, _mm256_add_ps(_mm256_fmadd_ps(ps, c1, pm), _mm256_loadu_ps(o + 8)));
    }
    for (; i < group; i += 8) {
      float* o = out + base + i;
      const __m256 c0 = load_int4x8(codes + (base + i) / 2);
      _mm256_storeu_ps(o, _mm256_add_ps(_mm256_fmadd_ps(ps, c0, pm), _mm256_loadu_ps(o)));
    }
  }
}

void f32_to_f16_avx2(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) out[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

void f16_to_f32_avx2(const uint16_t* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  }
  for (; i < n; ++i) out[i] = half_to_float(x[i]);
}

void dequantize_int8_avx2(const int8_t* codes, const uint16_t* scales, int64_t n, int group, float* out) {
  if (group % 8 != 0) return dequantize_int8_scalar(codes, scales, n, group, out);
  for (int64_t g = 0, base = 0; base < n; ++g, base += group) {
    const __m256 s = _mm256_set1_ps(half_to_float(scales[g]));
    for (int i = 0; i < group; i += 8) _mm256_storeu_ps(out + base + i, _mm256_mul_ps(s, load_int8x8(codes + base + i)));
  }
}

void dequantize_int4_avx2(const uint8_t* codes, const uint16_t* scales, const uint16_t* mins, int64_t n, int group,
                          float* out) {
  if (group % 8 != 0) return dequantize_int4_scalar(codes, scales, mins, n, group, out);
  for (int64_t g = 0, base = 0; base < n; ++g, base += group) {
    const __m256 s = _mm256_set1_ps(half_to_float(scales[g]));
    const __m256 m = _mm256_set1_ps(half_to_float(mins[g]));
    int i = 0;
    for (; i + 16 <= group; i += 16) {
      __m256 c0, c1;
      load_int4x16(codes + (base + i) / 2, &c0, &c1);
      _mm256_storeu_ps(out + base + i, _mm256_fmadd_ps(s, c0, m));
      _mm256_storeu_ps(out + base + i + 8, _mm256_fmadd_ps(s, c1, m));
    }
    for (; i < group; i += 8) {
      _mm256_storeu_ps(out + base + i, _mm256_fmadd_ps(s, load_int4x8(codes + (base + i) / 2), m));
    }
  }
}

// Butterflies of distance 1, 2 and 4 inside one vector of 8.
inline __m256 hadamard8(__m256 v) {
  __m256 swapped = _mm256_permute_ps(v, 0xB1);  // (1,0,3,2)
  v = _mm256_blend_ps(_mm256_add_ps(v, swapped), _mm256_sub_ps(swapped, v), 0xAA);
  swapped = _mm256_permute_ps(v, 0x4E);  // (2,3,0,1)
  v = _mm256_blend_ps(_mm256_add_ps(v, swapped), _mm256_sub_ps(swapped, v), 0xCC);
  swapped = _mm256_permute2f128_ps(v, v, 1);
  return _mm256_blend_ps(_mm256_add_ps(v, swapped), _mm256_sub_ps(swapped, v), 0xF0);
}

void hadamard_rows_avx2(float* x, int64_t n_vectors, int n) {
  if (n < 8) return hadamard_rows_scalar(x, n_vectors, n);
  const __m256 norm = _mm256_set1_ps(1.0f / __builtin_sqrtf(static_cast<float>(n)));
  for (int64_t v = 0; v < n_vectors; ++v) {
    float* y = x + v * n;
    for (int i = 0; i < n; i += 8) _mm256_storeu_ps(y + i, hadamard8(_mm256_loadu_ps(y + i)));
    for (int len = 8; len < n; len <<= 1) {
      for (int i = 0; i < n; i += 2 * len) {
        for (int j = i; j < i + len; j += 8) {
          const __m256 a = _mm256_loadu_ps(y + j), b = _mm256_loadu_ps(y + j + len);
          _mm256_storeu_ps(y + j, _mm256_add_ps(a, b));
          _mm256_storeu_ps(y + j + len, _mm256_sub_ps(a, b));
        }
      }
    }
    for (int i = 0; i < n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(norm, _mm256_loadu_ps(y + i)));
  }
}

// In-place softmax of n floats.
void softmax_avx2(float* s, int64_t n) {
  __m256 max8 = _mm256_set1_ps(-__builtin_inff());
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) max8 = _mm256_max_ps(max8, _mm256_loadu_ps(s + j));
  float max_score = hmax256(max8);
  for (; j < n; ++j) max_score = s[j] > max_score ? s[j] : max_score;
  const __m256 vmax = _mm256_set1_ps(max_score);
  __m256 sum8 = _mm256_setzero_ps();
  j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), vmax));
    _mm256_storeu_ps(s + j, e);
    sum8 = _mm256_add_ps(sum8, e);
  }
  float sum = hsum256(sum8);
  for (; j < n; ++j) {
    s[j] = __builtin_expf(s[j] - max_score);
    sum += s[j];
  }
  const __m256 inv = _mm256_set1_ps(1.0f / sum);
  j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(s + j, _mm256_mul_ps(inv, _mm256_loadu_ps(s + j)));
  for (; j < n; ++j) s[j] *= 1.0f / sum;
}

// Sums of each of 8 vectors, as one vector: [sum(a[0]), ..., sum(a[7])].
inline __m256 hsum8x8(const __m256 (&a)[8]) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Elements [d, d + 16) of row j of a head, dequantized (group % 8 == 0, d % 8 == 0).
inline void load_head_row16(const KvHeadRows& h, int64_t j, int d, __m256* first, __m256* second) {
  const uint8_t* codes = h.codes + j * h.row_code_bytes;
  if (h.bits == 16) {
    const uint16_t* x = reinterpret_cast<const uint16_t*>(codes) + d;
    *first = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
    *second = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + 8)));
    return;
  }
  const uint16_t* scales = h.scales + j * h.row_groups;
  const __m256 s0 = _mm256_set1_ps(half_to_float(scales[d / h.group]));
  const __m256 s1 = _mm256_set1_ps(half_to_float(scales[(d + 8) / h.group]));
  if (h.bits == 8) {
    const int8_t* c = reinterpret_cast<const int8_t*>(codes) + d;
    *first = _mm256_mul_ps(s0, load_int8x8(c));
    *second = _mm256_mul_ps(s1, load_int8x8(c + 8));
    return;
  }
  const uint16_t* mins = h.mins + j * h.row_groups;
  __m256 c0, c1;
  load_int4x16(codes + d / 2, &c0, &c1);
  *first = _mm256_fmadd_ps(s0, c0, _mm256_set1_ps(half_to_float(mins[d / h.group])));
  *second = _mm256_fmadd_ps(s1, c1, _mm256_set1_ps(half_to_float(mins[(d + 8) / h.group])));
}

// out[i, d0..d0+16) = sum_j p[i, j] * V_j[d0..d0+16) for NQ query heads,
// accumulated in registers.
template <int NQ>
void accumulate_values16(const KvHeadRows& v, const float* p, int64_t n_ctx, int d0, int head_dim, float* out) {
  __m256 acc[NQ][2];
  for (int i = 0; i < NQ; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t j = 0; j < n_ctx; ++j) {
    __m256 v0, v1;
    load_head_row16(v, j, d0, &v0, &v1);
    for (int i = 0; i < NQ; ++i) {
      const __m256 pij = _mm256_broadcast_ss(p + i * n_ctx + j);
      acc[i][0] = _mm256_fmadd_ps(pij, v0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(pij, v1, acc[i][1]);
    }
  }
  for (int i = 0; i < NQ; ++i) {
    _mm256_storeu_ps(out + int64_t{i} * head_dim + d0, acc[i][0]);
    _mm256_storeu_ps(out + int64_t{i} * head_dim + d0 + 8, acc[i][1]);
  }
}

void attend_heads_avx2(const KvHeadRows& k, const KvHeadRows& v, const float* q, int n_q, int head_dim, float scale,
                       int64_t n_ctx, float* scratch, float* out) {
  const bool k_ok = k.bits == 16 || k.group % 8 == 0, v_ok = v.bits == 16 || v.group % 8 == 0;
  if (head_dim % 16 != 0 || !k_ok || !v_ok) {
    return attend_heads_scalar(k, v, q, n_q, head_dim, scale, n_ctx, scratch, out);
  }
  float* scores = scratch;                      // [n_q, n_ctx]
  float* rows = scratch + int64_t{n_q} * n_ctx;  // [2 * head_dim]: spare, the kernel keeps rows in registers
  (void)rows;
  // Scores, 8 K rows at a time: each row dequantized once for all heads;
  // one transpose-add gives the 8 dot products of a head.
  alignas(32) float block[8 * 128];  // 8 dequantized rows of up to 128 elements
  const __m256 vscale = _mm256_set1_ps(scale);
  int64_t j0 = 0;
  if (head_dim <= 128) {
    for (; j0 + 8 <= n_ctx; j0 += 8) {
      for (int r = 0; r < 8; ++r) {
        for (int d = 0; d < head_dim; d += 16) {
          __m256 a, b;
          load_head_row16(k, j0 + r, d, &a, &b);
          _mm256_store_ps(block + r * head_dim + d, a);
          _mm256_store_ps(block + r * head_dim + d + 8, b);
        }
      }
      for (int i = 0; i < n_q; ++i) {
        const float* qi = q + int64_t{i} * head_dim;
        __m256 acc[8];
        for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
        for (int d = 0; d < head_dim; d += 8) {
          const __m256 qd = _mm256_loadu_ps(qi + d);
          for (int r = 0; r < 8; ++r) acc[r] = _mm256_fmadd_ps(qd, _mm256_load_ps(block + r * head_dim + d), acc[r]);
        }
        _mm256_storeu_ps(scores + i * n_ctx + j0, _mm256_mul_ps(hsum8x8(acc), vscale));
      }
    }
  }
  for (int64_t j = j0; j < n_ctx; ++j) {  // the last < 8 rows (or every row when head_dim > 128)
    for (int i = 0; i < n_q; ++i) scores[i * n_ctx + j] = 0.0f;
    for (int d = 0; d < head_dim; d += 16) {
      __m256 a, b;
      load_head_row16(k, j, d, &a, &b);
      for (int i = 0; i < n_q; ++i) {
        const float* qi = q + int64_t{i} * head_dim + d;
        const __m256 prod = _mm256_fmadd_ps(_mm256_loadu_ps(qi), a, _mm256_mul_ps(_mm256_loadu_ps(qi + 8), b));
        scores[i * n_ctx + j] += hsum256(prod);
      }
    }
    for (int i = 0; i < n_q; ++i) scores[i * n_ctx + j] *= scale;
  }
  for (int i = 0; i < n_q; ++i) softmax_avx2(scores + i * n_ctx, n_ctx);
  // Output, 16 dimensions and up to 4 heads at a time, in registers.
  for (int i0 = 0; i0 < n_q; i0 += 4) {
    const float* p = scores + int64_t{i0} * n_ctx;
    float* o = out + int64_t{i0} * head_dim;
    for (int d0 = 0; d0 < head_dim; d0 += 16) {
      switch (n_q - i0) {
        case 1: accumulate_values16<1>(v, p, n_ctx, d0, head_dim, o); break;
        case 2: accumulate_values16<2>(v, p, n_ctx, d0, head_dim, o); break;
        case 3: accumulate_values16<3>(v, p, n_ctx, d0, head_dim, o); break;
        default: accumulate_values16<4>(v, p, n_ctx, d0, head_dim, o); break;
      }
    }
  }
}

// Scores of tile rows [g0 + r_lo, g0 + r_hi) of one head, lane r = q . k_{g0+r}
// (lanes outside: 0): row r's dot is the chain of its 8-float chunk
// products in chunk order, then hsum8x8's tree, whatever rows are computed
// with it. head_dim % 8 == 0.
inline __m256 group8_dots(const float* k, int64_t k_stride, const float* q, int head_dim, int g0, int r_lo, int r_hi) {
  __m256 acc[8];
  const float* kg = k + g0 * k_stride;
#pragma GCC unroll 8
  for (int r = 0; r < 8; ++r) {
    acc[r] = _mm256_setzero_ps();
    if (r < r_lo || r >= r_hi) continue;
    const float* kr = kg + r * k_stride;
    for (int d = 0; d < head_dim; d += 8) {
      acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(kr + d), acc[r]);
    }
  }
  return hsum8x8(acc);
}

// acc[i, d0 .. d0 + 8 NV) += sum_r p[i, r] v_r[d0 ..] for R heads, rows [lo, hi).
template <int R, int NV>
void accumulate_tile_values8(const float* v, int64_t v_stride, const float* p, int lo, int hi, float* acc,
                             int head_dim, int d0) {
  __m256 a[R][NV];
  for (int i = 0; i < R; ++i) {
    for (int c = 0; c < NV; ++c) a[i][c] = _mm256_loadu_ps(acc + i * head_dim + d0 + 8 * c);
  }
  for (int r = lo; r < hi; ++r) {
    const float* vr = v + r * v_stride + d0;
    for (int i = 0; i < R; ++i) {
      const __m256 pr = _mm256_broadcast_ss(p + i * kAttentionTileRows + r);
      for (int c = 0; c < NV; ++c) a[i][c] = _mm256_fmadd_ps(pr, _mm256_loadu_ps(vr + 8 * c), a[i][c]);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int c = 0; c < NV; ++c) _mm256_storeu_ps(acc + i * head_dim + d0 + 8 * c, a[i][c]);
  }
}

template <int R>
void accumulate_values8(const float* v, int64_t v_stride, const float* p, int lo, int hi, float* acc, int head_dim) {
  for (int d0 = 0; d0 < head_dim; d0 += 32) {
    switch (std::min(head_dim - d0, 32) / 8) {
      case 1: accumulate_tile_values8<R, 1>(v, v_stride, p, lo, hi, acc, head_dim, d0); break;
      case 2: accumulate_tile_values8<R, 2>(v, v_stride, p, lo, hi, acc, head_dim, d0); break;
      case 3: accumulate_tile_values8<R, 3>(v, v_stride, p, lo, hi, acc, head_dim, d0); break;
      default: accumulate_tile_values8<R, 4>(v, v_stride, p, lo, hi, acc, head_dim, d0); break;
    }
  }
}

void attend_tile_avx2(const float* k, int64_t k_stride, const float* v, int64_t v_stride, const float* q, int n_q,
                      int head_dim, float scale, int lo, int hi, float* m, float* l, float* acc, float* scratch) {
  if (head_dim % 8 != 0) {
    return attend_tile_scalar(k, k_stride, v, v_stride, q, n_q, head_dim, scale, lo, hi, m, l, acc, scratch);
  }
  const __m256 vscale = _mm256_set1_ps(scale);
  const int g_first = lo / 8 * 8;
  for (int i = 0; i < n_q; ++i) {
    const float* qi = q + int64_t{i} * head_dim;
    float* s = scratch + int64_t{i} * kAttentionTileRows;
    __m256 vmax = _mm256_set1_ps(-__builtin_inff());
    for (int g0 = g_first; g0 < hi; g0 += 8) {
      const int r_lo = std::max(lo - g0, 0), r_hi = std::min(hi - g0, 8);
      const __m256 scores = _mm256_mul_ps(group8_dots(k, k_stride, qi, head_dim, g0, r_lo, r_hi), vscale);
      _mm256_storeu_ps(s + g0, scores);
      vmax = _mm256_blendv_ps(vmax, _mm256_max_ps(vmax, scores), rows_mask8(g0, lo, hi));
    }
    const float m_new = std::max(m[i], hmax256(vmax));
    // 0 for the empty state (m = -inf); exactly 1 (exp(0)) when the max
    // holds, the common case: no exp call, no rescale (x * 1 == x).
    const float alpha = m_new == m[i] ? 1.0f : std::exp(m[i] - m_new);
    const __m256 vm = _mm256_set1_ps(m_new);
    __m256 vsum = _mm256_setzero_ps();
    for (int g0 = g_first; g0 < hi; g0 += 8) {
      // Rows outside [lo, hi) weigh exactly 0.
      const __m256 p = _mm256_and_ps(rows_mask8(g0, lo, hi), exp256(_mm256_sub_ps(_mm256_loadu_ps(s + g0), vm)));
      _mm256_storeu_ps(s + g0, p);
      vsum = _mm256_add_ps(vsum, p);
    }
    m[i] = m_new;
    l[i] = l[i] * alpha + hsum256(vsum);
    const __m256 valpha = _mm256_set1_ps(alpha);
    float* ai = acc + int64_t{i} * head_dim;
    if (alpha != 1.0f) {
      for (int d = 0; d < head_dim; d += 8) _mm256_storeu_ps(ai + d, _mm256_mul_ps(valpha, _mm256_loadu_ps(ai + d)));
    }
  }
  // Values, two heads at a time: each V row loaded once for both.
  int i = 0;
  for (; i + 2 <= n_q; i += 2) {
    accumulate_values8<2>(v, v_stride, scratch + int64_t{i} * kAttentionTileRows, lo, hi, acc + int64_t{i} * head_dim,
                          head_dim);
  }
  if (i < n_q) {
    accumulate_values8<1>(v, v_stride, scratch + int64_t{i} * kAttentionTileRows, lo, hi, acc + int64_t{i} * head_dim,
                          head_dim);
  }
}

// Lanes [0, width) of a vector of 8 (width may be <= 0 or > 8).
__m256i lane_mask(int width) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(width), lanes);
}

// R rows of c, columns [j0, j0 + 32): 4R accumulators over the k terms.
template <int R>
void affine_tile(const float* a, int64_t lda, int k, const float* b, int m, const float* bias, float* c,
                 int64_t ldc, int j0) {
  __m256i mask[4];
  for (int v = 0; v < 4; ++v) mask[v] = lane_mask(m - j0 - 8 * v);
  __m256 acc[R][4];
  for (int v = 0; v < 4; ++v) {
    const __m256 init = _mm256_maskload_ps(bias + j0 + 8 * v, mask[v]);
    for (int r = 0; r < R; ++r) acc[r][v] = init;
  }
  for (int i = 0; i < k; ++i) {
    const float* bi = b + static_cast<int64_t>(i) * m + j0;
    __m256 w[4];
    for (int v = 0; v < 4; ++v) w[v] = _mm256_maskload_ps(bi + 8 * v, mask[v]);
    for (int r = 0; r < R; ++r) {
      const __m256 ar = _mm256_broadcast_ss(a + r * lda + i);
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm256_fmadd_ps(ar, w[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < 4; ++v) _mm256_maskstore_ps(c + r * ldc + j0 + 8 * v, mask[v], acc[r][v]);
  }
}

void affine_rows_avx2(const float* a, int64_t lda, int64_t n, int k, const float* b, int m, const float* bias,
                      float* c, int64_t ldc) {
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) {
    for (int j0 = 0; j0 < m; j0 += 32) affine_tile<4>(a + t * lda, lda, k, b, m, bias, c + t * ldc, ldc, j0);
  }
  for (; t < n; ++t) {
    for (int j0 = 0; j0 < m; j0 += 32) affine_tile<1>(a + t * lda, lda, k, b, m, bias, c + t * ldc, ldc, j0);
  }
}

// The four bytes a[4g .. 4g + 3] as u16 in every 64-bit lane.
inline __m256i broadcast_u8x4(const uint8_t* a) {
  uint32_t word;
  std::memcpy(&word, a, sizeof(word));
  return _mm256_broadcastq_epi64(_mm_cvtepu8_epi16(_mm_cvtsi32_si128(static_cast<int>(word))));
}

// R rows of c, columns [j0, j0 + 8). No u8 x s8 instruction of AVX2 sums
// without saturating, so both sides widen to 16 bits: madd_epi16 sums pairs
// of components per column half, and one hadd at the end joins the halves.
template <int R>
void affine_u8_tile(const uint8_t* a, int64_t lda, int k, const int8_t* b, int m, const float* scale,
                    const float* bias, float* c, int64_t ldc, int j0) {
  const __m256i mask = lane_mask(m - j0);
  __m256i lo_acc[R], hi_acc[R];
  for (int r = 0; r < R; ++r) lo_acc[r] = hi_acc[r] = _mm256_setzero_si256();
  const int groups = (k + 3) / 4;
  for (int g = 0; g < groups; ++g) {
    // Columns j0..j0+7, four components each: 32 bytes.
    const __m256i w = _mm256_maskload_epi32(reinterpret_cast<const int*>(b + (int64_t{g} * m + j0) * 4), mask);
    const __m256i lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(w));       // columns 0-3
    const __m256i hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(w, 1));  // columns 4-7
    for (int r = 0; r < R; ++r) {
      const __m256i ar = broadcast_u8x4(a + r * lda + 4 * g);
      lo_acc[r] = _mm256_add_epi32(lo_acc[r], _mm256_madd_epi16(ar, lo));
      hi_acc[r] = _mm256_add_epi32(hi_acc[r], _mm256_madd_epi16(ar, hi));
    }
  }
  const __m256 s = _mm256_maskload_ps(scale + j0, mask);
  const __m256 z = _mm256_maskload_ps(bias + j0, mask);
  for (int r = 0; r < R; ++r) {
    // hadd: lane 0 = columns 0, 1, 4, 5; lane 1 = 2, 3, 6, 7; the permute
    // puts them in order.
    const __m256i sum = _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo_acc[r], hi_acc[r]), _MM_SHUFFLE(3, 1, 2, 0));
    _mm256_maskstore_ps(c + r * ldc + j0, mask, _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(sum), z));
  }
}

void affine_u8_rows_avx2(const uint8_t* a, int64_t lda, int64_t n, int k, const int8_t* b, int m,
                         const float* scale, const float* bias, float* c, int64_t ldc) {
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) {
    for (int j0 = 0; j0 < m; j0 += 8) affine_u8_tile<4>(a + t * lda, lda, k, b, m, scale, bias, c + t * ldc, ldc, j0);
  }
  for (; t < n; ++t) {
    for (int j0 = 0; j0 < m; j0 += 8) affine_u8_tile<1>(a + t * lda, lda, k, b, m, scale, bias, c + t * ldc, ldc, j0);
  }
}

void dequantize_head_rows_avx2(const KvHeadRows& h, int64_t first_row, int64_t n_rows, int head_dim, float* out) {
  for (int64_t r = first_row; r < first_row + n_rows; ++r, out += head_dim) {
    const uint8_t* codes = h.codes + r * h.row_code_bytes;
    switch (h.bits) {
      case 16: f16_to_f32_avx2(reinterpret_cast<const uint16_t*>(codes), out, head_dim); break;
      case 8:
        dequantize_int8_avx2(reinterpret_cast<const int8_t*>(codes), h.scales + r * h.row_groups, head_dim, h.group,
                             out);
        break;
      default:
        dequantize_int4_avx2(codes, h.scales + r * h.row_groups, h.mins + r * h.row_groups, head_dim, h.group, out);
        break;
    }
  }
}

}  // namespace

KvKernels kv_kernels_avx2() {
  KvKernels set{dot_f16_avx2,         dot_int8_avx2,     dot_int4_avx2,
                axpy_f16_avx2,        axpy_int8_avx2,    axpy_int4_avx2,
                dequantize_int8_avx2, dequantize_int4_avx2, hadamard_rows_avx2,
                attend_heads_avx2,    dequantize_head_rows_avx2, attend_tile_avx2,
                f32_to_f16_avx2,      f16_to_f32_avx2,   affine_rows_avx2,
                affine_u8_rows_avx2,  attend_tile_q8_avx2, attend_tile_q8_positions_avx2,  // kv_kernels_q8_avx2.cc
                nullptr,              /*q8_spreads_prefetch=*/true};
  set.attend_tile_q4_positions = attend_tile_q4_positions_avx2;  // kv_kernels_q8_avx2.cc
  return set;
}

}  // namespace baton::kv_kernels_impl
