// Internal to edge_decode/generate/generate_turn*.cc: GenerateTurn, one
// Generate turn as the list of its steps (generate_turn.h says what a turn
// does). Its methods live in three files by phase:
//   generate_turn.cc          validate, the session, the conversation's
//                             tokens, context overflow, codec auto, context;
//   generate_turn_prefill.cc  the plan and the prefill: local, cloud,
//                             overlapped;
//   generate_turn_decode.cc   the sampler, early tokens from the cloud,
//                             decoding, commit and the Stats.
#pragma once

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
#include "common/engine/draft_model.h"
#include "common/engine/speculative.h"
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
#include "edge_decode/generate/decode_batcher.h"
#include "edge_decode/plan/codec_choice.h"
#include "edge_decode/store/session_lease.h"
#include "edge_decode/generate/generate_turn.h"
#include "edge_decode/generate/stop_matcher.h"


namespace baton::turn_internal {

using Clock = std::chrono::steady_clock;

// A turn's engine passes through the batcher as its seat: a plain decode
// step and a speculative draft alike join the other decoding turns' steps
// (one decode_rows call for all), and how many turns shared them.
class SeatRunner final : public DecodeRunner {
 public:
  explicit SeatRunner(DecodeBatcher::Seat& seat) : seat_(seat) {}
  absl::Status decode(std::span<const int32_t> tokens, KvCache& kv, std::vector<float>* logits) override {
    DecodeStepInfo info;
    BATON_RETURN_IF_ERROR(seat_.decode(tokens, kv, logits, {}, &info));
    batch_max = std::max(batch_max, static_cast<uint32_t>(info.requests));
    batch_sum += static_cast<uint64_t>(info.requests);
    ++batch_steps;
    return absl::OkStatus();
  }
  absl::Status prefill(std::span<const int32_t> tokens, KvCache& kv, std::vector<float>* last_logits) override {
    return seat_.prefill(tokens, kv, last_logits);
  }
  uint32_t batch_max = 0;  // turns that shared a step: most, and their sum over the steps
  uint64_t batch_sum = 0;
  uint64_t batch_steps = 0;

 private:
  DecodeBatcher::Seat& seat_;
};

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
  // The reply's engine passes (generate_turn_decode.cc): start_steps takes
  // the seat and runs the last prompt token (and the early tokens shown);
  // the stepper then hands out the next token's logits and runs each
  // sampled token (with a draft: --speculative); finish_steps rolls back
  // draft rows and leaves the seat.
  absl::Status start_steps(std::span<const int32_t> run);
  absl::Status advance_steps(int32_t token);
  void finish_steps();
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
    // The other running turns: their checked-out sessions, or (new sessions
    // and one-shot turns included) their KV reservations.
    uint64_t others = rt_.sessions->busy_memory_bytes_except(session_id);
    if (rt_.kv_admission != nullptr) {
      others = std::max(others, rt_.kv_admission->held_bytes() - (kv_ticket_ ? kv_ticket_->bytes() : 0));
    }
    const uint64_t held = static_cast<uint64_t>(kv.memory_bytes()) + others;
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
  // The store's bytes at the capacity this turn needs, reserved among the
  // running turns (kv_admission.h) until the turn ends.
  std::optional<KvAdmission::Ticket> kv_ticket_;
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
  // Decoding: the most draft tokens per step (0: plain decode steps); this
  // turn's seat among the decoding turns (held from the last prompt token to
  // the end of the reply), the passes through it (and how many turns shared
  // them: Stats.decode_batch_max / mean), and the stepper that runs the KV
  // and hands out each next token's logits.
  uint32_t speculative_ = 0;
  DecodeBatcher::Seat seat_;
  std::optional<SeatRunner> runner_;
  std::optional<DecodeStepper> stepper_;
  // With --draft: the draft model's engine (this turn's own: an Engine is
  // one caller at a time, and turns decode at once) and the drafter on it.
  std::optional<Engine> draft_engine_;
  std::optional<ModelDrafter> drafter_;
  v1::FinishReason finish_ = v1::FINISH_REASON_LENGTH;
  uint32_t generated_ = 0;
  Clock::time_point first_token_time_{};
  Clock::time_point last_token_time_{};
};

}  // namespace baton::turn_internal
