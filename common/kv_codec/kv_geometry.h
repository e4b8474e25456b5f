// The KV shape of a model: layers, heads, head size and sliding windows.
// The codec, the caches and the stream all size their data by it, so it sits
// at the bottom of the KV code (below the KvCache interface).
#pragma once

#include <cstdint>

#include <vector>

#include "common/model/model_spec.h"

namespace baton {

struct KvGeometry {
  int n_layer = 0;
  int n_head = 0;     // query heads
  int n_head_kv = 0;  // key/value heads
  int head_dim = 0;
  // Sliding-window attention, per layer: empty, or n_layer entries where 0 =
  // full attention and W > 0 = a query at position p sees keys at positions
  // (p - W, p] only (llama.cpp's "standard" SWA; Gemma 2/3 local layers).
  std::vector<int32_t> layer_window;
  int64_t kv_dim() const { return int64_t{n_head_kv} * head_dim; }
  int64_t q_dim() const { return int64_t{n_head} * head_dim; }
  // 0 = full attention.
  int32_t window(int layer) const { return layer_window.empty() ? 0 : layer_window[layer]; }
};

// The KV geometry of a model.
inline KvGeometry kv_geometry_for(const ModelSpec& spec) {
  return KvGeometry{spec.n_layer, spec.n_head, spec.n_head_kv, spec.head_dim, spec.layer_window};
}

}  // namespace baton
