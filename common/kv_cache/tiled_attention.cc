#include "common/kv_cache/tiled_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "common/model/layer_window.h"
#include "common/util/check.h"
#include "common/util/thread_pool.h"

namespace baton {
namespace {

using kv_kernels_impl::KvHeadRows;
using kv_kernels_impl::KvKernels;
using kv_kernels_impl::QueryQ8;

constexpr int64_t kTile = kv_kernels_impl::kAttentionTileRows;
// Calls with at most this many queries (decode steps, short drafts) split
// each query's context across tasks by segment; longer ones (prefill) give
// each task a block of queries, so a tile read once serves the whole block.
// 32 (one attend_tile_q8_positions call per tile): 1.07x over 16 on the
// 64-query prefill microbenchmark at context 8192, single-threaded; 64 (the
// engine's whole micro-batch, so n_head_kv tasks): 22.8-23.4 against
// 24.6-25.8 ms there, 12.0-12.4 against 12.0-12.6 on two threads (Intel
// AVX-512 host, 3 alternating runs).
constexpr int64_t kSplitMaxQueries = 4;
constexpr int64_t kQueryBlock = kv_kernels_impl::kQ8MaxPositions;

// Folds state b into state a (same head): the merge of two disjoint key
// ranges' softmax states. One compiled instance (noinline): every path
// merges with the same instructions. The side that holds the max takes
// exp(0) = 1 without a call (exactly what the call returns), and the
// accumulators go four at a time (the same IEEE multiplies and adds per
// element): a prefill at context 8192 merges 16 segments per query head.
[[gnu::noinline]] void merge_state(float m_b, float l_b, const float* acc_b, float* m, float* l, float* acc,
                                   int head_dim) {
  const float m_new = std::max(*m, m_b);
  // alpha = 0 for the empty state (exp(-inf)).
  const float alpha = *m == m_new ? 1.0f : std::exp(*m - m_new), beta = m_b == m_new ? 1.0f : std::exp(m_b - m_new);
  *m = m_new;
  *l = *l * alpha + l_b * beta;
  using Four = float __attribute__((vector_size(16)));
  int d = 0;
  for (; d + 4 <= head_dim; d += 4) {
    Four a, b;
    std::memcpy(&a, acc + d, sizeof a);
    std::memcpy(&b, acc_b + d, sizeof b);
    a = a * alpha + b * beta;
    std::memcpy(acc + d, &a, sizeof a);
  }
  for (; d < head_dim; ++d) acc[d] = acc[d] * alpha + acc_b[d] * beta;
}

// States of `heads` query heads: m [heads], l [heads], acc [heads, head_dim].
struct StateSpan {
  float* m;
  float* l;
  float* acc;
};

void reset_states(StateSpan s, int64_t heads, int head_dim) {
  std::fill(s.m, s.m + heads, -INFINITY);
  std::fill(s.l, s.l + heads, 0.0f);
  std::fill(s.acc, s.acc + heads * head_dim, 0.0f);
}

// Per-thread buffers: one dequantized K and V tile, the tile's scores.
struct TileScratch {
  std::vector<float> k, v;  // [kTile, head_dim]
  std::vector<float> scores;  // [heads_per_kv, kTile]
  std::vector<float> m, l, acc;  // a task's segment and total states (query-block path)
  // [kTile, head_dim] each: a tile's keys out of key column blocks, its
  // values out of value quads (as_rows).
  std::vector<int8_t> key_rows, value_rows;

  static int8_t* rows_for(std::vector<int8_t>& rows, int head_dim) {
    const size_t tile = static_cast<size_t>(kTile * head_dim);
    if (rows.size() < tile) rows.resize(tile);
    return rows.data();
  }

  // in_place: the tiles are read in place (attend_tile_q8, attend_tile_f16;
  // scratch for the larger, q8), no dequantized K / V.
  void reserve(int head_dim, int heads_per_kv, bool in_place) {
    const size_t tile = static_cast<size_t>(kTile * head_dim);
    // Zero on growth: rows a tile does not dequantize stay finite.
    if (!in_place && k.size() < tile) k.assign(tile, 0.0f), v.assign(tile, 0.0f);
    const size_t scores_floats = static_cast<size_t>(
        in_place ? kv_kernels_impl::attend_tile_q4_scratch_floats(heads_per_kv * kv_kernels_impl::kQ8MaxPositions,
                                                                  head_dim)
                 : heads_per_kv * kTile);
    if (scores.size() < scores_floats) scores.resize(scores_floats);
  }
};

// The queries of a call quantized for attend_tile_q8 (INT8 K and V): per
// query and query head, head_dim codes and head_dim / kQ8Block block scales
// and biases, in q's order ([n, n_head, ...]).
struct QueriesQ8 {
  const int8_t* codes = nullptr;  // null: the f32 path
  const float* scales = nullptr;
  const int32_t* bias = nullptr;
};

class LayerAttention {
 public:
  // n: the call's queries (F16 tiles spread their prefetch in decode-sized
  // calls only, see spread_).
  LayerAttention(const KvGeometry& g, int32_t window, float scale, const AttentionRows& rows, int64_t pos,
                 const float* q, QueriesQ8 q8, int64_t n)
      : kern_(kv_kernels_impl::kv_kernels()),
        head_dim_(g.head_dim),
        heads_per_kv_(g.n_head / g.n_head_kv),
        q_dim_(g.q_dim()),
        window_(window),
        segment_(attention_segment_rows(g.n_head_kv)),
        scale_(scale),
        rows_(with_head_strides(rows)),
        consecutive_(rows.k.row_code_bytes == rows.k_head_code_bytes &&
                     rows.v.row_code_bytes == rows.v_head_code_bytes),
        pos_(pos),
        q_(q),
        q8_(q8),
        q4_(q8.codes != nullptr && rows.v.bits == 4),
        f16_rows_(kern_.attend_tile_f16 != nullptr && kv_kernels_impl::f16_tile_supported(rows.k, rows.v, head_dim_)),
        key_blocks_in_place_(q8.codes != nullptr && kv_kernels_impl::q8_key_blocks_active() &&
                             (rows.k.bits != 4 || (q4_ && kern_.q4_reads_blocks))),
        value_quads_in_place_(q8.codes != nullptr && kern_.q8_reads_value_quads &&
                              kv_kernels_impl::q8_value_quads_active() &&
                              (rows.v.bits != 4 || (q4_ && kern_.q4_reads_blocks))),
        spread_((q8.codes != nullptr ? kern_.q8_spreads_prefetch : f16_rows_ && n <= kSplitMaxQueries) &&
                rows.k.row_code_bytes == rows.v.row_code_bytes && rows.k_head_code_bytes == rows.v_head_code_bytes),
        nta_(spread_ && n <= kSplitMaxQueries && kv_kernels_impl::attention_prefetch_nta()) {}

