#include "common/kv_cache/quantized_kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_format.h"
#include "common/cpu/ops.h"
#include "common/kv_cache/tiled_attention.h"
#include "common/kv_codec/kv_kernels.h"
#include "common/kv_codec/kv_quant.h"
#include "common/model/layer_window.h"
#include "common/util/check.h"
#include "common/util/thread_pool.h"

namespace baton {
namespace {

using Bits = KvCodecConfig::Bits;

int64_t code_bytes_per_row(Bits bits, const KvGeometry& g) {
  switch (bits) {
    case Bits::kF16:
      return 2 * g.kv_dim();
    case Bits::kInt8:
      return g.kv_dim();
    case Bits::kInt4:
      return g.kv_dim() / 2;
  }
  return 0;
}

int64_t groups_per_row(Bits bits, int group, const KvGeometry& g) {
  return bits != Bits::kF16 ? g.kv_dim() / group : 0;
}

// Bytes of one token's row of one layer's K (is_key) or V: codes, scales, mins.
int64_t row_bytes(const KvCodecConfig& c, const KvGeometry& g, bool is_key) {
  const Bits bits = c.bits_for(is_key);
  const int64_t scale_arrays = bits == Bits::kInt4 ? 2 : 1;
  return code_bytes_per_row(bits, g) + 2 * scale_arrays * groups_per_row(bits, c.group_size_for(is_key), g);
}

}  // namespace

absl::StatusOr<std::unique_ptr<QuantizedKvCache>> QuantizedKvCache::Create(const KvGeometry& geometry,
                                                                            int64_t capacity_tokens,
                                                                            const KvCodecConfig& config) {
  if (absl::Status st = config.validate(geometry); !st.ok()) return st;
  if (config.quantized() && config.key_axis != KvCodecConfig::KeyAxis::kPerToken) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV store codec %s: the store keeps keys in per-token groups (per-channel keys are requantized on "
        "ingest); use %s",
        config.to_string(), store_config_for(config).to_string()));
  }
  if (config.pre_rope_keys) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV store codec %s: the store keeps post-RoPE keys; use %s", config.to_string(),
        store_config_for(config).to_string()));
  }
  if (geometry.n_layer < 1 || geometry.n_head < geometry.n_head_kv || geometry.n_head % geometry.n_head_kv != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("KV store: bad geometry (%d layers, %d heads, %d kv heads)",
                                                      geometry.n_layer, geometry.n_head, geometry.n_head_kv));
  }
  if (capacity_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrFormat("KV store: negative capacity %d", capacity_tokens));
  }
  return std::unique_ptr<QuantizedKvCache>(new QuantizedKvCache(geometry, capacity_tokens, config));
}

KvCodecConfig QuantizedKvCache::store_config_for(const KvCodecConfig& wire) {
  KvCodecConfig c;
  // The transform codec: INT8 with groups of 32 (its INT8 rows' form).
  c.bits = wire.bits;
  c.key_bits = wire.key_bits;
  c.group_size = wire.group_size;
  // Per-channel wire keys are requantized in per-token groups of the value
  // group (the wire's key group spans tokens).
  if (wire.key_axis == KvCodecConfig::KeyAxis::kPerToken) c.key_group_size = wire.key_group_size;
  c.hadamard_keys = wire.hadamard_keys;
  c.hadamard_values = wire.hadamard_values;
  return c;
}

int64_t QuantizedKvCache::bytes_per_token(const KvCodecConfig& config, const KvGeometry& geometry) {
  return (row_bytes(config, geometry, /*is_key=*/true) + row_bytes(config, geometry, /*is_key=*/false)) *
         geometry.n_layer;
}

