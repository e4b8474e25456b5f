#include "common/kv_stream/kv_handoff.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <tuple>
#include <cmath>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "common/cpu/ops.h"
#include "common/kv_codec/kv_codec.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_stream/kv_fingerprint.h"
#include "common/kv_codec/kv_quant.h"
#include "common/kv_codec/kv_transform_codec.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/model/layer_window.h"
#include "common/model/model.h"
#include "common/util/check.h"

namespace baton {
namespace {

absl::Status check_rope(const KvCodecConfig& codec, const KvGeometry& geometry, const KvRope* rope,
                        const char* side) {
  if (!codec.pre_rope_keys) return absl::OkStatus();
  if (rope == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV codec %s has pre-RoPE keys: the %s needs the model's RoPE parameters", codec.to_string(), side));
  }
  if (rope->n_rot < 2 || rope->n_rot % 2 != 0 || rope->n_rot > geometry.head_dim ||
      rope->inv_freq.size() < static_cast<size_t>(rope->n_rot / 2)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV handoff: bad RoPE parameters (n_rot %d, head_dim %d, %d frequencies)", rope->n_rot,
                        geometry.head_dim, rope->inv_freq.size()));
  }
  return absl::OkStatus();
}

bool hadamard_for(const KvCodecConfig& codec, bool is_key) {
  return is_key ? codec.hadamard_keys : codec.hadamard_values;
}

// A transform codec needs its calibrated coder, for exactly that codec (the
// calibration digest included) and this geometry.
absl::Status check_transform(const KvCodecConfig& codec, const KvGeometry& geometry,
                             const KvTransformCodec* transform, const char* side) {
  if (!codec.transform) return absl::OkStatus();
  if (transform == nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "KV codec %s is the transform codec: the %s holds no calibration for it (tc_calibration %s)",
        codec.to_string(), side, to_hex(codec.transform->calibration)));
  }
  if (!(transform->config() == codec)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "KV codec %s (tc_calibration %s) is not the %s's transform codec %s (tc_calibration %s)", codec.to_string(),
        to_hex(codec.transform->calibration), side, transform->config().to_string(),
        to_hex(transform->config().transform->calibration)));
  }
  return transform->calibration().check_geometry(geometry);
}

// The calibration is bound to one model: the KV's must be it.
absl::Status check_calibration_model(const KvCodecConfig& codec, const KvTransformCodec* transform,
                                     const ModelFingerprint& model) {
  if (!codec.transform || transform == nullptr) return absl::OkStatus();
  if (transform->calibration().model_digest != model.digest) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "KV codec %s: the calibration is for model %s; the KV's model is %s", codec.to_string(),
        transform->calibration().model_digest, model.digest));
  }
  return absl::OkStatus();
}

std::string block_text(const KvStagedBlock& block) {
  return absl::StrFormat("KV block layer %u %s [%u, %u)", block.layer, kv_kind_name(block.kind), block.token_begin,
                         uint64_t{block.token_begin} + block.token_count);
}

// The segment's model must have the target's KV shape.
absl::Status check_geometry(const ModelFingerprint& model, const KvGeometry& geometry) {
  const std::pair<const char*, int> fields[] = {
      {"n_layer", geometry.n_layer}, {"n_head_kv", geometry.n_head_kv}, {"head_dim", geometry.head_dim}};
  for (const auto& [name, ours] : fields) {
    const std::string* theirs = model.find(name);
    int value = 0;
    if (theirs == nullptr || !absl::SimpleAtoi(*theirs, &value) || value != ours) {
      return absl::FailedPreconditionError(absl::StrFormat("KV segment model has %s %s; the target cache has %d",
                                                           name, theirs ? *theirs : "(none)", ours));
    }
  }
  return absl::OkStatus();
}

// The segment's model must have the target's sliding windows (none, or the
// same window on every layer).
absl::Status check_windows(const ModelFingerprint& model, const KvGeometry& geometry) {
  BATON_ASSIGN_OR_RETURN(const std::vector<int32_t> theirs, kv_layer_windows(model, geometry.n_layer));
  const std::vector<int32_t> ours =
      has_sliding_window(geometry.layer_window) ? geometry.layer_window : std::vector<int32_t>{};
  if (theirs != ours) {
    return absl::FailedPreconditionError(
        absl::StrFormat("KV segment model has layer_window '%s'; the target cache has '%s'",
                        layer_window_text(theirs), layer_window_text(ours)));
  }
  return absl::OkStatus();
}

}  // namespace