  int heads_per_kv() const { return heads_per_kv_; }
  int head_dim() const { return head_dim_; }
  bool q8() const { return q8_.codes != nullptr; }
  // Tiles read in place (attend_tile_q8 / attend_tile_f16): no dequantized copy.
  bool in_place() const { return q8() || f16_rows_; }
  // Keys query i sees: positions [first_key(i), end_key(i)).
  int64_t first_key(int64_t i) const { return window_first_kept_position(window_, pos_ + i); }
  int64_t end_key(int64_t i) const { return pos_ + i + 1; }
  int64_t first_segment(int64_t i) const { return first_key(i) / segment_; }
  int64_t last_segment(int64_t i) const { return (end_key(i) - 1) / segment_; }
  int64_t segment_rows() const { return segment_; }

  // Folds segment `seg` of KV heads [h0, h1) into the states of queries
  // [i0, i1): state of (query i, KV head kv_h) at
  // ((i - i0) * (h1 - h0) + kv_h - h0) * heads_per_kv (its heads_per_kv
  // query heads follow). Queries that see no key of the segment keep their
  // states. While a tile is computed, the next one's rows are prefetched to
  // L2 (measured: better than a row-by-row prefetch inside the
  // dequantization): even a head's consecutive rows (the edge store) came
  // too slowly from the hardware prefetchers alone here, and rows that hold
  // every head (F32KvCache) leave each head's strided. A kernel set
  // with q8_spreads_prefetch gets them as TilePositions::next and spreads
  // them over its steps instead of a burst before the call.
  //
  // stream_end: the task reads the rows up to there next (the segments after
  // this one), so the last tile prefetches the next segment's first; cold:
  // the segment's first tile was not prefetched (the task's first segment).
  void run_segment(int h0, int h1, int64_t i0, int64_t i1, int64_t seg, StateSpan s, TileScratch& scratch,
                   int64_t stream_end = 0, bool cold = true) const {
    const int64_t seg_begin = seg * segment_;
    const int64_t block_lo = std::max(first_key(i0), seg_begin);
    const int64_t block_hi = std::min(end_key(i1 - 1), seg_begin + segment_);
    if (block_lo >= block_hi) return;
    const int64_t prefetch_hi = std::max(block_hi, std::min(stream_end, end_key(i1 - 1)));
    if (consecutive_ && spread_ && in_place()) {
      return run_segment_by_head(h0, h1, i0, i1, block_lo, block_hi, prefetch_hi, s, scratch, cold);
    }
    for (int64_t t0 = block_lo / kTile * kTile; t0 < block_hi; t0 += kTile) {
      // first_key and end_key grow with i: the block's rows of this tile.
      const int64_t union_lo = std::max(block_lo, t0), union_hi = std::min(block_hi, t0 + kTile);
      const int64_t next_lo = t0 + kTile, next_hi = std::min(prefetch_hi, t0 + 2 * kTile);
      prefetch_scales(h0, h1, next_lo, next_hi);
      // A spreading INT8 kernel call prefetches a part of the next tile: the
      // task's heads' bytes of 1 / (h1 - h0) of its rows, row by row (whole
      // rows when the task holds every head: one contiguous run, which the
      // L2 streamer follows too), so the tile's calls bring all of it. Only
      // a cold segment's first tile (a task's first) is read unprefetched:
      // it is touched. Measured here
      // (AVX-512 host, BM_TiledAttentionDecode, INT8, 2 threads, interleaved
      // runs), context 16384 / 4096: the next call's rows (the next head's of
      // this tile, strided) 22.3-23.1 / 4.1-4.6 ms against 19.8-20.9 /
      // 4.0-4.8 ms this way; 2 tiles ahead 20.8-21.3 ms; the scales with each
      // part instead of once per tile 21.2-22.1 ms. On the AVX2 host the next
      // call's rows had beaten the burst before each call 31.7 vs 34.1 ms.
      if (in_place() && (!spread_ || (cold && t0 == block_lo / kTile * kTile))) {
        touch_rows(h0, h1, union_lo, union_hi);
      }
      for (int kv_h = h0; kv_h < h1; ++kv_h) {
        const KvHeadRows k_rows = k_head(kv_h), v_rows = v_head(kv_h);
        kv_kernels_impl::TilePrefetch next;
        if (spread_) {  // (rows that hold every head: consecutive_ runs take run_segment_by_head)
          const int64_t n_next = std::max<int64_t>(next_hi - next_lo, 0), parts = h1 - h0, part = kv_h - h0;
          next = tile_part_rows(h0, h1, next_lo + n_next * part / parts, next_lo + n_next * (part + 1) / parts);
        } else {
          prefetch_rows(k_rows, rows_.k_head_code_bytes, next_lo, next_hi);
          prefetch_rows(v_rows, rows_.v_head_code_bytes, next_lo, next_hi);
        }
        if (in_place()) {
          run_tile_in_place(k_rows, v_rows, kv_h, h0, h1, i0, i1, t0, next, s, scratch);
          continue;
        }
        int64_t k_stride = 0, v_stride = 0;
        const float* k = tile_rows(k_rows, t0, union_lo, union_hi, scratch.k.data(), &k_stride, scratch);
        const float* v = tile_rows(v_rows, t0, union_lo, union_hi, scratch.v.data(), &v_stride, scratch);
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t lo = std::max(first_key(i), t0), hi = std::min(end_key(i), t0 + kTile);
          if (lo >= hi) continue;
          const int64_t h = ((i - i0) * (h1 - h0) + (kv_h - h0)) * heads_per_kv_;
          kern_.attend_tile(k, k_stride, v, v_stride, q_ + i * q_dim_ + int64_t{kv_h} * heads_per_kv_ * head_dim_,
                            heads_per_kv_, head_dim_, scale_, static_cast<int>(lo - t0), static_cast<int>(hi - t0),
                            s.m + h, s.l + h, s.acc + h * head_dim_, scratch.scores.data());
        }
      }
    }
  }

