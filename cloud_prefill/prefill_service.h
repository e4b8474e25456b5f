// PrefillService: the Prefill gRPC service (callback API) over a
// PrefillBackend (CPU engine, or CUDA when built and asked for).
//
// Lifecycle: LOADING (constructed) -> WARMING (model loaded, one tiny forward
// pass per backend) -> READY (Load() returned OK) -> DRAINING (begin_drain():
// running streams finish, new requests get UNAVAILABLE). Before READY and
// while draining, Prefill is refused with UNAVAILABLE and a retry hint in
// trailing metadata (kRetryAfterMetadataKey).
//
// A Prefill request is authenticated (bearer token -> tenant) and validated
// on the gRPC thread (cheap checks only), then queued for one of max_running
// worker threads, each with its own backend; a full queue answers
// RESOURCE_EXHAUSTED with a retry hint. The worker runs a PrefillJob
// (prefill_job.h): reuse from the tenant's pack / session / prefix caches,
// chunked layer-by-layer compute, blocks streamed as layers complete. A
// cancelled or timed-out stream stops at the next layer and frees
// everything it held; a queued one is dropped when its turn comes.
//
// Memory admission: before a Prefill is queued it reserves the bytes it will
// allocate (prefill_memory_bytes: its f32 KV cache, a reuse candidate, the
// stream's queue) against memory_limit_bytes; over the limit it is refused
// RESOURCE_EXHAUSTED with the numbers and the retry hint; the reservation is
// released when the request ends.
//
// PutPrefix / GetPrefix / DeletePrefix store, hand out and delete prefix
// packs per tenant (PrefixPackStore: store cap and per-tenant quota, upload
// bytes reserved at the stream header). GetPrefix writes the stored
// messages without copying them, at most max_pack_calls at once. With
// state_redis (or pack_dir) the packs are durable there and memory is their
// cache (PackLibrary, cloud_prefill/state/pack_library.h).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cloud_prefill/memory_admission.h"
#include "common/cpu/matmul.h"
#include "cloud_prefill/prefill_backend.h"
#include "cloud_prefill/prefill_job.h"
#include "cloud_prefill/prefill_job_observer.h"
#include "cloud_prefill/prefix_cache.h"
#include "cloud_prefill/prefix_pack_store.h"
#include "cloud_prefill/session_cache.h"
#include "cloud_prefill/state/pack_library.h"
#include "cloud_prefill/state/redis_client.h"
#include "cloud_prefill/state/state_tier.h"
#include "cloud_prefill/tenant_auth.h"
#include "common/kv_codec/kv_calibration.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_codec/kv_transform_codec.h"
#include "common/kv_stream/kv_stream_reader.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "common/rpc/grpc_status.h"  // kRetryAfterMetadataKey
#include "common/rpc/queued_write_reactor.h"
#include "common/rpc/tsan_annotations.h"
#include "common/rpc/write_stall_watchdog.h"
#include "common/tokenizer/tokenizer.h"
#include "proto/baton.grpc.pb.h"