namespace {

// INT4 codes the INT4 kernel reads in place in blocked layouts
// (kv_kernels.h, q4_reads_blocks): INT4 values with INT4 or INT8 keys, groups
// of whole 32-dim blocks, head_dim a multiple of 64, the in-place path allowed
// (BATON_INT4_IN_PLACE=0 keeps rows, the dequantizing path's layout).
bool q4_blockable(const KvCodecConfig& config, const KvGeometry& geometry) {
  const Bits k = config.bits_for(/*is_key=*/true), v = config.bits_for(/*is_key=*/false);
  return kv_kernels_impl::kv_kernels().q4_reads_blocks && kv_kernels_impl::q4_in_place_allowed() &&
         v == Bits::kInt4 && (k == Bits::kInt4 || k == Bits::kInt8) && geometry.head_dim % 64 == 0 &&
         config.group_size_for(/*is_key=*/true) % kv_kernels_impl::kQ8Block == 0 &&
         config.group_size_for(/*is_key=*/false) % kv_kernels_impl::kQ8Block == 0;
}

// INT8 (or INT4: q4_blockable) codes of this kind a blocked layout may hold:
// head_dim what the INT8 kernels take, and a full layer to hold them (a
// sliding-window layer keeps rows: its window moves rows off block edges;
// layer_holds_blocks).
bool blockable(const KvCodecConfig& config, const KvGeometry& geometry, bool is_key) {
  const Bits bits = config.bits_for(is_key);
  if (bits != Bits::kInt8 && !(bits == Bits::kInt4 && q4_blockable(config, geometry))) return false;
  if (geometry.head_dim % kv_kernels_impl::kQ8Block != 0 || geometry.head_dim > kv_kernels_impl::kQ8MaxHeadDim) {
    return false;
  }
  for (int layer = 0; layer < geometry.n_layer; ++layer) {
    if (geometry.window(layer) <= 0) return true;
  }
  return false;
}

}  // namespace

bool QuantizedKvCache::uses_key_blocks(const KvCodecConfig& config, const KvGeometry& geometry) {
  return blockable(config, geometry, /*is_key=*/true) && kv_kernels_impl::q8_key_blocks_active();
}

bool QuantizedKvCache::uses_value_quads(const KvCodecConfig& config, const KvGeometry& geometry) {
  return blockable(config, geometry, /*is_key=*/false) && config.group_size_for(/*is_key=*/false) % 32 == 0 &&
         kv_kernels_impl::kv_kernels().q8_reads_value_quads && kv_kernels_impl::q8_value_quads_active();
}

QuantizedKvCache::QuantizedKvCache(const KvGeometry& geometry, int64_t capacity_tokens,
                                   const KvCodecConfig& config)
    : geometry_(geometry),
      capacity_(capacity_tokens),
      config_(config) {
  for (bool is_key : {true, false}) {
    Plane& p = is_key ? k_ : v_;
    p.bits = config.bits_for(is_key);
    p.group = config.group_size_for(is_key);
    p.row_code_bytes = code_bytes_per_row(p.bits, geometry);
    p.row_groups = groups_per_row(p.bits, p.group, geometry);
    p.heads = geometry.n_head_kv;
  }
  k_.key_blocks = uses_key_blocks(config, geometry);
  v_.value_quads = uses_value_quads(config, geometry);
  lay_out(capacity_tokens);
}

void QuantizedKvCache::quantize_rows(const float* x, int64_t n, Plane& plane, Run run, int64_t r) const {
  const int64_t elements = n * geometry_.kv_dim();
  // Row-major first (a wire block's form), then head by head into the run.
  // Groups divide head_dim, so quantizing the n rows as one run of elements
  // gives the same groups as per row and head.
  thread_local std::vector<uint8_t> codes;
  thread_local std::vector<uint16_t> scales, mins;  // grow only: no allocation per decode step
  codes.resize(std::max(codes.size(), static_cast<size_t>(n * plane.row_code_bytes)));
  scales.resize(std::max(scales.size(), static_cast<size_t>(n * plane.row_groups)));
  if (plane.bits == Bits::kInt4) mins.resize(std::max(mins.size(), static_cast<size_t>(n * plane.row_groups)));
  switch (plane.bits) {
    case Bits::kF16:
      kv_quant::f32_to_f16(x, reinterpret_cast<uint16_t*>(codes.data()), elements);
      break;
    case Bits::kInt8:
      kv_quant::quantize_int8_groups(x, elements, plane.group, reinterpret_cast<int8_t*>(codes.data()),
                                     scales.data());
      break;
    case Bits::kInt4:
      kv_quant::quantize_int4_groups(x, elements, plane.group, codes.data(), scales.data(), mins.data());
      break;
  }
  move_rows<true>(plane, run, r, n, codes.data(), scales.data(), plane.bits == Bits::kInt4 ? mins.data() : nullptr);
}

