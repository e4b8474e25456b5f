#include "edge_decode/generate/generate_turn.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_stream/cache_salt.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/model/layer_window.h"
#include "common/tokenizer/streaming_decoder.h"
#include "common/util/check.h"
#include "common/util/clock.h"
#include "common/util/fp16.h"
#include "common/util/log.h"
#include "edge_decode/generate/chat_turn.h"
#include "edge_decode/generate/context_overflow.h"
#include "edge_decode/plan/codec_choice.h"
#include "edge_decode/store/session_lease.h"
#include "edge_decode/generate/stop_matcher.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;

// Tokens per local prefill call: a multiple of the engine's micro-batch, so
// chunking does not change the arithmetic; progress and cancellation are
// checked between chunks.
constexpr int64_t kLocalPrefillChunkTokens = 256;

// GenerateRequest.logprobs: the model's log-probability of `token` (from the
// raw logits, before penalties and temperature) and its `top_n` alternatives.
void add_logprobs(std::span<const float> logits, int32_t token, uint32_t top_n, v1::TextPiece* piece) {
  const TokenLogprobs computed = token_logprobs(logits, token, static_cast<int>(top_n));
  v1::TokenLogprob* out = piece->add_logprobs();
  out->set_token_id(static_cast<uint32_t>(token));
  out->set_logprob(computed.logprob);
  for (const auto& [id, logprob] : computed.top) {
    v1::TopLogprob* top = out->add_top();
    top->set_token_id(static_cast<uint32_t>(id));
    top->set_logprob(logprob);
  }
}

KvCodecConfig::Bits bits_of(v1::KvCodec codec) {
  switch (codec) {
    case v1::KV_CODEC_F16:
      return KvCodecConfig::Bits::kF16;
    case v1::KV_CODEC_INT4:
      return KvCodecConfig::Bits::kInt4;
    default:
      return KvCodecConfig::Bits::kInt8;
  }
}

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

class GenerateTurn {
 public:
  GenerateTurn(const EdgeRuntime& runtime, const v1::GenerateRequest& request, const TurnIo& io)
      : rt_(runtime), request_(request), io_(io) {}

  // The turn, as the list of its steps; each step reads what the steps
  // before it left in the members below.
  absl::Status run();

 private:
  // 1. Validate the request (cheap checks first).
  absl::Status validate();
  // 2. The session: continue it, or create it (one-shot sessions live for
  // this call only); the store codec and the wire codec.
  absl::Status take_session();
  // 3. Tokens of the conversation after this turn's prompt; under codec
  // auto, the codec for them (a new session's store follows it).
  absl::Status conversation_tokens();
  // 3b. Context overflow (context_overflow.h): a continuing session whose
  // conversation, with room for the reply, passes the context limit drops
  // its oldest whole turns under truncate and shift (refuse: fit_context
  // refuses).
  absl::Status truncate_if_overflowing();
  // Tokens truncation never drops: the pack, at least keep_tokens, a leading
  // BOS; at most the tokens held.
  absl::StatusOr<int64_t> kept_prefix_tokens();
  // The shortened conversation in a new store holding the prefix's KV (and,
  // under shift, the kept tail's cells moved to their new positions); the
  // old one is set aside in the lease until the turn commits.
  absl::Status replace_conversation(TruncationPlan plan, int64_t prefix);
  absl::Status choose_auto_codec();
  absl::Status check_codec_usable(const KvCodecConfig& wire) const;
  // What the trained context and `store`'s share of the KV budget allow.
  ContextLimit context_limit_of(const KvCodecConfig& store) const;
  // 4. Context: the conversation must fit; the session's KV store sized for
  // it, with the prefix pack loaded into a new session.
  absl::Status fit_context();
  absl::Status load_pack();
  // 5. Plan: positions [have, n-1) to prefill; the last prompt token always
  // runs here.
  absl::Status plan_prefill();
  // 6. Prefill [have, n-1): through the cloud when the plan says so, else
  // (or after a fallback) locally.
  absl::Status prefill();
  // The cloud part of step 6: [first, n-1) from the cloud; true when the
  // cloud prefilled, false when the turn falls back to local prefill (policy
  // AUTO). `before_commit` and `stop` are set for an overlapped turn (see
  // CloudPrefillRequest::before_commit; stop: true ends the stream).
  absl::StatusOr<bool> cloud_prefill(int64_t first, std::function<absl::Status()> before_commit = {},
                                     const std::function<bool()>& stop = {});
  // An OVERLAP plan: the edge prefills [have, a) on this thread while the
  // cloud streams [a, n-1) on another; true when both succeeded, false when
  // the cloud failed under policy AUTO (the store then holds [0, a), the
  // rest is the caller's local prefill).
  absl::StatusOr<bool> overlapped_prefill();
  // split_position of the request: within [have, n-1], and below n-1 only
  // where the cloud may be asked.
  absl::Status check_split_position() const;
  // A transform wire codec's coder, bound to the edge's calibration (null
  // coder for other codecs); FAILED_PRECONDITION naming tc_calibration.
  absl::Status bind_transform(std::shared_ptr<const KvTransformCodec>& coder) const;
  // Before prefill: the sampler (the prompt accepted), the text decoder and
  // the stop matcher, which early tokens use during the cloud prefill.
  void prepare_sampling();
  // The number of early tokens to ask the cloud for: the request's (or
  // --early-tokens), within max_tokens and the room left in the context.
  uint32_t early_tokens_to_ask() const;
  // An EarlyTokens message (on the thread reading the cloud stream, after
  // its header verified): each token is taken into the sampler and shown.
  void show_early(const v1::EarlyTokens& early);
  // One sampled token for the client: recorded, its text piece emitted, and
  // whether it ends the reply (finish_). `logprob` (optional) is its entry.
  absl::Status show_token(int32_t token, std::vector<int32_t>& reply, const v1::TokenLogprob* logprob,
                          std::span<const float> logits, bool* finished);
  // 7. The last prompt token (and the early tokens shown), then decode
  // (text pieces streamed).
  absl::Status start_decoding();
  // The session's turn records: this turn (and what a truncation kept).
  void record_turn();
  absl::Status decode();
  // Bytes the decoder or the stop matcher held back end the text.
  absl::Status flush_text();
  // 8. Commit, then the final Stats.
  absl::Status commit_and_report();

