// Per-architecture traits. Each supported architecture has its own file
// (llama.cc, qwen2.cc) that defines what differs from the common transformer.
#pragma once

#include <string>
#include <string_view>
#include <vector>

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

// nullptr when Baton does not support the architecture.
const ArchTraits* find_arch_traits(std::string_view name);
std::vector<std::string> supported_arch_names();

}  // namespace baton