  // run_segment where each head's rows are consecutive (consecutive_, a
  // spreading in-place kernel): head by head, each head's tiles in order
  // (the same calls, so the same bits: a head's state takes its tiles in
  // the same order), so that a call streams one contiguous run and
  // prefetches the next: the head's next tile, after its last the next
  // head's first, after the last head's last the first head's next
  // segment (prefetch_hi). With the tiles outer and the heads inner over
  // the same head-major store, BM_TiledAttentionDecode (INT8, context
  // 16384) measured 27.8-30.3 / 14.1-14.4 ms on 1 / 2 threads against
  // 25.4-26.1 / 13.2-13.6 this way.
  void run_segment_by_head(int h0, int h1, int64_t i0, int64_t i1, int64_t block_lo, int64_t block_hi,
                           int64_t prefetch_hi, StateSpan s, TileScratch& scratch, bool cold) const {
    const int64_t first_tile = block_lo / kTile * kTile;
    if (cold) touch_rows(h0, h0 + 1, block_lo, std::min(block_hi, first_tile + kTile));
    for (int kv_h = h0; kv_h < h1; ++kv_h) {
      for (int64_t t0 = first_tile; t0 < block_hi; t0 += kTile) {
        int next_h = kv_h;
        int64_t next_lo = t0 + kTile, next_hi = std::min(block_hi, t0 + 2 * kTile);
        if (next_lo >= block_hi) {  // the head's last tile of the segment
          if (kv_h + 1 < h1) {
            next_h = kv_h + 1, next_lo = block_lo, next_hi = std::min(block_hi, first_tile + kTile);
          } else {
            next_h = h0, next_hi = std::min(prefetch_hi, t0 + 2 * kTile);
          }
        }
        prefetch_scales(next_h, next_h + 1, next_lo, next_hi);
        run_tile_in_place(k_head(kv_h), v_head(kv_h), kv_h, h0, h1, i0, i1, t0, head_run(next_h, next_lo, next_hi), s,
                          scratch);
      }
    }
  }

  // out row of query i, heads of kv_h: acc / l.
  void write_output(int kv_h, int64_t i, const float* l, const float* acc, float* out) const {
    float* o = out + i * q_dim_ + int64_t{kv_h} * heads_per_kv_ * head_dim_;
    for (int h = 0; h < heads_per_kv_; ++h) {
      const float inv = 1.0f / l[h];
      for (int d = 0; d < head_dim_; ++d) o[h * head_dim_ + d] = acc[h * head_dim_ + d] * inv;
    }
  }

  void merge_heads(const float* m_b, const float* l_b, const float* acc_b, StateSpan total) const {
    for (int h = 0; h < heads_per_kv_; ++h) {
      merge_state(m_b[h], l_b[h], acc_b + h * head_dim_, total.m + h, total.l + h, total.acc + h * head_dim_,
                  head_dim_);
    }
  }

 private:
  // The K and V codes of KV heads [h0, h1) at positions [lo, hi) as a spread
  // prefetch (spread_ only), row by row; none (rows 0) when the range is
  // empty.
  kv_kernels_impl::TilePrefetch tile_part_rows(int h0, int h1, int64_t lo, int64_t hi) const {
    kv_kernels_impl::TilePrefetch p;
    if (lo >= hi) return p;
    const int64_t row = lo - rows_.first_position;
    p.k = k_head(h0).codes + row * rows_.k.row_code_bytes;
    p.v = v_head(h0).codes + row * rows_.v.row_code_bytes;
    p.stride = rows_.k.row_code_bytes;
    p.rows = static_cast<int>(hi - lo);
    p.lines = static_cast<int>(((h1 - h0) * rows_.k_head_code_bytes + 63) / 64);
    p.nta = nta_;
    return p;
  }

  // The K and V codes of one head's positions [lo, hi) as a spread prefetch
  // (consecutive_ only): one run of lines from the line holding the first
  // byte (K and V runs lie alike on lines: spread_ has the same strides).
  kv_kernels_impl::TilePrefetch head_run(int kv_h, int64_t lo, int64_t hi) const {
    kv_kernels_impl::TilePrefetch p;
    if (lo >= hi) return p;
    const int64_t row = lo - rows_.first_position;
    const uint8_t* k = k_head(kv_h).codes + row * rows_.k.row_code_bytes;
    const int64_t skew = static_cast<int64_t>(reinterpret_cast<uintptr_t>(k) & 63);
    p.k = k - skew;
    p.v = v_head(kv_h).codes + row * rows_.v.row_code_bytes - skew;
    p.rows = 1;
    p.lines = static_cast<int>((skew + (hi - lo) * rows_.k.row_code_bytes + 63) / 64);
    p.stride = int64_t{p.lines} * 64;
    p.nta = nta_;
    return p;
  }

