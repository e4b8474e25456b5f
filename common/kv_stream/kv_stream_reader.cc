#include "common/kv_stream/kv_stream_reader.h"

#include <zstd.h>

#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/util/check.h"

namespace baton {
namespace {

std::string range_text(uint64_t begin, uint64_t end) { return absl::StrFormat("[%u, %u)", begin, end); }

std::string block_name(const v1::KvBlock& block) {
  return absl::StrFormat("block layer %u %s %s", block.layer(), kv_kind_name(block.kind()),
                         range_text(block.token_begin(), uint64_t{block.token_begin()} + block.token_count()));
}

std::string digest_hex(const std::string& bytes) {
  return to_hex(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

absl::StatusOr<uint32_t> model_u32(const ModelFingerprint& model, const char* name) {
  const std::string* text = nullptr;
  for (const auto& [key, value] : model.fields) {
    if (key == name) text = &value;
  }
  uint32_t value = 0;
  if (text == nullptr || !absl::SimpleAtoi(*text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the receiver's model fingerprint has no numeric field '%s'", name));
  }
  return value;
}

absl::Status check_codec_complete(const v1::CodecParams& codec) {
  const int c = codec.codec();
  if (c != v1::KV_CODEC_F16 && c != v1::KV_CODEC_INT8 && c != v1::KV_CODEC_INT4 && c != v1::KV_CODEC_TC) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV header codec is %s; expected f16, int8, int4 or tc", kv_codec_name(c)));
  }
  if (c == v1::KV_CODEC_TC) {
    const v1::TransformCodecParams& t = codec.transform();
    if (t.calibration_sha256().size() != 32) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "KV header codec tc: calibration_sha256 is %d bytes; expected 32", t.calibration_sha256().size()));
    }
    if (t.budget_tenths() < 1 || t.budget_tenths() > 80) {
      return absl::InvalidArgumentError(
          absl::StrFormat("KV header codec tc: budget_tenths %u is outside [1, 80]", t.budget_tenths()));
    }
  } else if (c != v1::KV_CODEC_F16) {
    if (codec.group_size() == 0) return absl::InvalidArgumentError("KV header codec group_size is 0");
    const int axis = codec.key_axis();
    if (axis != v1::KEY_AXIS_PER_TOKEN && axis != v1::KEY_AXIS_PER_CHANNEL) {
      return absl::InvalidArgumentError(
          absl::StrFormat("KV header codec key_axis is %s; expected per_token or per_channel", key_axis_name(axis)));
    }
  }
  if (!codec.has_zstd_level()) return absl::InvalidArgumentError("KV header codec has no zstd_level");
  if (codec.zstd_level() < ZSTD_minCLevel() || codec.zstd_level() > ZSTD_maxCLevel()) {
    return absl::InvalidArgumentError(absl::StrFormat("KV header codec zstd_level %d is outside [%d, %d]",
                                                      codec.zstd_level(), ZSTD_minCLevel(), ZSTD_maxCLevel()));
  }
  return absl::OkStatus();
}

// What a transform-coded block may take beyond its raw (F16) size.
constexpr uint64_t kTransformBlockSlackBytes = 64;

bool pack_id_char_ok(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

}  // namespace

KvStreamReader::KvStreamReader(KvStreamExpectation expected, KvStreamReaderOptions options)
    : expected_(std::move(expected)), options_(std::move(options)) {}

absl::Status KvStreamReader::fail(absl::Status status) {
  BATON_CHECK(!status.ok());
  state_ = State::kFailed;
  error_ = status;
  segment_ = KvSegment{};  // discard the staging
  coverage_.clear();
  coverage_.shrink_to_fit();
  return status;
}

absl::Status KvStreamReader::abandon(absl::Status why) {
  if (state_ == State::kFailed) return error_;
  if (why.ok()) why = absl::CancelledError("KV stream abandoned");
  return fail(std::move(why));
}

absl::Status KvStreamReader::consume(v1::KvStreamMessage message) {
  switch (state_) {
    case State::kFailed: return error_;
    case State::kComplete:
    case State::kCommitted:
      return fail(absl::InvalidArgumentError("KV stream has a message after its trailer"));
    default: break;
  }
  const size_t message_bytes = message.ByteSizeLong();
  if (message_bytes > options_.max_message_bytes) {
    return fail(absl::ResourceExhaustedError(
        absl::StrFormat("KV stream message has %u bytes; the limit is %u (max_message_bytes)", message_bytes,
                        options_.max_message_bytes)));
  }
  absl::Status status;
  switch (message.item_case()) {
    case v1::KvStreamMessage::kHeader:
      if (state_ != State::kHeader) {
        status = absl::InvalidArgumentError("KV stream has a second header");
      } else {
        status = consume_header(*message.mutable_header());
      }
      break;
    case v1::KvStreamMessage::kBlock:
      if (state_ != State::kBlocks) {
        status = absl::InvalidArgumentError("KV stream starts with a block; the header must come first");
      } else {
        status = consume_block(*message.mutable_block());
      }
      break;
    case v1::KvStreamMessage::kTrailer:
      if (state_ != State::kBlocks) {
        status = absl::InvalidArgumentError("KV stream starts with a trailer; the header must come first");
      } else {
        status = consume_trailer(message.trailer());
      }
      break;
    default:
      status = absl::InvalidArgumentError("KV stream message has no header, block or trailer");
  }
  if (!status.ok()) return fail(std::move(status));
  return absl::OkStatus();
}

absl::Status KvStreamReader::consume_header(v1::KvHeader& header) {
  if (header.format_version() != kKvStreamFormatVersion &&
      header.format_version() != kKvStreamWindowedFormatVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "KV stream format_version is %u; this build reads versions %u and %u", header.format_version(),
        kKvStreamFormatVersion, kKvStreamWindowedFormatVersion));
  }
  // Limits and shape before anything is digested.
  if (header.token_count() == 0) return absl::InvalidArgumentError("KV stream header has token_count 0");
  if (header.token_count() > options_.max_segment_tokens) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("KV stream segment has %u tokens; the limit is %u (max_segment_tokens)",
                        header.token_count(), options_.max_segment_tokens));
  }
  const uint64_t end = uint64_t{header.first_position()} + header.token_count();
  if (end > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrFormat("KV stream segment %s runs past position 2^32 - 1",
                                                      range_text(header.first_position(), end)));
  }
  if (static_cast<uint64_t>(header.token_ids_size()) != header.token_count()) {
    return absl::InvalidArgumentError(absl::StrFormat("KV stream header has %d token_ids for token_count %u",
                                                      header.token_ids_size(), header.token_count()));
  }
  if (header.pack_id().size() > options_.max_pack_id_chars) {
    return absl::InvalidArgumentError(absl::StrFormat("KV stream pack_id has %u characters; the limit is %u",
                                                      header.pack_id().size(), options_.max_pack_id_chars));
  }
  for (char c : header.pack_id()) {
    if (!pack_id_char_ok(c)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "KV stream pack_id has character 0x%02x; allowed: A-Z a-z 0-9 . _ -", static_cast<unsigned char>(c)));
    }
  }
  if (header.description().size() > options_.max_description_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat("KV stream description has %u bytes; the limit is %u",
                                                      header.description().size(),
                                                      options_.max_description_bytes));
  }

  // The receiver's own model: layer count and vocabulary.
  BATON_ASSIGN_OR_RETURN(const uint32_t n_layer, model_u32(expected_.model, "n_layer"));
  BATON_ASSIGN_OR_RETURN(const uint32_t n_vocab, model_u32(expected_.model, "n_vocab"));
  if (n_layer == 0 || n_layer > options_.max_layers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the receiver's model has n_layer %u; supported 1..%u", n_layer, options_.max_layers));
  }

  // Fingerprint: self-consistent, then equal to what we expect.
  BATON_ASSIGN_OR_RETURN(KvFingerprint theirs, kv_fingerprint_from_header(header));
  BATON_RETURN_IF_ERROR(check_codec_complete(theirs.codec));
  KvFingerprint ours;
  ours.model = expected_.model;
  ours.model.digest = to_hex(sha256(canonical_fields(ours.model.fields)));
  ours.context.first_position = expected_.first_position.value_or(theirs.context.first_position);
  ours.context.token_count = expected_.token_ids ? static_cast<uint32_t>(expected_.token_ids->size())
                                                 : theirs.context.token_count;
  ours.context.prefix_digest = expected_.prefix_digest.value_or(theirs.context.prefix_digest);
  ours.codec = expected_.codec.value_or(theirs.codec);
  BATON_RETURN_IF_ERROR(verify_kv_fingerprint(ours, theirs, "the KV stream"));
  BATON_ASSIGN_OR_RETURN(std::vector<int32_t> layer_windows, kv_layer_windows(ours.model, static_cast<int>(n_layer)));
  const uint32_t version_wanted = layer_windows.empty() ? kKvStreamFormatVersion : kKvStreamWindowedFormatVersion;
  if (header.format_version() != version_wanted) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV stream format_version is %u but its model %s sliding-window layers (version %u)",
        header.format_version(), layer_windows.empty() ? "has no" : "has", version_wanted));
  }

  // Token ids: what we asked for, inside the vocabulary.
  for (int i = 0; i < header.token_ids_size(); ++i) {
    const uint32_t id = header.token_ids(i);
    if (expected_.token_ids && static_cast<uint32_t>((*expected_.token_ids)[static_cast<size_t>(i)]) != id) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "context mismatch: token_ids[%d] (position %u) is %d here, %u in the KV stream", i,
          uint64_t{header.first_position()} + static_cast<uint32_t>(i),
          (*expected_.token_ids)[static_cast<size_t>(i)], id));
    }
    if (id >= n_vocab) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "KV stream token_ids[%d] (position %u) is %u, outside the vocabulary (n_vocab %u)", i,
          uint64_t{header.first_position()} + static_cast<uint32_t>(i), id, n_vocab));
    }
  }
  // A segment that starts at 0 holds its whole prefix: its digest must match.
  if (header.first_position() == 0) {
    std::vector<int32_t> ids(header.token_ids().begin(), header.token_ids().end());
    const Digest256 computed = prefix_digest(ids);
    if (computed != theirs.context.prefix_digest) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "KV stream prefix_digest is %s but its token ids [0, %u) hash to %s", digest_hex(header.prefix_digest()),
          header.token_count(), to_hex(computed)));
    }
  }

  if (options_.check_header) BATON_RETURN_IF_ERROR(options_.check_header(header));

  n_layer_ = n_layer;
  segment_begin_ = header.first_position();
  segment_end_ = end;
  coverage_.assign(size_t{2} * n_layer, {});
  layer_begin_.assign(n_layer, 0);
  for (uint32_t layer = 0; layer < n_layer; ++layer) {
    layer_begin_[layer] = static_cast<uint32_t>(
        kv_layer_first_position(layer_windows, static_cast<int>(layer), segment_begin_, static_cast<int64_t>(end)));
  }
  layer_windows_ = std::move(layer_windows);
  segment_.fingerprint = std::move(theirs);
  segment_.header = std::move(header);
  state_ = State::kBlocks;
  return absl::OkStatus();
}

