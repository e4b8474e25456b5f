#include "cloud_prefill/prefill_service.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cloud_prefill/cpu_prefill_backend.h"
#include "cloud_prefill/state/dir_pack_backend.h"
#include "cloud_prefill/state/redis_pack_backend.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/queued_write_reactor.h"
#include "common/rpc/tsan_annotations.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_codec/kv_codec.h"
#include "common/kv_stream/cache_salt.h"
#include "common/kv_stream/kv_calibration_check.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_stream/kv_fingerprint.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/util/check.h"
#include "common/util/clock.h"
#include "common/util/log.h"
#include "common/util/sha256.h"
#include "common/util/thread_pool.h"
#include "common/util/version.h"

namespace baton {
KvStreamReactor* refused_stream(grpc::CallbackServerContext* context, const absl::Status& status) {
  auto* reactor = new KvStreamReactor(context);
  reactor->refuse(status);
  return reactor;
}

namespace {

// --pack-quota 0: a quarter of the store for each tenant when tokens name
// more than one tenant (no tenant can starve the rest), else the whole store.
uint64_t effective_pack_quota(const PrefillServiceOptions& options) {
  if (options.pack_quota_bytes > 0) return options.pack_quota_bytes;
  return options.auth.tenant_count() > 1 ? options.pack_store_bytes / 4 : 0;
}

}  // namespace

absl::Status PrefillService::open_packs() {
  pack_quota_bytes_ = effective_pack_quota(options_);
  const std::string model_id = short_model_id(fingerprint_.digest);
  // What a pack counts against its tenant's durable quota: what PutPrefix
  // reserves for it (its stream, and its decoded f32 KV on each replica).
  PackChargeFn charge = [this](uint32_t token_count, uint64_t value_bytes) {
    return value_bytes + decoded_pack_bytes(token_count);
  };
  std::unique_ptr<PackBackend> backend;
  if (options_.state_redis != nullptr) {
    if (!options_.pack_dir.empty()) {
      BATON_WARN("--pack-dir %s is not used: packs are durable in the redis state tier", options_.pack_dir.c_str());
    }
    backend = std::make_unique<RedisPackBackend>(options_.state_redis, model_id, pack_quota_bytes_, charge);
  } else if (!options_.pack_dir.empty()) {
    BATON_ASSIGN_OR_RETURN(backend, DirPackBackend::open(options_.pack_dir, model_id, pack_quota_bytes_, charge));
  }
  // With a backend the quota is the backend's (it holds across replicas and
  // restarts) and memory is a cache that evicts.
  packs_ = std::make_unique<PrefixPackStore>(options_.pack_store_bytes, backend ? 0 : pack_quota_bytes_,
                                             backend != nullptr);
  pack_library_ = std::make_unique<PackLibrary>(
      packs_.get(), std::move(backend), [this](std::string_view value) { return decode_stored_pack(value); });
  return absl::OkStatus();
}

uint64_t PrefillService::memory_in_use_bytes() const { return admission_ ? admission_->in_use_bytes() : 0; }

uint64_t PrefillService::prefill_memory_bytes(const PrefillJobInput& plan) const {
  // The job's f32 cache of the whole prompt, plus one reuse candidate of the
  // same size while it copies from the session or prefix cache.
  const uint64_t cache_bytes = decoded_pack_bytes(plan.tokens.size() + (plan.early ? plan.early->count : 0));
  const bool candidate = (session_cache_ != nullptr && options_.session_cache_bytes > 0 && !plan.session_id.empty()) ||
                         (prefix_cache_ != nullptr && options_.prefix_cache_bytes > 0) ||
                         options_.state_redis != nullptr;
  // The stream's queue: up to 64 encoded blocks, each at most one slice of
  // one layer's K or V in the wire codec (and at most the 4 MiB block bound).
  const double raw_per_token_layer_kind = kv_raw_bytes_per_token(plan.codec, geometry_) / (2.0 * geometry_.n_layer);
  const uint64_t block_bytes = std::min<uint64_t>(
      uint64_t{4} << 20, static_cast<uint64_t>(raw_per_token_layer_kind * plan.chunk_tokens) + 4096);
  // An L2 session read holds its reply and the decoded value (about the
  // prompt's KV each: an owned history is a prefix of the prompt).
  const bool l2_session = options_.state_redis != nullptr && !plan.session_id.empty();
  return cache_bytes * ((candidate ? 2 : 1) + (l2_session ? 2 : 0)) + 64 * block_bytes;
}

PrefillService::PrefillService(PrefillServiceOptions options)
    : options_(std::move(options)),
      write_stall_(options_.write_stall_timeout,
                   options_.job_observer != nullptr ? options_.job_observer->write_stall_counter() : nullptr),
      start_time_(std::chrono::steady_clock::now()) {}

PrefillService::~PrefillService() { StopWorkers(); }

void PrefillService::StopWorkers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& worker : workers_) {
    if (worker.joinable()) worker.join();
  }
  // Jobs never started get a null backend: they finish their RPC with UNAVAILABLE.
  std::deque<std::function<void(PrefillBackend*)>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(jobs_);
  }
  for (auto& job : left) job(nullptr);
  // GetPrefix senders end once their (cancelled) streams refuse more messages.
  while (pack_streams_.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
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
  const ModelSpec& spec = model_->spec();
  fingerprint_proto_.set_name(spec.name);  // [info]: GGUF general.name, as the edge reports it
  geometry_ = kv_geometry_for(spec);
  max_context_tokens_ = options_.max_context_tokens > 0 ? options_.max_context_tokens : spec.n_ctx_train;
  if (max_context_tokens_ <= 0) max_context_tokens_ = int64_t{1} << 20;
  prefix_cache_ = std::make_unique<PrefixCache>(options_.prefix_cache_bytes, geometry_);
  session_cache_ = std::make_unique<SessionCache>(options_.session_cache_bytes);
  StateTierOptions tier_options;
  tier_options.ttl = options_.state_ttl;
  state_tier_ = std::make_unique<StateTier>(options_.state_redis, fingerprint_, geometry_, tier_options);
  if (options_.kv_calibration != nullptr) {
    BATON_RETURN_IF_ERROR(check_kv_calibration_model(*options_.kv_calibration, fingerprint_.digest, geometry_, "--kv-calibration"));
    calibration_bytes_ = std::make_shared<const std::string>(serialize_kv_calibration(*options_.kv_calibration));
    calibration_digest_ = sha256(*calibration_bytes_);
  }
  if (absl::Status packs = open_packs(); !packs.ok()) return packs;
  admission_ = std::make_unique<MemoryAdmission>(options_.memory_limit_bytes);

  state_ = v1::SERVING_STATE_WARMING;
  const PrefillBackendFactory factory =
      options_.backend_factory ? options_.backend_factory : cpu_prefill_backend_factory(options_.threads, options_.cpu_float_matmul);
  const int n_workers = std::max(1, options_.max_running);
  for (int i = 0; i < n_workers; ++i) {
    absl::StatusOr<std::unique_ptr<PrefillBackend>> backend = factory(*model_, i);
    if (!backend.ok()) return backend.status();
    // One tiny forward pass: touches the weights and the kernels once.
    F32KvCache cache(geometry_, 1);
    const int32_t token = std::max<int32_t>(0, tokenizer_->bos_id());
    (*backend)->begin_sequence();
    if (absl::Status status = (*backend)->prefill(std::span<const int32_t>(&token, 1), cache, nullptr);
        !status.ok()) {
      return absl::InternalError(absl::StrCat("warm-up forward pass failed: ", status.message()));
    }
    backends_.push_back(std::move(*backend));
  }
  backend_name_ = backends_.front()->name();
  for (auto& backend : backends_) {
    workers_.emplace_back([this, b = backend.get()] { worker_loop(b); });
  }
  state_ = v1::SERVING_STATE_READY;
  BATON_INFO("serving %s (%s, %d workers), max context %lld tokens%s%s", model_path.c_str(), backend_name_.c_str(),
             n_workers, static_cast<long long>(max_context_tokens_),
             options_.auth.enabled() ? ", bearer tokens required" : "",
             options_.state_redis != nullptr ? ", caches' L2 on Redis (--state)" : "");
  return absl::OkStatus();
}