  const std::string& session_id() const { return request_.session_id(); }
  absl::Status check_alive() const {
    if (io_.cancelled && io_.cancelled()) return absl::CancelledError("the client cancelled the Generate call");
    if (std::chrono::system_clock::now() > io_.deadline) {
      return absl::DeadlineExceededError("the Generate call's deadline passed");
    }
    return absl::OkStatus();
  }
  double elapsed_ms() const { return ms_between(io_.arrival, Clock::now()); }
  // Locked: an overlapped turn's cloud stream reports from its own thread.
  absl::Status emit(v1::GenerateResponse response) {
    std::lock_guard<std::mutex> lock(emit_mu_);
    return io_.emit(std::move(response));
  }
  absl::Status progress(v1::Phase phase, const std::function<void(v1::Progress*)>& fill = {}) {
    if (!request_.progress()) return absl::OkStatus();
    v1::GenerateResponse response;
    v1::Progress* p = response.mutable_progress();
    p->set_phase(phase);
    p->set_n_layer(static_cast<uint32_t>(rt_.geometry.n_layer));
    p->set_elapsed_ms(elapsed_ms());
    if (fill) fill(p);
    return emit(std::move(response));
  }
  // `stops` gains what a chat template needs (GenerateRequest.chat).
  absl::StatusOr<std::vector<int32_t>> prompt_tokens(bool is_new, bool with_pack, std::vector<std::string>* stops) const;
  // Computes positions [store.size(), end) of `all` into the store;
  // positions [0, keep) are never recomputed (a prefix pack).
  absl::Status local_prefill(std::span<const int32_t> all, int64_t end, int64_t keep, QuantizedKvCache& store);
  // True when local prefill up to `end` goes through f32 staging (a lossless
  // store whose staging fits the headroom; see local_prefill).
  bool stages_in_f32(const KvCodecConfig& store, int64_t end) const {
    const uint64_t staging_bytes =
        static_cast<uint64_t>(end) * static_cast<uint64_t>(rt_.model->spec().kv_elements_per_token()) * sizeof(float);
    // A shifted turn attends over its shifted cells: no recompute.
    return store.bits == KvCodecConfig::Bits::kF16 && !store.key_bits.has_value() &&
           staging_bytes <= rt_.memory.headroom_bytes && !shifted_;
  }
  // What a cloud stream's staging may take: the KV budget less this
  // session's store and the other running turns' sessions (idle ones can be
  // evicted); at least 1, so a full budget refuses every stream.
  uint64_t staging_budget_bytes(const std::string& session_id, const QuantizedKvCache& kv) const {
    const uint64_t held = static_cast<uint64_t>(kv.memory_bytes()) + rt_.sessions->busy_memory_bytes_except(session_id);
    return rt_.memory.kv_budget_bytes > held ? rt_.memory.kv_budget_bytes - held : 1;
  }
  SplitInputs split_inputs(const KvCodecConfig& wire, uint32_t reused, uint32_t to_prefill,
                           uint32_t local_tokens) const;
  // The client left after `generated` tokens of the answer: the session keeps
  // the conversation with those tokens and their KV (the client was sent
  // them), as a completed turn would, and the call still ends `cancelled`.
  absl::Status keep_interrupted_turn(SessionLease& session, const Sampler& sampler, uint32_t generated,
                                     absl::Status cancelled);

  const EdgeRuntime& rt_;
  const v1::GenerateRequest& request_;
  const TurnIo& io_;
  std::mutex emit_mu_;

  // Step 1.
  SamplingParams sampling_;
  uint32_t max_tokens_ = 0;
  std::vector<std::string> stops_;
  PrefillPolicy policy_ = PrefillPolicy::kAuto;
  ContextOverflowMode overflow_mode_ = ContextOverflowMode::kTruncate;
  bool codec_requested_ = false;
  bool auto_codec_ = false;  // codec auto (the request's, or the agent's --codec auto)
  KvCodecConfig wire_;
  // Step 2.
  std::optional<SessionLease> session_;
  bool is_new_ = true;
  KvCodecConfig store_;
  // Step 3.
  std::vector<int32_t> all_;
  std::optional<PackSummary> pack_;
  int64_t n_ = 0;
  uint32_t prompt_token_count_ = 0;
  // Tokens of all_ before this turn's prompt that the session holds (0 for a
  // new session; after a truncation, the ones kept).
  int64_t held_tokens_ = 0;
  // Step 3b: what this turn dropped (unset: nothing); true when the kept
  // tail's cells were shifted rather than prefilled again.
  std::optional<TruncationPlan> truncation_;
  bool shifted_ = false;
  // Codec auto's choice: the table's wire bytes per token of wire_ (0: not
  // from the table) and the reason the plan carries.
  double auto_wire_bytes_per_token_ = 0;
  std::string codec_reason_;
  // Step 4.
  int64_t max_context_ = 0;
  std::string context_warning_;
  QuantizedKvCache* kv_ = nullptr;  // the session's store
  // The pack part of the session is reused as loaded, here and on the cloud
  // (when the cloud holds the pack: it was pulled from there).
  int64_t pack_tokens_ = 0;
  std::string cloud_pack_id_;
  // Step 5.
  int64_t have_ = 0;
  uint32_t to_prefill_ = 0;
  SplitPlan plan_;
  // Steps 6 to 8.
  v1::Stats stats_;
  double overlap_local_prefill_ms_ = 0;  // OVERLAP: the edge's part
  std::optional<Sampler> sampler_;
  std::optional<StreamingDecoder> decoder_;
  std::optional<StopMatcher> stop_matcher_;
  // Early tokens: asked for (validate), shown (the reply's first tokens,
  // not yet in the KV), whether the reply ended among them, a failed emit.
  uint32_t early_wanted_ = 0;
  std::vector<int32_t> early_shown_;
  bool early_done_ = false;
  bool early_closed_ = false;  // a bad early token: no more are shown
  absl::Status early_emit_status_;
  std::string early_note_;     // Stats.early_tokens_note
  Clock::time_point cloud_first_token_time_{};
  Clock::time_point local_first_token_time_{};
  Clock::time_point decode_ready_time_{};  // the KV held the prompt (and the early tokens)
  uint32_t local_generated_ = 0;           // tokens sampled here
  std::vector<float> logits_;
  v1::FinishReason finish_ = v1::FINISH_REASON_LENGTH;
  uint32_t generated_ = 0;
  Clock::time_point first_token_time_{};
  Clock::time_point last_token_time_{};
};

