// Per-architecture traits. Each supported architecture has its own file
// (llama.cc, qwen2.cc, gemma3.cc) that defines what differs from the common
// transformer.
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
};

const ArchTraits& llama_arch_traits();
const ArchTraits& qwen2_arch_traits();
const ArchTraits& gemma3_arch_traits();

// gemma3: fills what Gemma 3 adds to the common spec (sliding windows, norms,
// GeGLU, embedding scale, local RoPE base); spec's shape fields must be read.
absl::Status read_gemma3_spec(const GgufFile& file, ModelSpec& spec);
// gemma3: whether layer `layer` attends over the whole context.
bool gemma3_layer_is_global(int layer);

// nullptr when Baton does not support the architecture.
const ArchTraits* find_arch_traits(std::string_view name);
std::vector<std::string> supported_arch_names();

}  // namespace baton