  // One tile of one KV head for queries [i0, i1), the rows read in place.
  void run_tile_in_place(const KvHeadRows& k_rows, const KvHeadRows& v_rows, int kv_h, int h0, int h1, int64_t i0,
                         int64_t i1, int64_t t0, const kv_kernels_impl::TilePrefetch& next, StateSpan s,
                         TileScratch& scratch) const {
    const int64_t tile_row = t0 - rows_.first_position;
    const bool keys_as_rows = k_rows.key_blocks && !key_blocks_in_place_;
    const bool values_as_rows = v_rows.value_quads && !value_quads_in_place_;
    if (q8() && (keys_as_rows || values_as_rows)) {
      // The rows the call's queries see, out of the blocks (quads): the
      // kernel then reads the tile from its row 0 (the other plane's rows
      // moved to match).
      const int64_t lo = std::max(first_key(i0), t0), hi = std::min(end_key(i1 - 1), t0 + kTile);
      if (lo >= hi) return;
      const KvHeadRows k = keys_as_rows ? as_rows(k_rows, t0, lo, hi, TileScratch::rows_for(scratch.key_rows, head_dim_))
                                        : at_row(k_rows, tile_row);
      const KvHeadRows v = values_as_rows
                               ? as_rows(v_rows, t0, lo, hi, TileScratch::rows_for(scratch.value_rows, head_dim_))
                               : at_row(v_rows, tile_row);
      return run_tile_q8(k, v, 0, kv_h, h0, h1, i0, i1, t0, next, s, scratch);
    }
    if (q8()) return run_tile_q8(k_rows, v_rows, tile_row, kv_h, h0, h1, i0, i1, t0, next, s, scratch);
    kv_kernels_impl::TilePrefetch prefetch = next;  // the first call takes them (a decode step makes one call)
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t lo = std::max(first_key(i), t0), hi = std::min(end_key(i), t0 + kTile);
      if (lo >= hi) continue;
      const int64_t h = ((i - i0) * (h1 - h0) + (kv_h - h0)) * heads_per_kv_;
      const int64_t q_head = i * (q_dim_ / head_dim_) + int64_t{kv_h} * heads_per_kv_;  // first query head
      kern_.attend_tile_f16(k_rows, v_rows, t0 - rows_.first_position, q_ + q_head * head_dim_, heads_per_kv_,
                            head_dim_, scale_, static_cast<int>(lo - t0), static_cast<int>(hi - t0), s.m + h, s.l + h,
                            s.acc + h * head_dim_, scratch.scores.data(), prefetch);
      prefetch = kv_kernels_impl::TilePrefetch{};
    }
  }

