// KvStreamReader: the receiving side of a KV stream (DESIGN.md "The handoff",
// step 4). Consumes messages one at a time, validates everything before use,
// stages verified blocks, and hands the segment over (commit) only after the
// trailer verifies. Any error discards the staging and is sticky: later calls
// return the same status. Never trusts a count or size from the stream before
// checking it against a limit.
//
//   KvStreamReader reader(expected, options);
//   for each message: BATON_RETURN_IF_ERROR(reader.consume(std::move(message)));
//   BATON_ASSIGN_OR_RETURN(KvSegment segment, reader.commit());
//
// Status codes: FAILED_PRECONDITION for a stream that does not match what the
// receiver expects (fingerprint fields, token ids) or a version it cannot read;
// INVALID_ARGUMENT for a malformed stream (order, ranges, coverage, sizes);
// RESOURCE_EXHAUSTED for a limit exceeded; DATA_LOSS for checksum and digest
// failures and a stream that ends before its trailer.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv_stream/kv_fingerprint.h"
#include "common/kv_stream/kv_stream.h"
#include "common/model/model_fingerprint.h"
#include "proto/baton.pb.h"

namespace baton {

// What the receiver expects. The model is required; each context or codec
// part left unset accepts what the header declares (a pack being loaded
// defines its own tokens), but a stream starting at position 0 must always
// carry the prefix digest of its own token ids.
struct KvStreamExpectation {
  ModelFingerprint model;                     // our model (n_layer and n_vocab are read from it)
  std::optional<uint32_t> first_position;     // where the segment must start
  std::optional<std::vector<int32_t>> token_ids;  // the segment's token ids we asked for
  std::optional<Digest256> prefix_digest;     // digest of our prefix [0, end)
  std::optional<v1::CodecParams> codec;       // the exact codec we accept
};

struct KvStreamReaderOptions {
  uint32_t max_segment_tokens = 1u << 20;         // KvHeader.token_count
  uint32_t max_blocks = 1u << 20;                 // KvBlocks per stream
  uint64_t max_message_bytes = 4u << 20;          // serialized KvStreamMessage (gRPC default limit)
  uint64_t max_block_encoded_bytes = 4u << 20;    // KvBlock.encoded_size
  uint64_t max_block_raw_bytes = 64u << 20;       // KvBlock.raw_size (allocated when decompressing)
  uint64_t max_segment_encoded_bytes = uint64_t{16} << 30;  // all staged payloads
  uint32_t max_layers = 4096;                     // sanity cap on the model's n_layer
  uint32_t max_pack_id_chars = 128;
  uint32_t max_description_bytes = 4096;
  // Exact raw size per block, from the codec owner. Unset: raw sizes are only
  // checked against the caps and the encoded size.
  KvExpectedRawSizeFn expected_raw_size;
  // Codec placement rule; unset: default_kv_block_rule.
  KvBlockRuleFn block_rule;
  // Extra payload validation (after the checksum); unset: none.
  KvPayloadCheckFn check_payload;
  // The receiver's check of the verified header (memory, disk), before any
  // block; unset: none.
  KvHeaderCheckFn check_header;
};

class KvStreamReader {
 public:
  KvStreamReader(KvStreamExpectation expected, KvStreamReaderOptions options = {});

  // Validates and stages one message (header, block or trailer, in order).
  absl::Status consume(v1::KvStreamMessage message);

  // True once the trailer verified; commit() then hands the segment over.
  bool complete() const { return state_ == State::kComplete; }
  // Ends the stream early (cancelled RPC, unreadable file): discards the
  // staging, makes `why` the sticky error and returns it.
  absl::Status abandon(absl::Status why);
  // Blocks staged so far.
  size_t staged_blocks() const { return segment_.blocks.size(); }

  // Hands over the verified segment (once). DATA_LOSS when the stream ended
  // before its trailer (the staging is discarded); the sticky error after a
  // failure.
  absl::StatusOr<KvSegment> commit();

  // The limits this reader enforces.
  const KvStreamReaderOptions& options() const { return options_; }

 private:
  enum class State { kHeader, kBlocks, kComplete, kCommitted, kFailed };

  absl::Status consume_header(v1::KvHeader& header);
  absl::Status consume_block(v1::KvBlock& block);
  absl::Status consume_trailer(const v1::KvTrailer& trailer);
  absl::Status check_coverage() const;
  absl::Status fail(absl::Status status);

  KvStreamExpectation expected_;
  KvStreamReaderOptions options_;
  State state_ = State::kHeader;
  absl::Status error_;

  uint32_t n_layer_ = 0;
  uint32_t segment_begin_ = 0;
  uint64_t segment_end_ = 0;
  // Per layer: the first position the stream carries (the segment's start,
  // or a windowed layer's tail: kv_layer_first_position), and the windows
  // (empty without windowed layers).
  std::vector<uint32_t> layer_begin_;
  std::vector<int32_t> layer_windows_;
  KvSegment segment_;  // staging
  // Covered ranges per (layer, kind): index 2 * layer + (kind == V); begin -> end.
  std::vector<std::map<uint32_t, uint64_t>> coverage_;
  KvStreamDigest digest_;
};

}  // namespace baton
