// qwen3: Qwen3 dense (0.6B .. 8B, 14B, 32B). Qwen2 without the Q/K/V biases,
// with a per-head RMSNorm on Q and on K (blk.N.attn_q_norm / attn_k_norm,
// [head_dim], shared by the heads) applied before RoPE, with the model's
// norm epsilon. RoPE pairs dim i with i + n_rot/2 ("NEOX"), base 1e6 in
// released models. head_dim comes from {arch}.attention.key_length (128 in
// every released size, which is not n_embd / n_head for 0.6B, 4B, 8B ...);
// the small sizes tie the output to token_embd.
#include "common/model/arch/arch.h"

namespace baton {

const ArchTraits& qwen3_arch_traits() {
  static const ArchTraits traits{"qwen3", RopeType::kNeox, /*qkv_bias=*/false, 1000000.0f,
                                 /*qk_norm=*/true};
  return traits;
}

}  // namespace baton
