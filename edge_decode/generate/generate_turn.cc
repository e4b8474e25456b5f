#include "edge_decode/generate/generate_turn.h"

#include "edge_decode/generate/generate_turn_steps.h"

namespace baton::turn_internal {

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
  speculative_ = request_.has_speculative() ? request_.speculative() : rt_.speculative;
  if (speculative_ > kMaxSpeculativeTokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("speculative = %u; at most %u", speculative_, kMaxSpeculativeTokens));
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
  // This turn's KV reservation among the turns running at once: it waits
  // for room when theirs and its own pass the KV budget.
  const int64_t reserved_tokens = std::max<int64_t>(wanted_capacity, session->kv ? session->kv->capacity() : 0);
  BATON_ASSIGN_OR_RETURN(
      kv_ticket_, rt_.kv_admission->admit(static_cast<uint64_t>(QuantizedKvCache::memory_bytes_for(
                                              store_, rt_.geometry, reserved_tokens)),
                                          [this] { return check_alive(); }));
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

}  // namespace baton::turn_internal

namespace baton {
namespace {

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
  turn_internal::GenerateTurn turn(runtime, request, io);
  return turn.run();
}

}  // namespace baton
