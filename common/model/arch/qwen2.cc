// qwen2: Qwen2 / Qwen2.5. Biases on Q, K and V; RoPE pairs dim i with
// i + n_rot/2 ("NEOX"); base 1e6 in released models.
#include "common/model/arch/arch.h"

namespace baton {

const ArchTraits& qwen2_arch_traits() {
  static const ArchTraits traits{"qwen2", RopeType::kNeox, /*qkv_bias=*/true, 1000000.0f};
  return traits;
}

}  // namespace baton