namespace baton {

// The server side of the KV streams (Prefill, GetPrefix): messages come from
// a job's encoder thread or a pack sender thread.
using KvStreamReactor = QueuedWriteReactor<v1::KvStreamMessage>;

// GetKvCalibration sends the file in chunks of at most this many bytes (a
// large model's calibration passes gRPC's 4 MB default message limit).
inline constexpr size_t kKvCalibrationChunkBytes = size_t{1} << 20;

// A stream refused before any work: finishes at once with `status`.
KvStreamReactor* refused_stream(grpc::CallbackServerContext* context, const absl::Status& status);

struct PrefillServiceOptions {
  int threads = 0;                    // CPU threads per running request; 0: one per core
  int max_running = 4;                // requests computing at once (worker threads)
  int max_queued = 64;                // requests waiting; more get RESOURCE_EXHAUSTED
  int64_t max_context_tokens = 0;     // longest prompt, tokens; 0: the model's n_ctx_train
  int chunk_tokens = 256;             // tokens per prefill chunk and stream slice when unset
  // Threads encoding (quantize + zstd) one request's blocks; 0: auto, one
  // with the CPU engine (its threads compute while the encoder runs beside
  // them), min(8, cores) with a backend_factory (a GPU leaves the CPU free,
  // and one encoder thread fell 6x behind an H200's prefill).
  int encode_threads = 0;
  KvCodecConfig::Bits default_codec = KvCodecConfig::Bits::kInt8;  // request codec unset
  int zstd_level = 3;                 // request zstd_level unset
  uint32_t retry_after_ms = 1000;     // hint sent with UNAVAILABLE / RESOURCE_EXHAUSTED
  uint64_t prefix_cache_bytes = uint64_t{1} << 30;   // f32 KV kept by block digest; 0: off
  uint64_t session_cache_bytes = uint64_t{1} << 30;  // f32 KV of recent sessions; 0: off
  uint64_t pack_store_bytes = uint64_t{1} << 30;     // prefix packs (stream + decoded KV)
  // Per tenant share of pack_store_bytes; 0: pack_store_bytes / 4 with
  // --auth-tokens naming more than one tenant, else the whole store.
  uint64_t pack_quota_bytes = 0;
  int max_pack_calls = 4;             // GetPrefix calls at once; more get RESOURCE_EXHAUSTED
  // Without state_redis: packs also kept in this directory (one file each),
  // so they survive a restart; empty: memory only. With state_redis, Redis
  // is where packs are durable and this is not used.
  std::string pack_dir;
  // Memory that running and queued Prefill requests may reserve (their
  // caches, estimated before they run); more get RESOURCE_EXHAUSTED with the
  // numbers. 0: no limit (main.cc sets the default).
  uint64_t memory_limit_bytes = 0;
  TenantAuth auth;                    // no tokens: one tenant, no auth
  PrefillBackendFactory backend_factory;  // empty: the CPU engine with `threads` and `cpu_float_matmul`
  FloatMatmul cpu_float_matmul = FloatMatmul::kExact;  // --cpu-matmul
  PrefillJobObserver* job_observer = nullptr;  // optional: told of every finished job (PrefillMetrics)
  // A Prefill or GetPrefix stream whose writes make no progress this long is
  // cancelled (a client that stopped reading), freeing its worker; 0: never.
  std::chrono::milliseconds write_stall_timeout{10'000};
  // The shared state tier (--state redis://...): L2 of the prefix and
  // session caches (StateTier) and where packs are durable (PackLibrary);
  // null: in-process only.
  std::shared_ptr<RedisClient> state_redis;
  std::chrono::seconds state_ttl{24 * 3600};  // of L2 prefix blocks and sessions; 0: none (Redis's LRU only)
  // The KV calibration (--kv-calibration) the transform codec (KV_CODEC_TC)
  // codes with and GetKvCalibration hands out; its model_digest must be the
  // served model's (Load fails otherwise). Null: KV_CODEC_TC is refused.
  std::shared_ptr<const KvCalibration> kv_calibration;
};

class PrefillService final : public v1::Prefill::CallbackService {
 public:
  explicit PrefillService(PrefillServiceOptions options);
  // Stops the workers; requests still queued finish with UNAVAILABLE. The
  // gRPC server must have been shut down first.
  ~PrefillService() override;  // StopWorkers()
  // Joins the workers, ends jobs never started UNAVAILABLE and waits until
  // every GetPrefix call is done (OnDone); idempotent. ~PrefillServer calls it after shutting the
  // gRPC server down and before destroying it.
  void StopWorkers();
  // For ThreadSanitizer: the orderings between PrefillServer and the handlers.
  const TsanServiceEdges& tsan_edges() const { return tsan_edges_; }
  PrefillService(const PrefillService&) = delete;
  PrefillService& operator=(const PrefillService&) = delete;

  // LOADING -> WARMING -> READY: loads the GGUF at `model_path`, makes the
  // backends, then runs one tiny forward pass. Blocks; may run while the
  // server already serves Health.
  absl::Status Load(const std::string& model_path);

