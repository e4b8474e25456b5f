// The sampler on the wire: GenerateRequest.sampling -> SamplingParams, and
// the early-token request (PrefillRequest.early_tokens), which carries the
// edge's sampler to the cloud so the cloud samples the reply's first tokens
// as the edge would from the same logits, and the edge then continues the
// same PRNG stream (Sampler::adopt).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "absl/status/statusor.h"
#include "common/engine/sampler.h"
#include "proto/baton.pb.h"

namespace baton {

// `out` = the model's log-probability of `token` and its `top_n` most likely
// alternatives from raw logits (token_logprobs), as TextPiece and
// EarlyTokens carry them.
void fill_token_logprob(std::span<const float> logits, int32_t token, uint32_t top_n, v1::TokenLogprob* out);

// Most tokens one request may have the cloud sample ahead of its KV.
inline constexpr uint32_t kMaxEarlyTokens = 64;

// Request sampling values -> sampler parameters (proto zero values mean "off"
// or the agent default; see baton.proto SamplingParams). An unset seed draws
// a random one. INVALID_ARGUMENT names the bad field and its range.
absl::StatusOr<SamplingParams> sampling_params_from_proto(const v1::SamplingParams& params,
                                                          float default_temperature);

// The early-token request of a turn whose sampler is `sampler` (the prompt
// accepted, nothing sampled yet): sample `count` tokens after `last_token`.
v1::EarlyTokensRequest early_tokens_request(const Sampler& sampler, uint32_t count, int32_t last_token,
                                            std::optional<uint32_t> logprobs);

// What the cloud samples with: a validated early-token request.
struct EarlySampling {
  uint32_t count = 0;
  int32_t last_token = 0;
  SamplingParams params;
  SamplerState state;
  std::optional<uint32_t> logprobs;  // alternatives per token
};

// Checks every field against its bound before anything is allocated from it
// (count 1..kMaxEarlyTokens, token ids < n_vocab, exactly 4 PRNG words, the
// window no longer than repetition_last_n); INVALID_ARGUMENT names the field.
absl::StatusOr<EarlySampling> early_sampling_from_proto(const v1::EarlyTokensRequest& request, int n_vocab);

}  // namespace baton