absl::Status KvStreamReader::consume_block(v1::KvBlock& block) {
  const v1::CodecParams& codec = segment_.header.codec();
  if (segment_.blocks.size() >= options_.max_blocks) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("KV stream has more than %u blocks (max_blocks)", options_.max_blocks));
  }
  if (block.layer() >= n_layer_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: layer %u is out of range (n_layer %u)", block_name(block), block.layer(), n_layer_));
  }
  if (block.kind() != v1::KV_KIND_K && block.kind() != v1::KV_KIND_V) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: kind %s is neither K nor V", block_name(block), kv_kind_name(block.kind())));
  }
  const uint64_t block_end = uint64_t{block.token_begin()} + block.token_count();
  if (block.token_count() == 0 || block.token_begin() < segment_begin_ || block_end > segment_end_) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: token range is empty or outside the segment %s",
                                                      block_name(block),
                                                      range_text(segment_begin_, segment_end_)));
  }
  // A windowed layer carries only what a later query can see.
  if (block.token_begin() < layer_begin_[block.layer()]) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s starts before position %u: layer %u has a sliding window of %d tokens, so the stream carries only "
        "%s",
        block_name(block), layer_begin_[block.layer()], block.layer(), layer_windows_[block.layer()],
        range_text(layer_begin_[block.layer()], segment_end_)));
  }
  // The head block of a windowed tail may be a partial group (the writer cuts
  // it so that the blocks after it keep the segment's alignment).
  const bool windowed_head =
      layer_begin_[block.layer()] > segment_begin_ && block.token_begin() == layer_begin_[block.layer()];
  const KvBlockRuleFn& rule = options_.block_rule ? options_.block_rule : KvBlockRuleFn(default_kv_block_rule);
  if (!windowed_head) BATON_RETURN_IF_ERROR(rule(codec, block, segment_begin_, static_cast<uint32_t>(segment_end_)));

  // Sizes before the payload is touched.
  if (block.payload().size() != block.encoded_size()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: payload has %u bytes but encoded_size is %u",
                                                      block_name(block), block.payload().size(),
                                                      block.encoded_size()));
  }
  if (block.encoded_size() == 0 || block.encoded_size() > options_.max_block_encoded_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: encoded_size %u is outside [1, %u] (max_block_encoded_bytes)",
                                                      block_name(block), block.encoded_size(),
                                                      options_.max_block_encoded_bytes));
  }
  if (block.raw_size() == 0 || block.raw_size() > options_.max_block_raw_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: raw_size %u is outside [1, %u] (max_block_raw_bytes)",
                                                      block_name(block), block.raw_size(),
                                                      options_.max_block_raw_bytes));
  }
  if (codec.codec() == v1::KV_CODEC_TC) {
    // raw_size is the F16 size of what the block carries; its symbols take
    // at most 8 bits of the 16 (plus the rANS states or the zstd frame).
    if (block.encoded_size() > block.raw_size() + kTransformBlockSlackBytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: encoded_size %u exceeds the transform codec's bound raw_size %u + %u", block_name(block),
          block.encoded_size(), block.raw_size(), kTransformBlockSlackBytes));
    }
  } else if (codec.zstd_level() == 0) {
    if (block.raw_size() != block.encoded_size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: raw_size %u differs from encoded_size %u although payloads are not compressed",
                          block_name(block), block.raw_size(), block.encoded_size()));
    }
  } else if (block.encoded_size() > ZSTD_compressBound(block.raw_size())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: encoded_size %u exceeds zstd's bound %u for raw_size %u", block_name(block), block.encoded_size(),
        ZSTD_compressBound(block.raw_size()), block.raw_size()));
  }
  if (options_.expected_raw_size) {
    auto expected_raw = options_.expected_raw_size(codec, block.kind(), block.token_count());
    if (!expected_raw.ok()) return expected_raw.status();
    if (*expected_raw != block.raw_size()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: raw_size is %u; codec %s needs exactly %u bytes",
                                                        block_name(block), block.raw_size(),
                                                        kv_codec_name(codec.codec()), *expected_raw));
    }
  }
  if (segment_.encoded_bytes + block.encoded_size() > options_.max_segment_encoded_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "KV stream payloads exceed %u bytes (max_segment_encoded_bytes) at %s", options_.max_segment_encoded_bytes,
        block_name(block)));
  }

  // Placement: no overlap with what this (layer, kind) already holds.
  std::map<uint32_t, uint64_t>& covered =
      coverage_[size_t{2} * block.layer() + (block.kind() == v1::KV_KIND_V ? 1 : 0)];
  auto next = covered.lower_bound(block.token_begin());
  if (next != covered.end() && next->first < block_end) {
    return absl::InvalidArgumentError(absl::StrFormat("%s overlaps an earlier block covering %s", block_name(block),
                                                      range_text(next->first, next->second)));
  }
  if (next != covered.begin()) {
    auto previous = std::prev(next);
    if (previous->second > block.token_begin()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s overlaps an earlier block covering %s",
                                                        block_name(block),
                                                        range_text(previous->first, previous->second)));
    }
  }

  // Contents.
  const uint64_t checksum = kv_payload_checksum(block.payload());
  if (checksum != block.checksum()) {
    return absl::DataLossError(absl::StrFormat("%s: payload checksum is %016x; the block says %016x",
                                               block_name(block), checksum, block.checksum()));
  }
  if (options_.check_payload) BATON_RETURN_IF_ERROR(options_.check_payload(codec, block));

  covered.emplace(block.token_begin(), block_end);
  digest_.add_block(block);
  segment_.encoded_bytes += block.encoded_size();
  segment_.raw_bytes += block.raw_size();
  KvStagedBlock staged;
  staged.layer = block.layer();
  staged.kind = block.kind();
  staged.token_begin = block.token_begin();
  staged.token_count = block.token_count();
  staged.raw_size = block.raw_size();
  staged.checksum = block.checksum();
  staged.payload = std::move(*block.mutable_payload());
  segment_.blocks.push_back(std::move(staged));
  return absl::OkStatus();
}

