// The two ends of the KV handoff (DESIGN.md "The handoff", steps 3 and 4) as
// library functions; the services wrap them in their streams.
//
// Sender (cloud): write_kv_segment encodes the K and V of every layer for the
// token segment [first_position, end) with the wire codec and sends them
// through a KvStreamWriter as bounded blocks (the writer's payload bound),
// layer by layer; write_kv_layer is the per-layer piece for a sender that
// streams each layer as soon as its prefill is done.
//
// Receiver (edge): read_kv_segment feeds the messages to a KvStreamReader
// with the codec hooks (kv_codec_params.h) and, only after the trailer
// verified, load_kv_segment puts the blocks into the target KvCache:
// KvBlockIngest::ingest_block (KvCache::block_ingest) where the store holds
// the wire's form as is, else decode to f32 and KvCache::store (per-channel or pre-RoPE keys,
// other bit widths, an F32 cache). The target is unchanged on any error: its
// size stays put, and nothing is written until every block has decoded.
//
// Pre-RoPE keys (codec "pre"): the engine caches post-RoPE keys, so the
// sender un-rotates them with RoPE at the negated angle (a rotation by -theta
// is the exact inverse of one by +theta; the f32 rounding it adds is ~1e-7
// relative, far below any quantization step), the codec quantizes them, and
// the receiver's decode applies RoPE for each token's absolute position. Both
// ends need the model's RoPE (KvRope) for such codecs.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_cache/kv_cache.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_stream/kv_stream.h"
#include "common/kv_stream/kv_stream_reader.h"
#include "common/kv_stream/kv_stream_writer.h"
#include "common/model/model_fingerprint.h"
#include "common/util/sha256.h"
#include "proto/baton.pb.h"

