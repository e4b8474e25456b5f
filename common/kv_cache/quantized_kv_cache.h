// QuantizedKvCache: the edge's KV store. Holds K and V in the codec's
// quantized form (F16, INT8 or INT4 with per-token groups along head_dim; K
// and V each with their own bits and group, e.g. int4-k8: INT8 keys, INT4
// values) and attends over it directly (DESIGN.md "Edge memory"): the tiled
// attention (tiled_attention.h) reads INT8 and F16 tiles of 128 positions in
// place and dequantizes other tiles one KV head at a time into a small
// per-thread buffer, never the whole cache.
//
// Layout choice: keys are always stored post-RoPE in per-token groups, so a
// decode step appends one token without touching earlier ones. Blocks from
// the wire whose config agrees (same bits, group size and Hadamard flags of
// that kind;
// keys per-token and post-RoPE) are copied in as they are (ingest_block);
// per-channel (KIVI) or pre-RoPE keys are decoded to f32 by the codec
// (decode_kv_block applies RoPE) and requantized here by store().
// With hadamard_keys the stored keys are rotated and attend() rotates each
// query head the same way (q.k is invariant); with hadamard_values attend()
// rotates each head's output back.
#pragma once

#include <cstdint>
#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv_cache/kv_cache.h"
#include "common/kv_codec/kv_codec.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_codec/kv_kernels.h"
#include "common/util/huge_page_buffer.h"

namespace baton {

class QuantizedKvCache final : public KvCache, public KvBlockIngest {
 public:
  // `config`: bits, key_bits, group_size, key_group_size, hadamard flags;
  // key_axis must be per-token and pre_rope_keys false (see above); layout
  // and zstd_level are ignored.
  static absl::StatusOr<std::unique_ptr<QuantizedKvCache>> Create(const KvGeometry& geometry,
                                                                  int64_t capacity_tokens,
                                                                  const KvCodecConfig& config);
  // The store config that holds blocks of `wire`: same bits (keys and
  // values), groups and Hadamard flags; per-token, post-RoPE keys (whose group
  // is the value group when the wire's keys are per-channel); no layout /
  // zstd choices.
  static KvCodecConfig store_config_for(const KvCodecConfig& wire);
  // Bytes one token takes over all layers, K and V (codes plus scales/mins).
  static int64_t bytes_per_token(const KvCodecConfig& config, const KvGeometry& geometry);

  const KvGeometry& geometry() const override { return geometry_; }
  int64_t capacity() const override { return capacity_; }
  int64_t size() const override { return size_; }
  // k, v: f32 [n, n_head_kv * head_dim]; k post-RoPE. Quantized as the codec
  // would quantize the same rows (bit-identical to an ingested block).
  absl::Status store(int layer, int64_t pos, int64_t n, const float* k, const float* v) override;
  void attend(int layer, int64_t pos, int64_t n, const float* q, float* out, ThreadPool* pool) const override;
  void set_size(int64_t n) override;
  // Grows the capacity to `new_capacity_tokens` (a session's KV between
  // turns): the planes are laid out [n_layer, capacity, row], so every layer's
  // rows move to the new stride; the stored tokens stay bit-identical (and
  // rows past size() too). Never shrinks: a capacity at or under the current
  // one is a no-op. INVALID_ARGUMENT for a negative capacity.
  absl::Status reserve(int64_t new_capacity_tokens);
  // Gives back capacity above `capacity_tokens` (a failed turn returns what
  // it reserved): rows [0, capacity_tokens) stay bit-identical. A capacity at
  // or above the current one is a no-op; INVALID_ARGUMENT below size().
  absl::Status shrink_to(int64_t capacity_tokens);

  const KvCodecConfig& config() const { return config_; }
  int64_t bytes_per_token() const { return bytes_per_token(config_, geometry_); }
  // Bytes held for the whole capacity (sliding-window layers: their rows only).
  int64_t memory_bytes() const { return memory_bytes_for(config_, geometry_, capacity_, blocked()); }