absl::Status KvStreamReader::check_coverage() const {
  for (uint32_t layer = 0; layer < n_layer_; ++layer) {
    for (int v = 0; v < 2; ++v) {
      const std::map<uint32_t, uint64_t>& covered = coverage_[size_t{2} * layer + static_cast<size_t>(v)];
      uint64_t at = layer_begin_[layer];
      for (const auto& [begin, end] : covered) {
        if (begin > at) break;
        at = end;
      }
      if (at < segment_end_) {
        auto gap_end = covered.upper_bound(static_cast<uint32_t>(at));
        const uint64_t until = gap_end == covered.end() ? segment_end_ : gap_end->first;
        return absl::InvalidArgumentError(absl::StrFormat("KV stream is missing layer %u %s tokens %s", layer,
                                                          v == 0 ? "K" : "V", range_text(at, until)));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status KvStreamReader::consume_trailer(const v1::KvTrailer& trailer) {
  BATON_RETURN_IF_ERROR(check_coverage());
  if (trailer.block_count() != segment_.blocks.size()) {
    return absl::DataLossError(absl::StrFormat("KV stream trailer block_count is %u but %u blocks were received",
                                               trailer.block_count(), segment_.blocks.size()));
  }
  if (trailer.encoded_bytes() != segment_.encoded_bytes) {
    return absl::DataLossError(absl::StrFormat("KV stream trailer encoded_bytes is %u but the blocks hold %u",
                                               trailer.encoded_bytes(), segment_.encoded_bytes));
  }
  if (trailer.raw_bytes() != segment_.raw_bytes) {
    return absl::DataLossError(absl::StrFormat("KV stream trailer raw_bytes is %u but the blocks add up to %u",
                                               trailer.raw_bytes(), segment_.raw_bytes));
  }
  if (trailer.stream_digest() != digest_.value()) {
    return absl::DataLossError(absl::StrFormat("KV stream trailer stream_digest is %016x; the blocks hash to %016x",
                                               trailer.stream_digest(), digest_.value()));
  }
  segment_.trailer = trailer;
  state_ = State::kComplete;
  return absl::OkStatus();
}

absl::StatusOr<KvSegment> KvStreamReader::commit() {
  switch (state_) {
    case State::kFailed: return error_;
    case State::kCommitted: return absl::FailedPreconditionError("KV stream segment was already committed");
    case State::kHeader: return fail(absl::DataLossError("KV stream ended before its header"));
    case State::kBlocks:
      return fail(absl::DataLossError(absl::StrFormat("KV stream ended before its trailer (%u blocks received)",
                                                      segment_.blocks.size())));
    case State::kComplete: break;
  }
  state_ = State::kCommitted;
  coverage_.clear();
  return std::move(segment_);
}

}  // namespace baton
