// Token sampling: greedy, temperature, top-k, top-p, min-p, repetition
// penalty and OpenAI's frequency/presence penalties, seeded and reproducible across platforms (own PRNG, no
// std::uniform_real_distribution whose output differs between libraries).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace baton {

struct SamplingParams {
  float temperature = 0.0f;     // <= 0: greedy (argmax)
  int top_k = 40;               // <= 0: off
  float top_p = 1.0f;           // 1: off
  float min_p = 0.0f;           // 0: off; keeps p >= min_p * p_max
  float repeat_penalty = 1.0f;  // 1: off; llama.cpp rule on the last repeat_last_n tokens
  int repeat_last_n = 64;
  uint64_t seed = 0;
  // OpenAI's rule over the tokens generated since this Sampler was made
  // (accept(token, /*generated=*/true)), prompt excluded as in OpenAI and
  // vLLM (llama.cpp counts its last repeat_last_n tokens, prompt included):
  // logit[t] -= count[t] * frequency_penalty + (count[t] > 0) * presence_penalty,
  // after the repetition penalty. 0: off. (After seed: callers list the
  // fields above in order.)
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
};

// The model's log-probability of `token` and its `top_n` most likely
// alternatives (most likely first, lower id first on ties), from the log-softmax
// of raw logits [n_vocab]: what OpenAI's logprobs report.
struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0.0f;                      // natural log, <= 0
  std::vector<std::pair<int32_t, float>> top;  // (token, logprob), top_n entries at most
};
inline constexpr int kMaxTopLogprobs = 20;  // alternatives per token, as OpenAI allows
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int top_n);

// xoshiro256** seeded with splitmix64: the same stream on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next();
  double uniform();  // [0, 1), 53 bits
  std::array<uint64_t, 4> state() const { return {s_[0], s_[1], s_[2], s_[3]}; }
  void set_state(const std::array<uint64_t, 4>& state) {
    for (int i = 0; i < 4; ++i) s_[i] = state[i];
  }

 private:
  uint64_t s_[4];
};

// Everything a Sampler carries between tokens besides its parameters: the
// PRNG position and the repetition window. Saved with a session so a seeded
// conversation continues its random stream after a restart.
struct SamplerState {
  std::array<uint64_t, 4> rng{};
  std::vector<int32_t> recent;  // last repeat_last_n accepted tokens, oldest first
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Picks the next token from logits [n_vocab]. Does not record it.
  int32_t sample(std::span<const float> logits);
  // Records a token (prompt or generated) for the repetition penalty;
  // `generated` ones also count for the frequency and presence penalties.
  void accept(int32_t token, bool generated = false);
  // Takes `token` as if sample() had just returned it (its PRNG draw, when
  // not greedy, is consumed) and, with `record`, accepts it as generated: a
  // token sampled elsewhere from the same state (the cloud's early tokens,
  // sampling_proto.h) leaves this sampler where sampling it here would have.
  // (An end-of-generation token is not recorded, as a decode loop does not.)
  void adopt(int32_t token, bool record = true);
  const SamplingParams& params() const { return params_; }
  SamplerState state() const { return SamplerState{rng_.state(), {recent_.begin(), recent_.end()}}; }
  void restore(const SamplerState& state) {
    rng_.set_state(state.rng);
    recent_.assign(state.recent.begin(), state.recent.end());
  }

 private:
  SamplingParams params_;
  Rng rng_;
  std::deque<int32_t> recent_;  // last repeat_last_n tokens
  // token -> times generated; kept only when a frequency or presence penalty is set.
  std::unordered_map<int32_t, int> generated_counts_;
  std::vector<std::pair<float, int32_t>> candidates_;  // scratch (logit or prob, token)
};

}  // namespace baton
