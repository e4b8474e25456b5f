// Token sampling: greedy, temperature, top-k, top-p, min-p and repetition
// penalty, seeded and reproducible across platforms (own PRNG, no
// std::uniform_real_distribution whose output differs between libraries).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <span>
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
};

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
  // Records a token (prompt or generated) for the repetition penalty.
  void accept(int32_t token);
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
  std::vector<std::pair<float, int32_t>> candidates_;  // scratch (logit or prob, token)
};

}  // namespace baton