  // DRAINING: new Prefill / PutPrefix calls get UNAVAILABLE; running and
  // queued ones finish.
  void begin_drain();
  // Waits until nothing runs or waits (true), or until `timeout` (false).
  bool wait_idle(std::chrono::milliseconds timeout);

  v1::ServingState state() const { return state_.load(); }
  uint32_t running() const { return running_.load(); }
  uint32_t queued() const { return queued_.load(); }
  // Streams cancelled so far for a stalled write (write_stall_timeout).
  uint64_t write_stalls() const { return write_stall_.stalled_calls(); }
  PrefixCacheStats prefix_cache_stats() const;
  SessionCacheStats session_cache_stats() const;
  // The state tier's counters and health (kind "memory" before Load()).
  StateTierStats state_tier_stats() const;
  // Waits until the state tier's queued writes are done (tests).
  void flush_state_tier();

  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* context, const v1::HealthRequest* request,
                                   v1::HealthResponse* response) override;
  grpc::ServerWriteReactor<v1::KvStreamMessage>* Prefill(grpc::CallbackServerContext* context,
                                                         const v1::PrefillRequest* request) override;
  grpc::ServerReadReactor<v1::KvStreamMessage>* PutPrefix(grpc::CallbackServerContext* context,
                                                          v1::PutPrefixResponse* response) override;
  grpc::ServerWriteReactor<v1::KvStreamMessage>* GetPrefix(grpc::CallbackServerContext* context,
                                                           const v1::GetPrefixRequest* request) override;
  grpc::ServerUnaryReactor* DeletePrefix(grpc::CallbackServerContext* context, const v1::DeletePrefixRequest* request,
                                         v1::DeletePrefixResponse* response) override;
  grpc::ServerWriteReactor<v1::KvCalibrationChunk>* GetKvCalibration(
      grpc::CallbackServerContext* context, const v1::GetKvCalibrationRequest* request) override;

  // Bytes reserved by admitted Prefill requests (memory admission), the
  // packs stored, and the effective per-tenant pack quota.
  uint64_t memory_in_use_bytes() const;
  uint64_t pack_bytes() const { return packs_ ? packs_->bytes() + packs_->reserved_bytes() : 0; }
  uint64_t pack_quota_bytes() const { return pack_quota_bytes_; }
  // Loads from, and failures of, the durable pack store (zeros without one).
  PackLibraryStats pack_library_stats() const { return pack_library_ ? pack_library_->stats() : PackLibraryStats{}; }
  // What admission reserves for a request (its KV caches and stream queue).
  uint64_t prefill_memory_bytes(const PrefillJobInput& plan) const;
  // Threads encoding one request's blocks (options.encode_threads resolved).
  int encode_threads() const;

 private:
  friend class PutPrefixReactor;