absl::StatusOr<std::vector<int32_t>> GenerateTurn::prompt_tokens(bool is_new, bool with_pack,
                                                                 std::vector<std::string>* stops) const {
  const bool first_turn_without_pack = is_new && !with_pack;
  std::vector<int32_t> tokens;
  if (request_.prompt_case() == v1::GenerateRequest::kChat) {
    BATON_ASSIGN_OR_RETURN(ChatTurnTokens chat, chat_turn_tokens(rt_.model->file(), *rt_.tokenizer, request_.chat(),
                                                                 /*continuing=*/!is_new, first_turn_without_pack));
    tokens = std::move(chat.tokens);
    stops->insert(stops->end(), chat.stops.begin(), chat.stops.end());
  } else if (request_.prompt_case() == v1::GenerateRequest::kText) {
    EncodeOptions options;
    // BOS starts a conversation: the model's rule on a first turn without a
    // pack (a pack's tokens carry their own start), never on later turns.
    if (!first_turn_without_pack) options.add_bos = false;
    tokens = rt_.tokenizer->encode(request_.text(), options);
  } else if (request_.prompt_case() == v1::GenerateRequest::kTokens) {
    const int n_vocab = rt_.model->spec().n_vocab;
    for (int i = 0; i < request_.tokens().ids_size(); ++i) {
      const uint32_t id = request_.tokens().ids(i);
      if (id >= static_cast<uint32_t>(n_vocab)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("tokens.ids[%d] = %d is outside the vocabulary of %d tokens", i, id, n_vocab));
      }
      tokens.push_back(static_cast<int32_t>(id));
    }
  }
  if (tokens.empty()) return absl::InvalidArgumentError("the prompt is empty (no text and no tokens)");
  return tokens;
}

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
    absl::Status status = rt_.engine->prefill(all.subspan(first + done, count), kv, nullptr);
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

absl::Status GenerateTurn::keep_interrupted_turn(SessionLease& session, const Sampler& sampler,
                                                 uint32_t generated, absl::Status cancelled) {
  session->last_used_unix_ms = unix_ms_now();
  session->sampler = sampler.state();
  if (!request_.session_id().empty()) {
    BATON_INFO("session %s: the client left after %u generated tokens; the session keeps them (%zu tokens)",
               request_.session_id().c_str(), generated, session->tokens.size());
  }
  (void)session.commit();  // a failed save is logged; the session is kept in memory
  return cancelled;
}

absl::Status GenerateTurn::run() {
  BATON_RETURN_IF_ERROR(validate());             // 1
  BATON_RETURN_IF_ERROR(take_session());         // 2
  BATON_RETURN_IF_ERROR(conversation_tokens());  // 3
  BATON_RETURN_IF_ERROR(truncate_if_overflowing());
  BATON_RETURN_IF_ERROR(choose_auto_codec());
  BATON_RETURN_IF_ERROR(fit_context());          // 4
  BATON_RETURN_IF_ERROR(load_pack());
  BATON_RETURN_IF_ERROR(plan_prefill());         // 5
  prepare_sampling();
  BATON_RETURN_IF_ERROR(prefill());              // 6
  BATON_RETURN_IF_ERROR(start_decoding());       // 7
  BATON_RETURN_IF_ERROR(decode());
  return commit_and_report();                    // 8
}

absl::Status GenerateTurn::validate() {
  const bool one_shot = session_id().empty();
  if (!one_shot && !is_valid_session_id(session_id())) {
    return absl::InvalidArgumentError(
        absl::StrCat("session_id '", session_id(), "' is not 1..128 characters of [A-Za-z0-9._-]"));
  }
  if (request_.cache_salt().size() > kMaxCacheSaltBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("cache_salt has %d bytes; at most %d are allowed",
                                                      request_.cache_salt().size(), kMaxCacheSaltBytes));
  }
  if (request_.prompt_case() == v1::GenerateRequest::PROMPT_NOT_SET) {
    return absl::InvalidArgumentError("the prompt is empty (no text and no tokens)");
  }
  if (request_.has_logprobs() && request_.logprobs() > static_cast<uint32_t>(kMaxTopLogprobs)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("logprobs = %u alternatives; at most %d", request_.logprobs(), kMaxTopLogprobs));
  }
  BATON_ASSIGN_OR_RETURN(sampling_, sampling_params_from_proto(request_.sampling(), rt_.default_temperature));
  max_tokens_ = request_.max_tokens() > 0 ? request_.max_tokens() : static_cast<uint32_t>(rt_.default_max_tokens);
  if (max_tokens_ > rt_.max_tokens_cap) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "max_tokens = %u is over this agent's cap of %u tokens per request (--max-tokens-cap)", max_tokens_,
        rt_.max_tokens_cap));
  }
  stops_.assign(request_.stop().begin(), request_.stop().end());
  BATON_RETURN_IF_ERROR(check_stop_strings(stops_, "stop"));
  policy_ = prefill_policy_from_proto(request_.policy(), rt_.default_policy);
  early_wanted_ = request_.has_early_tokens() ? request_.early_tokens() : rt_.early_tokens;
  if (early_wanted_ > kMaxEarlyTokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("early_tokens = %u; at most %u", early_wanted_, kMaxEarlyTokens));
  }
  BATON_ASSIGN_OR_RETURN(overflow_mode_, context_overflow_from_proto(request_.context_overflow(), rt_.context_overflow));
  if (request_.has_keep_tokens() && request_.keep_tokens() > kMaxKeepTokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("keep_tokens = %u; at most %u", request_.keep_tokens(), kMaxKeepTokens));
  }
  if (policy_ == PrefillPolicy::kCloud && rt_.cloud == nullptr) {
    return absl::FailedPreconditionError("policy cloud needs a cloud, and this agent has none (--cloud)");
  }
  const v1::KvCodec asked = request_.codec().codec();
  auto_codec_ = asked == v1::KV_CODEC_AUTO || (asked == v1::KV_CODEC_UNSPECIFIED && rt_.auto_codec);
  codec_requested_ = asked != v1::KV_CODEC_UNSPECIFIED && asked != v1::KV_CODEC_AUTO;
  BATON_ASSIGN_OR_RETURN(wire_, resolve_wire_codec(request_.codec(), rt_.default_codec, rt_.geometry));
  return absl::OkStatus();
}

