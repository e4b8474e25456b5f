// gemma3: Gemma 3 text models (1B, 4B, 12B, 27B), as llama.cpp's converter
// writes them. What differs from llama:
// - token embeddings scaled by sqrt(n_embd) after the lookup; tied output;
// - RMSNorm everywhere, with the (1 + w) of Gemma's norms already folded into
//   the stored weights by the converter: the engine applies the stored weight
//   as is (the GGUF file is the contract);
// - per-head RMSNorm of Q and K (attn_q_norm / attn_k_norm) before RoPE;
// - post_attention_norm and post_ffw_norm on each block's output before the
//   residual add;
// - GeGLU feed-forward: gelu_tanh(gate) * up;
// - interleaved sliding-window attention: layer il is local (it sees the last
//   {arch}.attention.sliding_window tokens) unless il % 6 == 5; local layers
//   rotate with base 10000 unscaled, global ones with {arch}.rope.freq_base
//   and the file's linear scaling;
// - NEOX RoPE pairing; no final logit soft-capping (Gemma 2 had one).
#include <cmath>
#include <string>

#include "absl/strings/str_format.h"
#include "common/gguf/gguf_file.h"
#include "common/model/arch/arch.h"
#include "common/util/check.h"

namespace baton {
namespace {

// Every sixth layer attends globally (llama.cpp: set_swa_pattern(6)).
constexpr int kGemma3GlobalLayerPeriod = 6;
// Local layers rotate with this base, unscaled (llama.cpp: rope_freq_base_train_swa).
constexpr float kGemma3LocalRopeBase = 10000.0f;

}  // namespace

const ArchTraits& gemma3_arch_traits() {
  static const ArchTraits traits{"gemma3", RopeType::kNeox, /*qkv_bias=*/false, 10000.0f};
  return traits;
}

bool gemma3_layer_is_global(int layer) { return layer % kGemma3GlobalLayerPeriod == kGemma3GlobalLayerPeriod - 1; }

absl::Status read_gemma3_spec(const GgufFile& file, ModelSpec& spec) {
  const std::string key = spec.arch + ".attention.sliding_window";
  BATON_ASSIGN_OR_RETURN(int64_t window, file.get_int(key));
  if (window < 1 || window > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("metadata '%s' = %d is outside [1, %d]", key, window, int64_t{1} << 24));
  }
  spec.layer_window.assign(spec.n_layer, static_cast<int32_t>(window));
  for (int il = 0; il < spec.n_layer; ++il) {
    if (gemma3_layer_is_global(il)) spec.layer_window[il] = 0;
  }
  spec.qk_norm = true;
  spec.embedding_scale = std::sqrt(static_cast<float>(spec.n_embd));
  spec.post_norms = true;
  spec.gelu_ffn = true;
  spec.rope_swa_freq_base = kGemma3LocalRopeBase;
  // Attention scales by 1/sqrt(query_pre_attn_scalar): head_dim for every
  // size but 27B (62 layers), where it is n_embd / n_head (llama.cpp's rule).
  if (spec.n_layer == 62) {
    spec.query_scale = std::sqrt(static_cast<float>(spec.head_dim) / static_cast<float>(spec.n_embd / spec.n_head));
  }
  return absl::OkStatus();
}

}  // namespace baton
