// AVX2 + FMA + F16C kernels of the quantized KV store and codec. Entered only
// through kv_kernels() when best_simd_level() >= kAvx2.
#include <immintrin.h>

#include "common/kv/kv_kernels.h"

namespace baton::kv_kernels_impl {
namespace {

inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

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

}  // namespace

KvKernels kv_kernels_avx2() {
  return KvKernels{dot_f16_avx2,        dot_int8_avx2,        dot_int4_avx2,        axpy_f16_avx2,
                   axpy_int8_avx2,      axpy_int4_avx2,       dequantize_int8_avx2, dequantize_int4_avx2,
                   hadamard_rows_avx2,  f32_to_f16_avx2,      f16_to_f32_avx2};
}

}  // namespace baton::kv_kernels_impl