template <bool kIntoRun, typename PlaneT, typename Byte, typename Half>
void QuantizedKvCache::move_rows(PlaneT& plane, Run run, int64_t r, int64_t n, Byte* codes, Half* scales,
                                 Half* mins) {
  auto copy = [](auto* in_run, auto* in_rows, size_t bytes) {
    if constexpr (kIntoRun) {
      std::memcpy(in_run, in_rows, bytes);
    } else {
      std::memcpy(in_rows, in_run, bytes);
    }
  };
  const int64_t hb = plane.head_code_bytes(), hg = plane.head_groups();
  const bool blocked = plane.blocked_in(run);
  for (int h = 0; h < plane.heads; ++h) {
    if (blocked) {  // hb = head_dim codes a row (INT8), head_dim / 2 bytes (INT4)
      auto* head = plane.codes.data() + plane.code_at(run, h, 0);
      const int bits = plane.bits == Bits::kInt4 ? 4 : 8;
      const int head_dim = static_cast<int>(bits == 4 ? 2 * hb : hb);
      if constexpr (kIntoRun) {
        kv_kernels_impl::blocked_from_rows(bits, plane.key_blocks, reinterpret_cast<const uint8_t*>(codes) + h * hb,
                                           plane.row_code_bytes, r, n, head_dim, head);
      } else {
        kv_kernels_impl::rows_from_blocked(bits, plane.key_blocks, head, r, n, head_dim,
                                           reinterpret_cast<uint8_t*>(codes) + h * hb, plane.row_code_bytes);
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      if (!blocked) {
        copy(plane.codes.data() + plane.code_at(run, h, r + i), codes + i * plane.row_code_bytes + h * hb, hb);
      }
      if (hg == 0) continue;
      const int64_t at = plane.scale_at(run, h, r + i), from = i * plane.row_groups + h * hg;
      copy(plane.scales.data() + at, scales + from, hg * sizeof(uint16_t));
      if (mins != nullptr) copy(plane.mins.data() + at, mins + from, hg * sizeof(uint16_t));
    }
  }
}

absl::Status QuantizedKvCache::check_range(int layer, int64_t token_begin, int64_t n_tokens) const {
  if (layer < 0 || layer >= geometry_.n_layer) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV store: layer %d is outside [0, %d)", layer, geometry_.n_layer));
  }
  if (token_begin < 0 || n_tokens < 0 || token_begin + n_tokens > capacity_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "KV store holds %d tokens; positions [%d, %d) do not fit", capacity_, token_begin, token_begin + n_tokens));
  }
  return absl::OkStatus();
}

absl::Status QuantizedKvCache::store(int layer, int64_t pos, int64_t n, const float* k, const float* v) {
  BATON_CHECK(layer >= 0 && layer < geometry_.n_layer && pos >= 0 && n >= 0);
  if (absl::Status st = check_range(layer, pos, n); !st.ok()) return st;
  if (n == 0) return absl::OkStatus();
  // A windowed layer keeps only the last rows of a store longer than it holds.
  const int64_t first = make_room(layer, pos, n);
  k += (first - pos) * geometry_.kv_dim();
  v += (first - pos) * geometry_.kv_dim();
  n -= first - pos;
  const int64_t elements = n * geometry_.kv_dim();
  const int64_t first_row = row_of(layer, first);
  const Run run = layer_run(layer);
  std::vector<float> rotated;
  auto maybe_rotate = [&](const float* x, bool hadamard) {
    if (!hadamard) return x;
    rotated.assign(x, x + elements);
    kv_quant::hadamard_rows(rotated.data(), n * geometry_.n_head_kv, geometry_.head_dim);
    return static_cast<const float*>(rotated.data());
  };
  quantize_rows(maybe_rotate(k, config_.hadamard_keys), n, k_, run, first_row);
  quantize_rows(maybe_rotate(v, config_.hadamard_values), n, v_, run, first_row);
  return absl::OkStatus();
}

// K and V may differ in bits and group (int4-k8): each plane has its own
// row strides. The layer's run (Plane, Run): row j of head kv_h at codes +
// (kv_h * rows + j) * head_code_bytes, scales (mins) + (kv_h * rows + j) *
// head_groups.
kv_kernels_impl::KvHeadRows QuantizedKvCache::head0_rows(const Plane& p, const Run& run) {
  return kv_kernels_impl::KvHeadRows{p.bits == Bits::kF16 ? 16 : p.bits == Bits::kInt8 ? 8 : 4,
                                     p.codes.data() + run.first * p.row_code_bytes,
                                     p.head_code_bytes(),
                                     p.scales.empty() ? nullptr : p.scales.data() + run.first * p.row_groups,
                                     p.mins.empty() ? nullptr : p.mins.data() + run.first * p.row_groups,
                                     p.head_groups(),
                                     p.group,
                                     p.key_blocks_in(run),
                                     p.value_quads_in(run)};
}

