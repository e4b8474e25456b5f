// The engine's view of a sequence's KV cache. The engine writes K/V of new
// tokens and asks the cache to run attention over what it holds, so a store
// that keeps KV quantized (the edge) attends over its own layout directly,
// without a dequantized copy.
#pragma once

#include <cstdint>

#include <vector>

#include "absl/status/status.h"
#include "common/kv_codec/kv_geometry.h"

namespace baton {

class ThreadPool;
struct KvCodecConfig;
struct QuantizedKvBlock;

// What a cache that keeps KV in the codec's quantized form offers the
// handoff (kv_handoff.h): blocks from the wire copied in as they are,
// without a decode to f32 and a requantization.
class KvBlockIngest {
 public:
  // True when blocks encoded with `wire` for K (is_key) or V can be ingested
  // without requantizing.
  virtual bool can_ingest(const KvCodecConfig& wire, bool is_key) const = 0;
  // Copies a block in quantized form (decode_kv_block_quantized with a config
  // for which can_ingest holds) to tokens [token_begin, token_begin + n).
  // Does not commit: the caller calls set_size when every layer holds the
  // segment.
  virtual absl::Status ingest_block(int layer, bool is_key, int64_t token_begin, const QuantizedKvBlock& block) = 0;

 protected:
  ~KvBlockIngest() = default;
};

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
  // Each query's output must not depend on n or on the pool (the same
  // arithmetic as a call with that query alone): Engine::decode_rows relies
  // on it to match decode steps bit for bit.
  virtual void attend(int layer, int64_t pos, int64_t n, const float* q, float* out,
                      ThreadPool* pool) const = 0;

  // Marks [0, n) committed after every layer stored it, or rolls back to n.
  virtual void set_size(int64_t n) = 0;

  // The cache's quantized-block ingest, or null for a cache that takes f32
  // rows only (store()), such as F32KvCache.
  virtual KvBlockIngest* block_ingest() { return nullptr; }
};

}  // namespace baton
