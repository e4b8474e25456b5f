#include "edge_decode/edge_service.h"

#include <algorithm>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "common/engine/draft_model.h"
#include "common/gguf/ggml_types.h"
#include "common/kv_stream/kv_calibration_check.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_stream/kv_fingerprint.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/util/check.h"
#include "common/util/clock.h"
#include "common/util/cpu_features.h"
#include "common/util/log.h"
#include "common/util/version.h"
#include "edge_decode/generate/generate_turn.h"
#include "edge_decode/plan/default_codec.h"
#include "edge_decode/plan/memory_plan.h"
#include "edge_decode/store/session_owner.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/queued_write_reactor.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;

std::string digest_bytes(const Digest256& digest) {
  return std::string(reinterpret_cast<const char*>(digest.data()), digest.size());
}

void fill_codec(const KvCodecConfig& config, v1::CodecParams* out) {
  if (absl::StatusOr<v1::CodecParams> params = kv_codec_params(config); params.ok()) *out = *params;
}

// "LOADING", "WARMING", ... (the enum name without its prefix).
std::string state_name(v1::ServingState state) {
  std::string name = v1::ServingState_Name(state);
  const std::string prefix = "SERVING_STATE_";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

// Messages of one Generate turn: at most `max_tokens` text pieces, the
// held-back rest, the plan and the Stats, with at most one progress snapshot
// per phase between two of them (push_snapshot keyed by phase; a turn goes
// through each of the 7 phases at most once, so phase changes add at most 8).
// The reactor holds all of them, so the worker never waits for a slow client.
size_t generate_max_pending(uint32_t max_tokens_cap) { return 2 * (size_t{max_tokens_cap} + 3) + 1 + 8; }

// A unary reply: finishes at once.
grpc::ServerUnaryReactor* reply(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(to_grpc_status(status));
  return reactor;
}

// `status` with the stored session id replaced by the client's (the owner
// prefix is the agent's business).
absl::Status with_client_session_id(const absl::Status& status, const std::string& stored_id,
                                    const std::string& client_id) {
  if (status.ok() || stored_id == client_id) return status;
  return absl::Status(status.code(), absl::StrReplaceAll(status.message(), {{stored_id, client_id}}));
}

absl::Status check_client_session_id(const std::string& id) {
  if (is_valid_session_id(id, kMaxClientSessionIdChars)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("session_id '", id, "' is not 1..128 characters of [A-Za-z0-9._-]"));
}

}  // namespace

EdgeService::EdgeService(EdgeServiceOptions options)
    : options_(std::move(options)),
      write_stall_(options_.write_stall_timeout, options_.metrics != nullptr ? &options_.metrics->write_stalls : nullptr),
      start_time_(Clock::now()),
      generate_queue_(options_.max_queued, std::clamp(options_.max_batch, 1, kMaxDecodeBatch)),
      pack_queue_(4) {}

EdgeService::~EdgeService() { StopWorkers(); }

void EdgeService::StopWorkers() {
  pack_queue_.stop();
  generate_queue_.stop();
  if (cloud_ != nullptr) cloud_->stop_health_polling();
}

absl::Status EdgeService::Load(const std::string& model_path) {
  // Errors are returned, not logged: the caller prints them once.
  absl::Status status = load(model_path);
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("cannot load ", model_path, ": ", status.message()));
  }
  v1::ServingState loading = v1::SERVING_STATE_LOADING;
  state_.compare_exchange_strong(loading, v1::SERVING_STATE_WARMING);  // a Drain() meanwhile wins
  status = warm_up();
  if (!status.ok()) return absl::Status(status.code(), absl::StrCat("warm-up failed: ", status.message()));
  v1::ServingState expected = v1::SERVING_STATE_WARMING;
  state_.compare_exchange_strong(expected, v1::SERVING_STATE_READY);  // a Drain() meanwhile wins
  BATON_INFO("READY: %s (%s), %s", model_->spec().name.c_str(), backend_name_.c_str(),
             runtime_.memory.capacity.empty()
                 ? "no codec"
                 : absl::StrFormat("max context %d tokens with %s", runtime_.memory.capacity[0].max_context_tokens,
                                   runtime_.memory.capacity[0].codec.to_string())
                       .c_str());
  return absl::OkStatus();
}

