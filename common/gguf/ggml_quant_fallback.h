// Reference (scalar) conversions for the 32-element block types llama.cpp
// falls back to when a row is not a multiple of 256 (Q4_K -> Q5_0,
// Q5_K -> Q5_1) and for Q4_1: ggml's quantize_row_q*_ref and dequantize_row_q*
// formulas, so bytes and values match llama.cpp bit for bit. Compiled without
// FMA contraction (common/CMakeLists.txt).
#pragma once

#include <cstdint>

#include "common/gguf/ggml_types.h"

namespace baton {

// x: [n] f32 -> y: [n / 32] blocks; n must be a multiple of 32.
// Q4_1: d = (max - min) / 15, m = min, q = min(15, (int8)((x - min) / d + 0.5)).
void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n);
// Q5_0: d = (value of largest |x|) / -16, q = min(31, (int8)(x / d + 16.5)).
void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n);
// Q5_1: d = (max - min) / 31, m = min, q = (uint8)((x - min) / d + 0.5).
void quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t n);

// x: [n / 32] blocks -> y: [n] f32. Q4_1/Q5_1: y = q * d + m; Q5_0: y = (q - 16) * d.
void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t n);
void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t n);
void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t n);

}  // namespace baton