absl::Status GenerateTurn::take_session() {
  BATON_RETURN_IF_ERROR(progress(v1::PHASE_TOKENIZING));
  const bool one_shot = session_id().empty();
  std::unique_ptr<Session> taken;
  if (!one_shot && rt_.sessions->contains(session_id())) {
    BATON_ASSIGN_OR_RETURN(taken, rt_.sessions->checkout(session_id()));
    is_new_ = false;
  } else {
    if (!one_shot) BATON_RETURN_IF_ERROR(rt_.sessions->reserve(session_id()));
    taken = std::make_unique<Session>();
    taken->id = session_id();
    taken->created_unix_ms = unix_ms_now();
  }
  session_.emplace(rt_.sessions, std::move(taken), is_new_, one_shot);
  SessionLease& session = *session_;

  store_ = edge_store_config(wire_, rt_.geometry);
  if (!is_new_) {
    const KvCodecConfig session_store = QuantizedKvCache::store_config_for(session->codec);
    if (codec_requested_ && store_ != session_store) {
      return absl::InvalidArgumentError(absl::StrCat("session '", session_id(), "' holds its KV as ",
                                                     session_store.to_string(), "; the request asks for ",
                                                     store_.to_string()));
    }
    if (!request_.pack_id().empty() && request_.pack_id() != session->pack_id) {
      return absl::InvalidArgumentError(absl::StrCat("pack_id '", request_.pack_id(), "' applies to new sessions; '",
                                                     session_id(), "' started from '", session->pack_id, "'"));
    }
    store_ = session_store;
    // The session's store came from a wire codec of the same width; unless
    // the request names one, ask the cloud for the agent's default variant
    // when it lands in the same store, else for the store's own form.
    if (!codec_requested_) {
      wire_ = edge_store_config(rt_.default_codec, rt_.geometry) == store_ ? rt_.default_codec : store_;
    }
  }
  session->codec = store_;
  return absl::OkStatus();
}

absl::Status GenerateTurn::conversation_tokens() {
  SessionLease& session = *session_;
  all_ = session->tokens;
  if (is_new_ && !request_.pack_id().empty()) {
    BATON_ASSIGN_OR_RETURN(PackSummary found, rt_.packs->find(request_.pack_id()));
    pack_ = std::move(found);
  }
  BATON_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, prompt_tokens(is_new_, pack_.has_value(), &stops_));
  if (pack_.has_value()) {
    // The pack starts the conversation: a prompt that begins with its tokens
    // is taken as is, any other prompt follows them.
    const bool starts_with_pack = prompt.size() >= pack_->tokens.size() &&
                                  std::equal(pack_->tokens.begin(), pack_->tokens.end(), prompt.begin());
    if (!starts_with_pack) all_ = pack_->tokens;
  }
  all_.insert(all_.end(), prompt.begin(), prompt.end());
  n_ = static_cast<int64_t>(all_.size());
  prompt_token_count_ = static_cast<uint32_t>(n_ - static_cast<int64_t>(session.tokens_before()));
  held_tokens_ = is_new_ ? 0 : static_cast<int64_t>(session.tokens_before());
  return absl::OkStatus();
}

absl::Status GenerateTurn::truncate_if_overflowing() {
  if (is_new_ || overflow_mode_ == ContextOverflowMode::kRefuse) return absl::OkStatus();
  SessionLease& session = *session_;
  const ContextLimit limit = context_limit_of(store_);
  BATON_ASSIGN_OR_RETURN(const int64_t prefix, kept_prefix_tokens());
  TruncationInputs in;
  in.held_tokens = held_tokens_;
  in.turns = session->turns;
  in.kept_prefix = prefix;
  in.prefix_is_pack = session->pack_tokens > 0 && prefix == static_cast<int64_t>(session->pack_tokens);
  in.prompt_tokens = n_ - held_tokens_;
  // Room for the answer: max_tokens, but never more than half the limit (a
  // max_tokens near the limit would otherwise drop the whole conversation).
  in.reply_tokens = std::min<int64_t>(max_tokens_, limit.max_tokens() / 2);
  in.limit_tokens = limit.max_tokens();
  TruncationPlan plan = plan_truncation(in);
  if (!plan.needed) return absl::OkStatus();
  const int64_t kept = prefix + (held_tokens_ - plan.tail_begin);
  if (absl::Status fits = check_context_fits(limit, kept, n_ - held_tokens_); !fits.ok()) {
    // Dropping turns cannot help this prompt: refused, the session unchanged.
    return absl::Status(fits.code(), absl::StrFormat("%s; the prompt does not fit even with every earlier turn "
                                                     "dropped (context overflow truncate keeps %d tokens)",
                                                     fits.message(), prefix));
  }
  return replace_conversation(std::move(plan), prefix);
}

