// Tiled (flash-style) attention over one layer of a KV store, shared by
// F32KvCache and QuantizedKvCache: KV is read in tiles of
// kAttentionTileRows positions, each tile dequantized once for every query
// head that shares its KV head and for every query of the call (instead of
// once per query), and folded into each head's online-softmax state (running
// max, sum and rescaled output), so the working set stays in L1/L2 at any
// context length.
//
// Determinism (KvCache::attend's contract): every boundary of the arithmetic
// is a fixed absolute position: tiles start at multiples of
// kAttentionTileRows, and each query's tiles are folded into per-segment
// states (kAttentionSegmentRows positions) that are merged in segment order.
// A query's output is therefore a function of its own position, q and the
// rows it sees: the same bits alone or with other queries, with one thread or
// many (threads only choose which (KV head, segment) or (KV head, query
// block) each computes).
#pragma once

#include <cstdint>

#include "common/kv_codec/kv_geometry.h"
#include "common/kv_codec/kv_kernels.h"

namespace baton {

class ThreadPool;

// Positions per segment: the unit that one decode task folds on its own (the
// threads of a decode step split a long context by segments and KV heads).
inline constexpr int64_t kAttentionSegmentRows = 8 * kv_kernels_impl::kAttentionTileRows;

// One layer's K and V as the attention reads them.
struct AttentionRows {
  // KV head 0; row 0 holds position first_position. bits 32: F32 rows
  // (codes are floats, row_code_bytes their stride in bytes).
  kv_kernels_impl::KvHeadRows k, v;
  // KV head h: codes + h * head_code_bytes, scales (mins) + h * head_groups.
  int64_t k_head_code_bytes = 0, k_head_groups = 0;
  int64_t v_head_code_bytes = 0, v_head_groups = 0;
  int64_t first_position = 0;
};

// Causal attention of queries at positions [pos, pos + n) as KvCache::attend
// specifies: query i sees positions [first, pos + i] with first = 0, or
// max(0, pos + i - window + 1) when window > 0; every position it sees must
// have a row (>= rows.first_position). scale: multiplies q . k.
// q, out: f32 [n, n_head * head_dim] row-major. pool may be null.
void attend_tiled(const KvGeometry& geometry, int32_t window, float scale, const AttentionRows& rows, int64_t pos,
                  int64_t n, const float* q, float* out, ThreadPool* pool);

}  // namespace baton
