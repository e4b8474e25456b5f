// EdgeService: the Edge gRPC service (callback API) of baton-edge.
//
// Lifecycle: LOADING (constructed; Load() maps the weights, opens the
// session and pack stores, connects the cloud client) -> WARMING (a first
// forward pass that also measures local prefill tok/s) -> READY.
// Health answers in every state; Generate before READY (or while DRAINING)
// is UNAVAILABLE with the retry hint in trailing metadata
// (baton-retry-after-ms).
//
// Generate: one QueuedWriteReactor per call; the request waits in the
// generation queue and runs on one of its --max-batch worker threads
// (generate_turn.h), never on a gRPC thread. The turns running at once share
// the device's Engine through the DecodeBatcher (their decode steps batched,
// prefill in chunks between them) and the KV budget through KvAdmission.
// Turns of one session never run at once: the queue keys them by session and
// runs them one at a time in arrival order, while other sessions' turns pass.
// PullPack runs on a second worker (network-bound). The unary RPCs are
// answered on the gRPC thread (they only read the stores' indexes).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "common/engine/engine.h"
#include "common/engine/speculative.h"
#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "common/rpc/api_keys.h"
#include "common/rpc/cancel_slot.h"
#include "common/rpc/tsan_annotations.h"
#include "common/rpc/write_stall_watchdog.h"
#include "edge_decode/link/cloud_client.h"
#include "edge_decode/edge_metrics.h"
#include "edge_decode/edge_runtime.h"
#include "edge_decode/generate/context_overflow.h"
#include "edge_decode/store/pack_store.h"
#include "edge_decode/store/session_store.h"
#include "edge_decode/plan/codec_choice.h"
#include "edge_decode/plan/split_policy.h"
#include "edge_decode/work_queue.h"
#include "proto/baton.grpc.pb.h"

namespace baton {

// Caps of --max-batch and --prefill-chunk.
inline constexpr int kMaxDecodeBatch = 64;
inline constexpr int kMaxPrefillChunkTokens = 4096;

struct EdgeServiceOptions {
  int threads = 0;                        // CPU threads of the engine; 0: one per core
  uint64_t memory_budget_bytes = 0;       // device memory for Baton; 0: detect_device_memory_bytes()
  // Default KV codec: f16 | int8 | int4 (the default variant), a full name,
  // or "auto" (chosen per request: codec_choice.h; int4 without a table).
  std::string codec = "int4";
  double max_kv_loss_pct = kDefaultMaxKvLossPct;  // --codec auto's quality floor (perplexity change, %)
  PrefillPolicy policy = PrefillPolicy::kAuto;  // when a request leaves it unset
  int max_tokens = 256;                   // generated tokens when a request leaves it unset
  // A request's max_tokens above this is INVALID_ARGUMENT. It also bounds a
  // turn's output, which the Generate stream buffers whole so that a slow
  // reader never holds the generation worker.
  uint32_t max_tokens_cap = 4096;
  // A server stream (Generate, PullPack) whose writes make no progress this
  // long is cancelled (a client that stopped reading); 0: never.
  std::chrono::milliseconds write_stall_timeout{10'000};
  float temperature = 0.8f;               // when a request leaves it unset
  // A continuing session whose conversation outgrows its context limit, when
  // a request leaves it unset: refuse, truncate (drop the oldest whole turns
  // after the pack and the first keep_tokens tokens) or shift (drop them,
  // move the kept cells; context_overflow.h).
  ContextOverflowMode context_overflow = ContextOverflowMode::kTruncate;
  uint32_t keep_tokens = 0;               // at most kMaxKeepTokens
  // Reply tokens the cloud samples ahead of the KV when a request leaves
  // early_tokens unset (GenerateRequest.early_tokens); at most kMaxEarlyTokens.
  uint32_t early_tokens = 0;
  // Most draft tokens per decode step (speculative decoding, prompt lookup)
  // when a request leaves GenerateRequest.speculative unset; at most
  // kMaxSpeculativeTokens; 0: off.
  uint32_t speculative = kDefaultSpeculativeTokens;
  // A draft model for speculative decoding (--draft; the same tokenizer as
  // the model, checked at load); empty: drafts by prompt lookup. Its
  // engines' threads (--draft-threads).
  std::string draft_model_path;
  int draft_threads = 1;
  std::string sessions_dir;               // empty: sessions in memory only
  int max_sessions = 16;                  // sessions kept in memory (more are evicted to disk)
  int max_session_files = 0;              // session files on disk (LRU of idle ones); 0: no cap
  uint64_t max_session_disk_bytes = 0;    // bytes of session files (LRU of idle ones); 0: no cap
  std::string packs_dir;                  // empty: no packs
  // Cap on packs pulled from the cloud (LRU), checked for each pack at its
  // stream header before any block; 0: none.
  uint64_t max_pulled_pack_bytes = 0;
  std::optional<CloudClientOptions> cloud;  // unset: no cloud (always local)
  // The transform codec's calibration (.batoncal of this model); empty:
  // fetched from the cloud the first time a turn asks for tc.
  std::string kv_calibration_path;
  int max_queued = 16;                    // Generate calls waiting; more get RESOURCE_EXHAUSTED
  // Generate turns running at once (one worker thread each), their decode
  // steps batched into one pass over the weights (decode_batcher.h); 1: one
  // turn at a time. At most kMaxDecodeBatch.
  int max_batch = 4;
  // Tokens of a local prefill run between two batched decode steps (rounded
  // up to the engine's micro-batch); at most kMaxPrefillChunkTokens.
  int prefill_chunk_tokens = 64;
  uint32_t retry_after_ms = 1000;         // hint sent with UNAVAILABLE / RESOURCE_EXHAUSTED
  int warmup_tokens = 32;                 // tokens of the warm-up forward pass
  // > 0: replaces the measured local prefill tok/s in the split policy
  // (tests and tuning; the measured figure is still reported by Health).
  double assumed_local_prefill_tokens_per_s = 0;
  // > 0: replaces the measured link bandwidth (bytes/s) in the split policy
  // and codec auto (tests: a modeled slow or fast link over loopback).
  double assumed_link_bytes_per_s = 0;
  // Set: every Generate's outcome and Stats are recorded here (the HTTP front
  // end's own recording should then be off). Must outlive the service.
  EdgeMetrics* metrics = nullptr;
  // Set: every RPC but Health needs one of these keys ("authorization:
  // Bearer KEY" metadata; UNAUTHENTICATED otherwise), and sessions belong to
  // the key that created them (session_owner.h). Null: no keys (loopback).
  std::shared_ptr<const ApiKeySet> api_keys;
};

class EdgeService final : public v1::Edge::CallbackService {
 public:
  explicit EdgeService(EdgeServiceOptions options);
  // StopWorkers(). The gRPC server must have been shut down first.
  ~EdgeService() override;
  // Lets the running jobs end, ends queued calls UNAVAILABLE, joins the
  // worker threads and stops the cloud's health polling; idempotent.
  // ~EdgeServer calls it after shutting the gRPC server down and before
  // destroying it, so no worker is inside a call of that server then.
  void StopWorkers();
  // For ThreadSanitizer: the orderings between EdgeServer and the handlers.
  const TsanServiceEdges& tsan_edges() const { return tsan_edges_; }
  EdgeService(const EdgeService&) = delete;
  EdgeService& operator=(const EdgeService&) = delete;

