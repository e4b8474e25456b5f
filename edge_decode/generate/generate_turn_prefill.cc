// The plan and the prefill of a Generate turn (generate_turn_steps.h).

#include "edge_decode/generate/generate_turn_steps.h"

namespace baton::turn_internal {
namespace {

// Tokens per local prefill call: a multiple of the engine's micro-batch, so
// chunking does not change the arithmetic; progress and cancellation are
// checked between chunks.
constexpr int64_t kLocalPrefillChunkTokens = 256;

// An f32 staging cache with room for `capacity_tokens` holding an F16
// store's tokens [0, n) (f16 -> f32 is exact).
absl::StatusOr<std::unique_ptr<F32KvCache>> f32_staging_of(const QuantizedKvCache& store, int64_t n,
                                                          int64_t capacity_tokens) {
  const KvGeometry& geometry = store.geometry();
  auto staging = std::make_unique<F32KvCache>(geometry, capacity_tokens);
  // A sliding-window layer that no longer holds the window of n: recompute all.
  if (!store.holds_window_for(n)) n = 0;
  if (n == 0) return staging;
  std::vector<float> k(static_cast<size_t>(n * geometry.kv_dim()));
  std::vector<float> v(k.size());
  for (int layer = 0; layer < geometry.n_layer; ++layer) {
    // A windowed layer's keys before n's window are never read again.
    const int64_t from = window_first_kept_position(geometry.window(layer), n);
    BATON_ASSIGN_OR_RETURN(QuantizedKvBlock k_block, store.export_block(layer, /*is_key=*/true, from, n - from));
    BATON_ASSIGN_OR_RETURN(QuantizedKvBlock v_block, store.export_block(layer, /*is_key=*/false, from, n - from));
    const size_t elements = static_cast<size_t>((n - from) * geometry.kv_dim());
    BATON_CHECK(k_block.codes.size() == 2 * elements && v_block.codes.size() == 2 * elements,
                "F16 block of unexpected size");
    for (size_t i = 0; i < elements; ++i) {
      uint16_t k_half = 0;
      uint16_t v_half = 0;
      std::memcpy(&k_half, k_block.codes.data() + 2 * i, 2);
      std::memcpy(&v_half, v_block.codes.data() + 2 * i, 2);
      k[i] = fp16_to_fp32(k_half);
      v[i] = fp16_to_fp32(v_half);
    }
    BATON_RETURN_IF_ERROR(staging->store(layer, from, n - from, k.data(), v.data()));
  }
  staging->set_size(n);
  return staging;
}

// Why the split policy may not use the cloud now, for the plan's reason.
std::string cloud_unusable_why(const CloudLinkStatus& link) {
  if (link.checked_unix_ms == 0) return "not checked yet (no Health answer so far)";
  if (!link.reachable) {
    return absl::StrCat("unreachable (", link.last_error.empty() ? "no Health answer" : link.last_error, ")");
  }
  std::string state = v1::ServingState_Name(link.state);
  if (state.rfind("SERVING_STATE_", 0) == 0) state = state.substr(14);
  return absl::StrCat("not ready (", state, " at the last Health check)");
}

}  // namespace

SplitInputs GenerateTurn::split_inputs(const KvCodecConfig& wire, uint32_t reused, uint32_t to_prefill,
                                       uint32_t local_tokens) const {
  SplitInputs in;
  in.local_prefill_tokens = local_tokens;
  in.policy = prefill_policy_from_proto(request_.policy(), rt_.default_policy);
  in.cloud_configured = rt_.cloud != nullptr;
  in.reused_tokens = reused;
  in.prefill_tokens = to_prefill;
  if (request_.has_split_position()) in.forced_split_position = request_.split_position();
  in.local_prefill_tokens_per_s = rt_.assumed_local_prefill_tokens_per_s > 0
                                      ? rt_.assumed_local_prefill_tokens_per_s
                                      : rt_.local_prefill_tokens_per_s->value();
  const double quantized_per_token =
      static_cast<double>(QuantizedKvCache::bytes_per_token(edge_store_config(wire, rt_.geometry), rt_.geometry));
  double wire_ratio = wire.zstd_level != 0 ? 0.85 : 1.0;  // zstd on quantized KV: assumed until measured
  // The transform codec spends about its budget per element of the INT8 store's 8 bits.
  if (wire.transform) wire_ratio = std::min(1.0, wire.transform->budget_tenths / 80.0);
  if (rt_.cloud != nullptr) {
    const CloudLinkStatus link = rt_.cloud->link();
    in.cloud_reachable = link.reachable && link.state == v1::SERVING_STATE_READY;
    if (!in.cloud_reachable) in.cloud_unusable_why = cloud_unusable_why(link);
    in.cloud_prefill_tokens_per_s = link.prefill_tokens_per_s;
    in.link_bytes_per_s =
        rt_.assumed_link_bytes_per_s > 0 ? rt_.assumed_link_bytes_per_s : link.bandwidth_bytes_per_s;
    in.link_rtt_ms = link.rtt_ms;
    in.cloud_call_overhead_ms = link.call_overhead_ms;
    if (wire.zstd_level != 0 && link.wire_bytes_per_quantized_byte > 0) wire_ratio = link.wire_bytes_per_quantized_byte;
  }
  in.wire_bytes_per_token = quantized_per_token * wire_ratio;
  // Codec auto chose wire_ from the table: its measured figure.
  if (auto_wire_bytes_per_token_ > 0 && wire == wire_) in.wire_bytes_per_token = auto_wire_bytes_per_token_;
  return in;
}

absl::Status GenerateTurn::local_prefill(std::span<const int32_t> all, int64_t end, int64_t keep,
                                        QuantizedKvCache& store) {
  const int64_t have = store.size();
  const Clock::time_point start = Clock::now();
  // A lossless (F16) store is prefilled the way the cloud computes its KV:
  // in f32, attending over f32 K/V. Positions [keep, have) (earlier turns,
  // whose KV here came from f16 attention and decode steps) are recomputed
  // from their tokens as the cloud does; [0, keep) (a prefix pack, reused as
  // it is on both sides) is read back from the store; then [have, end) is
  // rounded into the store. So local and cloud prefill give bit-identical KV
  // turn after turn. The f32 staging must fit the headroom; past it (and for
  // quantized stores) the new positions attend over the stored codes.
  std::unique_ptr<F32KvCache> staging;
  if (stages_in_f32(store.config(), end)) {
    BATON_ASSIGN_OR_RETURN(staging, f32_staging_of(store, std::min(keep, have), end));
  }
  KvCache& kv = staging ? static_cast<KvCache&>(*staging) : static_cast<KvCache&>(store);
  const int64_t first = kv.size();
  const int64_t total = end - first;
  for (int64_t done = 0; done < total;) {
    BATON_RETURN_IF_ERROR(check_alive());
    const int64_t count = std::min(kLocalPrefillChunkTokens, total - done);
    // Through the batcher: in chunks between the running turns' decode steps.
    absl::Status status =
        rt_.batcher->prefill(all.subspan(first + done, count), kv, nullptr, [this] { return check_alive(); });
    if (!status.ok()) {
      store.set_size(have);
      return status;
    }
    done += count;
    BATON_RETURN_IF_ERROR(progress(v1::PHASE_LOCAL_PREFILL, [&](v1::Progress* p) {
      p->set_tokens_done(static_cast<uint32_t>(done));
      p->set_tokens_total(static_cast<uint32_t>(total));
    }));
  }
  if (staging) {
    for (int layer = 0; layer < rt_.geometry.n_layer; ++layer) {
      absl::Status stored =
          store.store(layer, have, end - have, staging->k_row(layer, have), staging->v_row(layer, have));
      if (!stored.ok()) {
        store.set_size(have);
        return stored;
      }
    }
    store.set_size(end);
  }
  const double seconds = ms_between(start, Clock::now()) / 1000.0;
  // Short prefills measure overhead more than throughput.
  if (total >= 16 && seconds > 0) rt_.local_prefill_tokens_per_s->add(static_cast<double>(total) / seconds);
  return absl::OkStatus();
}

absl::Status GenerateTurn::plan_prefill() {
  QuantizedKvCache& kv = *kv_;
  have_ = kv.size();
  BATON_CHECK(have_ <= n_, "session KV holds more tokens than the conversation");
  if (have_ == n_) {
    have_ = n_ - 1;  // everything is held (a prompt equal to the pack): recompute the last token's logits
    kv.set_size(have_);
    // A sliding-window layer holds only what the query at n sees (a pack
    // carries W - 1 rows): without the row n - W, recompute everything.
    if (!kv.holds_window_for(have_)) {
      have_ = 0;
      kv.set_size(0);
    }
  }
  BATON_RETURN_IF_ERROR(progress(v1::PHASE_PLANNING));
  to_prefill_ = static_cast<uint32_t>(n_ - 1 - have_);
  BATON_RETURN_IF_ERROR(check_split_position());
  const int64_t local_from = stages_in_f32(store_, n_ - 1) ? std::min<int64_t>(pack_tokens_, have_) : have_;
  plan_ = decide_split(
      split_inputs(wire_, static_cast<uint32_t>(have_), to_prefill_, static_cast<uint32_t>(n_ - 1 - local_from)));
  if (!codec_reason_.empty()) plan_.reason = absl::StrCat(plan_.reason, "; ", codec_reason_);
  if (truncation_.has_value()) plan_.reason = absl::StrCat(plan_.reason, "; ", truncation_->description);
  if (request_.progress()) {
    v1::GenerateResponse response;
    to_proto(plan_, response.mutable_plan());
    BATON_RETURN_IF_ERROR(emit(std::move(response)));
  }
  return absl::OkStatus();
}

absl::Status GenerateTurn::prefill() {
  if (!context_warning_.empty()) {
    stats_.set_context_warning(context_warning_);
    v1::GenerateResponse warning;
    warning.set_warning(context_warning_);
    BATON_RETURN_IF_ERROR(emit(std::move(warning)));
  }
  bool prefilled = plan_.place == v1::PREFILL_PLACE_REUSED;
  if (plan_.place == v1::PREFILL_PLACE_CLOUD) {
    BATON_ASSIGN_OR_RETURN(prefilled, cloud_prefill(have_));
  }
  if (plan_.place == v1::PREFILL_PLACE_OVERLAP) {
    BATON_ASSIGN_OR_RETURN(prefilled, overlapped_prefill());
  }
  if (!prefilled) {
    BATON_RETURN_IF_ERROR(local_prefill(all_, n_ - 1, pack_tokens_, *kv_));
  }
  return absl::OkStatus();
}

absl::Status GenerateTurn::check_split_position() const {
  if (!request_.has_split_position()) return absl::OkStatus();
  const uint32_t a = request_.split_position();
  if (a < have_ || a > n_ - 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "split_position = %u is outside [%d, %d]: the session holds %d positions and the prompt ends at %d (n-1)", a,
        have_, n_ - 1, have_, n_ - 1));
  }
  if (a == n_ - 1) return absl::OkStatus();
  if (policy_ == PrefillPolicy::kLocal) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "split_position = %u asks the cloud for [%u, %d), but policy local never contacts the cloud", a, a, n_ - 1));
  }
  if (rt_.cloud == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrFormat("split_position = %u asks the cloud for [%u, %d), and this agent has none (--cloud)", a, a,
                        n_ - 1));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> GenerateTurn::overlapped_prefill() {
  const int64_t a = plan_.split_position;
  std::mutex mu;
  std::condition_variable cv;
  std::optional<absl::Status> local_done;  // guarded by mu
  std::atomic<bool> stop_cloud{false};
  // The cloud's segment enters the store only once the edge's part is in.
  auto wait_for_local = [&]() -> absl::Status {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return local_done.has_value(); });
    if (local_done->ok()) return absl::OkStatus();
    return absl::AbortedError(absl::StrCat("the edge's prefill of [", have_, ", ", a, ") failed"));
  };
  absl::StatusOr<bool> cloud = false;
  std::thread cloud_thread([&] { cloud = cloud_prefill(a, wait_for_local, [&] { return stop_cloud.load(); }); });
  const Clock::time_point start = Clock::now();
  absl::Status local = local_prefill(all_, a, pack_tokens_, *kv_);
  overlap_local_prefill_ms_ = ms_between(start, Clock::now());
  {
    std::lock_guard<std::mutex> lock(mu);
    local_done = local;
  }
  cv.notify_all();
  // A failed edge part drops the cloud's: stop its stream at the next message.
  if (!local.ok()) stop_cloud = true;
  cloud_thread.join();
  BATON_RETURN_IF_ERROR(local);
  if (!cloud.ok()) return cloud.status();
  if (*cloud) {
    BATON_CHECK(kv_->size() == n_ - 1, "an overlapped prefill left the store short of n-1");
    return true;
  }
  BATON_CHECK(kv_->size() == a, "a failed KV stream changed the session");
  stats_.set_fallback_reason(absl::StrFormat("%s; the edge had prefilled [%d, %d) and prefills [%d, %d) too",
                                             stats_.fallback_reason(), have_, a, a, n_ - 1));
  return false;
}