void PrefillService::begin_drain() {
  v1::ServingState expected = v1::SERVING_STATE_READY;
  state_.compare_exchange_strong(expected, v1::SERVING_STATE_DRAINING);
  if (expected != v1::SERVING_STATE_READY) state_ = v1::SERVING_STATE_DRAINING;
  BATON_INFO("draining: %u running, %u queued", running_.load(), queued_.load());
}

bool PrefillService::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, timeout, [this] { return running_.load() == 0 && queued_.load() == 0; });
}

PrefixCacheStats PrefillService::prefix_cache_stats() const {
  return prefix_cache_ ? prefix_cache_->stats() : PrefixCacheStats{};
}

SessionCacheStats PrefillService::session_cache_stats() const {
  return session_cache_ ? session_cache_->stats() : SessionCacheStats{};
}

StateTierStats PrefillService::state_tier_stats() const {
  // Load() sets state_tier_ before LOADING ends; Health may ask earlier.
  if (state_.load() != v1::SERVING_STATE_LOADING && state_tier_) return state_tier_->stats();
  StateTierStats stats;
  stats.kind = options_.state_redis != nullptr ? "redis" : "memory";
  stats.detail = "the model is not loaded yet";
  return stats;
}

void PrefillService::flush_state_tier() {
  if (state_tier_) state_tier_->flush();
}