  // INT8 K and V: the queries of [i0, i1) that see rows of the tile (a
  // contiguous run: first_key and end_key grow with i) in calls of up to
  // kQ8MaxPositions, so the tile's K and V are read and rearranged once per
  // call (each query's bits are those of a call of its own).
  // tile_row: the tile's first row in k_rows and v_rows.
  void run_tile_q8(const KvHeadRows& k_rows, const KvHeadRows& v_rows, int64_t tile_row, int kv_h, int h0, int h1,
                   int64_t i0, int64_t i1, int64_t t0, const kv_kernels_impl::TilePrefetch& next, StateSpan s,
                   TileScratch& scratch) const {
    const int64_t n_blocks = head_dim_ / kv_kernels_impl::kQ8Block;
    const int64_t n_head = q_dim_ / head_dim_;
    int lo[kv_kernels_impl::kQ8MaxPositions], hi[kv_kernels_impl::kQ8MaxPositions];
    kv_kernels_impl::TilePositions pos;
    pos.q_heads_stride = n_head;
    pos.state_stride = int64_t{h1 - h0} * heads_per_kv_;
    pos.lo = lo;
    pos.hi = hi;
    pos.next = next;  // the first call takes them (a decode step makes one call)
    int64_t first = -1;  // the call's first query
    pos.n = 0;
    auto flush = [&] {
      if (pos.n == 0) return;
      const int64_t h = ((first - i0) * (h1 - h0) + (kv_h - h0)) * heads_per_kv_;
      const int64_t q_head = first * n_head + int64_t{kv_h} * heads_per_kv_;
      const QueryQ8 q{q8_.codes + q_head * head_dim_, q8_.scales + q_head * n_blocks, q8_.bias + q_head * n_blocks};
      (q4_ ? kern_.attend_tile_q4_positions : kern_.attend_tile_q8_positions)(
          k_rows, v_rows, tile_row, q, pos, heads_per_kv_, head_dim_, s.m + h, s.l + h, s.acc + h * head_dim_,
          scratch.scores.data());
      pos.n = 0;
      pos.next = kv_kernels_impl::TilePrefetch{};
    };
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t lo_i = std::max(first_key(i), t0), hi_i = std::min(end_key(i), t0 + kTile);
      if (lo_i >= hi_i) continue;
      if (pos.n > 0 && i != first + pos.n) flush();  // (never: the run is contiguous) the strides need one
      if (pos.n == 0) first = i;
      lo[pos.n] = static_cast<int>(lo_i - t0);
      hi[pos.n] = static_cast<int>(hi_i - t0);
      if (++pos.n == kv_kernels_impl::kQ8MaxPositions) flush();
    }
    flush();
  }

  // Reads one byte of every line of the codes of heads [h0, h1) at
  // positions [lo, hi), in address order, before the in-place kernels read
  // the tile head by head (where a row holds every head each head's rows
  // are strided; measured so, before the edge store kept each head's rows
  // consecutive). Measured on the AVX2 host (Zen 3 VM; baton_microbench
  // BM_TiledAttentionDecode, INT8, 2 threads, 8 interleaved runs): context
  // 16384 95.8 vs 107.9 ms best, 103.1 vs 130.5 median; context 4096 24.7 vs
  // 30.0 best. Software prefetches of the same lines (T0, this tile or the
  // next) gained less or nothing there; the kernels' first load of each row
  // was where decode attention stalled.
  // (With consecutive_ each head's rows are one run: touched head by head.)
  void touch_rows(int h0, int h1, int64_t lo, int64_t hi) const {
    uint32_t sink = 0;
    auto touch = [&](const uint8_t* first, int64_t stride, int64_t span, int64_t rows) {
      for (int64_t p = 0; p < rows; ++p) {
        const uint8_t* row = first + p * stride;
        for (int64_t b = 0; b < span; b += 64) sink += *reinterpret_cast<const volatile uint8_t*>(row + b);
      }
    };
    const int64_t row = lo - rows_.first_position;
    for (const bool is_k : {true, false}) {
      const KvHeadRows& h = is_k ? rows_.k : rows_.v;
      if (consecutive_) {
        for (int kv_h = h0; kv_h < h1; ++kv_h) {
          touch((is_k ? k_head(kv_h) : v_head(kv_h)).codes + row * h.row_code_bytes, 0,
                (hi - lo) * h.row_code_bytes, 1);
        }
      } else {
        const int64_t head_code_bytes = is_k ? rows_.k_head_code_bytes : rows_.v_head_code_bytes;
        touch(h.codes + row * h.row_code_bytes + h0 * head_code_bytes, h.row_code_bytes, (h1 - h0) * head_code_bytes,
              hi - lo);
      }
    }
    asm volatile("" : : "r"(sink));  // the loads are the point; nothing uses their values
  }

  // Prefetches (to L2) the codes of positions [lo, hi) of one head.
  void prefetch_rows(const KvHeadRows& h, int64_t head_code_bytes, int64_t lo, int64_t hi) const {
    for (int64_t p = lo; p < hi; ++p) {
      const uint8_t* codes = h.codes + (p - rows_.first_position) * h.row_code_bytes;
      for (int64_t b = 0; b < head_code_bytes; b += 64) __builtin_prefetch(codes + b, 0, 2);
    }
  }

  // Prefetches (to L2) every line of the group scales (and mins) of K and V
  // at positions [lo, hi) of heads [h0, h1), once per tile for all the heads
  // of a task: whole rows, every head's (one line holds the scales of a row
  // or more), or with consecutive_ each head's run.
  void prefetch_scales(int h0, int h1, int64_t lo, int64_t hi) const {
    if (lo >= hi) return;
    if (!consecutive_) {
      prefetch_scale_rows(rows_.k, lo, hi);
      prefetch_scale_rows(rows_.v, lo, hi);
      return;
    }
    for (int kv_h = h0; kv_h < h1; ++kv_h) {
      prefetch_scale_rows(k_head(kv_h), lo, hi);
      prefetch_scale_rows(v_head(kv_h), lo, hi);
    }
  }
  void prefetch_scale_rows(const KvHeadRows& h, int64_t lo, int64_t hi) const {
    for (const uint16_t* plane : {h.scales, h.mins}) {
      if (plane == nullptr) continue;
      const auto* begin = reinterpret_cast<const uint8_t*>(plane + (lo - rows_.first_position) * h.row_groups);
      const auto* end = reinterpret_cast<const uint8_t*>(plane + (hi - rows_.first_position) * h.row_groups);
      for (const uint8_t* line = begin; line < end; line += 64) __builtin_prefetch(line, 0, 2);
      __builtin_prefetch(end - 1, 0, 2);
    }
  }

  KvHeadRows k_head(int kv_h) const { return head_offset(rows_.k, rows_.k_head_stride, rows_.k_head_scale_stride, kv_h); }
  KvHeadRows v_head(int kv_h) const { return head_offset(rows_.v, rows_.v_head_stride, rows_.v_head_scale_stride, kv_h); }
  static KvHeadRows head_offset(KvHeadRows rows, int64_t head_stride, int64_t head_scale_stride, int kv_h) {
    rows.codes += kv_h * head_stride;
    if (rows.scales != nullptr) rows.scales += kv_h * head_scale_stride;
    if (rows.mins != nullptr) rows.mins += kv_h * head_scale_stride;
    return rows;
  }
  // rows with its 0 head strides made explicit (AttentionRows).
  static AttentionRows with_head_strides(AttentionRows rows) {
    if (rows.k_head_stride == 0) rows.k_head_stride = rows.k_head_code_bytes;
    if (rows.k_head_scale_stride == 0) rows.k_head_scale_stride = rows.k_head_groups;
    if (rows.v_head_stride == 0) rows.v_head_stride = rows.v_head_code_bytes;
    if (rows.v_head_scale_stride == 0) rows.v_head_scale_stride = rows.v_head_groups;
    return rows;
  }

  // Tile [t0, t0 + kTile) of one head with rows [lo, hi) readable: F32
  // rows in place, others dequantized into `buffer` (keys in key column
  // blocks through keys_as_rows). Row r of the tile at result + r * stride.
  const float* tile_rows(const KvHeadRows& h, int64_t t0, int64_t lo, int64_t hi, float* buffer, int64_t* stride,
                         TileScratch& scratch) const {
    if (h.bits == 32) {
      *stride = h.row_code_bytes / static_cast<int64_t>(sizeof(float));
      return reinterpret_cast<const float*>(h.codes) + (t0 - rows_.first_position) * *stride;
    }
    *stride = head_dim_;
    if (h.key_blocks || h.value_quads) {
      const KvHeadRows rows =
          as_rows(h, t0, lo, hi, TileScratch::rows_for(h.key_blocks ? scratch.key_rows : scratch.value_rows, head_dim_));
      kern_.dequantize_head_rows(rows, lo - t0, hi - lo, head_dim_, buffer + (lo - t0) * head_dim_);
      return buffer;
    }
    kern_.dequantize_head_rows(h, lo - rows_.first_position, hi - lo, head_dim_, buffer + (lo - t0) * head_dim_);
    return buffer;
  }

  // rows from row `row` on (codes, scales, mins): its row 0 is that row.
  static KvHeadRows at_row(KvHeadRows rows, int64_t row) {
    rows.codes += row * rows.row_code_bytes;
    if (rows.scales != nullptr) rows.scales += row * rows.row_groups;
    if (rows.mins != nullptr) rows.mins += row * rows.row_groups;
    return rows;
  }

  // One head's keys in key column blocks (KvHeadRows::key_blocks) or values
  // in value quads at positions [lo, hi) of tile t0, as rows for kernels
  // that read rows only: into `buffer` ([kTile, head_dim], row r of the tile
  // at r * head_dim); the result's row 0 is the tile's first (its scales the
  // store's).
  // INT4 codes (nibble key blocks, nibble quads) as packed rows of head_dim
  // / 2 bytes.
  KvHeadRows as_rows(const KvHeadRows& h, int64_t t0, int64_t lo, int64_t hi, int8_t* buffer) const {
    const int64_t first = lo - rows_.first_position;
    const int64_t row_bytes = h.bits == 4 ? head_dim_ / 2 : head_dim_;
    kv_kernels_impl::rows_from_blocked(h.bits, h.key_blocks, h.codes, first, hi - lo, head_dim_,
                                       reinterpret_cast<uint8_t*>(buffer) + (lo - t0) * row_bytes, row_bytes);
    KvHeadRows rows = at_row(h, t0 - rows_.first_position);
    rows.codes = reinterpret_cast<const uint8_t*>(buffer);
    rows.row_code_bytes = row_bytes;
    rows.key_blocks = rows.value_quads = false;
    return rows;
  }

  const KvKernels& kern_;
  const int head_dim_;
  const int heads_per_kv_;
  const int64_t q_dim_;
  const int32_t window_;
  const int64_t segment_;  // attention_segment_rows(n_head_kv)
  const float scale_;
  const AttentionRows rows_;
  // Each head's rows are consecutive (the edge store; or one KV head):
  // prefetches and touches go head by head; else a row holds every head.
  const bool consecutive_;
  const int64_t pos_;
  const float* q_;
  const QueriesQ8 q8_;
  // INT4 values (and INT4 or INT8 keys) in place (attend_tile_q4_positions)
  // on the quantized queries.
  const bool q4_;
  const bool f16_rows_;
  // The kernel reads keys in key column blocks in place (INT8: the INT8
  // kernel; INT4: the INT4 kernel where it reads blocks, q4_reads_blocks);
  // else a tile's keys in blocks go through keys_as_rows first.
  const bool key_blocks_in_place_;
  // The kernel takes values in value quads (INT8: reading them in place on
  // its decode path, as rows on its others; INT4 nibble quads: where the INT4
  // kernel reads blocks) and they are allowed; else a tile's values in quads
  // go through as_rows first.
  const bool value_quads_in_place_;
  // The kernel spreads the prefetch of the rows it reads next over its
  // steps (INT8: TilePositions::next; F16: attend_tile_f16's next, in calls
  // of up to kSplitMaxQueries queries: a prefill tile's 64 one-query F16
  // calls kept the touch of the tile and the burst before each call, local
  // prefill at 8192 tokens over an F16 store 0.1835 / 0.1884 of the int8
  // peak that way against 0.1813 / 0.1862 spread, alternating runs).
  const bool spread_;
  // The spread prefetch goes to L1 as non-temporal (TilePrefetch::nta): a
  // decode-sized call, where kv_kernels_impl::attention_prefetch_nta().
  const bool nta_;
};