KvRope kv_rope_of(const Model& model) {
  const RopeSpec& rope = model.spec().rope;
  return KvRope{model.rope_inv_freq(), rope.n_rot, rope.type == RopeType::kNeox};
}

absl::StatusOr<v1::KvHeader> make_kv_header(const KvStreamHeaderInfo& info) {
  if (info.token_ids.empty()) return absl::InvalidArgumentError("KV stream header: the segment has no tokens");
  BATON_ASSIGN_OR_RETURN(v1::CodecParams codec, kv_codec_params(info.codec));
  KvFingerprint fingerprint;
  fingerprint.model = info.model;
  fingerprint.context = {info.first_position, static_cast<uint32_t>(info.token_ids.size()), info.prefix_digest};
  fingerprint.codec = std::move(codec);
  v1::KvHeader header;
  set_header_fingerprint(fingerprint, &header);
  header.mutable_token_ids()->Reserve(static_cast<int>(info.token_ids.size()));
  for (size_t i = 0; i < info.token_ids.size(); ++i) {
    if (info.token_ids[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("KV stream header: token_ids[%d] is %d", i, info.token_ids[i]));
    }
    header.add_token_ids(static_cast<uint32_t>(info.token_ids[i]));
  }
  header.set_pack_id(info.pack_id);
  header.set_description(info.description);
  return header;
}

KvRowsFn f32_kv_rows(const F32KvCache& cache) {
  return [&cache](int layer, bool is_key, int64_t token_begin, int64_t n_tokens, float* out) -> absl::Status {
    const KvGeometry& g = cache.geometry();
    if (layer < 0 || layer >= g.n_layer || token_begin < 0 || n_tokens < 0 ||
        token_begin + n_tokens > cache.size()) {
      return absl::OutOfRangeError(absl::StrFormat("F32 KV cache holds %d tokens of %d layers; asked layer %d [%d, %d)",
                                                   cache.size(), g.n_layer, layer, token_begin,
                                                   token_begin + n_tokens));
    }
    const int64_t kv_dim = g.kv_dim();
    for (int64_t i = 0; i < n_tokens; ++i) {
      const float* row = is_key ? cache.k_row(layer, token_begin + i) : cache.v_row(layer, token_begin + i);
      std::copy(row, row + kv_dim, out + i * kv_dim);
    }
    return absl::OkStatus();
  };
}

