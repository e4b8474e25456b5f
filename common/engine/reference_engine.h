// The golden reference: a plain, single-threaded F32 forward pass, one token
// at a time, written for reading rather than speed (in the spirit of
// llama2.c's run.c). Weights of any stored type are dequantized row by row;
// activations stay F32 (no 8-bit activation quantization), accumulation in
// double. Every fast path is tested against it. Sliding-window layers
// (gemma3) see the keys (pos - W, pos] only; their cache still holds every token.
#pragma once

#include <cstdint>
#include <vector>

#include "common/model/model.h"

namespace baton {

class ReferenceEngine {
 public:
  explicit ReferenceEngine(const Model& model);

  // Appends `token` at position size() and returns its logits [n_vocab].
  std::vector<float> forward(int32_t token);
  int64_t size() const { return n_tokens_; }
  void reset();

  // Cached K / V of (layer, token), after RoPE: [n_head_kv * head_dim].
  const std::vector<float>& k(int layer, int64_t token) const { return k_cache_[layer][token]; }
  const std::vector<float>& v(int layer, int64_t token) const { return v_cache_[layer][token]; }

 private:
  const Model& model_;
  int64_t n_tokens_ = 0;
  std::vector<std::vector<std::vector<float>>> k_cache_;  // [layer][token][kv_dim]
  std::vector<std::vector<std::vector<float>>> v_cache_;  // [layer][token][kv_dim]
};

}  // namespace baton
