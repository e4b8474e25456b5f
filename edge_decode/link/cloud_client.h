// CloudClient: the edge agent's connection to baton-prefill (--cloud). One
// channel (plaintext, or TLS with --cloud-ca roots); every call carries the
// bearer token from --cloud-token-file ("authorization: Bearer ...") and a
// deadline. A background thread polls Health so the split policy knows
// whether the cloud is up, its RTT and its prefill speed; KV transfers feed
// the link bandwidth estimate (moving averages).
//
// prefill() asks for the KV of positions [first_position, end) and reads the
// answer with read_kv_segment against our own model fingerprint, the
// positions, the token ids we sent, the codec we asked for and the prefix
// digest of our tokens: the target cache is unchanged unless the whole
// stream verified. Checksums and digests catch corruption, not a lying
// cloud: the pins make a cloud that answers the wrong question fail loudly,
// and TLS (+ mutual TLS) is what authenticates the cloud.
//
// Session ids never leave the edge in clear: the cloud sees
// CloudSessionKeys::key_for (cloud_session_key.h). Every Prefill and
// GetPrefix carries the affinity header baton-prefix-digest
// (prefix_affinity_key) so a load balancer keeps a prefix on one replica.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv_cache/kv_cache.h"
#include "common/kv_codec/kv_calibration.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_codec/kv_transform_codec.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/model/model_fingerprint.h"
#include "common/rpc/cancel_slot.h"
#include "common/rpc/channel_options.h"
#include "edge_decode/link/cloud_session_key.h"
#include "edge_decode/plan/split_policy.h"
#include "proto/baton.grpc.pb.h"

