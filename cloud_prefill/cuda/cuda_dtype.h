// Element types of the CUDA backend's device buffers. Activations that feed
// a GEMM and the device KV are 16-bit (the weights' type); everything that is
// accumulated (residual stream, GEMM outputs, norms) is F32.
#pragma once

#include <cstddef>

namespace baton::cuda {

enum class CudaDType {
  kF32,
  kF16,   // IEEE half: F16 weights as stored
  kBF16,  // bfloat16: BF16 weights as stored; F32 / Q8_0 / Q4_0 weights converted at load
};

inline size_t dtype_bytes(CudaDType t) { return t == CudaDType::kF32 ? 4 : 2; }
inline const char* dtype_name(CudaDType t) {
  return t == CudaDType::kF32 ? "f32" : t == CudaDType::kF16 ? "f16" : "bf16";
}

}  // namespace baton::cuda
