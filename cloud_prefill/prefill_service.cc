#include "cloud_prefill/prefill_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/engine/engine.h"
#include "common/engine/f32_kv_cache.h"
#include "common/kv/kv_codec_params.h"
#include "common/kv/kv_fingerprint.h"
#include "common/kv/kv_handoff.h"
#include "common/kv/kv_stream_writer.h"
#include "common/kv/prefix_digest.h"
#include "common/util/cpu_features.h"
#include "common/util/log.h"

namespace baton {
namespace {

grpc::Status to_grpc_status(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

// One Prefill RPC. The worker thread produces messages (push / producer_done);
// the reactor writes them one at a time and calls Finish once the producer is
// done and the last write completed. OnDone (after Finish) deletes the
// reactor, so the worker may use it until it calls producer_done. gRPC calls
// (StartWrite, Finish) are made outside mu_: Finish may run OnDone on another
// thread at once.
class PrefillReactor final : public grpc::ServerWriteReactor<v1::KvStreamMessage> {
 public:
  // A refused request: finishes at once with `status`.
  explicit PrefillReactor(const grpc::Status& status) { Finish(status); }
  PrefillReactor() = default;

  // Queues a message; CANCELLED once the client is gone (the worker stops).
  // Blocks the worker while kMaxPendingMessages are waiting, so gRPC flow
  // control paces the encoder to the link.
  absl::Status push(v1::KvStreamMessage message) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      room_cv_.wait(lock, [this] { return cancelled_ || pending_.size() < kMaxPendingMessages; });
      if (cancelled_) return absl::CancelledError("the client cancelled the Prefill call");
      pending_.push_back(std::move(message));
    }
    pump();
    return absl::OkStatus();
  }

  // The worker is done with this reactor (it must not touch it afterwards).
  void producer_done(const absl::Status& status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      producer_done_ = true;
      producer_status_ = status;
    }
    pump();
  }

  bool cancelled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok) {
        cancelled_ = true;  // the stream is broken: drop the rest
        pending_.clear();
      }
    }
    room_cv_.notify_all();
    pump();
  }

  void OnCancel() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      pending_.clear();
    }
    room_cv_.notify_all();
  }

  void OnDone() override { delete this; }

 private:
  // Starts the next write, or finishes once everything is written.
  void pump() {
    bool write = false;
    bool finish = false;
    grpc::Status final_status;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_ || writing_) return;
      if (!pending_.empty() && !cancelled_) {
        current_ = std::move(pending_.front());
        pending_.pop_front();
        writing_ = true;
        write = true;
        room_cv_.notify_all();
      } else if (producer_done_) {
        finished_ = true;
        finish = true;
        final_status = cancelled_ && producer_status_.ok()
                           ? grpc::Status(grpc::StatusCode::CANCELLED, "Prefill call cancelled")
                           : to_grpc_status(producer_status_);
      }
    }
    if (write) StartWrite(&current_);
    if (finish) Finish(final_status);  // `this` may be gone after this line
  }

  // Messages (each <= ~1 MiB of payload) encoded ahead of the network.
  static constexpr size_t kMaxPendingMessages = 8;

  mutable std::mutex mu_;
  std::condition_variable room_cv_;          // pending_ shrank or the call ended
  std::deque<v1::KvStreamMessage> pending_;  // guarded by mu_
  v1::KvStreamMessage current_;              // the write in flight
  bool writing_ = false;                     // guarded by mu_
  bool cancelled_ = false;                   // guarded by mu_
  bool producer_done_ = false;               // guarded by mu_
  bool finished_ = false;                    // guarded by mu_
  absl::Status producer_status_;             // guarded by mu_
};

PrefillService::PrefillService(PrefillServiceOptions options)
    : options_(std::move(options)), start_time_(std::chrono::steady_clock::now()) {}

PrefillService::~PrefillService() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  // Jobs never started get a null engine: they finish their RPC with UNAVAILABLE.
  for (auto& job : jobs_) job(nullptr);
  jobs_.clear();
}

