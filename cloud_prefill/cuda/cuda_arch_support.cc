#include "cloud_prefill/cuda/cuda_arch_support.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace baton::cuda {

absl::Status check_cuda_supports_model(const ModelSpec& spec) {
  // Beyond the arch name: the kernels have no QK-norm, no attention factor on
  // cos/sin and no sliding window, so a spec that needs one is refused too.
  const bool known_arch = spec.arch == "llama" || spec.arch == "qwen2";
  const bool windowed = std::any_of(spec.layer_window.begin(), spec.layer_window.end(), [](int32_t w) { return w > 0; });
  if (known_arch && !spec.qk_norm && spec.rope.attn_factor == 1.0f && !windowed) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "the CUDA prefill backend implements the llama and qwen2 architectures only; this model is '%s': "
      "run baton-prefill with --backend cpu",
      spec.arch));
}

}  // namespace baton::cuda