TileScratch& thread_scratch(int head_dim, int heads_per_kv, bool in_place) {
  thread_local TileScratch scratch;
  scratch.reserve(head_dim, heads_per_kv, in_place);
  return scratch;
}

void run_tasks(ThreadPool* pool, int64_t n_tasks, const std::function<void(int64_t, int64_t)>& fn) {
  if (pool != nullptr) {
    pool->parallel_for_dynamic(n_tasks, 1, fn);
  } else {
    fn(0, n_tasks);
  }
}

// Few queries: tasks are (block of KV heads, run of segments) pairs, each
// folding each segment of its heads for every query into its own state;
// then every query merges its segments in order. KV heads split first:
// every head reads as many rows, so tasks of whole heads weigh the same at
// any context (runs of segments do not: a context of 2.5 segments split
// into 2 runs gives one run 1.5 of them), and each head's rows are one
// contiguous run in the edge store. Runs of segments only where there are
// more threads than heads to give them.
void attend_split(const LayerAttention& a, int n_head_kv, int64_t n, float* out, ThreadPool* pool) {
  const int hpk = a.heads_per_kv(), hd = a.head_dim();
  const int64_t seg_lo = a.first_segment(0), n_seg = a.last_segment(n - 1) + 1 - seg_lo;
  // Two tasks per thread, at least 4 (measured on 2 threads: 1 and 4 runs
  // of segments per thread the same or slower than 2). From kOneHeadTaskRows
  // rows a head on, up to four a thread, so that KV heads go one a task
  // where there are that many: the threads then end within a head of each
  // other, and the cold start of each task's first tile (a task prefetches
  // only within itself) is a small part of a head. Zen 5, 2 threads, the
  // 1B shape's 8 KV heads (16 layers of an INT8 store, evicted before each
  // call, 4 against 8 tasks alternating in one process, medians of 30-40
  // pairs; a temporary switch): context 16384 1.06x / 1.08x / 1.18x, 8192
  // 1.02x, 4096 0.94x / 0.94x / 0.94x / 1.02x.
  constexpr int64_t kMinTasks = 4;
  constexpr int64_t kOneHeadTaskRows = 12288;
  const int64_t threads = pool != nullptr ? pool->size() : 1;
  int64_t wanted_tasks = std::max<int64_t>(kMinTasks, 2 * threads);
  if (n_seg * a.segment_rows() >= kOneHeadTaskRows) {
    wanted_tasks = std::max<int64_t>(wanted_tasks, std::min<int64_t>(n_head_kv, 4 * threads));
  }
  const int64_t head_blocks = std::min<int64_t>(n_head_kv, wanted_tasks);
  const int block_heads = static_cast<int>((n_head_kv + head_blocks - 1) / head_blocks);
  const int64_t n_blocks = (n_head_kv + block_heads - 1) / block_heads;
  // States of (block b, segment s): [n, block_heads, hpk] at
  // (b * n_seg + s) * task_stride (m, l; rounded up to a cache line, as the
  // tasks of two threads write them) and (b * n_seg + s) * task_heads * hd
  // (acc).
  const int64_t task_heads = n * block_heads * hpk;
  const int64_t task_stride = (task_heads + 15) / 16 * 16;
  thread_local std::vector<float> m, l, acc;
  const size_t tasks = static_cast<size_t>(n_blocks * n_seg);
  if (m.size() < tasks * task_stride) m.resize(tasks * task_stride), l.resize(tasks * task_stride);
  if (acc.size() < tasks * task_heads * hd) acc.resize(tasks * task_heads * hd);
  float *m_all = m.data(), *l_all = l.data(), *acc_all = acc.data();
  // Query i's states of KV head kv_h merged in segment order, written out.
  auto merge_head = [&](int kv_h, int64_t i) {
    thread_local std::vector<float> total_m, total_l, total_acc;  // grow only: no allocation per decode step
    if (total_m.size() < static_cast<size_t>(hpk)) total_m.resize(hpk), total_l.resize(hpk);
    if (total_acc.size() < static_cast<size_t>(hpk * hd)) total_acc.resize(static_cast<size_t>(hpk * hd));
    const StateSpan total{total_m.data(), total_l.data(), total_acc.data()};
    const int64_t block = kv_h / block_heads;
    const int64_t width = std::min<int64_t>(n_head_kv, (block + 1) * block_heads) - block * block_heads;
    reset_states(total, hpk, hd);
    for (int64_t seg = a.first_segment(i); seg <= a.last_segment(i); ++seg) {
      const int64_t part = block * n_seg + (seg - seg_lo), head = (i * width + kv_h % block_heads) * hpk;
      a.merge_heads(m_all + part * task_stride + head, l_all + part * task_stride + head,
                    acc_all + (part * task_heads + head) * hd, total);
    }
    a.write_output(kv_h, i, total.l, total.acc, out);
  };
  // A task folds a run of consecutive segments of its block (each into its
  // own state): its thread streams on across their edges, prefetching each
  // next segment's first tile, and only its first tile is read cold. A
  // block in one run (as many blocks as tasks: a decode step with at least
  // half as many KV heads as threads) is merged by its task when the run
  // ends, not in a second pass over the pool (a wake-up and a join per
  // layer); the same merges in the same order.
  const int64_t runs = std::min(n_seg, (wanted_tasks + n_blocks - 1) / n_blocks);
  run_tasks(pool, n_blocks * runs, [&](int64_t begin, int64_t end) {
    TileScratch& scratch = thread_scratch(hd, hpk, a.in_place());
    for (int64_t task = begin; task < end; ++task) {
      const int64_t block = task / runs, run = task % runs;
      const int h0 = static_cast<int>(block) * block_heads, h1 = std::min(n_head_kv, h0 + block_heads);
      const int64_t s_begin = n_seg * run / runs, s_end = n_seg * (run + 1) / runs;
      for (int64_t seg = s_begin; seg < s_end; ++seg) {
        const int64_t state = block * n_seg + seg;
        const StateSpan s{m_all + state * task_stride, l_all + state * task_stride,
                          acc_all + state * task_heads * hd};
        reset_states(s, task_heads, hd);
        a.run_segment(h0, h1, 0, n, seg_lo + seg, s, scratch, (seg_lo + s_end) * a.segment_rows(), seg == s_begin);
      }
      if (runs > 1) continue;
      for (int kv_h = h0; kv_h < h1; ++kv_h) {
        for (int64_t i = 0; i < n; ++i) merge_head(kv_h, i);
      }
    }
  });
  if (runs == 1) return;
  run_tasks(pool, n_head_kv * n, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) merge_head(static_cast<int>(task / n), task % n);
  });
}