  // Sliding-window layers (geometry.layer_window) keep only the rows a later
  // query can see, in a window of window + kWindowSlackTokens rows that
  // slides forward as positions are written (the slack lets a micro-batch of
  // up to kWindowSlackTokens + 1 queries attend over its own keys; the
  // engine's micro-batch is 64). A turn may write far past the window and
  // still roll back (set_size below size()): the rows of the window before
  // pin_rollback_point() that a write pushes out are kept aside (at most
  // window - 1 rows per layer) until the next pin.
  static constexpr int64_t kWindowSlackTokens = 64;
  // Rows a layer keeps for a store of `capacity_tokens`: the capacity for a
  // full layer, else min(capacity, window + kWindowSlackTokens).
  static int64_t layer_rows(int32_t window, int64_t capacity_tokens);
  // Bytes a store of `capacity_tokens` holds, rollback rows of windowed layers
  // included (what the memory planner counts).
  static int64_t memory_bytes_for(const KvCodecConfig& config, const KvGeometry& geometry, int64_t capacity_tokens);
  // Whether a store made now with this config keeps its INT8 keys in key
  // column blocks (kv_kernels.h KvHeadRows::key_blocks): INT8 keys, a full
  // layer to hold them (its full layers do; a sliding-window layer keeps rows:
  // its window moves rows off block edges, layer_holds_blocks), head_dim a
  // multiple of kQ8Block, and the active kernels read the blocks in place
  // (q8_key_blocks_active). Each such layer's rows then run to a multiple of
  // kKeyBlockRows (memory_bytes_for counts them). export_block and
  // ingest_block move rows in and out of the blocks: the wire, a saved
  // session and attention's bits do not depend on it.
  static bool uses_key_blocks(const KvCodecConfig& config, const KvGeometry& geometry);
  // The same for INT8 values in value quads (KvHeadRows::value_quads): INT8
  // values in groups of whole 32-dim blocks, a full layer, and the
  // AVX-512 kernels' decode value product takes quads (q8_value_quads_active).
  // INT4 codes the same (nibble key blocks, nibble quads: kv_kernels.h
  // blocked_from_rows) where the INT4 kernel reads them in place
  // (q4_reads_blocks, q4_in_place_allowed): INT4 values with INT4 or INT8
  // keys, groups of whole 32-dim blocks, head_dim a multiple of 64.
  static bool uses_value_quads(const KvCodecConfig& config, const KvGeometry& geometry);
  bool key_blocks() const { return k_.key_blocks; }
  bool value_quads() const { return v_.value_quads; }
  // Whether attend() reads this store's INT4 values in place on quantized
  // queries now (attends_int4_in_place, tiled_attention.h), not dequantizing
  // each tile.
  bool int4_in_place() const;
  // Positions [first, end) whose rows `layer` holds now: [0, capacity) on a
  // full layer.
  std::pair<int64_t, int64_t> held_positions(int layer) const;
  // True when every sliding-window layer holds the keys a query at position
  // n sees, [n - window + 1, n): false after a rollback to a point whose
  // window was pushed out (or never received: a stream carries W - 1 rows),
  // where the caller recomputes from an earlier position (set_size(0)).
  bool holds_window_for(int64_t n) const;
  // Makes size() the point a later set_size may roll back to (a turn's start).
  void pin_rollback_point();

  // KvBlockIngest (kv_cache.h): blocks whose config agrees with the store's
  // for that kind are copied in as they are.
  KvBlockIngest* block_ingest() override { return this; }
  bool can_ingest(const KvCodecConfig& wire, bool is_key) const override;
  absl::Status ingest_block(int layer, bool is_key, int64_t token_begin, const QuantizedKvBlock& block) override;
  // The stored tokens [token_begin, token_begin + n_tokens) of one layer's K
  // or V, in this store's config (e.g. to save a session or a prefix pack).
  // OUT_OF_RANGE for positions a sliding-window layer no longer holds.
  absl::StatusOr<QuantizedKvBlock> export_block(int layer, bool is_key, int64_t token_begin,
                                                int64_t n_tokens) const;