absl::StatusOr<int64_t> GenerateTurn::kept_prefix_tokens() {
  SessionLease& session = *session_;
  int64_t pack = session->pack_tokens;
  if (pack == 0 && !session->pack_id.empty()) {
    // A session saved before format 2 does not record its pack's length.
    absl::StatusOr<PackSummary> summary = rt_.packs->find(session->pack_id);
    if (!summary.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "session '", session_id(), "' outgrew its context and started from pack '", session->pack_id,
          "', which this agent no longer holds, so the part truncation must keep is unknown (context overflow "
          "refuse, or delete the session)"));
    }
    pack = static_cast<int64_t>(summary->tokens.size());
  }
  const int64_t keep = request_.has_keep_tokens() ? request_.keep_tokens() : rt_.keep_tokens;
  int64_t prefix = std::max(pack, keep);
  // A leading BOS stays: the model has always seen it first.
  if (prefix == 0 && held_tokens_ > 0 && rt_.tokenizer->bos_id() >= 0 && all_[0] == rt_.tokenizer->bos_id()) {
    prefix = 1;
  }
  return std::min(prefix, held_tokens_);
}

absl::Status GenerateTurn::replace_conversation(TruncationPlan plan, int64_t prefix) {
  SessionLease& session = *session_;
  std::vector<int32_t> kept(all_.begin(), all_.begin() + prefix);
  kept.insert(kept.end(), all_.begin() + plan.tail_begin, all_.begin() + held_tokens_);
  const int64_t kept_held = static_cast<int64_t>(kept.size());
  kept.insert(kept.end(), all_.begin() + held_tokens_, all_.end());  // this turn's prompt
  const int64_t n = static_cast<int64_t>(kept.size());
  const int64_t capacity = std::min<int64_t>(context_limit_of(store_).max_tokens(), n + max_tokens_);
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<QuantizedKvCache> kv, QuantizedKvCache::Create(rt_.geometry, capacity, store_));
  // The prefix's KV is copied as it is (a pack stays exactly the pack); the
  // kept tail is prefilled again at its new positions by the turn's plan.
  const QuantizedKvCache* old = session.set_aside_conversation();
  int64_t copied = 0;
  if (old != nullptr) {
    BATON_ASSIGN_OR_RETURN(copied, copy_kv_prefix(*old, prefix, *kv));
  }
  if (copied == 0 && prefix > 0 && !session->pack_id.empty()) {
    // A sliding window already past the prefix: the pack from its file, if
    // it is still here; otherwise everything is prefilled.
    (void)rt_.packs->load_into(session->pack_id, *kv);
  }
  if (overflow_mode_ == ContextOverflowMode::kShift && old != nullptr && copied == prefix) {
    const int64_t end = std::min<int64_t>(old->size(), held_tokens_);
    absl::StatusOr<int64_t> shifted = shift_kv_tail(*old, plan.tail_begin, end, rt_.rope, *kv);
    if (shifted.ok()) {
      shifted_ = true;
      absl::StrAppend(&plan.description, absl::StrFormat("; shifted %d cells by %d positions (no recompute)",
                                                         *shifted - prefix, prefix - plan.tail_begin));
    } else {
      // The kept tail is prefilled again instead (as truncate).
      kv->set_size(prefix);
      absl::StrAppend(&plan.description, "; not shifted (", shifted.status().message(), "): prefilled again");
    }
  }
  session->kv = std::move(kv);
  session->tokens.assign(kept.begin(), kept.begin() + kept_held);
  BATON_INFO("session %s: %s", session_id().c_str(), plan.description.c_str());
  all_ = std::move(kept);
  n_ = n;
  held_tokens_ = kept_held;
  truncation_ = std::move(plan);
  return absl::OkStatus();
}

// Codec auto (codec_choice.h): the calibration's quality table, the link
// figures and the positions this turn prefills give the wire codec; a new
// session's store follows it (before fit_context creates the store). The
// calibration comes from --kv-calibration or the cloud (never asked under
// policy local).
absl::Status GenerateTurn::choose_auto_codec() {
  if (!auto_codec_) return absl::OkStatus();
  SessionLease& session = *session_;
  const int64_t held = is_new_ ? (pack_.has_value() ? static_cast<int64_t>(pack_->tokens.size()) : 0)
                               : (session->kv != nullptr ? session->kv->size() : 0);
  const int64_t have = std::min(held, n_ - 1);
  const uint32_t to_prefill = static_cast<uint32_t>(n_ - 1 - have);
  CodecChoiceInputs in;
  // The cloud is asked only when this turn could use it, and it is up.
  bool may_fetch = policy_ != PrefillPolicy::kLocal && rt_.cloud != nullptr && to_prefill > 0;
  if (may_fetch) {
    const CloudLinkStatus link = rt_.cloud->link();
    may_fetch = link.reachable && link.state == v1::SERVING_STATE_READY;
  }
  std::string why;
  std::shared_ptr<const KvCalibration> calibration =
      rt_.transform != nullptr ? rt_.transform->calibration_for_choice(may_fetch, &why) : nullptr;
  if (calibration != nullptr) {
    in.table = calibration->quality;
    if (in.table.empty()) why = "the KV calibration has none (a format 1 file: rerun baton model calibrate)";
  }
  in.no_table_why = why.empty() ? "no KV calibration" : why;
  in.max_loss_pct = rt_.max_kv_loss_pct;
  in.f16_bytes_per_token = 2.0 * static_cast<double>(rt_.model->spec().kv_elements_per_token());
  in.fallback = wire_;  // the agent's default, or the form of a continuing session's store
  in.usable = [this](const KvCodecConfig& wire) { return check_codec_usable(wire); };
  in.split_inputs = [&](const KvCodecConfig& wire) {
    return split_inputs(wire, static_cast<uint32_t>(have), to_prefill, to_prefill);
  };
  const CodecChoice choice = choose_codec(in);
  wire_ = choice.codec;
  auto_wire_bytes_per_token_ = choice.wire_bytes_per_token;
  codec_reason_ = choice.reason;
  if (is_new_) {
    store_ = edge_store_config(wire_, rt_.geometry);
    session->codec = store_;
  }
  return absl::OkStatus();
}