bool QuantizedKvCache::int4_in_place() const {
  int layer = 0;  // a full layer's layout, where there is one
  while (layer + 1 < geometry_.n_layer && geometry_.window(layer) > 0) ++layer;
  const Run run = layer_run(layer);
  return attends_int4_in_place(head0_rows(k_, run), head0_rows(v_, run), geometry_.head_dim);
}

void QuantizedKvCache::attend(int layer, int64_t pos, int64_t n, const float* q, float* out,
                              ThreadPool* pool) const {
  const KvGeometry& g = geometry_;
  const int64_t q_dim = g.q_dim();
  const int head_dim = g.head_dim;
  // Row 0 of the layer holds position layer_base; a windowed layer must hold
  // every key its queries see.
  const Run run = layer_run(layer);
  BATON_CHECK(first_visible_key(layer, pos) >= layer_base_[layer] && pos + n <= layer_base_[layer] + layer_rows_[layer],
              "sliding-window KV store does not hold the keys of the queries");
  AttentionRows rows;
  rows.k = head0_rows(k_, run);
  rows.v = head0_rows(v_, run);
  rows.k_head_code_bytes = k_.head_code_bytes();
  rows.k_head_groups = k_.head_groups();
  rows.v_head_code_bytes = v_.head_code_bytes();
  rows.v_head_groups = v_.head_groups();
  rows.k_head_stride = run.count * k_.head_code_bytes();
  rows.k_head_scale_stride = run.count * k_.head_groups();
  rows.v_head_stride = run.count * v_.head_code_bytes();
  rows.v_head_scale_stride = run.count * v_.head_groups();
  rows.first_position = layer_base_[layer];
  // Stored keys are rotated: rotate each query head the same way (q . k is
  // invariant); rotated values: rotate each output head back.
  thread_local std::vector<float> q_rotated;  // grows only: no allocation per decode step
  if (config_.hadamard_keys) {
    q_rotated.assign(q, q + n * q_dim);
    kv_quant::hadamard_rows(q_rotated.data(), n * g.n_head, head_dim);
    q = q_rotated.data();
  }
  attend_tiled(g, g.window(layer), 1.0f / std::sqrt(static_cast<float>(head_dim)), rows, pos, n, q, out, pool);
  if (config_.hadamard_values) kv_quant::hadamard_rows(out, n * g.n_head, head_dim);
}

int64_t QuantizedKvCache::first_visible_key(int layer, int64_t query_pos) const {
  return window_first_kept_position(geometry_.window(layer), query_pos);
}

void QuantizedKvCache::set_size(int64_t n) {
  BATON_CHECK(n >= 0 && n <= capacity_);
  if (n < size_) restore_windows(n);
  size_ = n;
}

absl::Status QuantizedKvCache::reserve(int64_t new_capacity_tokens) {
  if (new_capacity_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV store: cannot reserve a negative capacity (%d tokens)", new_capacity_tokens));
  }
  if (new_capacity_tokens <= capacity_) return absl::OkStatus();
  relayout(new_capacity_tokens);
  return absl::OkStatus();
}

absl::Status QuantizedKvCache::shrink_to(int64_t capacity_tokens) {
  if (capacity_tokens < size_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV store: cannot shrink to %d tokens below the %d tokens it holds", capacity_tokens, size_));
  }
  if (capacity_tokens >= capacity_) return absl::OkStatus();
  relayout(capacity_tokens);
  return absl::OkStatus();
}

void QuantizedKvCache::relayout(int64_t new_capacity_tokens) {
  const Plane old_k = std::move(k_), old_v = std::move(v_);
  const std::vector<int64_t> old_offset = layer_offset_, old_rows = layer_rows_, old_base = layer_base_;
  k_ = old_k.shape();
  v_ = old_v.shape();
  lay_out(new_capacity_tokens);
  for (int layer = 0; layer < geometry_.n_layer; ++layer) {
    // Full layers keep rows [0, kept) (rows past size() too); a windowed one
    // the newest rows up to size() (past it nothing is committed).
    int64_t kept = std::min(old_rows[layer], layer_rows_[layer]);
    int64_t skip = 0;
    if (geometry_.window(layer) > 0) {
      const int64_t held = std::clamp(size_ - old_base[layer], int64_t{0}, old_rows[layer]);
      kept = std::min(held, layer_rows_[layer]);
      skip = held - kept;
    }
    layer_base_[layer] = old_base[layer] + skip;
    const Run from = run_at(old_offset[layer], old_rows[layer], layer_blocked(layer));  // (its layout stays)
    copy_rows(old_k, from, skip, k_, layer_run(layer), 0, kept);
    copy_rows(old_v, from, skip, v_, layer_run(layer), 0, kept);
  }
  capacity_ = new_capacity_tokens;
}