 private:
  // Rows [first, first + count) of a plane that are laid out together, head
  // by head (Plane::code_at, scale_at). A layer's rows are one run; so are
  // the rows a rollback keeps aside and a restore gathers.
  struct Run {
    int64_t first = 0, count = 0;
    // The run holds its plane's blocked layouts (the plane's key_blocks /
    // value_quads): a full layer of a store that uses them. A sliding-window
    // layer keeps rows (its window moves rows off block edges), as do the
    // rows kept aside for a rollback and gathered back.
    bool blocked = false;
  };
  // All layers' K or V: per token and KV head a row of codes and a row of
  // group scales, in runs of rows (Run): a layer's rows, head by head inside
  // the run, so that one head's rows (codes, scales, mins) are consecutive:
  // decode attention reads a head's tiles as contiguous runs (the hardware
  // prefetchers follow them, a block's scales are one load) where rows that
  // held every head made each head's rows strided.
  struct Plane {
    KvCodecConfig::Bits bits;
    int group;                     // elements per scale group along head_dim (quantized)
    int64_t row_code_bytes;        // code bytes per token per layer: kv_dim * bits / 8
    int64_t row_groups;            // scale groups per token per layer: kv_dim / group (0 for F16)
    int heads;                     // KV heads
    bool key_blocks = false;       // INT8 / INT4 keys: each head's codes in key column blocks (uses_key_blocks)
    bool value_quads = false;      // INT8 / INT4 values: each head's codes in value quads (uses_value_quads)
    std::vector<uint8_t, PlaneAllocator<uint8_t>> codes;  // [rows, row_code_bytes] in runs, head-major in a run
    std::vector<uint16_t, PlaneAllocator<uint16_t>> scales;  // f16 [rows, row_groups], the same runs
    std::vector<uint16_t, PlaneAllocator<uint16_t>> mins;    // f16, INT4 only, same shape
    int64_t head_code_bytes() const { return row_code_bytes / heads; }
    int64_t head_groups() const { return row_groups / heads; }
    // Where head h's row r (0 <= r < run.count) of a run starts: in codes,
    // and in scales (and mins).
    int64_t code_at(Run run, int h, int64_t r) const {
      return run.first * row_code_bytes + (h * run.count + r) * head_code_bytes();
    }
    int64_t scale_at(Run run, int h, int64_t r) const {
      return run.first * row_groups + (h * run.count + r) * head_groups();
    }
    // The same shape, no rows.
    Plane shape() const {
      return Plane{bits, group, row_code_bytes, row_groups, heads, key_blocks, value_quads, {}, {}, {}};
    }
    bool blocked() const { return key_blocks || value_quads; }
    // Keys in key column blocks / values in value quads in `run`.
    bool key_blocks_in(const Run& run) const { return key_blocks && run.blocked; }
    bool value_quads_in(const Run& run) const { return value_quads && run.blocked; }
    bool blocked_in(const Run& run) const { return blocked() && run.blocked; }
  };
  // Whether a layer holds the blocked layouts: the store uses them
  // (store_blocked) and the layer is full (a sliding-window layer keeps rows).
  static bool layer_holds_blocks(bool store_blocked, int32_t window) { return store_blocked && window <= 0; }
  bool layer_blocked(int layer) const { return layer_holds_blocks(blocked(), geometry_.window(layer)); }
  // A layer's run at `offset` for `rows` rows (whole blocks when blocked).
  static Run run_at(int64_t offset, int64_t rows, bool blocked) { return Run{offset, run_rows(rows, blocked), blocked}; }
  Run layer_run(int layer) const { return run_at(layer_offset_[layer], layer_rows_[layer], layer_blocked(layer)); }
  // KV head 0's rows of a plane's run, as attention reads them.
  static kv_kernels_impl::KvHeadRows head0_rows(const Plane& p, const Run& run);
  // Keys in key column blocks or values in value quads: runs of whole blocks.
  bool blocked() const { return k_.blocked() || v_.blocked(); }
  // Rows a layer's run takes for `rows` rows: whole key column blocks (16
  // rows, a multiple of a value quad's 4) when blocked.
  static int64_t run_rows(int64_t rows, bool blocked) {
    static_assert(kv_kernels_impl::kKeyBlockRows % kv_kernels_impl::kValueQuadRows == 0);
    return blocked ? (rows + kv_kernels_impl::kKeyBlockRows - 1) / kv_kernels_impl::kKeyBlockRows *
                         kv_kernels_impl::kKeyBlockRows
                   : rows;
  }
  static int64_t memory_bytes_for(const KvCodecConfig& config, const KvGeometry& geometry, int64_t capacity_tokens,
                                  bool blocked);
  // Rows [r, r + n) of a plane's run against row-major rows (codes [n,
  // row_code_bytes], scales and mins [n, row_groups]: a wire block's form;
  // mins null for none): kIntoRun copies those rows into the run (store,
  // ingest), else the run's rows out to them (export).
  template <bool kIntoRun, typename PlaneT, typename Byte, typename Half>
  static void move_rows(PlaneT& plane, Run run, int64_t r, int64_t n, Byte* codes, Half* scales, Half* mins);

