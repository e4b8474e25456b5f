// Per-architecture traits. Each supported architecture has its own file
// (llama.cc, qwen2.cc, qwen3.cc, phi3.cc, gemma3.cc) that defines what differs
// from the common transformer.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "common/model/model_spec.h"

namespace baton {

struct ArchTraits {
  std::string_view name;         // general.architecture
  RopeType rope_type;            // pairing of rotated dims
  bool qkv_bias;                 // attn_q/k/v carry biases
  float default_rope_freq_base;  // when {arch}.rope.freq_base is absent
  bool qk_norm = false;          // blk.N.attn_q_norm / attn_k_norm: per-head RMSNorm before RoPE
};

const ArchTraits& llama_arch_traits();
const ArchTraits& qwen2_arch_traits();
const ArchTraits& gemma3_arch_traits();

// gemma3: fills what Gemma 3 adds to the common spec (sliding windows, norms,
// GeGLU, embedding scale, local RoPE base); spec's shape fields must be read.
absl::Status read_gemma3_spec(const GgufFile& file, ModelSpec& spec);
// gemma3: whether layer `layer` attends over the whole context.
bool gemma3_layer_is_global(int layer);
const ArchTraits& qwen3_arch_traits();
const ArchTraits& phi3_arch_traits();

// LongRoPE (phi3.cc). Fills spec->rope's long_rope, original_context and
// attn_factor when the file has rope_factors_long.weight; leaves it alone
// otherwise. Needs spec->n_ctx_train and rope.n_rot already read.
absl::Status read_long_rope(const GgufFile& file, ModelSpec* spec);
// The factor set LongRoPE runs with: long when the serving context exceeds
// the original (pre-extension) context. Baton's serving context is the
// model's trained context ({arch}.context_length), the one length cloud and
// edge both know without negotiating.
bool long_rope_uses_long_factors(int serving_context, int original_context);

// nullptr when Baton does not support the architecture.
const ArchTraits* find_arch_traits(std::string_view name);
std::vector<std::string> supported_arch_names();

}  // namespace baton