void PrefillService::worker_loop(PrefillBackend* backend) {
  for (;;) {
    std::function<void(PrefillBackend*)> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job(backend);
    {
      std::lock_guard<std::mutex> lock(mu_);  // pairs with wait_idle's predicate
    }
    idle_cv_.notify_all();
  }
}

bool PrefillService::try_enqueue(std::function<void(PrefillBackend*)> job) {
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

void PrefillService::record_throughput(int64_t computed_tokens, double prefill_ms) {
  if (computed_tokens <= 0 || prefill_ms <= 0) return;
  const double tokens_per_s = static_cast<double>(computed_tokens) * 1000.0 / prefill_ms;
  std::lock_guard<std::mutex> lock(mu_);
  prefill_tokens_per_s_ =
      prefill_tokens_per_s_ == 0 ? tokens_per_s : 0.8 * prefill_tokens_per_s_ + 0.2 * tokens_per_s;
}

absl::Status PrefillService::check_serving(grpc::CallbackServerContext* context) const {
  const v1::ServingState state = state_.load();
  if (state == v1::SERVING_STATE_READY) return absl::OkStatus();
  add_retry_after(*context, options_.retry_after_ms);
  if (state == v1::SERVING_STATE_DRAINING) {
    return absl::UnavailableError("the prefill server is draining (shutting down); retry on another replica");
  }
  return absl::UnavailableError("the prefill server is not READY yet (loading or warming up)");
}

grpc::ServerUnaryReactor* PrefillService::Health(grpc::CallbackServerContext* context,
                                                 const v1::HealthRequest* /*request*/,
                                                 v1::HealthResponse* response) {
  const TsanServiceEdges::Handler tsan_handler(tsan_edges_);  // the first statement: see TsanServiceEdges
  const v1::ServingState state = state_.load();
  response->set_state(state);
  if (state == v1::SERVING_STATE_READY || state == v1::SERVING_STATE_DRAINING) {
    *response->mutable_model() = fingerprint_proto_;
    response->set_backend(backend_name_);
    response->set_max_context_tokens(static_cast<uint32_t>(max_context_tokens_));
  }
  if (state != v1::SERVING_STATE_READY) response->set_retry_after_ms(options_.retry_after_ms);
  response->add_codecs(v1::KV_CODEC_F16);
  response->add_codecs(v1::KV_CODEC_INT8);
  response->add_codecs(v1::KV_CODEC_INT4);
  if (calibration_bytes_ != nullptr) {
    response->add_codecs(v1::KV_CODEC_TC);
    response->set_kv_calibration_sha256(to_hex(calibration_digest_));
  }
  response->set_running(running_.load());
  response->set_queued(queued_.load());
  {
    std::lock_guard<std::mutex> lock(mu_);
    response->set_prefill_tokens_per_s(prefill_tokens_per_s_);
  }
  const StateTierStats tier = state_tier_stats();
  v1::StateTier* state_tier = response->mutable_state_tier();
  state_tier->set_kind(tier.kind);
  state_tier->set_healthy(tier.healthy);
  state_tier->set_detail(tier.detail);
  response->set_version(kBatonVersion);
  response->set_uptime_ms(static_cast<uint64_t>(ms_since(start_time_)));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

absl::StatusOr<KvCodecConfig> PrefillService::resolve_codec(const v1::CodecParams& requested) const {
  const KvGeometry& geometry = geometry_;
  KvCodecConfig::Bits bits = options_.default_codec;
  switch (requested.codec()) {
    case v1::KV_CODEC_UNSPECIFIED: break;
    case v1::KV_CODEC_F16: bits = KvCodecConfig::Bits::kF16; break;
    case v1::KV_CODEC_INT8: bits = KvCodecConfig::Bits::kInt8; break;
    case v1::KV_CODEC_INT4: bits = KvCodecConfig::Bits::kInt4; break;
    case v1::KV_CODEC_TC: return resolve_transform_codec(requested);
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
  // Per-token keys group along head_dim like the values: key_group_size 0
  // then means "the group size" (kv_codec_params writes it so), never the
  // per-channel default's token span (an INT4 request for int4-g32 would
  // otherwise become int4-kg128-g32, a codec the edge did not ask for).
  if (requested.key_axis() == v1::KEY_AXIS_PER_TOKEN) params.set_key_group_size(0);
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

absl::StatusOr<KvCodecConfig> PrefillService::resolve_transform_codec(const v1::CodecParams& requested) const {
  if (options_.kv_calibration == nullptr) {
    return absl::FailedPreconditionError("this cloud holds no KV calibration (--kv-calibration)");
  }
  // Unset fields take the defaults (the same reading as the edge's); the
  // calibration is the cloud's own, and one the request names must be it.
  BATON_ASSIGN_OR_RETURN(KvCodecConfig config, kv_transform_request_config(requested, geometry_));
  KvTransformParams& t = *config.transform;
  if (t.bound() && t.calibration != calibration_digest_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "transform.calibration_sha256: the request's tc_calibration is %s, this cloud's (--kv-calibration) is %s",
        to_hex(t.calibration), to_hex(calibration_digest_)));
  }
  t.calibration = calibration_digest_;
  return config;
}

absl::StatusOr<std::shared_ptr<const KvTransformCodec>> PrefillService::transform_coder(
    const KvCodecConfig& config) const {
  const std::string key = absl::StrCat(config.to_string(), "/", to_hex(config.transform->calibration));
  std::lock_guard<std::mutex> lock(coders_mu_);
  auto it = coders_.find(key);
  if (it != coders_.end()) return it->second;
  // Few distinct configs are ever asked for; the cap bounds what a hostile caller can make the map hold.
  constexpr size_t kMaxCoders = 64;
  if (coders_.size() >= kMaxCoders) coders_.erase(coders_.begin());
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<KvTransformCodec> coder,
                         KvTransformCodec::Create(options_.kv_calibration, config));
  std::shared_ptr<const KvTransformCodec> shared = std::move(coder);
  coders_.emplace(key, shared);
  return shared;
}

absl::Status PrefillService::check_expected_model(const v1::ModelFingerprint& expected_proto) const {
  absl::StatusOr<ModelFingerprint> expected = model_fingerprint_from_proto(expected_proto);
  if (!expected.ok()) return absl::InvalidArgumentError(absl::StrCat("expected_model: ", expected.status().message()));
  if (absl::Status status = compare_model_fingerprints(fingerprint_, *expected, "expected_model"); !status.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("expected_model: ", status.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<PrefillJobInput> PrefillService::plan_request(const v1::PrefillRequest& request,
                                                             const std::string& tenant) const {
  PrefillJobInput plan;
  plan.tenant = tenant;
  const int n_vocab = model_->spec().n_vocab;
  switch (request.input_case()) {
    case v1::PrefillRequest::kTokens:
      if (request.tokens().ids_size() > max_context_tokens_) {
        return absl::ResourceExhaustedError(absl::StrFormat("prompt has %d tokens; this server accepts at most %d",
                                                            request.tokens().ids_size(), max_context_tokens_));
      }
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
      if (static_cast<int64_t>(request.text().size()) > max_context_tokens_ * 64) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "prompt text has %d bytes; this server accepts at most %d tokens", request.text().size(),
            max_context_tokens_));
      }
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
  if (request.has_expected_model()) BATON_RETURN_IF_ERROR(check_expected_model(request.expected_model()));
  if (!request.session_id().empty()) {
    if (request.session_id().size() > 128) {
      return absl::InvalidArgumentError(
          absl::StrFormat("session_id has %d characters; at most 128 are allowed", request.session_id().size()));
    }
    // The id is the entry's only credential (SessionCache): it must be unguessable.
    if (request.session_id().size() < kMinSessionIdChars) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "session_id has %d characters; at least %d are required: use a secret of >= 128 bits, as baton-edge "
          "derives (HMAC-SHA256 of its session id, 64 hex characters)",
          request.session_id().size(), kMinSessionIdChars));
    }
    plan.session_id = request.session_id();
  }
  if (!request.prefix_pack_id().empty()) {
    BATON_ASSIGN_OR_RETURN(plan.pack, pack_library_->find_by_id(tenant, request.prefix_pack_id()));
    if (plan.pack == nullptr) {
      return absl::NotFoundError(absl::StrCat("prefix_pack_id '", request.prefix_pack_id(), "' is unknown"));
    }
    const std::vector<int32_t>& pack_tokens = plan.pack->tokens;
    if (pack_tokens.size() > plan.tokens.size() ||
        !std::equal(pack_tokens.begin(), pack_tokens.end(), plan.tokens.begin())) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "prefix pack '%s' (%d tokens) is not a prefix of the request's %d tokens", request.prefix_pack_id(),
          pack_tokens.size(), plan.tokens.size()));
    }
  }
  if (request.cache_salt().size() > kMaxCacheSaltBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("cache_salt has %d bytes; at most %d are allowed",
                                                      request.cache_salt().size(), kMaxCacheSaltBytes));
  }
  plan.cache_salt = request.cache_salt();
  absl::StatusOr<KvCodecConfig> codec = resolve_codec(request.codec());
  if (!codec.ok()) {
    // A calibration the cloud lacks or does not share is a precondition, not a malformed request.
    const absl::StatusCode code = codec.status().code() == absl::StatusCode::kFailedPrecondition
                                      ? absl::StatusCode::kFailedPrecondition
                                      : absl::StatusCode::kInvalidArgument;
    return absl::Status(code, absl::StrCat("codec: ", codec.status().message()));
  }
  plan.codec = *codec;
  if (plan.codec.transform) {
    BATON_ASSIGN_OR_RETURN(plan.transform, transform_coder(plan.codec));
  }
  plan.chunk_tokens = request.chunk_tokens() > 0 ? request.chunk_tokens()
                                                 : static_cast<uint32_t>(std::max(1, options_.chunk_tokens));
  plan.chunk_tokens = std::min<uint32_t>(plan.chunk_tokens, 8192);  // bounds the compute scratch
  if (request.has_early_tokens() && request.early_tokens().count() > 0) {
    BATON_ASSIGN_OR_RETURN(plan.early, early_sampling_from_proto(request.early_tokens(), n_vocab));
    // The decode steps run past the prompt: the context limit counts them.
    if (static_cast<int64_t>(plan.tokens.size()) + plan.early->count > max_context_tokens_) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("prompt of %d tokens + %u early tokens pass this server's limit of %d tokens",
                          plan.tokens.size(), plan.early->count, max_context_tokens_));
    }
  }
  return plan;
}