// Many queries: tasks are (KV head, block of kQueryBlock queries), each
// folding the block's segments in order.
void attend_blocks(const LayerAttention& a, int n_head_kv, int64_t n, float* out, ThreadPool* pool) {
  const int hpk = a.heads_per_kv(), hd = a.head_dim();
  const int64_t n_blocks = (n + kQueryBlock - 1) / kQueryBlock;
  run_tasks(pool, n_head_kv * n_blocks, [&](int64_t begin, int64_t end) {
    TileScratch& scratch = thread_scratch(hd, hpk, a.in_place());
    const size_t heads = static_cast<size_t>(kQueryBlock * hpk);
    // [2, kQueryBlock * hpk]: segment states, then totals.
    if (scratch.m.size() < 2 * heads) scratch.m.resize(2 * heads), scratch.l.resize(2 * heads);
    if (scratch.acc.size() < 2 * heads * hd) scratch.acc.resize(2 * heads * hd);
    const StateSpan seg{scratch.m.data(), scratch.l.data(), scratch.acc.data()};
    const StateSpan total{seg.m + heads, seg.l + heads, seg.acc + heads * hd};
    for (int64_t task = begin; task < end; ++task) {
      const int kv_h = static_cast<int>(task / n_blocks);
      const int64_t i0 = task % n_blocks * kQueryBlock, i1 = std::min(n, i0 + kQueryBlock);
      const int64_t block_heads = (i1 - i0) * hpk;
      reset_states(total, block_heads, hd);
      for (int64_t s = a.first_segment(i0); s <= a.last_segment(i1 - 1); ++s) {
        reset_states(seg, block_heads, hd);
        a.run_segment(kv_h, kv_h + 1, i0, i1, s, seg, scratch);
        for (int64_t i = i0; i < i1; ++i) {
          if (s < a.first_segment(i) || s > a.last_segment(i)) continue;
          const int64_t h = (i - i0) * hpk;
          a.merge_heads(seg.m + h, seg.l + h, seg.acc + h * hd,
                        StateSpan{total.m + h, total.l + h, total.acc + h * hd});
        }
      }
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t h = (i - i0) * hpk;
        a.write_output(kv_h, i, total.l + h, total.acc + h * hd, out);
      }
    }
  });
}

