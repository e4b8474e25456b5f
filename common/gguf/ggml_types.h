// Tensor element types shared with GGUF/ggml, and the Q4_0 / Q8_0 block layouts,
// bit-compatible with ggml so files made here load elsewhere and vice versa.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace baton {

// Values are ggml's `ggml_type` ids as stored in GGUF tensor infos.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,  // activations only (the dot-product partner of the K-quants)
  kBF16 = 30,
};

inline constexpr int kQK4_0 = 32;  // elements per Q4_0 block
inline constexpr int kQK8_0 = 32;  // elements per Q8_0 block

// Q4_0: x[i] = d * (q[i] - 8); 18 bytes per 32 elements.
// qs[j] low nibble = element j, high nibble = element j + 16 (j in 0..15).
struct BlockQ4_0 {
  uint16_t d;              // fp16 scale
  uint8_t qs[kQK4_0 / 2];  // packed 4-bit quants
};
static_assert(sizeof(BlockQ4_0) == 18);

// Q8_0: x[i] = d * q[i]; 34 bytes per 32 elements.
struct BlockQ8_0 {
  uint16_t d;          // fp16 scale
  int8_t qs[kQK8_0];   // quants
};
static_assert(sizeof(BlockQ8_0) == 34);

// The layouts below are ggml's (ggml-common.h), byte for byte.
inline constexpr int kQK4_1 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK5_1 = 32;
inline constexpr int kQK_K = 256;        // elements per K-quant super-block
inline constexpr int kKScaleBytes = 12;  // packed 6-bit scales and mins of Q4_K / Q5_K

// Q4_1: x[i] = d * q[i] + m; 20 bytes per 32 elements; nibbles as Q4_0.
struct BlockQ4_1 {
  uint16_t d;  // fp16 scale
  uint16_t m;  // fp16 min
  uint8_t qs[kQK4_1 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

// Q5_0: x[i] = d * (q[i] - 16); low 4 bits as Q4_0, bit 4 of element j in bit j of qh.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK5_0 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

// Q5_1: x[i] = d * q[i] + m; bits as Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// Q4_K: 256 elements in 8 sub-blocks of 32; x = d * sc[j] * q - dmin * m[j],
// sc/m 6-bit, packed in `scales`; 4.5 bits per weight.
struct BlockQ4_K {
  uint16_t d;     // fp16 super-block scale of the quantized scales
  uint16_t dmin;  // fp16 super-block scale of the quantized mins
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q5_K: as Q4_K plus a 5th bit per element in qh; 5.5 bits per weight.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// Q6_K: 16 sub-blocks of 16; x = d * scales[j] * (q - 32), q 6-bit (4 low in ql,
// 2 high in qh), scales int8; 6.5625 bits per weight.
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// Q8_K: activations for K-quant dot products; d is f32, bsums[j] = sum of
// qs[16j .. 16j+15] (used for the mins term).
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(BlockQ8_K) == 292);

// Is `type` one Baton supports as a stored tensor type? (Q8_K is not: it is
// only the activation format of K-quant dot products.)
bool ggml_type_supported(uint32_t type);
// ggml's names: "f32", "f16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_K",
// "q5_K", "q6_K", "q8_K", "bf16"; a few other known ids; "unknown" otherwise.
std::string_view ggml_type_name(uint32_t type);
inline std::string_view ggml_type_name(GgmlType type) { return ggml_type_name(static_cast<uint32_t>(type)); }
// Elements per block (1 for float types).
int64_t ggml_block_elements(GgmlType type);
// Bytes per block.
int64_t ggml_block_bytes(GgmlType type);
// Bytes of a row of `n` elements; n must be a multiple of the block size.
inline int64_t ggml_row_bytes(GgmlType type, int64_t n) {
  return n / ggml_block_elements(type) * ggml_block_bytes(type);
}

}  // namespace baton
