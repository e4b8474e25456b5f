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
  kQ8_0 = 8,
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

// Is `type` one Baton supports?
bool ggml_type_supported(uint32_t type);
// "f32", "f16", "q4_0", "q8_0", "bf16", or "type#N" for others.
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
