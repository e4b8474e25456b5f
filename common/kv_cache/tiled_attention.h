// Tiled (flash-style) attention over one layer of a KV store, shared by
// F32KvCache and QuantizedKvCache: KV is read in tiles of
// kAttentionTileRows positions, each tile read once for every query head
// that shares its KV head, and folded into each head's online-softmax state
// (running max, sum and rescaled output), so the working set stays in L1/L2
// at any context length. How a tile is read depends on the store:
//   INT8 K and V (kv_kernels.h, attend_tile_q8): in place, no f32 copy;
//     each query head quantized once per call like ggml's Q8_0 activations
//     (blocks of 32), q . k an exact integer dot product (VNNI on the AVX-512
//     set); the softmax weights times the value group scales quantized to
//     15-bit codes per (query head, tile, group) and p . V an exact integer
//     sum too (kv_kernels.h, kQ8WeightMax: the bound of that error); a
//     prefill's queries in calls of up to kQ8MaxPositions positions, so a
//     tile's K and V are rearranged once for all of them.
//   F16 K and V on sets with attend_tile_f16 (AVX-512): in place, the same
//     arithmetic as the dequantized tile.
//   Others (F32, INT4, mixed, or a set without the kernel): the tile is
//     dequantized once into a per-thread buffer for every query of the call.
// The choice depends only on the store's formats and the kernel set, never
// on the queries of a call.
//
// Determinism (KvCache::attend's contract): every boundary of the arithmetic
// is a fixed absolute position: tiles start at multiples of
// kAttentionTileRows, and each query's tiles are folded into per-segment
// states (attention_segment_rows positions) that are merged in segment order.
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
// threads of a decode step split a long context by KV heads, then by
// segments). Each segment's state is merged into the query's total in order,
// so fewer, longer segments merge less: 4096 rows against 512 measured decode
// attention at context 16384 (2 threads, `baton bench decode`, attn ms, 3
// rounds alternating the builds) 13.4-13.5 against 13.8-14.5 ms (13.0-13.3
// with the decode tasks split by KV heads too), and prefill attention
// (BM_TiledAttentionPrefill, pos 8192, 1 thread) 23.1-23.5 against 24.7-25.4.
// A whole number of tiles (32 of 128 positions; 64 of 64 before the tiles grew).
inline constexpr int64_t kAttentionSegmentRows = 4096;
static_assert(kAttentionSegmentRows % kv_kernels_impl::kAttentionTileRows == 0);
// A model with one KV head (Gemma 3 1B) has no heads to split a decode step
// between threads, only segments: with 4096-row segments one thread folded a
// whole context up to 4096 and every sliding-window layer (Gemma 3 1B's 22 of
// 26, window 512) alone while the other waited. Its segments are 256 rows (2
// tiles), so a window of 512 spans 2-3 tasks. A function of the geometry
// only: a model's boundaries stay fixed positions (the contract above).
inline constexpr int64_t kAttentionSegmentRowsOneKvHead = 256;
static_assert(kAttentionSegmentRowsOneKvHead % kv_kernels_impl::kAttentionTileRows == 0);
inline int64_t attention_segment_rows(int n_head_kv) {
  return n_head_kv == 1 ? kAttentionSegmentRowsOneKvHead : kAttentionSegmentRows;
}

// One layer's K and V as the attention reads them.
struct AttentionRows {
  // KV head 0; row 0 holds position first_position. bits 32: F32 rows
  // (codes are floats, row_code_bytes their stride in bytes).
  kv_kernels_impl::KvHeadRows k, v;
  // A head's row: head_code_bytes of codes, head_groups scales (mins).
  int64_t k_head_code_bytes = 0, k_head_groups = 0;
  int64_t v_head_code_bytes = 0, v_head_groups = 0;
  // KV head h: codes + h * head_stride, scales (mins) + h * head_scale_stride.
  // 0: head_code_bytes and head_groups (rows that hold every head, heads side
  // by side); the edge store keeps each head's rows consecutive instead
  // (head_stride = rows * head_code_bytes, row_code_bytes = head_code_bytes).
  int64_t k_head_stride = 0, k_head_scale_stride = 0;
  int64_t v_head_stride = 0, v_head_scale_stride = 0;
  int64_t first_position = 0;
};

// Whether attend_tiled reads INT4 values (with INT4 or INT8 keys) in place
// on quantized queries (attend_tile_q4_positions: a kernel set that has it,
// q4_in_place_allowed, q4_tile_supported) rather than dequantizing each tile.
bool attends_int4_in_place(const kv_kernels_impl::KvHeadRows& k, const kv_kernels_impl::KvHeadRows& v,
                           int head_dim);

// Causal attention of queries at positions [pos, pos + n) as KvCache::attend
// specifies: query i sees positions [first, pos + i] with first = 0, or
// max(0, pos + i - window + 1) when window > 0; every position it sees must
// have a row (>= rows.first_position). scale: multiplies q . k.
// q, out: f32 [n, n_head * head_dim] row-major. pool may be null.
void attend_tiled(const KvGeometry& geometry, int32_t window, float scale, const AttentionRows& rows, int64_t pos,
                  int64_t n, const float* q, float* out, ThreadPool* pool);

}  // namespace baton
