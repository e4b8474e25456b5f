// Which architectures the CUDA prefill backend implements. Plain C++ (no CUDA
// calls), so the check runs, and is tested, before any device is touched.
#pragma once

#include "absl/status/status.h"
#include "common/model/model_spec.h"

namespace baton::cuda {

// OK for llama and qwen2 (the CUDA kernels implement RMSNorm, optional QKV
// biases, NORM/NEOX RoPE, SwiGLU). Anything else (qwen3's QK-norm, phi3's
// LongRoPE attention factor, gemma3's windows and norms) is
// FAILED_PRECONDITION naming the architecture and the CPU backend's flag.
absl::Status check_cuda_supports_model(const ModelSpec& spec);

}  // namespace baton::cuda