  QuantizedKvCache(const KvGeometry& geometry, int64_t capacity_tokens, const KvCodecConfig& config);
  // Rows [r, r + n) of `run` from f32 rows x [n, kv_dim].
  void quantize_rows(const float* x, int64_t n, Plane& plane, Run run, int64_t r) const;
  absl::Status check_range(int layer, int64_t token_begin, int64_t n_tokens) const;

  // Sliding-window bookkeeping (quantized_kv_window.cc). Row of `pos` in the
  // layer's run; the layer must hold it.
  int64_t row_of(int layer, int64_t pos) const { return pos - layer_base_[layer]; }
  // Row layout for `capacity_tokens`: offsets, rows, bases (a fresh store).
  void lay_out(int64_t capacity_tokens);
  // Slides a windowed layer so that it holds [pos, pos + n) (the last rows of
  // it when n exceeds the layer's rows), keeping the window before pos as far
  // as the rows allow; returns the first position of the range it holds.
  int64_t make_room(int layer, int64_t pos, int64_t n);
  // Keeps aside the rows of positions [from, to) that a rollback to the
  // pinned point needs.
  void save_for_rollback(int layer, int64_t from, int64_t to);
  // After a rollback to n: every windowed layer holds [n - window + 1, n)
  // again (from its rows and the rows kept aside) where it can.
  void restore_windows(int64_t n);
  // Copies rows [from_row, from_row + n) of a run of `from` to rows [to_row,
  // ...) of a run of `to` (planes of the same shape; the runs may be the
  // same, the rows may overlap).
  static void copy_rows(const Plane& from, Run from_run, int64_t from_row, Plane& to, Run to_run, int64_t to_row,
                        int64_t n);
  static void resize_plane(Plane& plane, int64_t rows);
  // Sliding-window attention: the first key a query at `query_pos` of `layer`
  // sees (0 on a full layer); positions below it are never read.
  int64_t first_visible_key(int layer, int64_t query_pos) const;

  KvGeometry geometry_;
  int64_t capacity_;
  KvCodecConfig config_;
  int64_t size_ = 0;
  // Moves every layer's rows to the layout of `new_capacity_tokens`, keeping
  // min(old, new) rows per full layer (the newest rows of a windowed one);
  // rows past them are zero.
  void relayout(int64_t new_capacity_tokens);
  Plane k_, v_;
  // Per layer: first row in the planes, rows kept, position of its first row.
  std::vector<int64_t> layer_offset_, layer_rows_, layer_base_;
  // Rollback rows of windowed layers: positions [rollback_point_ - window + 1,
  // rollback_point_) pushed out since the pin, row = position - that start.
  struct RollbackRows {
    Plane k, v;
    std::vector<uint8_t> saved;  // [window - 1]: 1 where the row holds its position
  };
  std::vector<RollbackRows> rollback_;
  int64_t rollback_point_ = 0;
};

}  // namespace baton
