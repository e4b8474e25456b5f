// llama: Llama 2/3/3.x, TinyLlama, Mistral (no sliding window).
// RoPE pairs adjacent dims (2i, 2i+1) ("NORM"), as llama.cpp after its
// converter permutes the Q/K rows; Llama 3.1+ frequency factors arrive as the
// rope_freqs.weight tensor. No attention biases.
#include "common/model/arch/arch.h"

namespace baton {

const ArchTraits& llama_arch_traits() {
  static const ArchTraits traits{"llama", RopeType::kNorm, /*qkv_bias=*/false, 10000.0f};
  return traits;
}

}  // namespace baton
