// Reference (scalar) conversions between f32 and ggml's K-quant weight types
// Q4_K, Q5_K and Q6_K (super-blocks of 256). The quantizers follow ggml's
// reference search (quantize_row_q*_K_ref: make_qkx2_quants for Q4_K/Q5_K,
// make_qx_quants for Q6_K) operation for operation, so the bytes equal
// llama.cpp's without an importance matrix; the dequantizers reproduce ggml's
// values bit for bit. This file is compiled without FMA contraction (see
// common/CMakeLists.txt): a fused multiply-add would change the rounding.
#pragma once

#include <cstdint>

#include "common/gguf/ggml_types.h"

namespace baton {

// Unpacks the 6-bit scale and min of sub-block j (0..7) from a Q4_K/Q5_K
// `scales` array: j < 4 in the low 6 bits of bytes j and j+4; j >= 4 split
// into the nibbles of byte j+4 and the top 2 bits of bytes j-4 and j.
void kquant_scale_min(int j, const uint8_t* scales, uint8_t* scale, uint8_t* min);

// x: [n] f32 -> y: [n / 256] blocks; n must be a multiple of 256.
void quantize_row_q4_k(const float* x, BlockQ4_K* y, int64_t n);
void quantize_row_q5_k(const float* x, BlockQ5_K* y, int64_t n);
void quantize_row_q6_k(const float* x, BlockQ6_K* y, int64_t n);

// x: [n / 256] blocks -> y: [n] f32.
// Q4_K: y = d * sc[j] * q - dmin * m[j]; Q5_K: the same with a 5th bit;
// Q6_K: y = d * scales[j] * (q - 32).
void dequantize_row_q4_k(const BlockQ4_K* x, float* y, int64_t n);
void dequantize_row_q5_k(const BlockQ5_K* x, float* y, int64_t n);
void dequantize_row_q6_k(const BlockQ6_K* x, float* y, int64_t n);

}  // namespace baton