absl::Status EdgeService::load(const std::string& model_path) {
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(model_path));
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::FromGguf(model->file()));
  BATON_ASSIGN_OR_RETURN(ModelFingerprint fingerprint, model_fingerprint(*model));
  std::unique_ptr<Model> draft_model;
  if (!options_.draft_model_path.empty()) {
    absl::StatusOr<std::unique_ptr<Model>> draft = Model::Load(options_.draft_model_path);
    if (!draft.ok()) {
      return absl::Status(draft.status().code(),
                          "--draft " + options_.draft_model_path + ": " + std::string(draft.status().message()));
    }
    BATON_RETURN_IF_ERROR(check_draft_model(*model, **draft));
    draft_model = std::move(*draft);
    BATON_INFO("draft model %s (%d layers x %d wide) drafts for speculative decoding", draft_model->spec().name.c_str(),
               draft_model->spec().n_layer, draft_model->spec().n_embd);
  }
  EngineOptions engine_options;
  engine_options.n_threads = options_.threads;
  auto engine = std::make_unique<Engine>(*model, engine_options);
  const KvGeometry geometry = engine->kv_geometry();
  BATON_ASSIGN_OR_RETURN(KvCodecConfig default_codec, default_codec_from_name(options_.codec, geometry));

  // Memory plan: the default codec first, then the other widths.
  std::vector<KvCodecConfig> codecs = {edge_store_config(default_codec, geometry)};
  for (KvCodecConfig::Bits bits : {KvCodecConfig::Bits::kF16, KvCodecConfig::Bits::kInt8, KvCodecConfig::Bits::kInt4}) {
    const KvCodecConfig config = default_kv_codec_config(bits, geometry);
    bool seen = false;
    for (const KvCodecConfig& c : codecs) {
      seen = seen || QuantizedKvCache::store_config_for(c) == QuantizedKvCache::store_config_for(config);
    }
    if (!seen) codecs.push_back(config);
  }
  uint64_t limit = options_.memory_budget_bytes;
  if (limit == 0) limit = detect_device_memory_bytes();
  const EdgeMemoryPlan plan = make_memory_plan(*model, limit, codecs);
  if (plan.kv_budget_bytes == 0) {
    BATON_WARN("no memory left for KV: limit %s, weights %s, scratch %s, headroom %s",
               format_bytes(plan.device_limit_bytes).c_str(), format_bytes(plan.weights_bytes).c_str(),
               format_bytes(plan.scratch_bytes).c_str(), format_bytes(plan.headroom_bytes).c_str());
  }

  SessionStoreOptions session_options;
  session_options.dir = options_.sessions_dir;
  session_options.max_memory_bytes = std::max<uint64_t>(1, plan.kv_budget_bytes);
  session_options.max_sessions = options_.max_sessions;
  session_options.max_files = options_.max_session_files;
  session_options.max_disk_bytes = options_.max_session_disk_bytes;
  auto sessions = std::make_unique<SessionStore>(session_options, fingerprint, geometry);
  std::vector<std::string> refused;
  BATON_RETURN_IF_ERROR(sessions->open(&refused));
  for (const std::string& line : refused) BATON_WARN("session refused: %s", line.c_str());

  PackStoreOptions pack_options;
  pack_options.dir = options_.packs_dir;
  pack_options.max_pulled_bytes = options_.max_pulled_pack_bytes;
  pack_options.max_pack_memory_bytes = plan.kv_budget_bytes;
  auto packs = std::make_unique<PackStore>(pack_options, fingerprint, geometry, kv_rope_of(*model));
  refused.clear();
  BATON_RETURN_IF_ERROR(packs->open(&refused));
  for (const std::string& line : refused) BATON_WARN("pack refused: %s", line.c_str());

  std::unique_ptr<CloudClient> cloud;
  if (options_.cloud.has_value()) {
    CloudClientOptions cloud_options = *options_.cloud;
    // Sessions that outlive the process keep their cloud session keys.
    if (cloud_options.session_secret_path.empty() && !options_.sessions_dir.empty()) {
      cloud_options.session_secret_path = options_.sessions_dir + "/" + kCloudSessionSecretFileName;
    }
    BATON_ASSIGN_OR_RETURN(cloud, CloudClient::Create(cloud_options));
    cloud->start_health_polling();
  }

  std::shared_ptr<const KvCalibration> calibration;
  if (!options_.kv_calibration_path.empty()) {
    absl::StatusOr<KvCalibration> loaded = load_kv_calibration(options_.kv_calibration_path);
    if (!loaded.ok()) return absl::Status(loaded.status().code(), absl::StrCat("--kv-calibration: ", loaded.status().message()));
    BATON_RETURN_IF_ERROR(check_kv_calibration_model(*loaded, fingerprint.digest, geometry,
                                                     "--kv-calibration " + options_.kv_calibration_path));
    calibration = std::make_shared<const KvCalibration>(std::move(*loaded));
  } else if (default_codec.transform && cloud == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--codec ", options_.codec,
                                                   ": the transform codec needs --kv-calibration or a --cloud to "
                                                   "fetch the calibration from"));
  }
  auto transform = std::make_unique<TransformCoders>(std::move(calibration), cloud.get(), fingerprint.digest, geometry);

  backend_name_ = absl::StrFormat("cpu:%s x%d", simd_level_name(active_simd_level()), engine->pool().size());
  fingerprint_proto_ = model_fingerprint_to_proto(fingerprint);
  // [info] field: the stored type of the weight matrices ("Q4_0").
  fingerprint_proto_.set_weights_type(absl::AsciiStrToUpper(std::string(ggml_type_name(model->layer(0).wq.type))));
  // [info] field: the model's one name (GGUF general.name), as logs and the
  // HTTP API call it; the architecture is its own field.
  fingerprint_proto_.set_name(model->spec().name);
  runtime_.model = model.get();
  runtime_.tokenizer = tokenizer.get();
  runtime_.engine = engine.get();
  // The batch never passes the engine's rows per pass.
  DecodeBatcherOptions batcher_options;
  batcher_options.max_batch = std::clamp(options_.max_batch, 1, std::min(kMaxDecodeBatch, engine->max_batch_tokens()));
  batcher_options.prefill_chunk_tokens = std::clamp(options_.prefill_chunk_tokens, 1, kMaxPrefillChunkTokens);
  auto batcher = std::make_unique<DecodeBatcher>(*engine, batcher_options);
  auto kv_admission = std::make_unique<KvAdmission>(plan.kv_budget_bytes);
  runtime_.batcher = batcher.get();
  runtime_.kv_admission = kv_admission.get();
  runtime_.fingerprint = std::move(fingerprint);
  runtime_.geometry = geometry;
  runtime_.rope = kv_rope_of(*model);
  runtime_.memory = plan;
  runtime_.default_codec = default_codec;
  runtime_.auto_codec = options_.codec == "auto";
  runtime_.max_kv_loss_pct = options_.max_kv_loss_pct;
  runtime_.default_policy = options_.policy;
  runtime_.default_max_tokens = options_.max_tokens;
  runtime_.max_tokens_cap = options_.max_tokens_cap;
  runtime_.default_temperature = options_.temperature;
  runtime_.context_overflow = options_.context_overflow;
  runtime_.keep_tokens = std::min(options_.keep_tokens, kMaxKeepTokens);
  runtime_.early_tokens = std::min(options_.early_tokens, kMaxEarlyTokens);
  runtime_.speculative = std::min(options_.speculative, kMaxSpeculativeTokens);
  runtime_.draft_model = draft_model.get();
  runtime_.draft_threads = std::max(1, options_.draft_threads);
  runtime_.sessions = sessions.get();
  runtime_.packs = packs.get();
  runtime_.cloud = cloud.get();
  runtime_.transform = transform.get();
  runtime_.local_prefill_tokens_per_s = &local_prefill_tokens_per_s_;
  runtime_.assumed_local_prefill_tokens_per_s = options_.assumed_local_prefill_tokens_per_s;
  runtime_.assumed_link_bytes_per_s = options_.assumed_link_bytes_per_s;
  runtime_.decode_tokens_per_s = &decode_tokens_per_s_;
  model_ = std::move(model);
  draft_model_ = std::move(draft_model);
  tokenizer_ = std::move(tokenizer);
  engine_ = std::move(engine);
  batcher_ = std::move(batcher);
  kv_admission_ = std::move(kv_admission);
  sessions_ = std::move(sessions);
  packs_ = std::move(packs);
  cloud_ = std::move(cloud);
  transform_ = std::move(transform);
  return absl::OkStatus();
}