// Whether codec auto may pick `wire` for this turn (codec_choice.h's usable).
absl::Status GenerateTurn::check_codec_usable(const KvCodecConfig& wire) const {
  BATON_RETURN_IF_ERROR(wire.validate(rt_.geometry));
  const KvCodecConfig store = edge_store_config(wire, rt_.geometry);
  if (!is_new_) {
    if (store == store_) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("lands in ", store.to_string(), "; the session holds ", store_.to_string()));
  }
  const int64_t held = static_cast<int64_t>(session_->tokens_before());
  if (absl::Status fits = check_context_fits(context_limit_of(store), held, n_ - held); !fits.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat("the conversation does not fit its store ", store.to_string()));
  }
  return absl::OkStatus();
}

ContextLimit GenerateTurn::context_limit_of(const KvCodecConfig& store) const {
  const CodecCapacityPlan* capacity = rt_.memory.find(store);
  CodecCapacityPlan computed;
  if (capacity == nullptr) {
    computed.codec = store;
    computed.kv_bytes_per_token = static_cast<uint64_t>(QuantizedKvCache::bytes_per_token(store, rt_.geometry));
    capacity = &computed;
  }
  return context_limit(rt_.memory, *capacity, rt_.model->spec().n_ctx_train);
}

// The conversation must fit the trained context and this codec's share of
// the KV budget (whichever is smaller); max_tokens is clamped to the room
// left, with a warning before the first token.
absl::Status GenerateTurn::fit_context() {
  SessionLease& session = *session_;
  const ContextLimit limit = context_limit_of(store_);
  max_context_ = limit.max_tokens();
  BATON_RETURN_IF_ERROR(check_context_fits(limit, held_tokens_, n_ - held_tokens_));
  context_warning_ = context_overflow_warning(limit, n_, max_tokens_);
  const int64_t wanted_capacity = std::min<int64_t>(max_context_, n_ + static_cast<int64_t>(max_tokens_));
  if (session->kv == nullptr) {
    BATON_ASSIGN_OR_RETURN(session->kv, QuantizedKvCache::Create(rt_.geometry, wanted_capacity, store_));
  } else if (session->kv->capacity() < wanted_capacity) {
    BATON_RETURN_IF_ERROR(session->kv->reserve(wanted_capacity));
  }
  kv_ = session->kv.get();
  return absl::OkStatus();
}

