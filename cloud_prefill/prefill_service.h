// PrefillService: the Prefill gRPC service (callback API) over a CPU Engine.
//
// Lifecycle: LOADING (constructed) -> WARMING (model loaded, one tiny forward
// pass) -> READY (Load() returned OK). Prefill before READY is refused with
// UNAVAILABLE and a retry hint in trailing metadata (kRetryAfterMetadataKey).
//
// A Prefill request is validated on the gRPC thread (cheap checks only), then
// queued for one of max_running worker threads, each with its own Engine. The
// worker prefills the prompt in chunks of chunk_tokens into an F32KvCache and
// then encodes the KV stream (header, bounded blocks per layer, trailer); each
// message is handed to the RPC's PrefillReactor, which writes them one at a
// time. Cancellation (client gone, deadline) is checked between chunks and
// between messages.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv/kv_codec_config.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "common/tokenizer/tokenizer.h"
#include "proto/baton.grpc.pb.h"

namespace baton {

class Engine;

// Trailing metadata key of the retry hint on UNAVAILABLE / RESOURCE_EXHAUSTED.
inline constexpr char kRetryAfterMetadataKey[] = "baton-retry-after-ms";

struct PrefillServiceOptions {
  int threads = 0;                    // CPU threads per running request; 0: one per core
  int max_running = 4;                // requests computing at once (worker threads)
  int max_queued = 64;                // requests waiting; more get RESOURCE_EXHAUSTED
  int64_t max_context_tokens = 0;     // longest prompt, tokens; 0: the model's n_ctx_train
  int chunk_tokens = 256;             // tokens per prefill chunk and KV block when unset
  KvCodecConfig::Bits default_codec = KvCodecConfig::Bits::kInt8;  // request codec unset
  int zstd_level = 3;                 // request zstd_level unset
  uint32_t retry_after_ms = 1000;     // hint sent with UNAVAILABLE / RESOURCE_EXHAUSTED
};

class PrefillService final : public v1::Prefill::CallbackService {
 public:
  explicit PrefillService(PrefillServiceOptions options);
  // Stops the workers; requests still queued finish with UNAVAILABLE. The
  // gRPC server must have been shut down first.
  ~PrefillService() override;
  PrefillService(const PrefillService&) = delete;
  PrefillService& operator=(const PrefillService&) = delete;

  // LOADING -> WARMING -> READY: loads the GGUF at `model_path`, then runs one
  // tiny forward pass. Blocks; may run while the server already serves Health.
  absl::Status Load(const std::string& model_path);

  v1::ServingState state() const { return state_.load(); }

  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* context, const v1::HealthRequest* request,
                                   v1::HealthResponse* response) override;
  grpc::ServerWriteReactor<v1::KvStreamMessage>* Prefill(grpc::CallbackServerContext* context,
                                                         const v1::PrefillRequest* request) override;

 private:
  friend class PrefillReactor;

  // A validated request: what the worker needs.
  struct PrefillPlan {
    std::vector<int32_t> tokens;      // the whole prompt [0, end)
    uint32_t first_position = 0;      // KV of [first_position, end) is streamed
    uint32_t chunk_tokens = 0;        // tokens per prefill chunk
    KvCodecConfig codec;              // the wire codec, validated against the geometry
  };

  // Validates `request` against the served model and the limits; the error
  // carries the gRPC-mapped code (INVALID_ARGUMENT, RESOURCE_EXHAUSTED,
  // FAILED_PRECONDITION).
  absl::StatusOr<PrefillPlan> plan_request(const v1::PrefillRequest& request) const;
  absl::StatusOr<KvCodecConfig> resolve_codec(const v1::CodecParams& params) const;
  // Runs on a worker: prefills in chunks, then streams the KV through `reactor`.
  absl::Status run_prefill(Engine& engine, const PrefillPlan& plan, std::chrono::steady_clock::time_point admitted,
                           class PrefillReactor& reactor);

  // Queues a job for a worker; false when the queue is full.
  bool try_enqueue(std::function<void(Engine*)> job);
  void worker_loop();

  PrefillServiceOptions options_;
  std::atomic<v1::ServingState> state_{v1::SERVING_STATE_LOADING};
  std::chrono::steady_clock::time_point start_time_;

  // Set once by Load() before state_ becomes READY; read-only afterwards.
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ModelFingerprint fingerprint_;
  v1::ModelFingerprint fingerprint_proto_;
  std::string backend_name_;          // "cpu:<simd level>"
  int64_t max_context_tokens_ = 0;    // effective cap, tokens

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::deque<std::function<void(Engine*)>> jobs_;  // guarded by mu_
  bool stopping_ = false;                                 // guarded by mu_
  std::atomic<uint32_t> running_{0};
  std::atomic<uint32_t> queued_{0};
  double prefill_tokens_per_s_ = 0;  // guarded by mu_: moving average over requests
  std::vector<std::thread> workers_;
};

}  // namespace baton