namespace baton {

class Model;
class QuantizedKvCache;
class KvTransformCodec;

// The model's RoPE, for codecs with pre-RoPE keys (unused otherwise).
struct KvRope {
  std::span<const float> inv_freq;  // [n_rot / 2]: Model::rope_inv_freq()
  int n_rot = 0;                    // rotated channels per head, even, <= head_dim
  bool neox = false;                // NEOX pairing (i, i + n_rot/2) instead of (2i, 2i+1)
};
// The RoPE of `model` (the view borrows the model's frequencies).
KvRope kv_rope_of(const Model& model);

// What the stream's header says about the segment.
struct KvStreamHeaderInfo {
  ModelFingerprint model;           // the sender's model (model_fingerprint)
  KvCodecConfig codec;              // wire codec; planes layout (kv_codec_params.h)
  uint32_t first_position = 0;      // position of the segment's first token
  std::vector<int32_t> token_ids;   // the segment's tokens [first_position, end); not empty
  Digest256 prefix_digest{};        // prefix_digest() of all tokens [0, end)
  std::string pack_id;              // prefix packs only
  std::string description;          // prefix packs only
  // The transform codec's coder when `codec` is one (its config() == codec).
  const KvTransformCodec* transform = nullptr;
};

// The complete header (fingerprint, codec, positions, token ids); the writer
// sets format_version.
absl::StatusOr<v1::KvHeader> make_kv_header(const KvStreamHeaderInfo& info);

// Reads one layer's K (is_key) or V for absolute positions [token_begin,
// token_begin + n_tokens) into out: f32 [n_tokens, n_head_kv * head_dim],
// keys post-RoPE (as the engine caches them).
using KvRowsFn = std::function<absl::Status(int layer, bool is_key, int64_t token_begin, int64_t n_tokens,
                                            float* out)>;
// Rows of an F32KvCache (the cloud's CPU prefill); it must outlive the
// function. Positions past the cache's size() are an error.
KvRowsFn f32_kv_rows(const F32KvCache& cache);

// Encodes and sends one layer's K then V for the whole segment of the
// writer's header, in blocks under the writer's payload bound (the header
// must have been written with the same codec).
// A transform codec (codec.transform) needs `transform`, the coder of exactly
// that codec (FAILED_PRECONDITION otherwise).
absl::Status write_kv_layer(const KvRowsFn& rows, const KvGeometry& geometry, const KvCodecConfig& codec,
                            const KvRope* rope, int layer, KvStreamWriter& writer,
                            const KvTransformCodec* transform = nullptr);
// The same for positions [token_begin, token_begin + n_tokens) of the
// segment only (KvStreamWriter::write_layer_range's alignment rule applies:
// kv_block_token_alignment of the codec's keys).
absl::Status write_kv_layer_range(const KvRowsFn& rows, const KvGeometry& geometry, const KvCodecConfig& codec,
                                  const KvRope* rope, int layer, uint32_t token_begin, uint32_t n_tokens,
                                  KvStreamWriter& writer, const KvTransformCodec* transform = nullptr);

// Header, every layer's K and V, trailer. `rope` is needed for pre-RoPE
// codecs only (INVALID_ARGUMENT without it). `producer` (optional) goes into
// the trailer.
absl::Status write_kv_segment(const KvRowsFn& rows, const KvGeometry& geometry, const KvStreamHeaderInfo& info,
                              const KvRope* rope, KvStreamWriter& writer,
                              const v1::ProducerStats* producer = nullptr);
// The same from an F32KvCache that holds [0, end) (at least [first_position, end)).
absl::Status write_kv_segment(const F32KvCache& source, const KvStreamHeaderInfo& info, const KvRope* rope,
                              KvStreamWriter& writer, const v1::ProducerStats* producer = nullptr);
// The same from a QuantizedKvCache that holds [0, end), its blocks sent in
// the store's own quantized form (export_block, no requantization; a
// session file or a pack saved by the edge). info.codec must be that form
// (can_ingest for K and V; its zstd level is the caller's choice), else
// INVALID_ARGUMENT.
absl::Status write_kv_segment(const QuantizedKvCache& source, const KvStreamHeaderInfo& info, KvStreamWriter& writer,
                              const v1::ProducerStats* producer = nullptr);

// What a load did.
struct KvSegmentLoad {
  uint32_t first_position = 0;
  uint32_t token_count = 0;
  KvCodecConfig codec;               // the wire codec of the segment
  uint64_t encoded_bytes = 0;        // payload bytes received (after zstd)
  uint64_t raw_bytes = 0;            // payload bytes before zstd
  uint32_t ingested_blocks = 0;      // copied into a QuantizedKvCache as they were
  uint32_t decoded_blocks = 0;       // decoded to f32 and stored (requantized by a quantized store)
  uint32_t decoded_on_arrival = 0;   // transform blocks decoded while the stream was still arriving
};

// Puts a verified segment (KvStreamReader::commit) into `target`, which must
// hold exactly [0, first_position) (size() == first_position) and have room
// for the segment, with the geometry of the segment's model. Every block is
// decoded (and checked: sizes, zstd frame, finite scales) before anything is
// written; then each layer is written and the segment committed
// (set_size(end)). On error `target` is unchanged. `rope` is needed for
// pre-RoPE keys only.
// A transform-coded segment needs `transform`, the coder of exactly its codec
// (FAILED_PRECONDITION naming tc_calibration otherwise); its blocks are
// decoded to f32, keys rotated, and requantized to the store's form.
absl::StatusOr<KvSegmentLoad> load_kv_segment(const KvSegment& segment, const KvRope* rope, KvCache& target,
                                              const KvTransformCodec* transform = nullptr);

// Next message of a stream; nullopt at its end.
using KvMessageSource = std::function<absl::StatusOr<std::optional<v1::KvStreamMessage>>()>;

struct KvReadOptions {
  // Limits; the codec hooks for the target's geometry are added
  // (kv_reader_options_with_codec).
  KvStreamReaderOptions reader;
  // Trial-decode each block as it arrives (rejects a bad block before the
  // trailer; load_kv_segment decodes everything again either way). Transform
  // blocks are not trial-decoded (their coder needs the stream's end).
  bool trial_decode = true;
  // The transform codec's coder, for segments coded with it.
  const KvTransformCodec* transform = nullptr;
  // Set: called once the trailer verified, before the segment is loaded; a
  // non-OK status ends the read with it, `target` unchanged. Until it
  // returns, `target` may still grow towards the expected first position
  // (an edge prefilling the front of the prompt while the back streams in),
  // so the position is checked at load instead of before reading.
  std::function<absl::Status()> before_load;
};

// Reads a whole stream into `target`: every message through a KvStreamReader
// that checks `expected` (model, and the context / codec the caller pins),
// then load_kv_segment. When expected.first_position is unset the segment
// must still start at target.size() (at load time with
// options.before_load). On any error (the reader's codes, a
// source error, a load error) `target` is unchanged.
absl::StatusOr<KvSegmentLoad> read_kv_segment(const KvMessageSource& source, const KvStreamExpectation& expected,
                                              const KvRope* rope, KvCache& target, const KvReadOptions& options = {});
// The same over messages held in memory (a test, a pack read whole).
absl::StatusOr<KvSegmentLoad> read_kv_segment(std::span<const v1::KvStreamMessage> messages,
                                              const KvStreamExpectation& expected, const KvRope* rope,
                                              KvCache& target, const KvReadOptions& options = {});

}  // namespace baton