absl::Status GenerateTurn::load_pack() {
  SessionLease& session = *session_;
  if (pack_.has_value()) {
    BATON_ASSIGN_OR_RETURN(KvSegmentLoad loaded, rt_.packs->load_into(pack_->pack_id, *kv_));
    (void)loaded;
    session->pack_id = pack_->pack_id;
    session->pack_tokens = static_cast<uint32_t>(pack_->tokens.size());
  }
  if (!session->pack_id.empty()) {
    absl::StatusOr<PackSummary> summary = pack_.has_value() ? absl::StatusOr<PackSummary>(*pack_)
                                                            : rt_.packs->find(session->pack_id);
    pack_tokens_ = summary.ok() ? static_cast<int64_t>(summary->tokens.size()) : kv_->size();
    if (summary.ok() && summary->pulled) cloud_pack_id_ = session->pack_id;
  }
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

void GenerateTurn::prepare_sampling() {
  SessionLease& session = *session_;
  Sampler& sampler = sampler_.emplace(sampling_);
  if (!is_new_) {
    SamplerState state = session->sampler;
    if (request_.sampling().has_seed()) state.rng = sampler.state().rng;  // an explicit seed restarts the stream
    sampler.restore(state);
  }
  const size_t accept_from = is_new_ ? 0 : static_cast<size_t>(held_tokens_);
  for (size_t i = accept_from; i < all_.size(); ++i) sampler.accept(all_[i]);
  decoder_.emplace(*rt_.tokenizer);
  stop_matcher_.emplace(stops_);
}

uint32_t GenerateTurn::early_tokens_to_ask() const {
  if (early_wanted_ == 0) return 0;
  // The reply never grows past max_tokens or the context limit.
  const int64_t room = std::min<int64_t>(max_tokens_, max_context_ - n_);
  return static_cast<uint32_t>(std::clamp<int64_t>(room, 0, early_wanted_));
}

void GenerateTurn::show_early(const v1::EarlyTokens& early) {
  const int n_vocab = rt_.model->spec().n_vocab;
  for (int i = 0; i < early.token_ids_size() && !early_done_ && !early_closed_ && early_emit_status_.ok(); ++i) {
    const uint32_t id = early.token_ids(i);
    if (id >= static_cast<uint32_t>(n_vocab)) {
      // Never shown, nor any after it: the reply goes on here from the ones before.
      early_closed_ = true;
      early_note_ = absl::StrFormat("the cloud sent early token %u, outside the vocabulary of %d tokens: it and any "
                                    "after it were ignored",
                                    id, n_vocab);
      BATON_WARN("session %s: %s", session_id().c_str(), early_note_.c_str());
      break;
    }
    const int32_t token = static_cast<int32_t>(id);
    const Clock::time_point now = Clock::now();
    if (generated_ == 0) {
      first_token_time_ = now;
      cloud_first_token_time_ = now;
    }
    if (rt_.tokenizer->is_eog(token)) {
      sampler_->adopt(token, /*record=*/false);
      finish_ = v1::FINISH_REASON_EOS;
      early_done_ = true;
      break;
    }
    sampler_->adopt(token);
    const v1::TokenLogprob* logprob = i < early.logprobs_size() ? &early.logprobs(i) : nullptr;
    bool finished = false;
    early_emit_status_ = show_token(token, early_shown_, logprob, {}, &finished);
    if (finished) early_done_ = true;
  }
}

absl::Status GenerateTurn::show_token(int32_t token, std::vector<int32_t>& reply, const v1::TokenLogprob* logprob,
                                      std::span<const float> logits, bool* finished) {
  last_token_time_ = Clock::now();
  reply.push_back(token);
  ++generated_;
  bool stopped = false;
  v1::GenerateResponse piece;
  piece.mutable_text()->set_text(stop_matcher_->add(decoder_->push(token), &stopped));
  piece.mutable_text()->add_token_ids(static_cast<uint32_t>(token));
  if (request_.has_logprobs()) {
    if (logprob != nullptr) {
      *piece.mutable_text()->add_logprobs() = *logprob;
    } else if (!logits.empty()) {
      add_logprobs(logits, token, request_.logprobs(), piece.mutable_text());
    }
  }
  *finished = true;
  if (stopped) {
    finish_ = v1::FINISH_REASON_STOP;
  } else if (generated_ >= max_tokens_) {
    finish_ = v1::FINISH_REASON_LENGTH;
  } else if (n_ + static_cast<int64_t>(generated_) >= max_context_) {
    // The conversation never grows past the limit (the last sampled token
    // included: the next turn runs it into the KV).
    finish_ = v1::FINISH_REASON_CONTEXT_FULL;
  } else {
    *finished = false;
  }
  return emit(std::move(piece));
}

absl::Status GenerateTurn::start_decoding() {
  SessionLease& session = *session_;
  BATON_RETURN_IF_ERROR(check_alive());
  BATON_RETURN_IF_ERROR(progress(v1::PHASE_DECODING));
  if (early_shown_.empty()) {
    BATON_RETURN_IF_ERROR(rt_.engine->decode_step(all_[n_ - 1], *kv_, &logits_));
  } else {
    // The early tokens shown enter the edge's own KV with the last prompt
    // token, in one batch; the last one's logits continue the reply.
    std::vector<int32_t> run(1, all_[n_ - 1]);
    run.insert(run.end(), early_shown_.begin(), early_shown_.end());
    BATON_RETURN_IF_ERROR(rt_.engine->prefill(run, *kv_, &logits_));
  }
  decode_ready_time_ = Clock::now();
  session->tokens = all_;
  session->tokens.insert(session->tokens.end(), early_shown_.begin(), early_shown_.end());
  record_turn();
  return absl::OkStatus();
}

void GenerateTurn::record_turn() {
  SessionLease& session = *session_;
  if (truncation_.has_value()) {
    session->turns = truncation_->kept_turns;
    session->dropped_turns += truncation_->dropped_turns;
    session->dropped_tokens += static_cast<uint64_t>(truncation_->dropped_tokens);
    ++session->truncations;
  }
  // A new session's turn starts after its pack; a later one after what the
  // session held. A prompt that is all pack starts no turn (the answer's
  // tokens then belong to none).
  const int64_t first = is_new_ ? (pack_.has_value() ? static_cast<int64_t>(pack_->tokens.size()) : 0) : held_tokens_;
  ++session->turn_count;
  if (first < n_) session->turns.push_back({session->turn_count, static_cast<uint32_t>(first)});
}

absl::Status GenerateTurn::decode() {
  SessionLease& session = *session_;
  Sampler& sampler = *sampler_;
  // CANCELLED once the client left after its first token: the answer so far
  // is kept (keep_on_cancel).
  absl::Status interrupted;
  auto keep_on_cancel = [&](absl::Status status) {
    if (!absl::IsCancelled(status) || generated_ == 0) return status;
    interrupted = std::move(status);
    return absl::OkStatus();
  };
  if (!early_done_ && static_cast<int64_t>(session->tokens.size()) >= max_context_) {
    finish_ = v1::FINISH_REASON_CONTEXT_FULL;  // no room for a single token
    if (generated_ == 0) first_token_time_ = Clock::now();
  }
  // The reply may have ended among the early tokens.
  bool finished = early_done_ || finish_ == v1::FINISH_REASON_CONTEXT_FULL;
  while (!finished) {
    BATON_RETURN_IF_ERROR(keep_on_cancel(check_alive()));
    if (!interrupted.ok()) break;
    const int32_t token = sampler.sample(logits_);
    const Clock::time_point now = Clock::now();
    if (generated_ == 0) first_token_time_ = now;
    if (local_generated_ == 0) local_first_token_time_ = now;
    if (rt_.tokenizer->is_eog(token)) {
      finish_ = v1::FINISH_REASON_EOS;
      break;
    }
    sampler.accept(token, /*generated=*/true);
    ++local_generated_;
    BATON_RETURN_IF_ERROR(keep_on_cancel(show_token(token, session->tokens, nullptr, logits_, &finished)));
    if (!interrupted.ok() || finished) break;
    BATON_RETURN_IF_ERROR(rt_.engine->decode_step(token, *kv_, &logits_));
  }
  if (!interrupted.ok()) return keep_interrupted_turn(session, sampler, generated_, interrupted);
  if (finish_ != v1::FINISH_REASON_STOP) BATON_RETURN_IF_ERROR(flush_text());
  return absl::OkStatus();
}

absl::Status GenerateTurn::flush_text() {
  bool stopped = false;
  std::string rest = stop_matcher_->add(decoder_->flush(), &stopped);
  if (stopped) {
    finish_ = v1::FINISH_REASON_STOP;
  } else {
    rest += stop_matcher_->flush();
  }
  if (!rest.empty()) {
    v1::GenerateResponse piece;
    piece.mutable_text()->set_text(rest);
    BATON_RETURN_IF_ERROR(emit(std::move(piece)));
  }
  return absl::OkStatus();
}

absl::Status GenerateTurn::commit_and_report() {
  SessionLease& session = *session_;
  const Clock::time_point end = Clock::now();
  session->last_used_unix_ms = unix_ms_now();
  session->sampler = sampler_->state();
  // What the session's KV holds, as ListSessions counts it (the last sampled
  // token enters the KV at the next turn).
  const uint32_t context_tokens = static_cast<uint32_t>(kv_->size());
  if (absl::Status saved = session.commit(); !saved.ok()) {
    stats_.set_save_error(absl::StrCat("the turn is held in memory only (a restart would lose it): ",
                                       absl::StatusCodeToString(saved.code()), ": ", saved.message()));
  }

  const double ttft_ms = ms_between(io_.arrival, first_token_time_);
  stats_.set_ttft_ms(ttft_ms);
  // With early tokens the four parts add up to the first token sampled here
  // (or, when the reply ended among them, to the KV's holding them).
  const bool early = !early_shown_.empty();
  const bool local_token = local_first_token_time_ != Clock::time_point{};
  double parts_ms = ttft_ms;
  if (early) {
    stats_.set_early_tokens(static_cast<uint32_t>(early_shown_.size()));
    stats_.set_cloud_first_token_ms(ms_between(io_.arrival, cloud_first_token_time_));
    parts_ms = ms_between(io_.arrival, local_token ? local_first_token_time_ : decode_ready_time_);
  }
  if (local_token) stats_.set_local_first_token_ms(ms_between(io_.arrival, local_first_token_time_));
  if (!early_note_.empty()) stats_.set_early_tokens_note(early_note_);
  stats_.set_local_ms(std::max(0.0, parts_ms - stats_.cloud_prefill_ms() - stats_.transfer_ms() - stats_.ingest_ms()));
  // Decode speed: the tokens sampled here (the early ones came over the link).
  if (local_generated_ > 1) {
    const double decode_s = ms_between(local_first_token_time_, last_token_time_) / 1000.0;
    if (decode_s > 0) {
      stats_.set_decode_tokens_per_s(static_cast<double>(local_generated_ - 1) / decode_s);
      rt_.decode_tokens_per_s->add(stats_.decode_tokens_per_s());
    }
  }
  stats_.set_prompt_tokens(prompt_token_count_);
  if (truncation_.has_value()) {
    stats_.set_context_overflow(truncation_->description);
    stats_.set_dropped_turns(truncation_->dropped_turns);
    stats_.set_dropped_tokens(static_cast<uint32_t>(truncation_->dropped_tokens));
  }
  stats_.set_generated_tokens(generated_);
  stats_.set_context_tokens(context_tokens);
  to_proto(plan_, stats_.mutable_plan());
  if (!stats_.fallback_reason().empty()) {
    v1::Plan* plan = stats_.mutable_plan();
    plan->set_place(v1::PREFILL_PLACE_LOCAL);
    plan->set_reason(absl::StrCat(plan_.reason, "; fell back to local prefill"));
    plan->set_split_position(static_cast<uint32_t>(n_ - 1));
    plan->set_local_tokens(to_prefill_);
    plan->set_cloud_tokens(0);
  }
  if (plan_.place == v1::PREFILL_PLACE_OVERLAP) stats_.set_overlap_local_prefill_ms(overlap_local_prefill_ms_);
  stats_.set_finish_reason(finish_);
  stats_.set_total_ms(ms_between(io_.arrival, end));
  stats_.set_session_id(session_id());
  v1::GenerateResponse last;
  *last.mutable_stats() = std::move(stats_);
  return emit(std::move(last));
}

}  // namespace

