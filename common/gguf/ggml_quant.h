// Reference (scalar) row conversions between f32 and the GGUF tensor types,
// with ggml's exact formulas so quantized bytes match llama.cpp's bit for bit.
// These are the golden versions that any SIMD or GPU path is tested against.
#pragma once

#include <cstdint>

#include "common/gguf/ggml_types.h"

namespace baton {

// x: [n] f32 -> y: [n / 32] blocks. n must be a multiple of 32.
// Per block: `max` = the element with the largest |x|; d = max / -8;
// q = min(15, (int8)(x / d + 8.5)).
void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n);
// x: [n / 32] blocks -> y: [n] f32, y = d * (q - 8).
void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n);

// x: [n] f32 -> y: [n / 32] blocks. d = max|x| / 127; q = round(x / d).
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
// x: [n / 32] blocks -> y: [n] f32, y = d * q.
void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n);

// src: ggml_row_bytes(type, n) bytes of `type` -> dst: [n] f32.
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);
// src: [n] f32 -> dst: ggml_row_bytes(type, n) bytes of `type`.
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n);

}  // namespace baton