absl::Status EdgeService::warm_up() {
  // Twice: the first pass pays page faults and lazy allocations; the second
  // measures local prefill speed.
  const int n = std::max(2, std::min(options_.warmup_tokens, model_->spec().n_ctx_train));
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = (i * 31 + 7) % model_->spec().n_vocab;
  for (int pass = 0; pass < 2; ++pass) {
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<QuantizedKvCache> kv,
                           QuantizedKvCache::Create(runtime_.geometry, n,
                                                    edge_store_config(runtime_.default_codec, runtime_.geometry)));
    std::vector<float> logits;
    const Clock::time_point start = Clock::now();
    BATON_RETURN_IF_ERROR(engine_->prefill(tokens, *kv, &logits));
    const double seconds = ms_since(start) / 1000.0;
    if (pass == 1 && seconds > 0) local_prefill_tokens_per_s_.add(n / seconds);
  }
  return absl::OkStatus();
}

void EdgeService::Drain() {
  state_ = v1::SERVING_STATE_DRAINING;
}

grpc::ServerWriteReactor<v1::GenerateResponse>* EdgeService::Generate(grpc::CallbackServerContext* context,
                                                                      const v1::GenerateRequest* request) {
  const TsanServiceEdges::Handler tsan_handler(tsan_edges_);  // the first statement: see TsanServiceEdges
  auto* reactor = new QueuedWriteReactor<v1::GenerateResponse>(context, &write_stall_, "Generate",
                                                                generate_max_pending(options_.max_tokens_cap));
  absl::StatusOr<std::string> owner = authenticate_call(options_.api_keys.get(), *context);
  if (!owner.ok()) {
    reactor->refuse(owner.status());
    return reactor;
  }
  const v1::ServingState state = state_.load();
  if (state != v1::SERVING_STATE_READY) {
    reactor->refuse(absl::UnavailableError(absl::StrCat("the edge agent is ", state_name(state),
                                                        state == v1::SERVING_STATE_DRAINING
                                                            ? ""
                                                            : "; retry after the model is loaded and warmed up")),
                    options_.retry_after_ms);
    return reactor;
  }
  const std::string& client_id = request->session_id();
  if (!client_id.empty()) {
    if (absl::Status valid = check_client_session_id(client_id); !valid.ok()) {
      reactor->refuse(valid);
      return reactor;
    }
  }
  const std::string stored_id = owned_session_id(*owner, client_id);
  TurnIo io;
  io.arrival = Clock::now();
  io.deadline = context->deadline();
  io.cancelled = [reactor] { return reactor->cancelled(); };
  io.cancel_slot = &reactor->cancel_slot();
  ++generating_;
  // The request is copied: gRPC owns *request only until the reactor finishes.
  v1::GenerateRequest request_copy = *request;
  request_copy.set_session_id(stored_id);
  const bool queued = generate_queue_.try_push([this, reactor, io, request_copy = std::move(request_copy),
                                                client_id](bool run) mutable {
    std::optional<v1::Stats> stats;
    io.emit = [reactor, &stats, &client_id](v1::GenerateResponse response) {
      if (response.has_stats()) {
        if (!response.stats().session_id().empty()) response.mutable_stats()->set_session_id(client_id);
        stats = response.stats();
      }
      if (response.has_progress()) {
        const int64_t phase = response.progress().phase();
        return reactor->push_snapshot(std::move(response), phase);
      }
      return reactor->push(std::move(response));
    };
    absl::Status status = run ? run_generate_turn(runtime_, request_copy, io)
                              : absl::UnavailableError("the edge agent is shutting down");
    status = with_client_session_id(status, request_copy.session_id(), client_id);
    if (options_.metrics != nullptr) {
      options_.metrics->record_outcome(status);
      if (status.ok() && stats.has_value()) options_.metrics->record_stats(*stats);
    }
    --generating_;
    reactor->done(status);
  }, client_id.empty() ? std::string() : stored_id);  // a session's turns run one at a time, in order
  if (!queued) {
    --generating_;
    if (options_.metrics != nullptr) options_.metrics->record_outcome(absl::ResourceExhaustedError("queue full"));
    reactor->refuse(absl::ResourceExhaustedError(absl::StrFormat(
                        "%d Generate calls are already waiting (the limit); retry later", options_.max_queued)),
                    options_.retry_after_ms);
  }
  return reactor;
}

