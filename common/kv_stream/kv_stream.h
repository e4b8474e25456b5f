// Pieces shared by the KV stream writer and reader (proto/baton.proto "KV
// stream format"; DESIGN.md "The handoff"): format constants, block checksums,
// the trailer's stream digest, the codec hooks the reader takes, and the
// segment a verified stream hands over.
//
// Payloads are opaque here: the codec (common/kv_codec/kv_codec.h) produces and
// consumes them; this layer checks sizes, checksums, placement and coverage.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv_stream/kv_fingerprint.h"
#include "proto/baton.pb.h"

struct XXH64_state_s;

namespace baton {

// KvHeader.format_version this build writes and reads: 1 for models without
// sliding-window layers (unchanged, so their streams, packs and session
// files stay byte-identical), 2 for a model whose fingerprint has a
// layer_window field: each windowed layer carries only the positions a later
// query can see (kv_layer_first_position). A stream's version must match its
// model's kind.
inline constexpr uint32_t kKvStreamFormatVersion = 1;
inline constexpr uint32_t kKvStreamWindowedFormatVersion = 2;
// Default bound on one block's payload (encoded bytes): well under gRPC's
// 4 MiB message limit.
inline constexpr uint64_t kDefaultKvBlockPayloadBytes = uint64_t{1} << 20;
// Bytes of one block's record in the trailer's stream digest.
inline constexpr size_t kKvStreamDigestRecordBytes = 40;

// XXH64 (seed 0) of a block payload exactly as sent: KvBlock.checksum.
uint64_t kv_payload_checksum(std::string_view payload);

// The trailer's stream digest: XXH64 over one 40-byte little-endian record per
// block, in stream order (layer u32, kind u32, token_begin u32, token_count u32,
// encoded_size u64, raw_size u64, checksum u64).
class KvStreamDigest {
 public:
  KvStreamDigest();
  ~KvStreamDigest();
  KvStreamDigest(const KvStreamDigest&) = delete;
  KvStreamDigest& operator=(const KvStreamDigest&) = delete;

  void add_block(uint32_t layer, uint32_t kind, uint32_t token_begin, uint32_t token_count, uint64_t encoded_size,
                 uint64_t raw_size, uint64_t checksum);
  void add_block(const v1::KvBlock& block) {
    add_block(block.layer(), static_cast<uint32_t>(block.kind()), block.token_begin(), block.token_count(),
              block.encoded_size(), block.raw_size(), block.checksum());
  }
  uint64_t value() const;

 private:
  XXH64_state_s* state_;
};

// Codec hooks. The codec owner provides them; the reader takes them in its
// options.
//
// Exact payload bytes before zstd (KvBlock.raw_size) of a block of `n_tokens`
// tokens of `kind` under `codec` (geometry captured by the callback).
using KvExpectedRawSizeFn =
    std::function<absl::StatusOr<uint64_t>(const v1::CodecParams& codec, v1::KvKind kind, uint32_t n_tokens)>;
// Placement rule of a codec for a block of the segment [segment_begin,
// segment_end): e.g. per-channel key groups need token_count % group_size == 0
// for every block but the segment's last. OK or INVALID_ARGUMENT.
using KvBlockRuleFn = std::function<absl::Status(const v1::CodecParams& codec, const v1::KvBlock& block,
                                                 uint32_t segment_begin, uint32_t segment_end)>;
// Extra payload validation after the checksum verified (e.g. a trial decode).
using KvPayloadCheckFn = std::function<absl::Status(const v1::CodecParams& codec, const v1::KvBlock& block)>;
// The receiver's own check of a verified header (fingerprint, codec, token
// ids all valid), before any block is read: e.g. token_count x bytes per
// token against a memory budget or a disk cap. An error fails the stream.
using KvHeaderCheckFn = std::function<absl::Status(const v1::KvHeader& header)>;

// Tokens a block's token_count must be a multiple of (except the segment's
// last block): the key group (key_group_size, else group_size) for keys of a
// quantized codec with per-channel key groups, else 1.
uint32_t kv_block_token_alignment(const v1::CodecParams& codec, v1::KvKind kind);
// The default KvBlockRuleFn: applies kv_block_token_alignment.
absl::Status default_kv_block_rule(const v1::CodecParams& codec, const v1::KvBlock& block, uint32_t segment_begin,
                                   uint32_t segment_end);

// The format version a stream of this model is written in (see above).
uint32_t kv_stream_format_version_for(const v1::ModelFingerprint& model);
// The model's per-layer windows from its fingerprint's layer_window field:
// empty when it has none, else n_layer entries. INVALID_ARGUMENT when the
// field does not parse for n_layer layers.
absl::StatusOr<std::vector<int32_t>> kv_layer_windows(const ModelFingerprint& model, int n_layer);
// The same from a fingerprint as carried in a header (n_layer from its fields).
absl::StatusOr<std::vector<int32_t>> kv_layer_windows(const v1::ModelFingerprint& model);
// The first position of segment [segment_begin, segment_end) that a stream
// carries for `layer`: segment_begin for a full layer (or no windows), else
// max(segment_begin, segment_end - window + 1): the next query, at position
// segment_end, sees keys (segment_end - window, segment_end]. Equal to
// segment_end when the layer needs none of the segment.
int64_t kv_layer_first_position(const std::vector<int32_t>& layer_windows, int layer, int64_t segment_begin,
                                int64_t segment_end);

// One verified block, payload still encoded.
struct KvStagedBlock {
  uint32_t layer = 0;
  v1::KvKind kind = v1::KV_KIND_UNSPECIFIED;
  uint32_t token_begin = 0;  // absolute position
  uint32_t token_count = 0;
  uint64_t raw_size = 0;     // bytes after zstd decompression
  uint64_t checksum = 0;     // XXH64 of payload
  std::string payload;       // encoded bytes (KvBlock.payload)
};

// A verified KV stream: every (layer, kind, position) of the segment covered
// exactly once, all checksums and digests verified.
struct KvSegment {
  KvFingerprint fingerprint;
  v1::KvHeader header;                 // as received (token_ids, pack_id, ...)
  std::vector<KvStagedBlock> blocks;   // in stream order
  v1::KvTrailer trailer;
  uint64_t encoded_bytes = 0;          // sum of payload sizes
  uint64_t raw_bytes = 0;              // sum of raw sizes
};

// Receives a stream's messages one at a time (a gRPC writer, a pack file).
using KvMessageSink = std::function<absl::Status(const v1::KvStreamMessage& message)>;

}  // namespace baton