absl::StatusOr<KvCodecConfig> resolve_wire_codec(const v1::CodecParams& params, const KvCodecConfig& fallback,
                                                 const KvGeometry& geometry) {
  // Auto is resolved per turn (codec_choice.h); until then, the fallback.
  if (params.codec() == v1::KV_CODEC_UNSPECIFIED || params.codec() == v1::KV_CODEC_AUTO) return fallback;
  if (!v1::KvCodec_IsValid(params.codec())) {
    return absl::InvalidArgumentError(absl::StrFormat("codec.codec = %d is not a known codec", params.codec()));
  }
  if (params.codec() == v1::KV_CODEC_TC) return kv_transform_request_config(params, geometry);
  KvCodecConfig config = default_kv_codec_config(bits_of(params.codec()), geometry);
  if (params.group_size() > 0) config.group_size = static_cast<int>(params.group_size());
  if (params.key_axis() == v1::KEY_AXIS_PER_TOKEN) config.key_axis = KvCodecConfig::KeyAxis::kPerToken;
  if (params.key_axis() == v1::KEY_AXIS_PER_CHANNEL) config.key_axis = KvCodecConfig::KeyAxis::kPerChannel;
  if (params.pre_rope_keys()) config.pre_rope_keys = true;
  if (params.hadamard_keys()) config.hadamard_keys = true;
  if (params.hadamard_values()) config.hadamard_values = true;
  if (params.has_zstd_level()) config.zstd_level = params.zstd_level();
  if (params.key_codec() != v1::KV_CODEC_UNSPECIFIED) {
    const KvCodecConfig::Bits key_bits = bits_of(params.key_codec());
    config.key_bits = key_bits == config.bits ? std::nullopt : std::optional<KvCodecConfig::Bits>(key_bits);
  }
  if (params.key_group_size() > 0) config.key_group_size = static_cast<int>(params.key_group_size());
  if (config.bits == KvCodecConfig::Bits::kF16) config.key_axis = KvCodecConfig::KeyAxis::kPerToken;
  absl::Status valid = config.validate(geometry);
  if (!valid.ok()) return absl::InvalidArgumentError(absl::StrCat("codec: ", valid.message()));
  return config;
}

absl::Status run_generate_turn(const EdgeRuntime& runtime, const v1::GenerateRequest& request, const TurnIo& io) {
  GenerateTurn turn(runtime, request, io);
  return turn.run();
}

}  // namespace baton
