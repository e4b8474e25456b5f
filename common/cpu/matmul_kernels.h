// Internal: the per-ISA entry points behind common/cpu/matmul.h and vec.h.
// Each *_scalar.cc / *_avx2.cc / *_avx512.cc file defines one set; matmul.cc and
// vec.cc pick a set by SimdLevel. Only call an ISA's functions after checking
// best_simd_level() — they may contain instructions this CPU lacks.
//
// ISA files keep everything else in an anonymous namespace and use no inline
// functions or templates from shared headers (STL containers, fp16.h, ...): a
// weak symbol compiled with -mavx512f could be picked by the linker for a
// baseline caller and fault on an older CPU.
#pragma once

#include <cstdint>

#include "common/gguf/ggml_types.h"

namespace baton::cpu_kernels {

// One matmul call, with activations already prepared for the weight type.
struct MatmulProblem {
  GgmlType type;            // weight type: F32, F16, BF16, Q8_0 or Q4_0
  const uint8_t* weights;   // [rows] rows of row_bytes each
  int64_t row_bytes;        // ggml_row_bytes(type, cols)
  int64_t rows;             // output features
  int64_t cols;             // input features; a multiple of 32 for Q types
  const float* x;           // F32/F16/BF16 weights: [n_tokens, cols] f32
  const int8_t* xq;         // Q8_0/Q4_0 weights: [n_tokens, cols] Q8_0 quants of x
  const float* xd;          // Q8_0/Q4_0 weights: [n_tokens, cols/32] Q8_0 scales (fp16-rounded) as f32
  float* y;                 // [n_tokens, rows] f32
};

// Writes y[t, r] for r in [row_begin, row_end), t in [tok_begin, tok_end).
using MatmulTileFn = void (*)(const MatmulProblem& p, int64_t row_begin, int64_t row_end,
                              int64_t tok_begin, int64_t tok_end);
// Q8_0 quantization of n floats (n % 32 == 0), ggml's formulas: d = amax/127,
// q = roundf(x / d) (as x * (1/d)), d stored as fp16.
using QuantizeBlocksFn = void (*)(const float* x, BlockQ8_0* y, int64_t n);
// Same, split: qs [n] int8, d [n/32] f32 (the fp16-rounded scale, widened).
using QuantizeSplitFn = void (*)(const float* x, int8_t* qs, float* d, int64_t n);

void matmul_tile_scalar(const MatmulProblem& p, int64_t row_begin, int64_t row_end,
                        int64_t tok_begin, int64_t tok_end);
void matmul_tile_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end,
                      int64_t tok_begin, int64_t tok_end);
void matmul_tile_avx512(const MatmulProblem& p, int64_t row_begin, int64_t row_end,
                        int64_t tok_begin, int64_t tok_end);

void quantize_q8_0_scalar(const float* x, BlockQ8_0* y, int64_t n);
void quantize_q8_0_avx2(const float* x, BlockQ8_0* y, int64_t n);
void quantize_q8_0_avx512(const float* x, BlockQ8_0* y, int64_t n);
void quantize_q8_0_split_scalar(const float* x, int8_t* qs, float* d, int64_t n);
void quantize_q8_0_split_avx2(const float* x, int8_t* qs, float* d, int64_t n);
void quantize_q8_0_split_avx512(const float* x, int8_t* qs, float* d, int64_t n);

// vec.h kernels, per ISA.
float dot_f32_scalar(const float* a, const float* b, int64_t n);
float dot_f32_avx2(const float* a, const float* b, int64_t n);
float dot_f32_avx512(const float* a, const float* b, int64_t n);
void axpy_f32_scalar(float a, const float* x, float* y, int64_t n);
void axpy_f32_avx2(float a, const float* x, float* y, int64_t n);
void axpy_f32_avx512(float a, const float* x, float* y, int64_t n);
void scale_f32_scalar(float* y, float a, int64_t n);
void scale_f32_avx2(float* y, float a, int64_t n);
void scale_f32_avx512(float* y, float a, int64_t n);

}  // namespace baton::cpu_kernels
