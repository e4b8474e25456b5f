// The engine's view of a sequence's KV cache. The engine writes K/V of new
// tokens and asks the cache to run attention over what it holds, so a store
// that keeps KV quantized (the edge) attends over its own layout directly,
// without a dequantized copy.
#pragma once

#include <cstdint>

#include <vector>

#include "absl/status/status.h"
#include "common/model/model_spec.h"

namespace baton {

class ThreadPool;

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

class KvCache {
 public:
  virtual ~KvCache() = default;

  virtual const KvGeometry& geometry() const = 0;
  // Most tokens the cache can hold.
  virtual int64_t capacity() const = 0;
  // Tokens [0, size()) are committed: every layer holds them.
  virtual int64_t size() const = 0;

  // Writes K/V of tokens [pos, pos + n) for `layer`.
  // k, v: f32 [n, n_head_kv * head_dim] row-major; k already rotated (RoPE).
  // RESOURCE_EXHAUSTED when pos + n > capacity().
  virtual absl::Status store(int layer, int64_t pos, int64_t n, const float* k, const float* v) = 0;

  // Causal attention for queries at positions [pos, pos + n) over cached
  // tokens [0, pos + i] for query i, or [max(0, pos + i - W + 1), pos + i]
  // when geometry().window(layer) = W > 0 (the layer's K/V for [pos, pos+n)
  // must have been stored). q, out: f32 [n, n_head * head_dim] row-major.
  virtual void attend(int layer, int64_t pos, int64_t n, const float* q, float* out,
                      ThreadPool* pool) const = 0;

  // Marks [0, n) committed after every layer stored it, or rolls back to n.
  virtual void set_size(int64_t n) = 0;
};

}  // namespace baton