bool QuantizedKvCache::can_ingest(const KvCodecConfig& wire, bool is_key) const {
  if (wire.transform) return false;  // transform-coded blocks are decoded (kv_transform_codec.h)
  const Plane& plane = is_key ? k_ : v_;
  const Bits bits = wire.bits_for(is_key);
  if (bits != plane.bits) return false;
  if (bits != Bits::kF16 && wire.group_size_for(is_key) != plane.group) return false;
  if (!is_key) return wire.hadamard_values == config_.hadamard_values;
  return wire.hadamard_keys == config_.hadamard_keys && !wire.pre_rope_keys &&
         (!wire.quantized() || wire.key_axis == KvCodecConfig::KeyAxis::kPerToken);
}

absl::Status QuantizedKvCache::ingest_block(int layer, bool is_key, int64_t token_begin,
                                            const QuantizedKvBlock& block) {
  if (absl::Status st = check_range(layer, token_begin, block.n_tokens); !st.ok()) return st;
  Plane& plane = is_key ? k_ : v_;
  const int64_t n = block.n_tokens;
  const int64_t scale_count = plane.bits == Bits::kInt4 ? n * plane.row_groups : 0;
  if (static_cast<int64_t>(block.codes.size()) != n * plane.row_code_bytes ||
      static_cast<int64_t>(block.scales.size()) != n * plane.row_groups ||
      static_cast<int64_t>(block.mins.size()) != scale_count) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV store %s: %s block of %d tokens has %d code bytes, %d scales, %d mins; expected %d, %d, %d",
        config_.to_string(), is_key ? "key" : "value", n, block.codes.size(), block.scales.size(),
        block.mins.size(), n * plane.row_code_bytes, n * plane.row_groups, scale_count));
  }
  if (!kv_quant::all_f16_finite(block.scales.data(), static_cast<int64_t>(block.scales.size())) ||
      !kv_quant::all_f16_finite(block.mins.data(), static_cast<int64_t>(block.mins.size())) ||
      (plane.bits == Bits::kF16 &&
       !kv_quant::all_f16_finite(reinterpret_cast<const uint16_t*>(block.codes.data()), n * geometry_.kv_dim()))) {
    return absl::InvalidArgumentError("KV store: block holds Inf or NaN f16 values");
  }
  if (n == 0) return absl::OkStatus();
  // A windowed layer keeps only the block's last rows when it holds fewer.
  const int64_t first = make_room(layer, token_begin, n);
  const int64_t skip = first - token_begin, rows = n - skip;
  const uint16_t* no_halves = nullptr;
  move_rows<true>(plane, layer_run(layer), row_of(layer, first), rows, block.codes.data() + skip * plane.row_code_bytes,
                  block.scales.empty() ? no_halves : block.scales.data() + skip * plane.row_groups,
                  block.mins.empty() ? no_halves : block.mins.data() + skip * plane.row_groups);
  return absl::OkStatus();
}

absl::StatusOr<QuantizedKvBlock> QuantizedKvCache::export_block(int layer, bool is_key, int64_t token_begin,
                                                                int64_t n_tokens) const {
  if (absl::Status st = check_range(layer, token_begin, n_tokens); !st.ok()) return st;
  const auto [held_first, held_end] = held_positions(layer);
  if (n_tokens > 0 && (token_begin < held_first || token_begin + n_tokens > held_end)) {
    return absl::OutOfRangeError(absl::StrFormat(
        "KV store layer %d (sliding window of %d tokens) holds positions [%d, %d); asked [%d, %d)", layer,
        geometry_.window(layer), held_first, held_end, token_begin, token_begin + n_tokens));
  }
  const Plane& plane = is_key ? k_ : v_;
  QuantizedKvBlock b;
  b.n_tokens = n_tokens;
  b.codes.resize(static_cast<size_t>(n_tokens * plane.row_code_bytes));
  b.scales.resize(static_cast<size_t>(n_tokens * plane.row_groups));
  if (!plane.mins.empty()) b.mins.resize(b.scales.size());
  if (n_tokens > 0) {
    move_rows<false>(plane, layer_run(layer), row_of(layer, token_begin), n_tokens, b.codes.data(), b.scales.data(),
                     plane.mins.empty() ? nullptr : b.mins.data());
  }
  return b;
}

}  // namespace baton