absl::StatusOr<bool> GenerateTurn::cloud_prefill(int64_t first, std::function<absl::Status()> before_commit,
                                                 const std::function<bool()>& stop) {
  SessionLease& session = *session_;
  QuantizedKvCache& kv = *kv_;
  BATON_RETURN_IF_ERROR(progress(v1::PHASE_CLOUD_PREFILL));
  CloudPrefillRequest cloud_request;
  // The transform codec is bound to the edge's calibration here, when the
  // cloud is asked (a turn prefilled locally needs none); failing to bind is
  // a failed cloud prefill (falls back to local under policy auto).
  std::shared_ptr<const KvTransformCodec> transform;
  absl::Status bound = bind_transform(transform);
  if (bound.ok() && transform != nullptr) {
    wire_ = transform->config();
    cloud_request.transform = transform.get();
  }
  cloud_request.tokens.assign(all_.begin(), all_.end() - 1);
  cloud_request.first_position = static_cast<uint32_t>(first);
  cloud_request.before_commit = std::move(before_commit);
  cloud_request.codec = wire_;
  // A truncated conversation no longer extends the cloud's cached history:
  // each truncation starts a cloud session entry of its own.
  const uint32_t truncations = session->truncations + (truncation_.has_value() ? 1 : 0);
  cloud_request.session_id =
      truncations == 0 || session_id().empty() ? session_id() : absl::StrCat(session_id(), "#", truncations);
  cloud_request.session_created_unix_ms = session->created_unix_ms;
  cloud_request.cache_salt = request_.cache_salt();
  cloud_request.deadline = io_.deadline;
  // Under auto, a stream slower than local prefill is abandoned for it.
  if (policy_ == PrefillPolicy::kAuto) {
    cloud_request.give_up_after_local_ms = plan_.estimated_local_ms;
  }
  absl::Status emit_status;
  auto on_block = [&](const CloudPrefillProgress& seen) {
    if (!emit_status.ok() || !request_.progress()) return;
    emit_status = progress(seen.trailer ? v1::PHASE_INGESTING : v1::PHASE_RECEIVING_KV, [&](v1::Progress* p) {
      p->set_kv_layers_received(seen.kv_layers_received);
      p->set_kv_bytes_received(seen.kv_bytes_received);
    });
  };
  auto cancelled = [&] { return !emit_status.ok() || !check_alive().ok() || (stop && stop()); };
  cloud_request.prefix_pack_id = cloud_pack_id_;
  cloud_request.max_staging_bytes = staging_budget_bytes(session_id(), kv);
  if (const uint32_t early = early_tokens_to_ask(); early > 0) {
    std::optional<uint32_t> logprobs;
    if (request_.has_logprobs()) logprobs = request_.logprobs();
    cloud_request.early = early_tokens_request(*sampler_, early, all_[n_ - 1], logprobs);
    cloud_request.on_early = [this](const v1::EarlyTokens& message) { show_early(message); };
  }
  absl::StatusOr<CloudPrefillResult> result =
      bound.ok() ? rt_.cloud->prefill(cloud_request, rt_.fingerprint, rt_.rope, kv, on_block, cancelled,
                                      io_.cancel_slot)
                 : absl::StatusOr<CloudPrefillResult>(bound);
  if (!result.ok() && absl::IsNotFound(result.status()) && !cloud_pack_id_.empty()) {
    // The cloud no longer holds the pack: it recomputes those tokens instead
    // (a refusal comes before any early token; were one shown, the cloud
    // would not know it: none are asked for again).
    cloud_request.prefix_pack_id.clear();
    if (!early_shown_.empty() || early_done_) cloud_request.early.reset();
    result = rt_.cloud->prefill(cloud_request, rt_.fingerprint, rt_.rope, kv, on_block, cancelled, io_.cancel_slot);
  }
  if (result.ok()) {
    stats_.set_cloud_prefill_ms(result->cloud_prefill_ms);
    stats_.set_transfer_ms(result->transfer_ms);
    stats_.set_ingest_ms(result->ingest_ms);
    // F16-equivalent: 2 bytes per K/V element of the segment.
    stats_.set_kv_raw_bytes(static_cast<uint64_t>(n_ - 1 - first) *
                            static_cast<uint64_t>(rt_.model->spec().kv_elements_per_token()) * 2);
    stats_.set_kv_quantized_bytes(result->quantized_bytes);
    stats_.set_kv_wire_bytes(result->wire_bytes);
    stats_.set_cloud_reused_tokens(result->producer.cached_tokens());
    stats_.set_kv_codec(wire_.to_string());
    if (cloud_request.early.has_value() && result->early_tokens == 0 && early_note_.empty()) {
      early_note_ = "the cloud sent no early tokens (a baton-prefill without them, or its sampling failed)";
    }
    return true;
  }
  // (An overlapped turn's store is the edge's prefill's; overlapped_prefill checks it.)
  if (!cloud_request.before_commit) BATON_CHECK(kv.size() == have_, "a failed KV stream changed the session");
  BATON_RETURN_IF_ERROR(check_alive());
  // Our client is still here (check_alive), so a cancelled cloud call
  // means the cloud went away.
  const absl::StatusCode code =
      absl::IsCancelled(result.status()) ? absl::StatusCode::kUnavailable : result.status().code();
  const std::string why =
      absl::StrCat("cloud prefill failed (", absl::StatusCodeToString(code), "): ", result.status().message());
  if (policy_ == PrefillPolicy::kCloud) {
    if (early_shown_.empty()) return absl::Status(code, why);
    return absl::Status(code, absl::StrFormat("%s (after %d early tokens were sent; the session is unchanged)", why,
                                              early_shown_.size()));
  }
  BATON_WARN("session %s: %s; prefilling locally", session_id().c_str(), why.c_str());
  stats_.set_fallback_reason(why);
  if (!early_shown_.empty()) {
    early_note_ = absl::StrFormat(
        "the KV stream failed after %d early tokens were sent: the edge prefilled the prompt and them here and "
        "continued the reply",
        early_shown_.size());
  }
  return false;
}

absl::Status GenerateTurn::bind_transform(std::shared_ptr<const KvTransformCodec>& coder) const {
  if (!wire_.transform) return absl::OkStatus();
  if (rt_.transform == nullptr) {
    return absl::FailedPreconditionError("the transform codec (tc_calibration) is not available on this edge");
  }
  BATON_ASSIGN_OR_RETURN(coder, rt_.transform->coder_for(wire_));
  if (!(coder->int8_config() == store_)) {
    return absl::InternalError(absl::StrFormat("codec %s lands in %s, but the session's store is %s",
                                               wire_.to_string(), coder->int8_config().to_string(),
                                               store_.to_string()));
  }
  return absl::OkStatus();
}

}  // namespace baton::turn_internal