namespace baton {

struct CloudClientOptions {
  std::string address;                              // host:port of baton-prefill
  std::string token_path;                           // bearer token file; empty: no token
  std::string ca_path;                              // PEM roots; set: TLS
  // Client certificate chain and key (PEM) for mutual TLS; both or neither, with ca_path.
  std::string cert_path;
  std::string key_path;
  std::chrono::milliseconds prefill_timeout{60'000};  // deadline of one Prefill / GetPrefix call
  std::chrono::milliseconds health_timeout{2'000};    // deadline of one Health call
  std::chrono::milliseconds health_interval{2'000};   // between background Health polls
  // A Prefill stream that delivers nothing for this long is ended
  // (DEADLINE_EXCEEDED); 0: only the call's deadline applies.
  std::chrono::milliseconds stall_timeout{30'000};
  // Where the secret behind the cloud session keys is kept (created when
  // missing); empty: a per-process secret (cloud_session_key.h).
  std::string session_secret_path;
};

// What the edge knows about the cloud now.
struct CloudLinkStatus {
  std::string address;
  bool reachable = false;                 // the last Health call succeeded
  v1::ServingState state = v1::SERVING_STATE_UNSPECIFIED;
  double rtt_ms = 0;                      // moving average of Health round trips
  double last_rtt_ms = 0;                 // the last Health round trip
  double bandwidth_bytes_per_s = 0;       // moving average over KV transfers; 0 if unknown
  double prefill_tokens_per_s = 0;        // the cloud's reported throughput
  double wire_bytes_per_quantized_byte = 0;  // zstd ratio of recent transfers; 0 if unknown
  // Fixed cost of one Prefill call, round trip included: moving average over
  // short streams (under 64 KiB on the wire) of (request sent -> segment
  // committed) less the cloud's compute and the bytes' time on the link;
  // 0 until such a call measured it.
  double call_overhead_ms = 0;
  int64_t checked_unix_ms = 0;            // when Health last answered or failed
  std::string last_error;                 // why the last Health failed
  std::string model_digest;               // the cloud's model fingerprint digest (hex)
};

struct CloudPrefillRequest {
  std::vector<int32_t> tokens;            // positions [0, end): the prompt without its last token
  uint32_t first_position = 0;            // positions the edge already holds
  KvCodecConfig codec;                    // wire codec wanted
  // The coder of `codec` when it is a transform codec (its config() == codec,
  // bound to the calibration both ends hold); null otherwise.
  const KvTransformCodec* transform = nullptr;
  // The edge's session id (empty: one-shot) and when it was created; the
  // cloud gets only their keyed digest (CloudSessionKeys::key_for).
  std::string session_id;
  int64_t session_created_unix_ms = 0;
  std::string cache_salt;                 // PrefillRequest.cache_salt; empty: none
  std::string prefix_pack_id;             // a pack (on the cloud) whose tokens start `tokens`; empty: none
  std::chrono::system_clock::time_point deadline = std::chrono::system_clock::time_point::max();
  // > 0 (policy auto): the estimated local prefill time of these tokens, ms;
  // the stream is abandoned (DEADLINE_EXCEEDED) once its projected rest
  // exceeds it by half plus a second (see stream_watchdog.h).
  double give_up_after_local_ms = 0;
  // > 0: the memory the stream's staging may take (kv_stream_staging_bytes
  // of its header); a header declaring more is refused (RESOURCE_EXHAUSTED,
  // with the numbers) before any block is read, the target unchanged.
  uint64_t max_staging_bytes = 0;
  // Set (an overlapped prefill, first_position past target.size()): called
  // once the stream verified, before its segment enters `target`; it waits
  // until the edge's own prefill brought `target` to first_position (which
  // it may do meanwhile, on another thread) and says whether it did. A
  // non-OK status drops the stream, `target` as the edge's prefill left it.
  std::function<absl::Status()> before_commit;
  // Set (count > 0): the cloud samples the reply's first tokens
  // (PrefillRequest.early_tokens) and `on_early` gets each EarlyTokens
  // message as it arrives, on the calling thread, but never before the
  // stream's header verified (ones that overtake it wait). A stream that
  // sends more tokens than asked, or logprobs that do not pair with its
  // tokens, fails (DATA_LOSS) like a corrupt one.
  std::optional<v1::EarlyTokensRequest> early;
  std::function<void(const v1::EarlyTokens&)> on_early;
};

// Memory a received KV stream is counted for before it is committed: its
// token_count x the bytes per token of the target's store (the blocks
// decoded to the store's form; the encoded payloads staged meanwhile are
// about as large again, which the headroom of the memory plan covers), or of
// f32 rows where they wait instead (an F32 target; a transform stream into a
// store that is not INT8).
uint64_t kv_stream_staging_bytes(const v1::KvHeader& header, const KvCache& target);

// Called after every KV block and after the trailer.
struct CloudPrefillProgress {
  uint32_t kv_layers_received = 0;        // layers whose blocks are complete
  uint32_t n_layer = 0;
  uint64_t kv_bytes_received = 0;         // wire bytes so far
  bool first_block = false;               // this is the first block
  bool trailer = false;                   // the trailer arrived: verifying and committing follow
};
using CloudProgressFn = std::function<void(const CloudPrefillProgress&)>;
// Polled between messages; true stops the call (CANCELLED).
using CancelledFn = std::function<bool()>;

struct CloudPrefillResult {
  KvSegmentLoad load;                     // what entered the target cache
  // Times add up to total_ms (request sent -> segment committed):
  double cloud_prefill_ms = 0;            // cloud queue + compute (trailer ProducerStats, or time to first block)
  double transfer_ms = 0;                 // receiving, minus what hid behind cloud compute
  double ingest_ms = 0;                   // after the last byte: verify, decode, commit
  double total_ms = 0;
  // In before_commit (waiting for the edge's prefill): counted in none of
  // the times above, which then add up to total_ms + commit_wait_ms.
  double commit_wait_ms = 0;
  double first_block_ms = 0;              // request sent -> first block
  uint64_t wire_bytes = 0;                // encoded payload bytes (after zstd)
  uint64_t quantized_bytes = 0;           // payload bytes before zstd
  v1::ProducerStats producer;             // from the trailer (empty if absent)
  uint32_t early_tokens = 0;              // early tokens handed to on_early
  // The call's fixed HTTP/2 stream window (early_tokens_window_bytes); 0:
  // gRPC's own (no early tokens, or the link not measured yet).
  int stream_window_bytes = 0;
};

// A server stream of KV messages (GetPrefix) as a KvMessageSource; cancels the
// call when dropped early.
class CloudKvStream {
 public:
  ~CloudKvStream();
  KvMessageSource source();
  grpc::ClientContext& context() { return context_; }

 private:
  friend class CloudClient;
  CloudKvStream() = default;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::KvStreamMessage>> reader_;
  bool finished_ = false;
};

class CloudClient {
 public:
  // Reads the token and CA files; the channel connects lazily.
  static absl::StatusOr<std::unique_ptr<CloudClient>> Create(CloudClientOptions options);
  ~CloudClient();
  CloudClient(const CloudClient&) = delete;
  CloudClient& operator=(const CloudClient&) = delete;

  const std::string& address() const { return options_.address; }

  // Starts / stops the background Health poller (idempotent).
  void start_health_polling();
  void stop_health_polling();
  // One Health call now; updates link().
  absl::Status check_health();
  CloudLinkStatus link() const;

  // Streams the KV of [request.first_position, end) into `target` (which
  // must hold exactly [0, first_position), by the time
  // request.before_commit returns when it is set); `model` is ours (the stream must
  // match it), `rope` our model's RoPE. Errors: the cloud's status code with
  // "cloud: " before its message (UNAVAILABLE when unreachable), or the
  // reader's (FAILED_PRECONDITION for a fingerprint mismatch naming the
  // field, DATA_LOSS for a corrupt or truncated stream); `target` is then
  // unchanged.
  // `cancel_slot` (optional) is armed with the call's TryCancel for its
  // length, so a client that goes away stops a stalled stream at once.
  absl::StatusOr<CloudPrefillResult> prefill(const CloudPrefillRequest& request, const ModelFingerprint& model,
                                             const KvRope& rope, KvCache& target, const CloudProgressFn& progress = {},
                                             const CancelledFn& cancelled = {}, CancelSlot* cancel_slot = nullptr);

  // The cloud's KV calibration (GetKvCalibration), for the transform codec:
  // refused before anything is allocated when the first chunk declares more
  // than `max_bytes`, and after reading when the bytes are not what it
  // declared (size, SHA-256), do not parse, or belong to another model than
  // `model_digest` (FAILED_PRECONDITION naming both) or `geometry`.
  absl::StatusOr<std::shared_ptr<const KvCalibration>> fetch_kv_calibration(const std::string& model_digest,
                                                                            const KvGeometry& geometry,
                                                                            uint64_t max_bytes);

  // Opens GetPrefix for `pack_id` (checked against `model` by the cloud).
  std::unique_ptr<CloudKvStream> get_prefix(const std::string& pack_id, const ModelFingerprint& model);

 private:
  CloudClient(CloudClientOptions options, CloudSessionKeys session_keys)
      : options_(std::move(options)), session_keys_(std::move(session_keys)) {}
  void prepare(grpc::ClientContext& context, std::chrono::system_clock::time_point deadline) const;
  // A call just proved the cloud reachable and serving: the split policy
  // must not keep believing an older failed or not-READY Health poll.
  void record_served();
  void poll_loop();
  void record_transfer(uint64_t wire_bytes, uint64_t quantized_bytes, double seconds);
  void record_call_overhead(const CloudPrefillResult& result);

  CloudClientOptions options_;
  CloudSessionKeys session_keys_;
  std::string bearer_token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Prefill::Stub> stub_;
  // Channels of Prefill calls with early tokens, by their fixed stream
  // window (early_tokens_window_bytes), made on first use.
  struct PacedChannel {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::Prefill::Stub> stub;
  };
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  ChannelTuning tuning_;
  std::mutex paced_mu_;
  std::map<int, PacedChannel> paced_;  // guarded by paced_mu_
  v1::Prefill::Stub* paced_stub(int window_bytes);

  MovingAverage rtt_ms_;
  MovingAverage bandwidth_;
  MovingAverage wire_ratio_;
  MovingAverage call_overhead_ms_;
  mutable std::mutex mu_;
  CloudLinkStatus link_;                  // guarded by mu_ (moving averages filled on read)
  std::condition_variable poll_cv_;
  bool polling_ = false;                  // guarded by mu_
  std::thread poller_;
};

// The HTTP/2 stream window of a Prefill call with early tokens over a link of
// `bandwidth_bytes_per_s` and `rtt_ms`: twice its bandwidth-delay product
// (the link stays full), rounded up to a power of two, within [64 KiB,
// 4 MiB]; 0 (gRPC's own window) while either is unknown. gRPC's own window
// grows to max(4 MiB, 2 x BDP), and every KV byte it lets the cloud send
// before an early token is a byte ahead of that token on the link: on a
// 20 Mbit/s link 4 MiB is 1.7 s, 2 x BDP (60 ms RTT) 120 ms.
int early_tokens_window_bytes(double bandwidth_bytes_per_s, double rtt_ms);

// Metadata key of the affinity header (proto/baton.proto, "Metadata").
inline constexpr char kPrefixDigestMetadataKey[] = "baton-prefix-digest";

// The affinity header's value for a request: the pack id when it names a
// pack (GetPrefix, or a Prefill on a pack), else the lowercase hex prefix
// digest of the prompt's first 64-token block (kPrefixDigestBlockTokens), or
// of the whole prompt when it is shorter. Two prompts that share their first
// block share the value, so they reach the replica that caches it.
std::string prefix_affinity_key(std::span<const int32_t> tokens, const std::string& pack_id);

}  // namespace baton