// Every query head of the call quantized (quantize_query_q8), in per-thread
// buffers that only grow.
// nibble_order: in attend_tile_q4_positions' order (q4_query_order).
QueriesQ8 quantize_queries(const KvGeometry& g, float scale, int64_t n, const float* q, bool nibble_order) {
  thread_local std::vector<int8_t> codes;
  thread_local std::vector<float> scales;
  thread_local std::vector<int32_t> bias;
  const int64_t heads = n * g.n_head, n_blocks = g.head_dim / kv_kernels_impl::kQ8Block;
  if (codes.size() < static_cast<size_t>(heads * g.head_dim)) codes.resize(static_cast<size_t>(heads * g.head_dim));
  if (scales.size() < static_cast<size_t>(heads * n_blocks)) {
    scales.resize(static_cast<size_t>(heads * n_blocks)), bias.resize(static_cast<size_t>(heads * n_blocks));
  }
  if (const auto quantize = kv_kernels_impl::kv_kernels().quantize_queries_q8; quantize != nullptr) {
    quantize(q, heads, g.head_dim, scale, codes.data(), scales.data(), bias.data());
  } else {
    for (int64_t h = 0; h < heads; ++h) {
      kv_kernels_impl::quantize_query_q8(q + h * g.head_dim, g.head_dim, scale, codes.data() + h * g.head_dim,
                                         scales.data() + h * n_blocks, bias.data() + h * n_blocks);
    }
  }
  if (nibble_order) kv_kernels_impl::q4_query_order(codes.data(), heads * g.head_dim);
  return QueriesQ8{codes.data(), scales.data(), bias.data()};
}

}  // namespace

bool attends_int4_in_place(const kv_kernels_impl::KvHeadRows& k, const kv_kernels_impl::KvHeadRows& v,
                           int head_dim) {
  return kv_kernels_impl::kv_kernels().attend_tile_q4_positions != nullptr && kv_kernels_impl::q4_in_place_allowed() &&
         kv_kernels_impl::q4_tile_supported(k, v, head_dim);
}

void attend_tiled(const KvGeometry& geometry, int32_t window, float scale, const AttentionRows& rows, int64_t pos,
                  int64_t n, const float* q, float* out, ThreadPool* pool) {
  if (n <= 0) return;
  BATON_CHECK(geometry.n_head_kv > 0 && geometry.n_head % geometry.n_head_kv == 0);
  BATON_CHECK(rows.k.bits != 32 || rows.first_position == 0, "F32 rows start at position 0");
  // INT8 K and V in place where the kernel set has it (AVX-512, AVX2 and
  // the scalar reference level), INT4 values (INT4 or INT8 keys) where it
  // has attend_tile_q4_positions (AVX-512, AVX2), with the queries quantized
  // once per call (INT4 keys: in nibble order).
  const kv_kernels_impl::KvKernels& kern = kv_kernels_impl::kv_kernels();
  const bool q8_rows = kern.attend_tile_q8_positions != nullptr &&
                       kv_kernels_impl::q8_tile_supported(rows.k, rows.v, geometry.head_dim);
  const bool q4_rows = attends_int4_in_place(rows.k, rows.v, geometry.head_dim);
  const QueriesQ8 q8 =
      q8_rows || q4_rows ? quantize_queries(geometry, scale, n, q, q4_rows && rows.k.bits == 4) : QueriesQ8{};
  const LayerAttention a(geometry, window, scale, rows, pos, q, q8, n);
  BATON_CHECK(a.first_key(0) >= rows.first_position, "the rows do not hold the keys of the queries");
  if (n <= kSplitMaxQueries) {
    attend_split(a, geometry.n_head_kv, n, out, pool);
  } else {
    attend_blocks(a, geometry.n_head_kv, n, out, pool);
  }
}

}  // namespace baton
