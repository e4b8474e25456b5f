// QuantizedKvCache: the row layout and the sliding-window layers (see the
// header). A full layer keeps `capacity` rows, row r = position r. A
// windowed layer keeps layer_rows() rows, row r = position base + r: writes
// past its last row slide it forward (the rows still inside move to the
// front; amortized one row moved per kWindowSlackTokens / window tokens
// written), so the keys one query sees are always consecutive rows and
// attend runs the same kernels as on a full layer.
#include <algorithm>
#include <cstring>

#include "common/kv_cache/quantized_kv_cache.h"
#include "common/model/layer_window.h"
#include "common/util/check.h"

namespace baton {
int64_t QuantizedKvCache::layer_rows(int32_t window, int64_t capacity_tokens) {
  if (window <= 0) return capacity_tokens;
  return std::min(capacity_tokens, int64_t{window} + kWindowSlackTokens);
}

int64_t QuantizedKvCache::memory_bytes_for(const KvCodecConfig& config, const KvGeometry& geometry,
                                           int64_t capacity_tokens) {
  return memory_bytes_for(config, geometry, capacity_tokens,
                          uses_key_blocks(config, geometry) || uses_value_quads(config, geometry));
}

int64_t QuantizedKvCache::memory_bytes_for(const KvCodecConfig& config, const KvGeometry& geometry,
                                           int64_t capacity_tokens, bool blocked) {
  KvGeometry one_layer = geometry;
  one_layer.n_layer = 1;
  one_layer.layer_window.clear();
  const int64_t row_bytes = bytes_per_token(config, one_layer);  // K and V of one token, one layer
  int64_t rows = 0;
  for (int layer = 0; layer < geometry.n_layer; ++layer) {
    const int32_t window = geometry.window(layer);
    const int64_t kept = layer_rows(window, capacity_tokens);
    rows += run_rows(kept, layer_holds_blocks(blocked, window));
    // A layer that slides keeps up to window - 1 rows aside for a rollback.
    if (window > 0 && kept < capacity_tokens) rows += window - 1;
  }
  return rows * row_bytes;
}

void QuantizedKvCache::resize_plane(Plane& plane, int64_t rows) {
  plane.codes.assign(static_cast<size_t>(rows * plane.row_code_bytes), 0);
  plane.scales.assign(static_cast<size_t>(rows * plane.row_groups), 0);
  if (plane.bits == KvCodecConfig::Bits::kInt4) plane.mins.assign(static_cast<size_t>(rows * plane.row_groups), 0);
}

void QuantizedKvCache::copy_rows(const Plane& from, Run from_run, int64_t from_row, Plane& to, Run to_run,
                                 int64_t to_row, int64_t n) {
  if (n <= 0) return;
  // An F16 plane has no scales or mins: an empty vector's data() may be null,
  // and memmove with a null pointer is undefined even for 0 bytes.
  auto move = [](auto* dst, const auto* src, size_t bytes) {
    if (bytes > 0) std::memmove(dst, src, bytes);
  };
  BATON_CHECK(from.blocked_in(from_run) == to.blocked_in(to_run), "rows move between runs of one layout");
  if (from.blocked_in(from_run)) {
    // Key column blocks or value quads (full layers only: a relayout's whole
    // layers, from row 0 to row 0): whole blocks, the rows past n in the last
    // one too (rows past what a layer keeps, which nothing reads).
    BATON_CHECK(from_row == 0 && to_row == 0, "blocked planes move by whole blocks");
    n = run_rows(n, true);
  }
  // Head by head: each head's rows are consecutive in a run.
  const size_t code_bytes = static_cast<size_t>(n * from.head_code_bytes());
  const size_t scale_bytes = static_cast<size_t>(n * from.head_groups()) * sizeof(uint16_t);
  for (int h = 0; h < from.heads; ++h) {
    move(to.codes.data() + to.code_at(to_run, h, to_row), from.codes.data() + from.code_at(from_run, h, from_row),
         code_bytes);
    const int64_t to_at = to.scale_at(to_run, h, to_row), from_at = from.scale_at(from_run, h, from_row);
    move(to.scales.data() + to_at, from.scales.data() + from_at, scale_bytes);
    if (!from.mins.empty()) move(to.mins.data() + to_at, from.mins.data() + from_at, scale_bytes);
  }
}

void QuantizedKvCache::lay_out(int64_t capacity_tokens) {
  const int n_layer = geometry_.n_layer;
  layer_offset_.assign(static_cast<size_t>(n_layer), 0);
  layer_rows_.assign(static_cast<size_t>(n_layer), 0);
  layer_base_.assign(static_cast<size_t>(n_layer), 0);
  int64_t rows = 0;
  for (int layer = 0; layer < n_layer; ++layer) {
    layer_offset_[layer] = rows;
    layer_rows_[layer] = layer_rows(geometry_.window(layer), capacity_tokens);
    rows += run_rows(layer_rows_[layer], layer_blocked(layer));
  }
  resize_plane(k_, rows);
  resize_plane(v_, rows);
  rollback_.resize(static_cast<size_t>(n_layer));
}

std::pair<int64_t, int64_t> QuantizedKvCache::held_positions(int layer) const {
  return {layer_base_[layer], layer_base_[layer] + layer_rows_[layer]};
}

bool QuantizedKvCache::holds_window_for(int64_t n) const {
  for (int layer = 0; layer < geometry_.n_layer; ++layer) {
    if (geometry_.window(layer) <= 0) continue;
    const auto [first, end] = held_positions(layer);
    if (window_first_kept_position(geometry_.window(layer), n) < first || n > end) return false;
  }
  return true;
}

void QuantizedKvCache::pin_rollback_point() {
  rollback_point_ = size_;
  for (RollbackRows& r : rollback_) r = RollbackRows{};  // gives the rows back until a slide needs them
}

int64_t QuantizedKvCache::make_room(int layer, int64_t pos, int64_t n) {
  if (geometry_.window(layer) <= 0) return pos;
  const int64_t rows = layer_rows_[layer];
  int64_t& base = layer_base_[layer];
  const int64_t end = pos + n;
  if (pos >= base && end <= base + rows) return pos;
  // Slide forward so the layer ends at `end` (below the held rows: start
  // over at pos); what leaves is kept aside if a rollback needs it.
  const int64_t new_base = pos >= base ? end - rows : std::max(pos, end - rows);
  save_for_rollback(layer, base, std::min(base + rows, pos >= base ? new_base : base + rows));
  const int64_t keep = pos >= base ? std::max<int64_t>(0, base + rows - new_base) : 0;
  const Run run = layer_run(layer);
  copy_rows(k_, run, new_base - base, k_, run, 0, keep);
  copy_rows(v_, run, new_base - base, v_, run, 0, keep);
  base = new_base;
  return std::max(pos, new_base);
}

void QuantizedKvCache::save_for_rollback(int layer, int64_t from, int64_t to) {
  const int32_t window = geometry_.window(layer);
  const int64_t first = window_first_kept_position(window, rollback_point_);
  from = std::max(from, first);
  to = std::min(to, rollback_point_);
  if (from >= to) return;
  RollbackRows& r = rollback_[layer];
  if (r.saved.empty()) {
    r.k = k_.shape();
    r.v = v_.shape();
    resize_plane(r.k, window - 1);
    resize_plane(r.v, window - 1);
    r.saved.assign(static_cast<size_t>(window - 1), 0);
  }
  // The first save of a position holds its committed rows; keep it.
  const Run aside{0, window - 1};
  for (int64_t pos = from; pos < to; ++pos) {
    uint8_t& saved = r.saved[static_cast<size_t>(pos - first)];
    if (saved) continue;
    copy_rows(k_, layer_run(layer), row_of(layer, pos), r.k, aside, pos - first, 1);
    copy_rows(v_, layer_run(layer), row_of(layer, pos), r.v, aside, pos - first, 1);
    saved = 1;
  }
}

void QuantizedKvCache::restore_windows(int64_t n) {
  for (int layer = 0; layer < geometry_.n_layer; ++layer) {
    const int32_t window = geometry_.window(layer);
    if (window <= 0) continue;
    int64_t& base = layer_base_[layer];
    const int64_t rows = layer_rows_[layer];
    const int64_t first = window_first_kept_position(window, n);
    if (first >= base && n <= base + rows) continue;  // still held
    // Gather [first, n) from the held rows and the rows kept aside.
    const RollbackRows& r = rollback_[layer];
    const int64_t aside_first = window_first_kept_position(window, rollback_point_);
    Plane k = k_.shape(), v = v_.shape();
    resize_plane(k, n - first);
    resize_plane(v, n - first);
    const Run gathered{0, n - first}, aside{0, window - 1}, held = layer_run(layer);
    bool complete = true;
    for (int64_t pos = first; pos < n && complete; ++pos) {
      if (pos >= base && pos < base + rows) {
        copy_rows(k_, held, row_of(layer, pos), k, gathered, pos - first, 1);
        copy_rows(v_, held, row_of(layer, pos), v, gathered, pos - first, 1);
      } else if (pos >= aside_first && pos < rollback_point_ && !r.saved.empty() &&
                 r.saved[static_cast<size_t>(pos - aside_first)]) {
        copy_rows(r.k, aside, pos - aside_first, k, gathered, pos - first, 1);
        copy_rows(r.v, aside, pos - aside_first, v, gathered, pos - first, 1);
      } else {
        complete = false;
      }
    }
    if (!complete) {
      // The window of n is gone: hold nothing before n (attend checks it;
      // holds_window_for tells the caller to recompute).
      base = n;
      continue;
    }
    base = first;
    copy_rows(k, gathered, 0, k_, held, 0, n - first);
    copy_rows(v, gathered, 0, v_, held, 0, n - first);
  }
}

}  // namespace baton