grpc::ServerWriteReactor<v1::KvStreamMessage>* PrefillService::Prefill(grpc::CallbackServerContext* context,
                                                                       const v1::PrefillRequest* request) {
  const TsanServiceEdges::Handler tsan_handler(tsan_edges_);  // the first statement: see TsanServiceEdges
  if (absl::Status serving = check_serving(context); !serving.ok()) {
    return refused_stream(context, serving);
  }
  absl::StatusOr<std::string> tenant = options_.auth.authenticate(*context);
  if (!tenant.ok()) return refused_stream(context, tenant.status());
  absl::StatusOr<PrefillJobInput> plan = plan_request(*request, *tenant);
  if (!plan.ok()) return refused_stream(context, plan.status());
  // Admission by memory: the request's bytes are reserved before it is queued.
  absl::StatusOr<MemoryAdmission::Ticket> ticket = admission_->reserve(
      prefill_memory_bytes(*plan), absl::StrFormat("a prompt of %d tokens", plan->tokens.size()));
  if (!ticket.ok()) {
    add_retry_after(*context, options_.retry_after_ms);
    return refused_stream(context, absl::ResourceExhaustedError(absl::StrFormat(
                                       "%s; retry after %u ms", ticket.status().message(), options_.retry_after_ms)));
  }

  auto* reactor = new KvStreamReactor(context, &write_stall_, "Prefill");
  plan->admitted = std::chrono::steady_clock::now();
  auto shared_plan = std::make_shared<PrefillJobInput>(std::move(*plan));
  auto shared_ticket = std::make_shared<MemoryAdmission::Ticket>(std::move(*ticket));
  auto job = [this, reactor, shared_plan, shared_ticket](PrefillBackend* backend) {
    // Released when the job ends, however it ends.
    struct Release {
      MemoryAdmission::Ticket& ticket;
      ~Release() { ticket.release(); }
    } release{*shared_ticket};
    --queued_;
    if (backend == nullptr) {
      reactor->done(absl::UnavailableError("the prefill server is shutting down"));
      return;
    }
    if (reactor->cancelled()) {  // gave up (deadline, client gone) while queued
      reactor->done(absl::CancelledError("the Prefill call ended while it was queued"));
      return;
    }
    ++running_;
    const PrefillJobEnv env{model_.get(), &fingerprint_, prefix_cache_.get(), session_cache_.get(),
                            state_tier_.get(), tokenizer_.get(), encode_threads()};
    absl::StatusOr<PrefillJobResult> result = run_prefill_job(
        *shared_plan, env, *backend,
        [reactor](const v1::KvStreamMessage& message) { return reactor->push(message); },
        [reactor] { return reactor->cancelled(); },
        [reactor](const v1::KvStreamMessage& message) { return reactor->push_urgent(message); });
    if (result.ok()) record_throughput(result->computed_tokens, result->prefill_ms);
    if (options_.job_observer != nullptr) {
      options_.job_observer->job_finished(
          result, static_cast<uint64_t>(geometry_.kv_dim()) * 2 * geometry_.n_layer * sizeof(float));
    }
    --running_;
    shared_ticket->release();  // before the client sees the end, so its next request finds the memory free
    reactor->done(result.status());
  };
  if (!try_enqueue(std::move(job))) {
    add_retry_after(*context, options_.retry_after_ms);
    reactor->refuse(absl::ResourceExhaustedError(
        absl::StrFormat("the prefill queue is full (%d running, %d queued); retry after %u ms", options_.max_running,
                        options_.max_queued, options_.retry_after_ms)));
  }
  return reactor;
}

}  // namespace baton

