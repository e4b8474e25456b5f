// Internal: the group quantizers and the Walsh-Hadamard rotation shared by
// the KV codec (kv_codec.h) and the quantized store (quantized_kv_cache.h),
// so a token stored by the edge and the same token sent by the cloud hold
// the same bytes. Scalar C++ (the compiler vectorizes the inner loops); the
// per-token group quantizers use the AVX-512 kernels (kv_kernels.h) where
// present, with the same bytes.
#pragma once

#include <cstdint>

#include "common/util/fp16.h"

namespace baton::kv_quant {

// Largest |x| the codecs accept: every value (and so every scale and minimum)
// must fit an f16.
constexpr float kMaxAbsValue = 65504.0f;

// In-place normalized Walsh-Hadamard transform of x [n], n a power of two:
// x <- H x / sqrt(n). Orthonormal and symmetric, so it is its own inverse.
void hadamard_inplace(float* x, int n);
// Same on n_vectors consecutive vectors of n floats.
void hadamard_rows(float* x, int64_t n_vectors, int n);

// A group's f16-rounded scale and its inverse (0 for an all-zero group): the
// one rule the scalar quantizers and the vector kernels share.
struct Scale {
  uint16_t half;
  float value;
  float inverse;
};

inline Scale make_scale(float s) {
  Scale r;
  r.half = fp32_to_fp16(s);
  r.value = fp16_to_fp32(r.half);
  r.inverse = r.value > 0.0f ? 1.0f / r.value : 0.0f;
  return r;
}

// Per-token groups: x [n] split into n / group groups of `group` consecutive
// elements (n % group == 0; INT4: group even).
//   INT8: codes [n] int8 in [-127, 127], scales [n / group] f16 (amax / 127).
//   INT4: codes [n / 2] bytes, element 2i in the low nibble of byte i, 2i+1 in
//         the high nibble; scales, mins [n / group] f16; x = code * scale + min.
void quantize_int8_groups(const float* x, int64_t n, int group, int8_t* codes, uint16_t* scales);
void quantize_int4_groups(const float* x, int64_t n, int group, uint8_t* codes, uint16_t* scales,
                          uint16_t* mins);
// The portable code of the two above, which the kernels must match byte for
// byte (tests; the two above use it where the CPU has no kernel).
void quantize_int8_groups_scalar(const float* x, int64_t n, int group, int8_t* codes, uint16_t* scales);
void quantize_int4_groups_scalar(const float* x, int64_t n, int group, uint8_t* codes, uint16_t* scales,
                                 uint16_t* mins);
void dequantize_int8_groups(const int8_t* codes, const uint16_t* scales, int64_t n, int group, float* out);
void dequantize_int4_groups(const uint8_t* codes, const uint16_t* scales, const uint16_t* mins, int64_t n,
                            int group, float* out);

// Per-channel groups (KIVI): x [n_tokens, width] row-major, one group per
// channel over all n_tokens rows (the caller passes one token group).
// Codes keep the token-major [n_tokens, width] order of the input (INT4
// packed along width as above); scales, mins: [width] f16.
void quantize_int8_channels(const float* x, int64_t n_tokens, int64_t width, int8_t* codes, uint16_t* scales);
void quantize_int4_channels(const float* x, int64_t n_tokens, int64_t width, uint8_t* codes, uint16_t* scales,
                            uint16_t* mins);
void dequantize_int8_channels(const int8_t* codes, const uint16_t* scales, int64_t n_tokens, int64_t width,
                              float* out);
void dequantize_int4_channels(const uint8_t* codes, const uint16_t* scales, const uint16_t* mins,
                              int64_t n_tokens, int64_t width, float* out);

// f32 <-> f16 (round to nearest even), n elements; F16C when the CPU has it.
void f32_to_f16(const float* x, uint16_t* out, int64_t n);
void f16_to_f32(const uint16_t* x, float* out, int64_t n);

// True when every f16 in x [n] is finite (no Inf / NaN bit patterns).
bool all_f16_finite(const uint16_t* x, int64_t n);

}  // namespace baton::kv_quant
