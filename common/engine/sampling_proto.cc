#include "common/engine/sampling_proto.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace baton {

absl::StatusOr<SamplingParams> sampling_params_from_proto(const v1::SamplingParams& params,
                                                          float default_temperature) {
  SamplingParams out;
  out.temperature = params.has_temperature() ? params.temperature() : default_temperature;
  if (!std::isfinite(out.temperature) || out.temperature < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling.temperature = %g; must be >= 0 (0 = greedy)", out.temperature));
  }
  if (params.top_k() > 1'000'000) {
    return absl::InvalidArgumentError(absl::StrFormat("sampling.top_k = %d; at most 1000000", params.top_k()));
  }
  out.top_k = static_cast<int>(params.top_k());  // 0: off
  if (!(params.top_p() >= 0 && params.top_p() <= 1)) {
    return absl::InvalidArgumentError(absl::StrFormat("sampling.top_p = %g; must be in [0, 1]", params.top_p()));
  }
  out.top_p = params.top_p() == 0 ? 1.0f : params.top_p();
  if (!(params.min_p() >= 0 && params.min_p() <= 1)) {
    return absl::InvalidArgumentError(absl::StrFormat("sampling.min_p = %g; must be in [0, 1]", params.min_p()));
  }
  out.min_p = params.min_p();
  if (!(params.repetition_penalty() >= 0) || !std::isfinite(params.repetition_penalty())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling.repetition_penalty = %g; must be >= 0 (0 or 1 = off)", params.repetition_penalty()));
  }
  out.repeat_penalty = params.repetition_penalty() == 0 ? 1.0f : params.repetition_penalty();
  if (params.repetition_last_n() > 65536) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling.repetition_last_n = %d; at most 65536", params.repetition_last_n()));
  }
  out.repeat_last_n = params.repetition_last_n() == 0 ? 64 : static_cast<int>(params.repetition_last_n());
  for (const auto& [name, value] : {std::pair{"frequency_penalty", params.frequency_penalty()},
                                    std::pair{"presence_penalty", params.presence_penalty()}}) {
    if (!(value >= -2.0f && value <= 2.0f)) {
      return absl::InvalidArgumentError(absl::StrFormat("sampling.%s = %g; must be in [-2, 2]", name, value));
    }
  }
  out.frequency_penalty = params.frequency_penalty();
  out.presence_penalty = params.presence_penalty();
  if (params.has_seed()) {
    out.seed = params.seed();
  } else {
    std::random_device device;
    out.seed = (uint64_t{device()} << 32) ^ device();
  }
  return out;
}

void fill_token_logprob(std::span<const float> logits, int32_t token, uint32_t top_n, v1::TokenLogprob* out) {
  const TokenLogprobs computed = token_logprobs(logits, token, static_cast<int>(top_n));
  out->set_token_id(static_cast<uint32_t>(token));
  out->set_logprob(computed.logprob);
  for (const auto& [id, logprob] : computed.top) {
    v1::TopLogprob* top = out->add_top();
    top->set_token_id(static_cast<uint32_t>(id));
    top->set_logprob(logprob);
  }
}

v1::EarlyTokensRequest early_tokens_request(const Sampler& sampler, uint32_t count, int32_t last_token,
                                            std::optional<uint32_t> logprobs) {
  const SamplingParams& p = sampler.params();
  v1::EarlyTokensRequest out;
  out.set_count(count);
  out.set_last_token(static_cast<uint32_t>(last_token));
  v1::SamplingParams* s = out.mutable_sampling();
  s->set_temperature(p.temperature);
  s->set_top_k(static_cast<uint32_t>(std::max(0, p.top_k)));
  s->set_top_p(p.top_p);
  s->set_min_p(p.min_p);
  s->set_repetition_penalty(p.repeat_penalty);
  s->set_repetition_last_n(static_cast<uint32_t>(std::max(0, p.repeat_last_n)));
  s->set_frequency_penalty(p.frequency_penalty);
  s->set_presence_penalty(p.presence_penalty);
  const SamplerState state = sampler.state();
  for (const uint64_t word : state.rng) out.add_rng_state(word);
  for (const int32_t token : state.recent) out.add_recent_tokens(static_cast<uint32_t>(token));
  if (logprobs.has_value()) out.set_logprobs(*logprobs);
  return out;
}

absl::StatusOr<EarlySampling> early_sampling_from_proto(const v1::EarlyTokensRequest& request, int n_vocab) {
  if (request.count() == 0 || request.count() > kMaxEarlyTokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("early_tokens.count = %u; must be in [1, %u]", request.count(), kMaxEarlyTokens));
  }
  if (request.last_token() >= static_cast<uint32_t>(n_vocab)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "early_tokens.last_token = %u is outside the vocabulary of %d tokens", request.last_token(), n_vocab));
  }
  if (request.rng_state_size() != 4) {
    return absl::InvalidArgumentError(
        absl::StrFormat("early_tokens.rng_state has %d words; the sampler's state is 4", request.rng_state_size()));
  }
  if (!request.sampling().has_temperature()) {
    return absl::InvalidArgumentError("early_tokens.sampling.temperature is unset (the edge sends its resolved value)");
  }
  EarlySampling out;
  // The seed is never drawn: the PRNG state below replaces it.
  v1::SamplingParams settings = request.sampling();
  settings.set_seed(0);
  absl::StatusOr<SamplingParams> params = sampling_params_from_proto(settings, 0.0f);
  if (!params.ok()) return absl::InvalidArgumentError(absl::StrCat("early_tokens.", params.status().message()));
  out.params = *params;
  if (request.recent_tokens_size() > out.params.repeat_last_n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "early_tokens.recent_tokens has %d tokens; the window (repetition_last_n) is %d", request.recent_tokens_size(),
        out.params.repeat_last_n));
  }
  out.state.recent.reserve(static_cast<size_t>(request.recent_tokens_size()));
  for (int i = 0; i < request.recent_tokens_size(); ++i) {
    const uint32_t id = request.recent_tokens(i);
    if (id >= static_cast<uint32_t>(n_vocab)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "early_tokens.recent_tokens[%d] = %u is outside the vocabulary of %d tokens", i, id, n_vocab));
    }
    out.state.recent.push_back(static_cast<int32_t>(id));
  }
  for (int i = 0; i < 4; ++i) out.state.rng[static_cast<size_t>(i)] = request.rng_state(i);
  if (request.has_logprobs()) {
    if (request.logprobs() > static_cast<uint32_t>(kMaxTopLogprobs)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("early_tokens.logprobs = %u; at most %d", request.logprobs(), kMaxTopLogprobs));
    }
    out.logprobs = request.logprobs();
  }
  out.count = request.count();
  out.last_token = static_cast<int32_t>(request.last_token());
  return out;
}

}  // namespace baton