namespace {

// Raw bytes per token of `codec` for K (is_key) or V, rounded up: sizes the
// first try of each block (zstd only shrinks it).
uint64_t raw_bytes_per_token(const KvCodecConfig& codec, const KvGeometry& geometry, bool is_key) {
  constexpr int64_t kPlanTokens = 1024;
  return (kv_block_raw_size(codec, geometry, is_key, kPlanTokens) + kPlanTokens - 1) / kPlanTokens;
}

// Sends one layer's K (is_key) or V through `writer` in bounded blocks that
// `encode` makes; range: [token_begin, token_begin + n_tokens), or the whole
// segment when unset.
absl::Status write_kv_kind(const KvCodecConfig& codec, const KvGeometry& geometry, int layer, bool is_key,
                           const std::optional<KvTokenRange>& range, const KvBlockEncodeFn& encode,
                           KvStreamWriter& writer) {
  const uint64_t bytes_per_token = raw_bytes_per_token(codec, geometry, is_key);
  const v1::KvKind kind = is_key ? v1::KV_KIND_K : v1::KV_KIND_V;
  if (range.has_value()) {
    return writer.write_layer_range(static_cast<uint32_t>(layer), kind, range->begin, range->count, bytes_per_token,
                                    encode);
  }
  return writer.write_layer(static_cast<uint32_t>(layer), kind, bytes_per_token, encode);
}

// Header, every layer through `write_layer`, trailer: the checks of the
// public write_kv_segment overloads, in one place.
absl::Status write_kv_segment_with(const KvGeometry& geometry, const KvStreamHeaderInfo& info, const KvRope* rope,
                                   const std::function<absl::Status(int layer)>& write_layer, KvStreamWriter& writer,
                                   const v1::ProducerStats* producer) {
  BATON_RETURN_IF_ERROR(info.codec.validate(geometry));
  BATON_RETURN_IF_ERROR(check_rope(info.codec, geometry, rope, "sender"));
  BATON_RETURN_IF_ERROR(check_calibration_model(info.codec, info.transform, info.model));
  BATON_RETURN_IF_ERROR(check_windows(info.model, geometry));
  BATON_ASSIGN_OR_RETURN(v1::KvHeader header, make_kv_header(info));
  BATON_RETURN_IF_ERROR(writer.write_header(std::move(header)));
  for (int layer = 0; layer < geometry.n_layer; ++layer) BATON_RETURN_IF_ERROR(write_layer(layer));
  return writer.write_trailer(producer);
}

// The segment [info.first_position, end) must be in a source holding [0, size).
absl::Status check_segment_in_source(const KvStreamHeaderInfo& info, int64_t size) {
  const uint64_t end = uint64_t{info.first_position} + info.token_ids.size();
  if (end > static_cast<uint64_t>(size)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV segment [%u, %u) is not in the source cache, which holds [0, %d)", info.first_position, end, size));
  }
  return absl::OkStatus();
}

// range: [token_begin, token_begin + n_tokens), or the whole segment when unset.
absl::Status write_kv_layer_impl(const KvRowsFn& rows, const KvGeometry& geometry, const KvCodecConfig& codec,
                                 const KvRope* rope, int layer, const std::optional<KvTokenRange>& range,
                                 KvStreamWriter& writer, const KvTransformCodec* transform) {
  BATON_RETURN_IF_ERROR(codec.validate(geometry));
  BATON_RETURN_IF_ERROR(kv_codec_params(codec).status());  // rejects what a stream cannot carry
  BATON_RETURN_IF_ERROR(check_rope(codec, geometry, rope, "sender"));
  BATON_RETURN_IF_ERROR(check_transform(codec, geometry, transform, "sender"));
  const int64_t kv_dim = geometry.kv_dim();
  // RoPE at the negated angle undoes the engine's rotation (pre-RoPE keys).
  std::vector<float> unrotate_freq;
  if (codec.pre_rope_keys) {
    unrotate_freq.assign(rope->inv_freq.begin(), rope->inv_freq.begin() + rope->n_rot / 2);
    for (float& f : unrotate_freq) f = -f;
  }
  std::vector<float> buffer;  // f32 [n, kv_dim] rows of one block
  for (const bool is_key : {true, false}) {
    const KvBlockEncodeFn encode = [&](uint32_t token_begin,
                                       uint32_t n_tokens) -> absl::StatusOr<KvEncodedPayload> {
      buffer.resize(static_cast<size_t>(n_tokens * kv_dim));
      BATON_RETURN_IF_ERROR(rows(layer, is_key, token_begin, n_tokens, buffer.data()));
      if (is_key && codec.pre_rope_keys) {
        rope_rows(buffer.data(), n_tokens, geometry.n_head_kv, geometry.head_dim, rope->n_rot, rope->neox,
                  token_begin, unrotate_freq.data());
      }
      absl::StatusOr<EncodedKvBlock> encoded =
          codec.transform ? transform->encode(layer, is_key, token_begin, static_cast<int64_t>(writer.segment_end()),
                                              buffer.data(), n_tokens)
                          : encode_kv_block(codec, geometry, is_key, buffer.data(), n_tokens);
      if (!encoded.ok()) return encoded.status();
      return KvEncodedPayload{std::move(encoded->payload), encoded->raw_size};
    };
    BATON_RETURN_IF_ERROR(write_kv_kind(codec, geometry, layer, is_key, range, encode, writer));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status write_kv_layer(const KvRowsFn& rows, const KvGeometry& geometry, const KvCodecConfig& codec,
                            const KvRope* rope, int layer, KvStreamWriter& writer, const KvTransformCodec* transform) {
  return write_kv_layer_impl(rows, geometry, codec, rope, layer, std::nullopt, writer, transform);
}

absl::Status write_kv_layer_range(const KvRowsFn& rows, const KvGeometry& geometry, const KvCodecConfig& codec,
                                  const KvRope* rope, int layer, uint32_t token_begin, uint32_t n_tokens,
                                  KvStreamWriter& writer, const KvTransformCodec* transform) {
  return write_kv_layer_impl(rows, geometry, codec, rope, layer, KvTokenRange{token_begin, n_tokens}, writer,
                             transform);
}

absl::Status write_kv_segment(const KvRowsFn& rows, const KvGeometry& geometry, const KvStreamHeaderInfo& info,
                              const KvRope* rope, KvStreamWriter& writer, const v1::ProducerStats* producer) {
  const auto write_layer = [&](int layer) {
    return write_kv_layer(rows, geometry, info.codec, rope, layer, writer, info.transform);
  };
  return write_kv_segment_with(geometry, info, rope, write_layer, writer, producer);
}

absl::Status write_kv_segment(const F32KvCache& source, const KvStreamHeaderInfo& info, const KvRope* rope,
                              KvStreamWriter& writer, const v1::ProducerStats* producer) {
  BATON_RETURN_IF_ERROR(check_segment_in_source(info, source.size()));
  return write_kv_segment(f32_kv_rows(source), source.geometry(), info, rope, writer, producer);
}

absl::Status write_kv_segment(const QuantizedKvCache& source, const KvStreamHeaderInfo& info, KvStreamWriter& writer,
                              const v1::ProducerStats* producer) {
  BATON_RETURN_IF_ERROR(check_segment_in_source(info, source.size()));
  for (const bool is_key : {true, false}) {
    if (!source.can_ingest(info.codec, is_key)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("KV segment codec %s is not the %s form of the source store (%s)", info.codec.to_string(),
                          is_key ? "K" : "V", source.config().to_string()));
    }
  }
  const KvGeometry& geometry = source.geometry();
  const auto write_layer = [&](int layer) -> absl::Status {
    for (const bool is_key : {true, false}) {
      const KvBlockEncodeFn encode = [&](uint32_t token_begin,
                                         uint32_t n_tokens) -> absl::StatusOr<KvEncodedPayload> {
        BATON_ASSIGN_OR_RETURN(const QuantizedKvBlock block, source.export_block(layer, is_key, token_begin, n_tokens));
        BATON_ASSIGN_OR_RETURN(EncodedKvBlock encoded, encode_quantized_kv_block(info.codec, geometry, is_key, block));
        return KvEncodedPayload{std::move(encoded.payload), encoded.raw_size};
      };
      BATON_RETURN_IF_ERROR(write_kv_kind(info.codec, geometry, layer, is_key, std::nullopt, encode, writer));
    }
    return absl::OkStatus();
  };
  return write_kv_segment_with(geometry, info, /*rope=*/nullptr, write_layer, writer, producer);
}

namespace {

// A block of the segment decoded to its quantized form (phase 1 of
// load_kv_segment); a transform-coded block is decoded to f32 and, where the
// store ingests it, requantized to the store's form here.
struct DecodedKvBlock {
  bool is_key = false;
  int64_t token_begin = 0;  // absolute position
  QuantizedKvBlock block;   // empty for a transform block the store does not ingest
  const KvStagedBlock* staged = nullptr;
};

// f32 rows of a transform-coded block of the stream [.., stream_end), keys
// rotated to their positions (the rope table covers the stream's positions).
absl::Status decode_transform_rows(const KvTransformCodec& transform, uint32_t layer, bool is_key,
                                   uint32_t token_begin, uint32_t token_count, int64_t stream_end,
                                   std::string_view payload, uint64_t raw_size, const RopeTable& rope_table,
                                   bool neox, float* out) {
  const KvGeometry& g = transform.geometry();
  BATON_RETURN_IF_ERROR(transform.decode(static_cast<int>(layer), is_key, token_begin, stream_end, payload, raw_size,
                                         token_count, out));
  if (is_key) rope_rows_table(out, token_count, g.n_head_kv, g.head_dim, neox, token_begin, rope_table);
  return absl::OkStatus();
}

absl::Status decode_transform_rows(const KvTransformCodec& transform, const KvSegment& segment,
                                   const KvStagedBlock& staged, const RopeTable& rope_table, bool neox, float* out) {
  const int64_t stream_end = int64_t{segment.header.first_position()} + segment.header.token_count();
  return decode_transform_rows(transform, staged.layer, staged.kind == v1::KV_KIND_K, staged.token_begin,
                               staged.token_count, stream_end, staged.payload, staged.raw_size, rope_table, neox,
                               out);
}

// The value at `key`, or null.
template <typename Map>
typename Map::mapped_type* find_or_null(Map& map, const typename Map::key_type& key) {
  const auto it = map.find(key);
  return it == map.end() ? nullptr : &it->second;
}

// Transform blocks decoded as they arrive (read_kv_segment), so decoding
// overlaps the transfer: in the store's INT8 form where the target ingests
// it, else as f32 rows. Keyed by (layer, kind, token_begin).
struct TransformPredecode {
  int64_t first = 0, end = 0;  // the verified header's segment
  RopeTable rope_table;
  bool ingest_k = false, ingest_v = false;
  std::map<std::tuple<uint32_t, int, uint32_t>, QuantizedKvBlock> blocks;
  std::map<std::tuple<uint32_t, int, uint32_t>, std::vector<float>> rows;
};

absl::Status predecode_transform_block(const KvTransformCodec& transform, const KvRope& rope,
                                       const v1::KvBlock& block, TransformPredecode& pre) {
  const KvGeometry& g = transform.geometry();
  const bool is_key = block.kind() == v1::KV_KIND_K;
  if (block.layer() >= static_cast<uint32_t>(g.n_layer) || block.token_begin() < pre.first ||
      int64_t{block.token_begin()} + block.token_count() > pre.end) {
    return absl::InvalidArgumentError(absl::StrFormat("KV block layer %u at %u (%u tokens) is outside the segment",
                                                      block.layer(), block.token_begin(), block.token_count()));
  }
  std::vector<float> out(static_cast<size_t>(int64_t{block.token_count()} * g.kv_dim()));
  BATON_RETURN_IF_ERROR(decode_transform_rows(transform, block.layer(), is_key, block.token_begin(),
                                              block.token_count(), pre.end, block.payload(), block.raw_size(),
                                              pre.rope_table, rope.neox, out.data()));
  const auto key = std::make_tuple(block.layer(), is_key ? 0 : 1, block.token_begin());
  if (is_key ? pre.ingest_k : pre.ingest_v) {
    BATON_ASSIGN_OR_RETURN(pre.blocks[key],
                           quantize_kv_block(transform.int8_config(), g, is_key, out.data(), block.token_count()));
  } else {
    pre.rows[key] = std::move(out);
  }
  return absl::OkStatus();
}

absl::StatusOr<KvSegmentLoad> load_kv_segment_impl(const KvSegment& segment, const KvRope* rope, KvCache& target,
                                                   const KvTransformCodec* transform, TransformPredecode* pre);

}  // namespace

absl::StatusOr<KvSegmentLoad> load_kv_segment(const KvSegment& segment, const KvRope* rope, KvCache& target,
                                              const KvTransformCodec* transform) {
  return load_kv_segment_impl(segment, rope, target, transform, nullptr);
}

namespace {

absl::StatusOr<KvSegmentLoad> load_kv_segment_impl(const KvSegment& segment, const KvRope* rope, KvCache& target,
                                                   const KvTransformCodec* transform, TransformPredecode* pre) {
  const KvGeometry& g = target.geometry();
  const v1::KvHeader& header = segment.header;
  BATON_ASSIGN_OR_RETURN(const KvCodecConfig codec, kv_codec_config_from_params(header.codec()));
  BATON_RETURN_IF_ERROR(codec.validate(g));
  BATON_RETURN_IF_ERROR(check_geometry(segment.fingerprint.model, g));
  BATON_RETURN_IF_ERROR(check_windows(segment.fingerprint.model, g));
  BATON_RETURN_IF_ERROR(check_rope(codec, g, rope, "receiver"));
  BATON_RETURN_IF_ERROR(check_transform(codec, g, transform, "receiver"));
  BATON_RETURN_IF_ERROR(check_calibration_model(codec, transform, segment.fingerprint.model));
  const int64_t first = header.first_position();
  const int64_t n = header.token_count();
  const int64_t end = first + n;
  if (target.size() != first) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "KV segment starts at position %d but the target cache holds %d tokens", first, target.size()));
  }
  if (end > target.capacity()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "KV segment [%d, %d) does not fit: the target cache holds at most %d tokens", first, end, target.capacity()));
  }

  // Blocks are ingested in `form`: the wire's own, or for the transform
  // codec the INT8 form they are requantized to.
  const KvCodecConfig form = codec.transform ? transform->int8_config() : codec;
  KvBlockIngest* store = target.block_ingest();
  const bool ingest_k = store != nullptr && store->can_ingest(form, /*is_key=*/true);
  const bool ingest_v = store != nullptr && store->can_ingest(form, /*is_key=*/false);
  const int64_t kv_dim = g.kv_dim();

  // Phase 1: decode every block to its quantized form; this checks every
  // payload before the target is touched.
  std::vector<std::vector<DecodedKvBlock>> by_layer(static_cast<size_t>(g.n_layer));
  std::vector<int64_t> covered(static_cast<size_t>(2 * g.n_layer), 0);  // tokens per (layer, kind)
  std::vector<float> scratch;  // f32 rows of one transform block
  uint32_t arrived = 0;        // blocks the reader decoded on arrival
  // Every layer's keys rotate for the same positions: cos and sin once (the
  // reader's predecode already made them for this segment).
  const bool predecoded_table = codec.transform && pre != nullptr && pre->first == first && pre->end == end;
  RopeTable made_rope_table;
  if (codec.transform && !predecoded_table) {
    made_rope_table = make_rope_table(first, n, rope->n_rot, rope->inv_freq.data());
  }
  const RopeTable& rope_table = predecoded_table ? pre->rope_table : made_rope_table;
  for (const KvStagedBlock& staged : segment.blocks) {
    const bool is_key = staged.kind == v1::KV_KIND_K;
    if (staged.layer >= static_cast<uint32_t>(g.n_layer) || (!is_key && staged.kind != v1::KV_KIND_V) ||
        staged.token_begin < first || int64_t{staged.token_begin} + staged.token_count > end) {
      return absl::InvalidArgumentError(absl::StrFormat("%s is outside the segment [%d, %d) of %d layers",
                                                        block_text(staged), first, end, g.n_layer));
    }
    absl::StatusOr<QuantizedKvBlock> block;
    const auto key = std::make_tuple(staged.layer, is_key ? 0 : 1, staged.token_begin);
    QuantizedKvBlock* pre_block = pre != nullptr ? find_or_null(pre->blocks, key) : nullptr;
    const std::vector<float>* pre_rows = pre != nullptr ? find_or_null(pre->rows, key) : nullptr;
    if (codec.transform && pre_block != nullptr && pre_block->n_tokens == staged.token_count) {
      block = std::move(*pre_block);  // decoded as it arrived
      ++arrived;
    } else if (codec.transform && pre_rows != nullptr &&
               pre_rows->size() == static_cast<size_t>(int64_t{staged.token_count} * kv_dim)) {
      block = QuantizedKvBlock{};  // its f32 rows wait in pre->rows for phase 2
      ++arrived;
    } else if (codec.transform) {
      scratch.resize(static_cast<size_t>(int64_t{staged.token_count} * kv_dim));
      absl::Status st = decode_transform_rows(*transform, segment, staged, rope_table, rope->neox, scratch.data());
      if (st.ok() && (is_key ? ingest_k : ingest_v)) {
        block = quantize_kv_block(form, g, is_key, scratch.data(), staged.token_count);
      } else {
        block = st.ok() ? absl::StatusOr<QuantizedKvBlock>(QuantizedKvBlock{}) : absl::StatusOr<QuantizedKvBlock>(st);
      }
    } else {
      block = decode_kv_block_quantized(codec, g, is_key, staged.payload, staged.raw_size, staged.token_count);
    }
    if (!block.ok()) {
      return absl::Status(block.status().code(),
                          absl::StrFormat("%s: %s", block_text(staged), std::string(block.status().message())));
    }
    covered[2 * staged.layer + (is_key ? 0 : 1)] += staged.token_count;
    by_layer[staged.layer].push_back({is_key, staged.token_begin, std::move(*block), &staged});
  }
  // A windowed layer holds only its tail [layer_first(layer), end).
  const std::vector<int32_t> windows = has_sliding_window(g.layer_window) ? g.layer_window : std::vector<int32_t>{};
  auto layer_first = [&](int layer) { return kv_layer_first_position(windows, layer, first, end); };
  for (int layer = 0; layer < g.n_layer; ++layer) {
    for (int kind = 0; kind < 2; ++kind) {
      if (covered[2 * layer + kind] != end - layer_first(layer)) {
        return absl::InvalidArgumentError(absl::StrFormat("KV segment layer %d %s: blocks cover %d of %d tokens",
                                                          layer, kind == 0 ? "K" : "V", covered[2 * layer + kind],
                                                          end - layer_first(layer)));
      }
    }
  }

  // Phase 2: write layer by layer. Kinds the store cannot ingest are decoded
  // to f32 (dequantized, Hadamard undone, RoPE applied to pre-RoPE keys:
  // decode_kv_block's steps; transform blocks decoded again) and stored; the
  // rest is copied in as it is.
  KvSegmentLoad load;
  load.first_position = static_cast<uint32_t>(first);
  load.token_count = static_cast<uint32_t>(n);
  load.codec = codec;
  load.encoded_bytes = segment.encoded_bytes;
  load.raw_bytes = segment.raw_bytes;
  load.decoded_on_arrival = arrived;
  const bool need_store = !ingest_k || !ingest_v;
  std::vector<float> k_rows(need_store && !ingest_k ? static_cast<size_t>(n * kv_dim) : 0);  // f32 [n, kv_dim]
  std::vector<float> v_rows(need_store && !ingest_v ? static_cast<size_t>(n * kv_dim) : 0);  // f32 [n, kv_dim]
  for (int layer = 0; layer < g.n_layer; ++layer) {
    std::vector<DecodedKvBlock>& blocks = by_layer[static_cast<size_t>(layer)];
    if (need_store) {
      for (const DecodedKvBlock& d : blocks) {
        if (d.is_key ? ingest_k : ingest_v) continue;
        float* out = (d.is_key ? k_rows : v_rows).data() + (d.token_begin - first) * kv_dim;
        ++load.decoded_blocks;
        if (codec.transform) {
          const auto key = std::make_tuple(d.staged->layer, d.is_key ? 0 : 1, d.staged->token_begin);
          if (pre != nullptr) {
            const auto rows = pre->rows.find(key);
            if (rows != pre->rows.end() && rows->second.size() == static_cast<size_t>(d.staged->token_count * kv_dim)) {
              std::copy(rows->second.begin(), rows->second.end(), out);
              pre->rows.erase(rows);
              continue;
            }
          }
          BATON_RETURN_IF_ERROR(decode_transform_rows(*transform, segment, *d.staged, rope_table, rope->neox, out));
          continue;
        }
        BATON_RETURN_IF_ERROR(dequantize_kv_block(codec, g, d.is_key, d.block, out));
        if (hadamard_for(codec, d.is_key)) kv_quant::hadamard_rows(out, d.block.n_tokens * g.n_head_kv, g.head_dim);
        if (d.is_key && codec.pre_rope_keys) {
          rope_rows(out, d.block.n_tokens, g.n_head_kv, g.head_dim, rope->n_rot, rope->neox, d.token_begin,
                    rope->inv_freq.data());
        }
      }
      // A kind that is ingested below gets the other kind's rows as a
      // placeholder here; ingest_block overwrites them.
      const int64_t from = layer_first(layer);
      const float* k = (ingest_k ? v_rows.data() : k_rows.data()) + (from - first) * kv_dim;
      const float* v = (ingest_v ? k_rows.data() : v_rows.data()) + (from - first) * kv_dim;
      if (from < end) BATON_RETURN_IF_ERROR(target.store(layer, from, end - from, k, v));
    }
    for (DecodedKvBlock& d : blocks) {
      if (!(d.is_key ? ingest_k : ingest_v)) continue;
      BATON_RETURN_IF_ERROR(store->ingest_block(layer, d.is_key, d.token_begin, d.block));
      ++load.ingested_blocks;
      d.block = QuantizedKvBlock{};  // release as we go
    }
  }
  target.set_size(end);
  return load;
}

}  // namespace