  // Validates `request` against the served model, the tenant's packs and the
  // limits; the error carries the gRPC-mapped code (INVALID_ARGUMENT,
  // RESOURCE_EXHAUSTED, FAILED_PRECONDITION, NOT_FOUND).
  absl::StatusOr<PrefillJobInput> plan_request(const v1::PrefillRequest& request, const std::string& tenant) const;
  absl::StatusOr<KvCodecConfig> resolve_codec(const v1::CodecParams& params) const;
  // KV_CODEC_TC: the request's transform parameters (defaults where unset)
  // bound to the held calibration; FAILED_PRECONDITION without one or when
  // the request names another calibration.
  absl::StatusOr<KvCodecConfig> resolve_transform_codec(const v1::CodecParams& params) const;
  // The coder of a bound transform config, made once per distinct config.
  absl::StatusOr<std::shared_ptr<const KvTransformCodec>> transform_coder(const KvCodecConfig& config) const;
  // FAILED_PRECONDITION naming the field when `expected` differs from the served model.
  absl::Status check_expected_model(const v1::ModelFingerprint& expected) const;
  // Verifies an uploaded pack and stores it (PutPrefix's work), taking over
  // the upload's reservation.
  absl::StatusOr<PutPackResult> store_pack(const std::string& tenant, KvSegment segment,
                                           PrefixPackStore::Reservation* reservation);
  // A verified segment from position 0 as a pack: its stream and decoded KV.
  absl::StatusOr<std::shared_ptr<StoredPack>> make_stored_pack(KvSegment segment) const;
  // A pack read back from the durable store (a pack file's bytes), verified
  // as an upload is: the served model's fingerprint, every block, the trailer.
  absl::StatusOr<std::shared_ptr<StoredPack>> decode_stored_pack(std::string_view value) const;
  // What PutPrefix's KvStreamReader enforces (and decode_stored_pack's).
  KvStreamReaderOptions pack_reader_options() const;
  // The memory store and its durable backend (state_redis, pack_dir, or none).
  absl::Status open_packs();
  // f32 bytes of `tokens` tokens of decoded KV (K and V, every layer).
  uint64_t decoded_pack_bytes(uint64_t tokens) const;
  // DeletePrefix's work: the deleted pack.
  absl::StatusOr<RemovedPack> delete_prefix(grpc::CallbackServerContext& context,
                                            const v1::DeletePrefixRequest& request);
  // UNAVAILABLE (with the retry hint added to `context`) unless READY.
  absl::Status check_serving(grpc::CallbackServerContext* context) const;

  // Queues a job for a worker; false when the queue is full.
  bool try_enqueue(std::function<void(PrefillBackend*)> job);
  void worker_loop(PrefillBackend* backend);
  void record_throughput(int64_t computed_tokens, double prefill_ms);

  PrefillServiceOptions options_;
  TsanServiceEdges tsan_edges_;
  WriteStallWatchdog write_stall_;  // the write-progress deadline of Prefill and GetPrefix
  std::atomic<v1::ServingState> state_{v1::SERVING_STATE_LOADING};
  std::chrono::steady_clock::time_point start_time_;

  // Set once by Load() before state_ becomes READY; read-only afterwards.
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ModelFingerprint fingerprint_;
  v1::ModelFingerprint fingerprint_proto_;
  KvGeometry geometry_;
  std::string backend_name_;          // the first backend's name()
  int64_t max_context_tokens_ = 0;    // effective cap, tokens
  std::vector<std::unique_ptr<PrefillBackend>> backends_;  // one per worker
  std::unique_ptr<PrefixCache> prefix_cache_;
  std::unique_ptr<SessionCache> session_cache_;
  std::unique_ptr<StateTier> state_tier_;  // always set by Load(); disabled without state_redis
  std::unique_ptr<PrefixPackStore> packs_;        // in memory: all packs, or a cache of pack_library_'s backend
  std::unique_ptr<PackLibrary> pack_library_;    // packs_ over the durable backend; every pack call goes here
  uint64_t pack_quota_bytes_ = 0;                // effective per-tenant quota

  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;   // running + queued fell
  std::deque<std::function<void(PrefillBackend*)>> jobs_;  // guarded by mu_
  bool stopping_ = false;             // guarded by mu_
  std::atomic<uint32_t> running_{0};
  std::atomic<uint32_t> queued_{0};
  std::atomic<uint32_t> pack_streams_{0};  // GetPrefix calls alive (at most max_pack_calls)
  std::unique_ptr<MemoryAdmission> admission_;  // set by Load()
  double prefill_tokens_per_s_ = 0;   // guarded by mu_: moving average over requests
  std::vector<std::thread> workers_;

  // Set once by Load() when options_.kv_calibration is set.
  std::shared_ptr<const std::string> calibration_bytes_;  // the serialized file GetKvCalibration streams
  Digest256 calibration_digest_{};
  mutable std::mutex coders_mu_;
  // One coder per distinct bound transform config (name + digest), guarded by coders_mu_.
  mutable std::map<std::string, std::shared_ptr<const KvTransformCodec>> coders_;
};

}  // namespace baton