namespace baton {
namespace {

// GetKvCalibration's stream: the file's bytes in chunks of at most
// kKvCalibrationChunkBytes, one write at a time straight from the shared
// bytes (no copy of the whole file per call, no worker thread held by a
// slow reader: flow control just delays OnWriteDone).
class KvCalibrationReactor final : public grpc::ServerWriteReactor<v1::KvCalibrationChunk> {
 public:
  KvCalibrationReactor(std::shared_ptr<const std::string> bytes, const Digest256& digest, std::string model_digest)
      : bytes_(std::move(bytes)) {
    chunk_.set_total_bytes(bytes_->size());
    chunk_.set_sha256(std::string(reinterpret_cast<const char*>(digest.data()), digest.size()));
    chunk_.set_model_digest(std::move(model_digest));
    next();
  }
  explicit KvCalibrationReactor(const absl::Status& refusal) { Finish(to_grpc_status(refusal)); }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "GetKvCalibration: the client went away"));
      return;
    }
    chunk_.Clear();
    next();
  }
  void OnDone() override { delete this; }

 private:
  void next() {
    if (started_ && offset_ >= bytes_->size()) {
      Finish(grpc::Status::OK);
      return;
    }
    const size_t n = std::min(kKvCalibrationChunkBytes, bytes_->size() - offset_);
    chunk_.set_data(bytes_->data() + offset_, n);
    offset_ += n;
    started_ = true;
    StartWrite(&chunk_);
  }

  std::shared_ptr<const std::string> bytes_;
  size_t offset_ = 0;
  bool started_ = false;  // the first chunk (with the sizes and digests) went out
  v1::KvCalibrationChunk chunk_;
};

}  // namespace

grpc::ServerWriteReactor<v1::KvCalibrationChunk>* PrefillService::GetKvCalibration(
    grpc::CallbackServerContext* context, const v1::GetKvCalibrationRequest* /*request*/) {
  const TsanServiceEdges::Handler tsan_handler(tsan_edges_);  // the first statement: see TsanServiceEdges
  if (absl::Status serving = check_serving(context); !serving.ok()) return new KvCalibrationReactor(serving);
  absl::StatusOr<std::string> tenant = options_.auth.authenticate(*context);
  if (!tenant.ok()) return new KvCalibrationReactor(tenant.status());
  if (calibration_bytes_ == nullptr) {
    return new KvCalibrationReactor(absl::NotFoundError("this cloud holds no KV calibration (--kv-calibration)"));
  }
  return new KvCalibrationReactor(calibration_bytes_, calibration_digest_, fingerprint_.digest);
}

int PrefillService::encode_threads() const {
  if (options_.encode_threads > 0) return options_.encode_threads;
  return options_.backend_factory ? std::min(8, resolve_thread_count(0)) : 1;
}

}  // namespace baton