  // LOADING -> WARMING -> READY for the GGUF at `model_path` (Q4_0 / Q8_0).
  // Blocks; the server may already serve Health meanwhile.
  absl::Status Load(const std::string& model_path);
  // READY -> DRAINING: new Generate calls are refused; running ones finish.
  void Drain();

  v1::ServingState state() const { return state_.load(); }
  // The batcher's counters (null before Load; tests and /metrics).
  const DecodeBatcher* batcher() const { return batcher_.get(); }
  // What Health answers (also read by the agent's /metrics at each scrape).
  void fill_health(v1::EdgeHealthResponse* response) const;
  // Server streams cancelled so far for a stalled write (--write-stall-timeout).
  uint64_t write_stalls() const { return write_stall_.stalled_calls(); }

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(grpc::CallbackServerContext* context,
                                                           const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* context, const v1::HealthRequest* request,
                                   v1::EdgeHealthResponse* response) override;
  grpc::ServerUnaryReactor* ListSessions(grpc::CallbackServerContext* context,
                                         const v1::ListSessionsRequest* request,
                                         v1::ListSessionsResponse* response) override;
  grpc::ServerUnaryReactor* DeleteSession(grpc::CallbackServerContext* context,
                                          const v1::DeleteSessionRequest* request,
                                          v1::DeleteSessionResponse* response) override;
  grpc::ServerWriteReactor<v1::PullPackResponse>* PullPack(grpc::CallbackServerContext* context,
                                                           const v1::PullPackRequest* request) override;
  grpc::ServerUnaryReactor* ListPacks(grpc::CallbackServerContext* context, const v1::ListPacksRequest* request,
                                      v1::ListPacksResponse* response) override;

 private:
  absl::Status load(const std::string& model_path);
  absl::Status warm_up();
  absl::Status pull_pack(const v1::PullPackRequest& request, std::chrono::steady_clock::time_point arrival,
                         const std::function<absl::Status(v1::PullPackResponse)>& emit, CancelSlot& cancel_slot);

  EdgeServiceOptions options_;
  TsanServiceEdges tsan_edges_;
  WriteStallWatchdog write_stall_;  // the write-progress deadline of Generate and PullPack
  std::atomic<v1::ServingState> state_{v1::SERVING_STATE_LOADING};
  std::chrono::steady_clock::time_point start_time_;

  // Set by Load() before state_ leaves LOADING; read-only afterwards (the
  // engine is used by the generation worker only).
  std::unique_ptr<Model> model_;
  std::unique_ptr<Model> draft_model_;  // --draft; null without
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<DecodeBatcher> batcher_;
  std::unique_ptr<KvAdmission> kv_admission_;
  std::unique_ptr<SessionStore> sessions_;
  std::unique_ptr<PackStore> packs_;
  std::unique_ptr<CloudClient> cloud_;
  std::unique_ptr<TransformCoders> transform_;  // after cloud_: it borrows it
  v1::ModelFingerprint fingerprint_proto_;
  std::string backend_name_;
  EdgeRuntime runtime_;
  MovingAverage local_prefill_tokens_per_s_;
  MovingAverage decode_tokens_per_s_;

  std::atomic<uint32_t> generating_{0};   // Generate calls admitted and not finished
  WorkQueue generate_queue_;
  WorkQueue pack_queue_;
};

}  // namespace baton
