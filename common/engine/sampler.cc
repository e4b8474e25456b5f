#include "common/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <unordered_set>

#include "common/util/check.h"

namespace baton {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// The loop `best = 0; for i: if (x[i] > x[best]) best = i` (the lowest id of
// the largest value; a NaN never wins, a NaN first stays), without its
// serial dependence: the largest value of each 256-entry chunk in 16
// running maxima (vectorized), then the first entry equal to the largest in
// the first chunk that holds it. ~10x faster over a 128K vocabulary.
int32_t first_argmax(std::span<const float> x) {
  const int64_t n = static_cast<int64_t>(x.size());
  if (std::isnan(x[0])) return 0;
  constexpr int64_t kChunk = 256, kLanes = 16;
  float best = -INFINITY;
  int64_t best_chunk = 0;
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t end = std::min(n, c + kChunk);
    float lane[kLanes];
    for (int64_t k = 0; k < kLanes; ++k) lane[k] = -INFINITY;
    int64_t i = c;
    for (; i + kLanes <= end; i += kLanes) {
      for (int64_t k = 0; k < kLanes; ++k) lane[k] = x[i + k] > lane[k] ? x[i + k] : lane[k];
    }
    for (; i < end; ++i) lane[0] = x[i] > lane[0] ? x[i] : lane[0];
    float chunk_max = lane[0];
    for (int64_t k = 1; k < kLanes; ++k) chunk_max = lane[k] > chunk_max ? lane[k] : chunk_max;
    if (chunk_max > best) best = chunk_max, best_chunk = c;
  }
  for (int64_t i = best_chunk; i < n; ++i) {
    if (x[i] == best) return static_cast<int32_t>(i);
  }
  return 0;  // not reached: x[0] is not NaN, so some entry equals best
}

}  // namespace

Rng::Rng(uint64_t seed) {
  for (uint64_t& word : s_) word = splitmix64(seed);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

void Sampler::accept(int32_t token, bool generated) {
  if (generated && (params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f)) {
    ++generated_counts_[token];
  }
  if (params_.repeat_last_n <= 0) return;
  recent_.push_back(token);
  while (static_cast<int>(recent_.size()) > params_.repeat_last_n) recent_.pop_front();
}

void Sampler::adopt(int32_t token, bool record) {
  // sample() draws exactly one uniform when it does not take the argmax.
  if (params_.temperature > 0.0f) (void)rng_.uniform();
  if (record) accept(token, /*generated=*/true);
}

int32_t Sampler::sample(std::span<const float> logits) {
  BATON_CHECK(!logits.empty());
  const int32_t n_vocab = static_cast<int32_t>(logits.size());
  // Greedy with nothing to adjust: the argmax of the logits as they are, the
  // same token as below without copying the vocabulary first (it runs
  // between a batched edge's decode steps, which wait for it).
  const bool no_repeat_penalty = params_.repeat_penalty == 1.0f || recent_.empty();
  if (params_.temperature <= 0.0f && no_repeat_penalty && generated_counts_.empty()) return first_argmax(logits);
  candidates_.resize(n_vocab);
  for (int32_t i = 0; i < n_vocab; ++i) candidates_[i] = {logits[i], i};

  // Repetition penalty (llama.cpp / CTRL rule): divide positive logits,
  // multiply negative ones, once per distinct recent token.
  if (params_.repeat_penalty != 1.0f && !recent_.empty()) {
    std::unordered_set<int32_t> seen(recent_.begin(), recent_.end());
    for (int32_t token : seen) {
      if (token < 0 || token >= n_vocab) continue;
      float& logit = candidates_[token].first;
      logit = logit > 0 ? logit / params_.repeat_penalty : logit * params_.repeat_penalty;
    }
  }

  for (const auto& [token, count] : generated_counts_) {
    if (token < 0 || token >= n_vocab) continue;
    candidates_[token].first -= static_cast<float>(count) * params_.frequency_penalty + params_.presence_penalty;
  }

  // Greedy: the highest logit, lowest id on ties.
  if (params_.temperature <= 0.0f) {
    int32_t best = 0;
    for (int32_t i = 1; i < n_vocab; ++i) {
      if (candidates_[i].first > candidates_[best].first) best = i;
    }
    return best;
  }

  // Sort descending by logit (stable on id for reproducibility), cut to top-k.
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  size_t keep = candidates_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) {
    keep = params_.top_k;
    std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), by_logit);
    candidates_.resize(keep);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }

  // Softmax at temperature.
  const float max_logit = candidates_[0].first;
  double total = 0.0;
  for (auto& c : candidates_) {
    c.first = std::exp((c.first - max_logit) / params_.temperature);
    total += c.first;
  }
  for (auto& c : candidates_) c.first = static_cast<float>(c.first / total);

  // min-p: drop tokens below min_p * p_max.
  if (params_.min_p > 0.0f) {
    const float floor = params_.min_p * candidates_[0].first;
    size_t n = 1;
    while (n < candidates_.size() && candidates_[n].first >= floor) ++n;
    candidates_.resize(n);
  }
  // top-p: the smallest prefix whose mass reaches top_p.
  if (params_.top_p < 1.0f) {
    double mass = 0.0;
    size_t n = 0;
    while (n < candidates_.size()) {
      mass += candidates_[n].first;
      ++n;
      if (mass >= params_.top_p) break;
    }
    candidates_.resize(n);
  }

  double kept = 0.0;
  for (const auto& c : candidates_) kept += c.first;
  double target = rng_.uniform() * kept;
  for (const auto& c : candidates_) {
    target -= c.first;
    if (target < 0.0) return c.second;
  }
  return candidates_.back().second;
}

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int top_n) {
  BATON_CHECK(!logits.empty());
  BATON_CHECK(token >= 0 && static_cast<size_t>(token) < logits.size(), "the token is outside the vocabulary");
  // log p[i] = logit[i] - (max + log sum exp(logit - max)), in double.
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double total = 0.0;
  for (const float logit : logits) total += std::exp(static_cast<double>(logit) - max_logit);
  const double log_normalizer = max_logit + std::log(total);
  auto logprob_of = [&](int32_t id) {
    return static_cast<float>(std::min(0.0, static_cast<double>(logits[id]) - log_normalizer));
  };
  TokenLogprobs out;
  out.token = token;
  out.logprob = logprob_of(token);
  const size_t n = std::min(static_cast<size_t>(std::max(top_n, 0)), logits.size());
  if (n == 0) return out;
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(),
                    [&](int32_t a, int32_t b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; });
  out.top.reserve(n);
  for (size_t i = 0; i < n; ++i) out.top.emplace_back(ids[i], logprob_of(ids[i]));
  return out;
}

}  // namespace baton