absl::Status PrefillService::Load(const std::string& model_path) {
  state_ = v1::SERVING_STATE_LOADING;
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(model_path);
  if (!model.ok()) return model.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf((*model)->file());
  if (!tokenizer.ok()) return tokenizer.status();
  absl::StatusOr<ModelFingerprint> fingerprint = model_fingerprint(**model);
  if (!fingerprint.ok()) return fingerprint.status();
  model_ = std::move(*model);
  tokenizer_ = std::move(*tokenizer);
  fingerprint_ = std::move(*fingerprint);
  fingerprint_proto_ = model_fingerprint_to_proto(fingerprint_);
  backend_name_ = absl::StrCat("cpu:", simd_level_name(active_simd_level()));
  max_context_tokens_ = options_.max_context_tokens > 0 ? options_.max_context_tokens : model_->spec().n_ctx_train;
  if (max_context_tokens_ <= 0) max_context_tokens_ = int64_t{1} << 20;

  state_ = v1::SERVING_STATE_WARMING;
  {
    // One tiny forward pass: touches the weights and the kernels once.
    Engine engine(*model_, EngineOptions{.n_threads = options_.threads});
    F32KvCache cache(engine.kv_geometry(), 1);
    const int32_t token = std::max<int32_t>(0, tokenizer_->bos_id());
    std::vector<float> logits;
    if (absl::Status status = engine.prefill(std::span<const int32_t>(&token, 1), cache, &logits); !status.ok()) {
      return absl::InternalError(absl::StrCat("warm-up forward pass failed: ", status.message()));
    }
  }
  for (int i = 0; i < std::max(1, options_.max_running); ++i) {
    workers_.emplace_back([this] { worker_loop(); });
  }
  state_ = v1::SERVING_STATE_READY;
  BATON_INFO("serving %s (%s), max context %lld tokens", model_path.c_str(), backend_name_.c_str(),
             static_cast<long long>(max_context_tokens_));
  return absl::OkStatus();
}

void PrefillService::worker_loop() {
  Engine engine(*model_, EngineOptions{.n_threads = options_.threads});
  for (;;) {
    std::function<void(Engine*)> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job(&engine);
  }
}

bool PrefillService::try_enqueue(std::function<void(Engine*)> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    if (running_.load() + jobs_.size() >=
        static_cast<uint64_t>(options_.max_running) + static_cast<uint64_t>(options_.max_queued)) {
      return false;
    }
    jobs_.push_back(std::move(job));
    ++queued_;
  }
  work_cv_.notify_one();
  return true;
}

grpc::ServerUnaryReactor* PrefillService::Health(grpc::CallbackServerContext* context,
                                                 const v1::HealthRequest* /*request*/,
                                                 v1::HealthResponse* response) {
  const v1::ServingState state = state_.load();
  response->set_state(state);
  if (state == v1::SERVING_STATE_READY) {
    *response->mutable_model() = fingerprint_proto_;
    response->set_backend(backend_name_);
    response->set_max_context_tokens(static_cast<uint32_t>(max_context_tokens_));
  } else {
    response->set_retry_after_ms(options_.retry_after_ms);
  }
  response->add_codecs(v1::KV_CODEC_F16);
  response->add_codecs(v1::KV_CODEC_INT8);
  response->add_codecs(v1::KV_CODEC_INT4);
  response->set_running(running_.load());
  response->set_queued(queued_.load());
  {
    std::lock_guard<std::mutex> lock(mu_);
    response->set_prefill_tokens_per_s(prefill_tokens_per_s_);
  }
  response->set_uptime_ms(static_cast<uint64_t>(ms_since(start_time_)));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

absl::StatusOr<KvCodecConfig> PrefillService::resolve_codec(const v1::CodecParams& requested) const {
  const KvGeometry geometry{model_->spec().n_layer, model_->spec().n_head, model_->spec().n_head_kv,
                            model_->spec().head_dim};
  KvCodecConfig::Bits bits = options_.default_codec;
  switch (requested.codec()) {
    case v1::KV_CODEC_UNSPECIFIED: break;
    case v1::KV_CODEC_F16: bits = KvCodecConfig::Bits::kF16; break;
    case v1::KV_CODEC_INT8: bits = KvCodecConfig::Bits::kInt8; break;
    case v1::KV_CODEC_INT4: bits = KvCodecConfig::Bits::kInt4; break;
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("codec.codec: %d is not a known KV codec", static_cast<int>(requested.codec())));
  }
  KvCodecConfig defaults = default_kv_codec_config(bits, geometry);
  defaults.zstd_level = options_.zstd_level;
  if (requested.codec() == v1::KV_CODEC_UNSPECIFIED && requested.group_size() == 0 &&
      requested.key_axis() == v1::KEY_AXIS_UNSPECIFIED && !requested.pre_rope_keys() &&
      !requested.hadamard_keys() && !requested.hadamard_values() && requested.key_codec() == v1::KV_CODEC_UNSPECIFIED &&
      requested.key_group_size() == 0) {
    if (requested.has_zstd_level()) defaults.zstd_level = requested.zstd_level();
    if (absl::Status status = defaults.validate(geometry); !status.ok()) return status;
    return defaults;
  }
  // Unset fields take the defaults of the codec's width.
  absl::StatusOr<v1::CodecParams> filled = kv_codec_params(defaults);
  if (!filled.ok()) return filled.status();
  v1::CodecParams params = *filled;
  params.set_codec(requested.codec() == v1::KV_CODEC_UNSPECIFIED ? filled->codec() : requested.codec());
  if (requested.group_size() != 0) params.set_group_size(requested.group_size());
  if (requested.key_axis() != v1::KEY_AXIS_UNSPECIFIED) params.set_key_axis(requested.key_axis());
  if (requested.key_group_size() != 0) params.set_key_group_size(requested.key_group_size());
  if (requested.key_codec() != v1::KV_CODEC_UNSPECIFIED) params.set_key_codec(requested.key_codec());
  params.set_pre_rope_keys(requested.pre_rope_keys());
  params.set_hadamard_keys(requested.hadamard_keys());
  params.set_hadamard_values(requested.hadamard_values());
  if (requested.has_zstd_level()) params.set_zstd_level(requested.zstd_level());
  absl::StatusOr<KvCodecConfig> config = kv_codec_config_from_params(params);
  if (!config.ok()) return absl::InvalidArgumentError(config.status().message());
  if (absl::Status status = config->validate(geometry); !status.ok()) {
    return absl::InvalidArgumentError(status.message());
  }
  return config;
}

