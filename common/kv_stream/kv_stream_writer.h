// KvStreamWriter: produces the messages of one KV stream (header, bounded
// blocks with checksums, trailer with counts, byte totals and stream digest)
// and hands each to a sink (a gRPC stream, a pack file).
//
//   KvStreamWriter writer(sink);
//   writer.write_header(header);                 // fingerprint, codec, token ids
//   for (layer...) for (kind: K, V)
//     writer.write_layer(layer, kind, raw_bytes_per_token, encode);   // split into blocks
//   writer.write_trailer();
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv_stream/kv_stream.h"
#include "proto/baton.pb.h"

namespace baton {

struct KvStreamWriterOptions {
  // Most encoded bytes in one block's payload; write_layer splits a layer's
  // token range so every payload stays at or under it.
  uint64_t max_block_payload_bytes = kDefaultKvBlockPayloadBytes;
};

// What the codec returns for a token range.
struct KvEncodedPayload {
  std::string payload;    // encoded bytes (quantized, then zstd when enabled)
  uint64_t raw_size = 0;  // bytes before zstd
};

// Encodes the K or V of one layer for tokens [token_begin, token_begin + n).
using KvBlockEncodeFn = std::function<absl::StatusOr<KvEncodedPayload>(uint32_t token_begin, uint32_t n_tokens)>;

// A token range [begin, begin + count).
struct KvTokenRange {
  uint32_t begin = 0;
  uint32_t count = 0;
  bool operator==(const KvTokenRange&) const = default;
};

// Splits [begin, begin + count) into consecutive chunks of at most
// max_bytes / bytes_per_token tokens (at least one `align` group), each chunk
// but the last a multiple of `align` tokens.
std::vector<KvTokenRange> plan_kv_block_ranges(uint32_t begin, uint32_t count, uint64_t bytes_per_token,
                                               uint64_t max_bytes, uint32_t align);

class KvStreamWriter {
 public:
  explicit KvStreamWriter(KvMessageSink sink, KvStreamWriterOptions options = {});

  // Sends the header. format_version is set by the writer; the header must
  // carry the fingerprint, codec, first_position, token_count (>= 1) and
  // token_count token ids (see set_header_fingerprint).
  absl::Status write_header(v1::KvHeader header);

  // Sends one block: checksum and sizes are filled here. INVALID_ARGUMENT when
  // the range leaves the segment, RESOURCE_EXHAUSTED when the payload exceeds
  // max_block_payload_bytes.
  absl::Status write_block(uint32_t layer, v1::KvKind kind, uint32_t token_begin, uint32_t token_count,
                           std::string payload, uint64_t raw_size);

  // Sends the K or V of `layer` for the whole segment as bounded blocks.
  // raw_bytes_per_token (> 0) sizes the first try; a chunk whose encoded
  // payload is still over the bound is halved (in alignment groups) and
  // encoded again. RESOURCE_EXHAUSTED when a single group does not fit.
  absl::Status write_layer(uint32_t layer, v1::KvKind kind, uint64_t raw_bytes_per_token,
                           const KvBlockEncodeFn& encode);
  // The same for the part [token_begin, token_begin + n_tokens) of the
  // segment (a sender that streams a layer chunk by chunk as it is computed).
  // A sliding-window layer (the header's model fingerprint has layer_window)
  // sends only the part of the range at or after kv_layer_first_position:
  // nothing when the range lies before it.
  // Blocks are cut in alignment groups from token_begin, so token_begin must
  // sit a whole number of groups after the segment's start unless the range
  // ends the segment (INVALID_ARGUMENT otherwise).
  absl::Status write_layer_range(uint32_t layer, v1::KvKind kind, uint32_t token_begin, uint32_t n_tokens,
                                 uint64_t raw_bytes_per_token, const KvBlockEncodeFn& encode);

  // Sends the trailer (block count, stream digest, byte totals) and closes the
  // stream; `producer` is optional.
  absl::Status write_trailer(const v1::ProducerStats* producer = nullptr);

  uint32_t block_count() const { return block_count_; }
  // One past the segment's last position (after write_header).
  uint64_t segment_end() const { return segment_end_; }
  uint64_t encoded_bytes() const { return encoded_bytes_; }
  uint64_t raw_bytes() const { return raw_bytes_; }

 private:
  enum class State { kHeader, kBlocks, kClosed };

  KvMessageSink sink_;
  KvStreamWriterOptions options_;
  State state_ = State::kHeader;
  v1::CodecParams codec_;
  // Splits [token_begin, token_begin + n_tokens) into bounded blocks and sends them.
  absl::Status write_blocks(uint32_t layer, v1::KvKind kind, uint32_t token_begin, uint32_t n_tokens,
                            uint64_t raw_bytes_per_token, const KvBlockEncodeFn& encode);

  uint32_t segment_begin_ = 0;
  uint64_t segment_end_ = 0;
  std::vector<int32_t> layer_windows_;  // the header model's windows (kv_layer_windows); empty: none
  uint32_t block_count_ = 0;
  uint64_t encoded_bytes_ = 0;
  uint64_t raw_bytes_ = 0;
  KvStreamDigest digest_;
};

}  // namespace baton