void EdgeService::fill_health(v1::EdgeHealthResponse* response) const {
  const v1::ServingState state = state_.load();
  response->set_state(state);
  response->set_version(kBatonVersion);
  // generating_ drops before a call's final status goes out, so a client that
  // saw its call end never sees it counted.
  const uint32_t admitted = generating_.load();
  const uint32_t queued = std::min(admitted, generate_queue_.queued());
  response->set_running(admitted - queued);
  response->set_queued(queued);
  if (state != v1::SERVING_STATE_READY) response->set_retry_after_ms(options_.retry_after_ms);
  if (state == v1::SERVING_STATE_LOADING) return;  // nothing below is set yet
  *response->mutable_model() = fingerprint_proto_;
  response->set_backend(backend_name_);
  to_proto(runtime_.memory, sessions_->memory_bytes(), response->mutable_memory());
  v1::CloudLink* link = response->mutable_cloud();
  if (cloud_ != nullptr) {
    const CloudLinkStatus status = cloud_->link();
    link->set_address(status.address);
    link->set_reachable(status.reachable);
    link->set_state(status.state);
    link->set_rtt_ms(status.last_rtt_ms);
    link->set_bandwidth_bytes_per_s(status.bandwidth_bytes_per_s);
    link->set_prefill_tokens_per_s(status.prefill_tokens_per_s);
    link->set_checked_unix_ms(status.checked_unix_ms);
    link->set_call_overhead_ms(status.call_overhead_ms);
  }
  response->set_local_prefill_tokens_per_s(local_prefill_tokens_per_s_.value());
  response->set_decode_tokens_per_s(decode_tokens_per_s_.value());
  response->set_sessions(static_cast<uint32_t>(sessions_->size()));
  response->set_packs(static_cast<uint32_t>(packs_->list().size()));
  response->set_default_codec(runtime_.auto_codec ? "auto" : runtime_.default_codec.to_string());
  if (transform_ != nullptr) {
    if (std::shared_ptr<const KvCalibration> calibration = transform_->calibration()) {
      response->set_kv_calibration_sha256(transform_->calibration_sha256());
      response->set_kv_quality_rows(static_cast<uint32_t>(calibration->quality.size()));
    }
  }
}

