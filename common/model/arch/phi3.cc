// phi3: Phi-3-mini (4k, 128k), Phi-3.5-mini, Phi-4-mini.
//
// - Fused tensors: blk.N.attn_qkv.weight holds the Q, K and V rows in that
//   order ([q_dim + 2 kv_dim, n_embd]) and blk.N.ffn_up.weight the gate rows
//   then the up rows ([2 n_ff, n_embd]; no ffn_gate tensor). Model::bind
//   takes them as zero-copy row ranges, so the engines see wq/wk/wv and
//   w_gate/w_up as for llama. Files with separate attn_q/k/v load too.
// - RoPE pairs dim i with i + n_rot/2 ("NEOX"), base 10000; Phi-4-mini
//   rotates only the first rope.dimension_count = 96 of its 128 head dims.
// - LongRoPE ("su", the 128k models): per-pair frequency divisors in
//   rope_factors_short.weight and rope_factors_long.weight ([n_rot/2]), and an
//   attention magnitude factor that multiplies cos and sin. llama.cpp picks
//   the long set when its context (n_ctx) exceeds
//   rope.scaling.original_context_length and keeps it for the whole context;
//   Baton does the same with the model's trained context
//   ({arch}.context_length) as that context, because the factor set changes
//   every key in the KV and the cloud and the edge must pick the same set
//   without negotiating: both read it from the file. A Phi-3-mini-128k file
//   (context 131072, original 4096) thus runs with the long factors at every
//   prompt length; the factor set and the attention factor are in the model
//   fingerprint.
// - No biases; Phi-4-mini ties the output to token_embd. The sliding window
//   some phi3 files declare is ignored, as llama.cpp does (full attention).
#include <cmath>

#include "absl/strings/str_format.h"
#include "common/gguf/gguf_file.h"
#include "common/model/arch/arch.h"
#include "common/util/check.h"

namespace baton {
namespace {

// The LongRoPE attention factor when the file does not state it: the formula
// of the Hugging Face Phi-3 model and of llama.cpp's converter, which writes
// it as rope.scaling.attn_factor (so every converted file carries it).
float default_long_rope_attn_factor(int trained_context, int original_context) {
  const double scale = static_cast<double>(trained_context) / original_context;
  if (scale <= 1.0) return 1.0f;
  return static_cast<float>(std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(original_context))));
}

}  // namespace

const ArchTraits& phi3_arch_traits() {
  static const ArchTraits traits{"phi3", RopeType::kNeox, /*qkv_bias=*/false, 10000.0f};
  return traits;
}

bool long_rope_uses_long_factors(int serving_context, int original_context) {
  return serving_context > original_context;
}

absl::Status read_long_rope(const GgufFile& file, ModelSpec* spec) {
  const bool has_long = file.find_tensor("rope_factors_long.weight") != nullptr;
  const bool has_short = file.find_tensor("rope_factors_short.weight") != nullptr;
  if (!has_long && !has_short) return absl::OkStatus();
  if (has_long != has_short) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "LongRoPE needs rope_factors_long.weight and rope_factors_short.weight; the file has only %s",
        has_long ? "rope_factors_long.weight" : "rope_factors_short.weight"));
  }
  RopeSpec& rope = spec->rope;
  if (rope.has_freq_factors) {
    return absl::InvalidArgumentError("the file has both rope_freqs.weight and LongRoPE factors");
  }
  if (rope.scaling_type != "none" && rope.scaling_type != "longrope" && rope.scaling_type != "su") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rope.scaling.type '%s' does not go with LongRoPE factors (rope_factors_long/short.weight)",
        rope.scaling_type));
  }
  const std::string p = spec->arch + ".";
  // As llama.cpp: without the key the original context is the trained one.
  int64_t original = spec->n_ctx_train;
  if (file.find(p + "rope.scaling.original_context_length") != nullptr) {
    BATON_ASSIGN_OR_RETURN(original, file.get_int(p + "rope.scaling.original_context_length"));
  }
  if (original < 2 || original > spec->n_ctx_train) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "metadata '%srope.scaling.original_context_length' = %d is outside [2, context_length %d]", p, original,
        spec->n_ctx_train));
  }
  rope.original_context = static_cast<int>(original);
  rope.attn_factor = default_long_rope_attn_factor(spec->n_ctx_train, rope.original_context);
  if (file.find(p + "rope.scaling.attn_factor") != nullptr) {
    BATON_ASSIGN_OR_RETURN(double factor, file.get_float(p + "rope.scaling.attn_factor"));
    if (!(factor > 0.0 && factor <= 16.0)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("metadata '%srope.scaling.attn_factor' = %g is outside (0, 16]", p, factor));
    }
    rope.attn_factor = static_cast<float>(factor);
  }
  rope.scaling_type = "longrope";
  rope.long_rope = long_rope_uses_long_factors(spec->n_ctx_train, rope.original_context) ? LongRopeFactors::kLong
                                                                                          : LongRopeFactors::kShort;
  return absl::OkStatus();
}

}  // namespace baton