absl::StatusOr<PrefillService::PrefillPlan> PrefillService::plan_request(const v1::PrefillRequest& request) const {
  PrefillPlan plan;
  const int n_vocab = model_->spec().n_vocab;
  switch (request.input_case()) {
    case v1::PrefillRequest::kTokens:
      plan.tokens.reserve(static_cast<size_t>(request.tokens().ids_size()));
      for (int i = 0; i < request.tokens().ids_size(); ++i) {
        const uint32_t id = request.tokens().ids(i);
        if (id >= static_cast<uint32_t>(n_vocab)) {
          return absl::InvalidArgumentError(
              absl::StrFormat("tokens.ids[%d] is %u; the model's vocabulary has %d tokens", i, id, n_vocab));
        }
        plan.tokens.push_back(static_cast<int32_t>(id));
      }
      break;
    case v1::PrefillRequest::kText:
      plan.tokens = tokenizer_->encode(request.text());
      break;
    default:
      return absl::InvalidArgumentError("the request has neither tokens nor text");
  }
  if (plan.tokens.empty()) return absl::InvalidArgumentError("the prompt is empty (0 tokens)");
  if (static_cast<int64_t>(plan.tokens.size()) > max_context_tokens_) {
    return absl::ResourceExhaustedError(absl::StrFormat("prompt has %d tokens; this server accepts at most %d",
                                                        plan.tokens.size(), max_context_tokens_));
  }
  if (request.first_position() >= plan.tokens.size()) {
    return absl::InvalidArgumentError(absl::StrFormat("first_position %u is not below the prompt's %d tokens",
                                                      request.first_position(), plan.tokens.size()));
  }
  plan.first_position = request.first_position();
  if (request.has_expected_model()) {
    absl::StatusOr<ModelFingerprint> expected = model_fingerprint_from_proto(request.expected_model());
    if (!expected.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("expected_model: ", expected.status().message()));
    }
    if (absl::Status status = compare_model_fingerprints(fingerprint_, *expected, "expected_model");
        !status.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("expected_model: ", status.message()));
    }
  }
  if (!request.session_id().empty() || !request.prefix_pack_id().empty()) {
    // Session and prefix caches are not implemented yet; the KV is recomputed.
    if (!request.prefix_pack_id().empty()) {
      return absl::NotFoundError(absl::StrCat("prefix_pack_id '", request.prefix_pack_id(),
                                              "' is unknown (this server stores no prefix packs yet)"));
    }
  }
  absl::StatusOr<KvCodecConfig> codec = resolve_codec(request.codec());
  if (!codec.ok()) return absl::InvalidArgumentError(absl::StrCat("codec: ", codec.status().message()));
  plan.codec = *codec;
  plan.chunk_tokens = request.chunk_tokens() > 0 ? request.chunk_tokens()
                                                 : static_cast<uint32_t>(std::max(1, options_.chunk_tokens));
  return plan;
}

