#include "common/kv_stream/kv_stream.h"

#include <xxhash.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "common/model/layer_window.h"
#include "common/util/check.h"

namespace baton {
namespace {

void put_le(uint8_t* out, uint64_t v, int n_bytes) {
  for (int i = 0; i < n_bytes; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

uint64_t kv_payload_checksum(std::string_view payload) { return XXH64(payload.data(), payload.size(), 0); }

KvStreamDigest::KvStreamDigest() : state_(XXH64_createState()) {
  BATON_CHECK(state_ != nullptr);
  BATON_CHECK(XXH64_reset(state_, 0) == XXH_OK);
}

KvStreamDigest::~KvStreamDigest() { XXH64_freeState(state_); }

void KvStreamDigest::add_block(uint32_t layer, uint32_t kind, uint32_t token_begin, uint32_t token_count,
                               uint64_t encoded_size, uint64_t raw_size, uint64_t checksum) {
  uint8_t record[kKvStreamDigestRecordBytes];
  put_le(record + 0, layer, 4);
  put_le(record + 4, kind, 4);
  put_le(record + 8, token_begin, 4);
  put_le(record + 12, token_count, 4);
  put_le(record + 16, encoded_size, 8);
  put_le(record + 24, raw_size, 8);
  put_le(record + 32, checksum, 8);
  BATON_CHECK(XXH64_update(state_, record, sizeof(record)) == XXH_OK);
}

uint64_t KvStreamDigest::value() const { return XXH64_digest(state_); }

uint32_t kv_block_token_alignment(const v1::CodecParams& codec, v1::KvKind kind) {
  const bool quantized = codec.codec() == v1::KV_CODEC_INT8 || codec.codec() == v1::KV_CODEC_INT4;
  const uint32_t key_group = codec.key_group_size() != 0 ? codec.key_group_size() : codec.group_size();
  if (quantized && kind == v1::KV_KIND_K && codec.key_axis() == v1::KEY_AXIS_PER_CHANNEL && key_group > 0) {
    return key_group;
  }
  return 1;
}

absl::Status default_kv_block_rule(const v1::CodecParams& codec, const v1::KvBlock& block, uint32_t segment_begin,
                                   uint32_t segment_end) {
  const uint32_t align = kv_block_token_alignment(codec, block.kind());
  if (align <= 1) return absl::OkStatus();
  const uint64_t block_end = uint64_t{block.token_begin()} + block.token_count();
  if (block_end != segment_end && block.token_count() % align != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "block layer %u %s [%u, %u): token_count %u is not a multiple of the per-channel key group size %u "
        "(only the segment's last block may be shorter)",
        block.layer(), kv_kind_name(block.kind()), block.token_begin(), block_end, block.token_count(), align));
  }
  return absl::OkStatus();
}

uint32_t kv_stream_format_version_for(const v1::ModelFingerprint& model) {
  for (const v1::FingerprintField& field : model.fields()) {
    if (field.name() == "layer_window") return kKvStreamWindowedFormatVersion;
  }
  return kKvStreamFormatVersion;
}

absl::StatusOr<std::vector<int32_t>> kv_layer_windows(const ModelFingerprint& model, int n_layer) {
  const std::string* text = model.find("layer_window");
  if (text == nullptr) return std::vector<int32_t>{};
  absl::StatusOr<std::vector<int32_t>> windows = parse_layer_window_text(*text, n_layer);
  if (!windows.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model fingerprint: %s", std::string(windows.status().message())));
  }
  return windows;
}

absl::StatusOr<std::vector<int32_t>> kv_layer_windows(const v1::ModelFingerprint& model) {
  const std::string* windows = nullptr;
  const std::string* n_layer_text = nullptr;
  for (const v1::FingerprintField& field : model.fields()) {
    if (field.name() == "layer_window") windows = &field.value();
    if (field.name() == "n_layer") n_layer_text = &field.value();
  }
  if (windows == nullptr) return std::vector<int32_t>{};
  int n_layer = 0;
  if (n_layer_text == nullptr || !absl::SimpleAtoi(*n_layer_text, &n_layer) || n_layer < 1 || n_layer > 4096) {
    return absl::InvalidArgumentError("model fingerprint has layer_window but no n_layer in 1..4096");
  }
  absl::StatusOr<std::vector<int32_t>> parsed = parse_layer_window_text(*windows, n_layer);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat("model fingerprint: %s", std::string(parsed.status().message())));
  }
  return parsed;
}

int64_t kv_layer_first_position(const std::vector<int32_t>& layer_windows, int layer, int64_t segment_begin,
                                int64_t segment_end) {
  if (layer_windows.empty()) return segment_begin;
  return std::max(segment_begin, window_first_kept_position(layer_windows[static_cast<size_t>(layer)], segment_end));
}

}  // namespace baton