grpc::ServerUnaryReactor* EdgeService::Health(grpc::CallbackServerContext* context, const v1::HealthRequest*,
                                              v1::EdgeHealthResponse* response) {
  const TsanServiceEdges::Handler tsan_handler(tsan_edges_);  // the first statement: see TsanServiceEdges
  fill_health(response);
  return reply(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* EdgeService::ListSessions(grpc::CallbackServerContext* context,
                                                    const v1::ListSessionsRequest*,
                                                    v1::ListSessionsResponse* response) {
  const TsanServiceEdges::Handler tsan_handler(tsan_edges_);  // the first statement: see TsanServiceEdges
  absl::StatusOr<std::string> owner = authenticate_call(options_.api_keys.get(), *context);
  if (!owner.ok()) return reply(context, owner.status());
  if (state_.load() == v1::SERVING_STATE_LOADING) {
    return reply(context, absl::UnavailableError("the edge agent is LOADING"));
  }
  for (const SessionSummary& summary : sessions_->list()) {
    std::optional<std::string> client_id = client_session_id(*owner, summary.id);
    if (!client_id.has_value()) continue;  // another key's session
    v1::SessionInfo* info = response->add_sessions();
    info->set_session_id(*client_id);
    info->set_token_count(summary.token_count);
    info->set_kv_bytes(summary.kv_bytes);
    fill_codec(summary.codec, info->mutable_codec());
    info->set_pack_id(summary.pack_id);
    info->set_prefix_digest(digest_bytes(summary.prefix_digest));
    info->set_created_unix_ms(summary.created_unix_ms);
    info->set_last_used_unix_ms(summary.last_used_unix_ms);
    info->set_persisted(summary.persisted);
    info->set_busy(summary.busy);
    info->set_turn_count(summary.turn_count);
    info->set_first_held_turn(summary.first_held_turn);
    info->set_dropped_turns(summary.dropped_turns);
    info->set_dropped_tokens(summary.dropped_tokens);
  }
  return reply(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* EdgeService::DeleteSession(grpc::CallbackServerContext* context,
                                                     const v1::DeleteSessionRequest* request,
                                                     v1::DeleteSessionResponse* response) {
  const TsanServiceEdges::Handler tsan_handler(tsan_edges_);  // the first statement: see TsanServiceEdges
  absl::StatusOr<std::string> owner = authenticate_call(options_.api_keys.get(), *context);
  if (!owner.ok()) return reply(context, owner.status());
  if (state_.load() == v1::SERVING_STATE_LOADING) {
    return reply(context, absl::UnavailableError("the edge agent is LOADING"));
  }
  if (absl::Status valid = check_client_session_id(request->session_id()); !valid.ok()) {
    return reply(context, valid);
  }
  const std::string stored_id = owned_session_id(*owner, request->session_id());
  absl::StatusOr<uint64_t> freed = sessions_->remove(stored_id);
  if (!freed.ok()) return reply(context, with_client_session_id(freed.status(), stored_id, request->session_id()));
  response->set_freed_bytes(*freed);
  return reply(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* EdgeService::ListPacks(grpc::CallbackServerContext* context, const v1::ListPacksRequest*,
                                                 v1::ListPacksResponse* response) {
  const TsanServiceEdges::Handler tsan_handler(tsan_edges_);  // the first statement: see TsanServiceEdges
  if (absl::StatusOr<std::string> owner = authenticate_call(options_.api_keys.get(), *context); !owner.ok()) {
    return reply(context, owner.status());
  }
  if (state_.load() == v1::SERVING_STATE_LOADING) {
    return reply(context, absl::UnavailableError("the edge agent is LOADING"));
  }
  for (const PackSummary& summary : packs_->list()) {
    v1::PackInfo* info = response->add_packs();
    info->set_pack_id(summary.pack_id);
    info->set_description(summary.description);
    info->set_token_count(static_cast<uint32_t>(summary.tokens.size()));
    info->set_prefix_digest(digest_bytes(summary.prefix_digest));
    fill_codec(summary.codec, info->mutable_codec());
    info->set_file_bytes(summary.file_bytes);
    info->set_path(summary.path);
  }
  return reply(context, absl::OkStatus());
}

grpc::ServerWriteReactor<v1::PullPackResponse>* EdgeService::PullPack(grpc::CallbackServerContext* context,
                                                                      const v1::PullPackRequest* request) {
  const TsanServiceEdges::Handler tsan_handler(tsan_edges_);  // the first statement: see TsanServiceEdges
  auto* reactor = new QueuedWriteReactor<v1::PullPackResponse>(context, &write_stall_, "PullPack");
  if (absl::StatusOr<std::string> owner = authenticate_call(options_.api_keys.get(), *context); !owner.ok()) {
    reactor->refuse(owner.status());
    return reactor;
  }
  const v1::ServingState state = state_.load();
  if (state != v1::SERVING_STATE_READY) {
    reactor->refuse(absl::UnavailableError(absl::StrCat("the edge agent is ", state_name(state))),
                    options_.retry_after_ms);
    return reactor;
  }
  if (cloud_ == nullptr) {
    reactor->refuse(absl::FailedPreconditionError("PullPack needs a cloud, and this agent has none (--cloud)"));
    return reactor;
  }
  const Clock::time_point arrival = Clock::now();
  const bool queued = pack_queue_.try_push([this, reactor, arrival, request_copy = *request](bool run) {
    absl::Status status =
        run ? pull_pack(
                  request_copy, arrival,
                  [reactor](v1::PullPackResponse response) { return reactor->push(std::move(response)); },
                  reactor->cancel_slot())
            : absl::UnavailableError("the edge agent is shutting down");
    reactor->done(status);
  });
  if (!queued) {
    reactor->refuse(absl::ResourceExhaustedError("too many PullPack calls are waiting; retry later"),
                    options_.retry_after_ms);
  }
  return reactor;
}

absl::Status EdgeService::pull_pack(const v1::PullPackRequest& request, Clock::time_point arrival,
                                    const std::function<absl::Status(v1::PullPackResponse)>& emit,
                                    CancelSlot& cancel_slot) {
  if (request.pack_id().empty()) return absl::InvalidArgumentError("pack_id is empty");
  std::unique_ptr<CloudKvStream> stream = cloud_->get_prefix(request.pack_id(), runtime_.fingerprint);
  // A client that goes away stops the download at once; disarmed before the stream goes.
  struct Disarm {
    CancelSlot& slot;
    ~Disarm() { slot.disarm(); }
  } disarm{cancel_slot};
  cancel_slot.arm([&stream] { stream->context().TryCancel(); });
  absl::Status emit_status;
  const uint32_t n_layer = static_cast<uint32_t>(runtime_.geometry.n_layer);
  uint32_t layers_seen = 0;
  KvMessageSource inner = stream->source();
  // Count layers as blocks go by (blocks come in layer order).
  KvMessageSource source = [&]() -> absl::StatusOr<std::optional<v1::KvStreamMessage>> {
    BATON_ASSIGN_OR_RETURN(std::optional<v1::KvStreamMessage> message, inner());
    if (message.has_value() && message->has_block()) layers_seen = std::max(layers_seen, message->block().layer());
    if (message.has_value() && message->has_trailer()) layers_seen = n_layer;
    return message;
  };
  auto progress = [&](uint32_t blocks, uint64_t bytes) {
    (void)blocks;
    if (!emit_status.ok()) return;
    v1::PullPackResponse response;
    v1::Progress* p = response.mutable_progress();
    p->set_phase(v1::PHASE_RECEIVING_KV);
    p->set_kv_layers_received(layers_seen);
    p->set_n_layer(n_layer);
    p->set_kv_bytes_received(bytes);
    p->set_elapsed_ms(ms_since(arrival));
    emit_status = emit(std::move(response));
    if (!emit_status.ok()) stream->context().TryCancel();
  };
  absl::StatusOr<PackSummary> stored =
      packs_->add_from_stream(request.pack_id(), source, request.overwrite(), progress);
  BATON_RETURN_IF_ERROR(emit_status);
  if (!stored.ok()) return stored.status();
  v1::PullPackResponse done;
  v1::PackInfo* info = done.mutable_done();
  info->set_pack_id(stored->pack_id);
  info->set_description(stored->description);
  info->set_token_count(static_cast<uint32_t>(stored->tokens.size()));
  info->set_prefix_digest(digest_bytes(stored->prefix_digest));
  fill_codec(stored->codec, info->mutable_codec());
  info->set_file_bytes(stored->file_bytes);
  info->set_path(stored->path);
  return emit(std::move(done));
}

}  // namespace baton
