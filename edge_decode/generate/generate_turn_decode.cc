// The sampler, early tokens, decoding and the commit of a Generate turn
// (generate_turn_steps.h).

#include "edge_decode/generate/generate_turn_steps.h"

namespace baton::turn_internal {

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
      // GenerateRequest.logprobs: from the raw logits, before penalties and temperature.
      fill_token_logprob(logits, token, request_.logprobs(), piece.mutable_text()->add_logprobs());
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
  session->tokens = all_;
  session->tokens.insert(session->tokens.end(), early_shown_.begin(), early_shown_.end());
  // The last prompt token, with the early tokens shown (they enter the
  // edge's own KV in one batch; the last one's logits continue the reply).
  std::vector<int32_t> run(1, all_[n_ - 1]);
  run.insert(run.end(), early_shown_.begin(), early_shown_.end());
  BATON_RETURN_IF_ERROR(start_steps(run));
  decode_ready_time_ = Clock::now();
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
    const std::span<const float> logits = stepper_->logits();
    const int32_t token = sampler.sample(logits);
    const Clock::time_point now = Clock::now();
    if (generated_ == 0) first_token_time_ = now;
    if (local_generated_ == 0) local_first_token_time_ = now;
    if (rt_.tokenizer->is_eog(token)) {
      finish_ = v1::FINISH_REASON_EOS;
      break;
    }
    sampler.accept(token, /*generated=*/true);
    ++local_generated_;
    BATON_RETURN_IF_ERROR(keep_on_cancel(show_token(token, session->tokens, nullptr, logits, &finished)));
    if (!interrupted.ok() || finished) break;
    BATON_RETURN_IF_ERROR(advance_steps(token));
  }
  finish_steps();
  if (!interrupted.ok()) return keep_interrupted_turn(session, sampler, generated_, interrupted);
  if (finish_ != v1::FINISH_REASON_STOP) BATON_RETURN_IF_ERROR(flush_text());
  return absl::OkStatus();
}

// Every engine pass of the reply goes through the batcher as this seated
// turn: plain steps and speculative drafts (--speculative) alike share the
// decode steps of the other decoding turns.
absl::Status GenerateTurn::start_steps(std::span<const int32_t> run) {
  seat_ = rt_.batcher->seat();  // held until finish_steps
  runner_.emplace(seat_);
  stepper_.emplace(*runner_, *rt_.engine, *kv_, static_cast<int>(speculative_));
  if (rt_.draft_model != nullptr && speculative_ > 0) {
    // The draft model's KV covers what it can draft for: this turn's
    // context, within the draft model's own trained context (past it, the
    // target decodes plainly). Its engine runs on this turn's thread,
    // between the batched passes.
    const int64_t trained = rt_.draft_model->spec().n_ctx_train;
    int64_t capacity = max_context_ + static_cast<int64_t>(speculative_);
    if (trained > 0) capacity = std::min(capacity, trained);
    if (!draft_engine_.has_value()) {
      EngineOptions options;
      options.n_threads = rt_.draft_threads;
      draft_engine_.emplace(*rt_.draft_model, options);
    }
    drafter_.emplace(*draft_engine_, capacity);
    stepper_->set_drafter(&*drafter_);
  }
  const int64_t left = static_cast<int64_t>(max_tokens_) - static_cast<int64_t>(generated_);
  return stepper_->start(run, (**session_).tokens, left);
}

absl::Status GenerateTurn::advance_steps(int32_t token) {
  // Runs the token (with a draft after it), or moves on to the draft row
  // that guessed it.
  const int64_t left = static_cast<int64_t>(max_tokens_) - static_cast<int64_t>(generated_);
  return stepper_->advance(token, (**session_).tokens, left);
}

void GenerateTurn::finish_steps() {
  // The KV holds every kept token but the last sampled one, as after plain
  // decode steps: draft rows past it go.
  if (stepper_.has_value()) stepper_->finish();
  seat_.leave();  // the other turns' steps no longer wait for this one
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
  if (stepper_.has_value()) {
    stats_.set_speculative_drafted(static_cast<uint32_t>(stepper_->stats().drafted_tokens));
    stats_.set_speculative_accepted(static_cast<uint32_t>(stepper_->stats().accepted_tokens));
  }
  if (runner_.has_value() && runner_->batch_steps > 0) {
    stats_.set_decode_batch_max(runner_->batch_max);
    stats_.set_decode_batch_mean(static_cast<double>(runner_->batch_sum) /
                                 static_cast<double>(runner_->batch_steps));
  }
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

}  // namespace baton::turn_internal