absl::StatusOr<KvSegmentLoad> read_kv_segment(const KvMessageSource& source, const KvStreamExpectation& expected,
                                              const KvRope* rope, KvCache& target, const KvReadOptions& options) {
  KvStreamExpectation pinned = expected;
  if (!pinned.first_position) {
    pinned.first_position = static_cast<uint32_t>(target.size());
  } else if (!options.before_load && static_cast<int64_t>(*pinned.first_position) != target.size()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "KV segment is expected at position %u but the target cache holds %d tokens", *pinned.first_position,
        target.size()));
  }
  KvStreamReaderOptions reader_options =
      kv_reader_options_with_codec(target.geometry(), options.reader, options.trial_decode);
  // A transform-coded stream is decoded block by block as it arrives (after
  // its header verified), so decoding overlaps the transfer; load uses it.
  TransformPredecode pre;
  bool transform_stream = false;  // outlives the reader's checks below (they capture it)
  if (options.transform != nullptr && rope != nullptr) {
    const KvTransformCodec* transform = options.transform;
    KvBlockIngest* store = target.block_ingest();
    pre.ingest_k = store != nullptr && store->can_ingest(transform->int8_config(), /*is_key=*/true);
    pre.ingest_v = store != nullptr && store->can_ingest(transform->int8_config(), /*is_key=*/false);
    const KvHeaderCheckFn outer_header = reader_options.check_header;
    // `transform` (a local of this block) by value: the checks run after it.
    reader_options.check_header = [&, outer_header, transform](const v1::KvHeader& header) -> absl::Status {
      if (outer_header) BATON_RETURN_IF_ERROR(outer_header(header));
      transform_stream = header.codec().codec() == v1::KV_CODEC_TC;
      if (!transform_stream) return absl::OkStatus();
      BATON_ASSIGN_OR_RETURN(const KvCodecConfig codec, kv_codec_config_from_params(header.codec()));
      BATON_RETURN_IF_ERROR(check_transform(codec, target.geometry(), transform, "receiver"));
      pre.first = header.first_position();
      pre.end = pre.first + header.token_count();
      pre.rope_table = make_rope_table(pre.first, pre.end - pre.first, rope->n_rot, rope->inv_freq.data());
      return absl::OkStatus();
    };
    const KvPayloadCheckFn outer_payload = reader_options.check_payload;
    reader_options.check_payload = [&, outer_payload, transform](const v1::CodecParams& codec,
                                                                 const v1::KvBlock& block) -> absl::Status {
      if (outer_payload) BATON_RETURN_IF_ERROR(outer_payload(codec, block));
      if (!transform_stream) return absl::OkStatus();
      return predecode_transform_block(*transform, *rope, block, pre);
    };
  }
  KvStreamReader reader(std::move(pinned), std::move(reader_options));
  for (;;) {
    absl::StatusOr<std::optional<v1::KvStreamMessage>> message = source();
    if (!message.ok()) return reader.abandon(message.status());
    if (!message->has_value()) break;
    BATON_RETURN_IF_ERROR(reader.consume(std::move(**message)));
  }
  BATON_ASSIGN_OR_RETURN(const KvSegment segment, reader.commit());
  if (options.before_load) BATON_RETURN_IF_ERROR(options.before_load());
  return load_kv_segment_impl(segment, rope, target, options.transform, options.transform ? &pre : nullptr);
}

absl::StatusOr<KvSegmentLoad> read_kv_segment(std::span<const v1::KvStreamMessage> messages,
                                              const KvStreamExpectation& expected, const KvRope* rope,
                                              KvCache& target, const KvReadOptions& options) {
  size_t next = 0;
  const KvMessageSource source = [&]() -> absl::StatusOr<std::optional<v1::KvStreamMessage>> {
    if (next == messages.size()) return std::nullopt;
    return std::optional<v1::KvStreamMessage>(messages[next++]);
  };
  return read_kv_segment(source, expected, rope, target, options);
}

}  // namespace baton