grpc::ServerWriteReactor<v1::KvStreamMessage>* PrefillService::Prefill(grpc::CallbackServerContext* context,
                                                                       const v1::PrefillRequest* request) {
  if (state_.load() != v1::SERVING_STATE_READY) {
    context->AddTrailingMetadata(kRetryAfterMetadataKey, std::to_string(options_.retry_after_ms));
    return new PrefillReactor(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                           "the prefill server is not READY yet (loading or warming up)"));
  }
  absl::StatusOr<PrefillPlan> plan = plan_request(*request);
  if (!plan.ok()) return new PrefillReactor(to_grpc_status(plan.status()));

  auto* reactor = new PrefillReactor();
  const auto admitted = std::chrono::steady_clock::now();
  auto shared_plan = std::make_shared<PrefillPlan>(std::move(*plan));
  auto job = [this, reactor, shared_plan, admitted](Engine* engine) {
    --queued_;
    if (engine == nullptr) {
      reactor->producer_done(absl::UnavailableError("the prefill server is shutting down"));
      return;
    }
    ++running_;
    reactor->producer_done(run_prefill(*engine, *shared_plan, admitted, *reactor));
    --running_;
  };
  if (!try_enqueue(std::move(job))) {
    context->AddTrailingMetadata(kRetryAfterMetadataKey, std::to_string(options_.retry_after_ms));
    reactor->producer_done(absl::ResourceExhaustedError(
        absl::StrFormat("the prefill queue is full (%d running, %d queued)", options_.max_running,
                        options_.max_queued)));
  }
  return reactor;
}

absl::Status PrefillService::run_prefill(Engine& engine, const PrefillPlan& plan,
                                         std::chrono::steady_clock::time_point admitted, PrefillReactor& reactor) {
  const double queue_ms = ms_since(admitted);
  const auto compute_start = std::chrono::steady_clock::now();
  const int64_t end = static_cast<int64_t>(plan.tokens.size());
  F32KvCache cache(engine.kv_geometry(), end);
  std::vector<float> logits;
  for (int64_t begin = 0; begin < end; begin += plan.chunk_tokens) {
    if (reactor.cancelled()) return absl::CancelledError("the client cancelled the Prefill call");
    const int64_t count = std::min<int64_t>(plan.chunk_tokens, end - begin);
    if (absl::Status status = engine.prefill(std::span<const int32_t>(plan.tokens).subspan(begin, count), cache,
                                             &logits);
        !status.ok()) {
      return absl::InternalError(absl::StrCat("prefill failed: ", status.message()));
    }
  }
  const double prefill_ms = ms_since(compute_start);
  if (prefill_ms > 0) {
    const double tokens_per_s = static_cast<double>(end) * 1000.0 / prefill_ms;
    std::lock_guard<std::mutex> lock(mu_);
    prefill_tokens_per_s_ =
        prefill_tokens_per_s_ == 0 ? tokens_per_s : 0.8 * prefill_tokens_per_s_ + 0.2 * tokens_per_s;
  }

  KvStreamHeaderInfo info;
  info.model = fingerprint_;
  info.codec = plan.codec;
  info.first_position = plan.first_position;
  info.token_ids.assign(plan.tokens.begin() + plan.first_position, plan.tokens.end());
  info.prefix_digest = prefix_digest(plan.tokens);
  v1::ProducerStats producer;
  producer.set_queue_ms(queue_ms);
  producer.set_prefill_ms(prefill_ms);
  producer.set_computed_tokens(static_cast<uint32_t>(end));
  producer.set_backend(backend_name_);
  KvStreamWriter writer([&reactor](const v1::KvStreamMessage& message) { return reactor.push(message); });
  const KvRope rope = kv_rope_of(*model_);
  return write_kv_segment(cache, info, &rope, writer, &producer);
}

}  // namespace baton
