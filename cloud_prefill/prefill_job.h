// PrefillJob: what one Prefill request does on a service worker thread.
//
//   1. Reuse: copy the longest KV already held for the prompt into a fresh
//      host cache — the prefix pack the request names, its session's previous
//      turn (SessionCache, else the state tier's copy), or the prefix cache
//      (by block digest: L1, then block by block from the state tier's L2) —
//      whichever covers most.
//   2. Compute the rest in chunks of chunk_tokens on the backend, layer by
//      layer over each chunk.
//   3. Stream [first_position, end) as a KV stream: the header at once, then
//      blocks for layer L of a slice as soon as layer L of the chunk that
//      completes it is in the host cache (reused positions at once). Encoding
//      (quantize + zstd) and sending run on the job's encoder thread, off the
//      compute path: env.encode_threads workers encode the layers' slices
//      as they complete and a sender sends them in order (the same bytes
//      with any number of workers); the stream is cut into slices of chunk_tokens (rounded up
//      to the codec's key alignment) measured from first_position, so block
//      boundaries do not depend on what was reused.
//   3b. Early tokens (PrefillRequest.early_tokens): once the prompt is
//      computed, decode steps from the prompt's last token sample the
//      reply's first tokens with the edge's sampler, each sent at once
//      through the urgent sink (ahead of the blocks still queued), while the
//      encoder thread goes on sending the KV. Their rows are dropped
//      afterwards: the stream and the caches hold the prompt only.
//   4. After the trailer: keep the prompt's full 64-token blocks in the prefix
//      cache and, with a session id, the whole KV in the session cache; the
//      state tier gets the blocks this job computed and the session, through
//      its write-behind queue (the job never waits on it).
//
// Cancellation (the sink fails, or `cancelled` turns true) stops the compute
// at the next layer and the job frees everything it held.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cloud_prefill/prefill_backend.h"
#include "cloud_prefill/prefix_cache.h"
#include "cloud_prefill/prefix_pack_store.h"
#include "cloud_prefill/session_cache.h"
#include "cloud_prefill/state/state_tier.h"
#include "common/engine/sampling_proto.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_codec/kv_transform_codec.h"
#include "common/kv_stream/kv_stream.h"
#include "common/model/model_fingerprint.h"

namespace baton {

class Model;
class Tokenizer;

// A validated request.
struct PrefillJobInput {
  std::string tenant;
  std::vector<int32_t> tokens;                 // the whole prompt [0, end)
  uint32_t first_position = 0;                 // KV of [first_position, end) is streamed
  uint32_t chunk_tokens = 256;                 // tokens per compute chunk and stream slice
  KvCodecConfig codec;                         // wire codec, validated against the geometry
  std::shared_ptr<const KvTransformCodec> transform;  // the coder of `codec` when it is a transform codec
  std::string session_id;                      // optional; >= kMinSessionIdChars (a secret)
  std::string cache_salt;                      // optional; partitions the prefix cache (prefix_cache_partition)
  std::shared_ptr<const StoredPack> pack;      // optional; its tokens start `tokens`
  std::optional<EarlySampling> early;          // optional; PrefillRequest.early_tokens, validated
  std::chrono::steady_clock::time_point admitted;
};

// What the service lends a job (all outlive it; caches may be null).
struct PrefillJobEnv {
  const Model* model = nullptr;
  const ModelFingerprint* fingerprint = nullptr;
  PrefixCache* prefix_cache = nullptr;
  SessionCache* session_cache = nullptr;
  StateTier* state_tier = nullptr;  // L2 of both caches; null or !enabled(): in-process only
  const Tokenizer* tokenizer = nullptr;  // early tokens stop after an end-of-generation token; null: never
  int encode_threads = 1;  // threads encoding the job's blocks (a sender thread beside them)
};

struct PrefillJobResult {
  int64_t reused_tokens = 0;      // positions whose KV came from a pack or cache
  int64_t computed_tokens = 0;    // positions computed by this job
  double queue_ms = 0;
  double prefill_ms = 0;          // compute, first chunk to last layer
  double first_block_ms = 0;      // job start to the first block handed to the sink
  double encode_tail_ms = 0;      // encoding/sending after compute ended
  uint32_t early_tokens = 0;      // early tokens sent
};

// `urgent` (optional; default: `sink`) sends the early tokens: a sink that
// queues them ahead of the blocks `sink` queued (QueuedWriteReactor::push_urgent).
absl::StatusOr<PrefillJobResult> run_prefill_job(const PrefillJobInput& input, const PrefillJobEnv& env,
                                                 PrefillBackend& backend, const KvMessageSink& sink,
                                                 const std::function<bool()>& cancelled,
                                                 const KvMessageSink& urgent = {});

}  // namespace baton
