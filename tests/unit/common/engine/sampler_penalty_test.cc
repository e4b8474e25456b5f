// OpenAI's frequency and presence penalties in the Sampler, and the
// log-probabilities reported for logprobs (common/engine/sampler.h). What must
// hold, on hand-computed logits: logit[t] -= count[t] * frequency_penalty +
// (count[t] > 0) * presence_penalty over generated tokens only (prompt tokens
// do not count); logprobs are the log-softmax of the raw logits, most likely
// alternatives first, lower id first on ties.
#include <cmath>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "common/engine/sampler.h"

namespace baton {
namespace {

// Greedy: the sampler returns the argmax of the penalized logits, so each
// expectation below is the hand-computed argmax.
SamplingParams greedy_with(float frequency_penalty, float presence_penalty) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.frequency_penalty = frequency_penalty;
  params.presence_penalty = presence_penalty;
  return params;
}

const std::vector<float> kLogits = {1.0f, 0.9f, 0.5f};

TEST(SamplerPenaltyTest, FrequencyPenaltyScalesWithTheCount) {
  // Frequency 0.06: token 0 once: 1.0 - 0.06 = 0.94 > 0.9 -> token 0; twice:
  // 1.0 - 0.12 = 0.88 < 0.9 -> token 1.
  Sampler sampler(greedy_with(0.06f, 0.0f));
  sampler.accept(0, /*generated=*/true);
  EXPECT_EQ(sampler.sample(kLogits), 0);
  sampler.accept(0, /*generated=*/true);
  EXPECT_EQ(sampler.sample(kLogits), 1);
  // Frequency 0.04, twice: 1.0 - 0.08 = 0.92 > 0.9 -> still token 0.
  Sampler weak(greedy_with(0.04f, 0.0f));
  weak.accept(0, true);
  weak.accept(0, true);
  EXPECT_EQ(weak.sample(kLogits), 0);
}

TEST(SamplerPenaltyTest, FrequencyPenaltyOfOneOccurrence) {
  // 1.0 - 1 * 0.3 = 0.7 < 0.9 -> token 1; 1.0 - 0.05 = 0.95 -> token 0.
  Sampler penalized(greedy_with(0.3f, 0.0f));
  penalized.accept(0, true);
  EXPECT_EQ(penalized.sample(kLogits), 1);
  Sampler light(greedy_with(0.05f, 0.0f));
  light.accept(0, true);
  EXPECT_EQ(light.sample(kLogits), 0);
}

TEST(SamplerPenaltyTest, PresencePenaltyCountsATokenOnce) {
  // Token 0 generated three times; presence 0.05: 1.0 - 0.05 = 0.95 > 0.9 ->
  // token 0 (counted per occurrence it would be 0.85 -> token 1).
  Sampler once(greedy_with(0.0f, 0.05f));
  for (int i = 0; i < 3; ++i) once.accept(0, true);
  EXPECT_EQ(once.sample(kLogits), 0);
  // presence 0.15: 1.0 - 0.15 = 0.85 < 0.9 -> token 1.
  Sampler more(greedy_with(0.0f, 0.15f));
  more.accept(0, true);
  EXPECT_EQ(more.sample(kLogits), 1);
}

TEST(SamplerPenaltyTest, BothPenaltiesAdd) {
  // Token 0 generated twice. Frequency 0.04 alone: 1.0 - 0.08 = 0.92 -> 0;
  // presence 0.05 alone: 0.95 -> 0; both: 1.0 - 0.08 - 0.05 = 0.87 < 0.9 -> 1.
  for (const auto& [frequency, presence, expected] :
       {std::tuple{0.04f, 0.0f, 0}, std::tuple{0.0f, 0.05f, 0}, std::tuple{0.04f, 0.05f, 1}}) {
    Sampler sampler(greedy_with(frequency, presence));
    sampler.accept(0, true);
    sampler.accept(0, true);
    EXPECT_EQ(sampler.sample(kLogits), expected) << "frequency " << frequency << " presence " << presence;
  }
}

TEST(SamplerPenaltyTest, PromptTokensDoNotCount) {
  Sampler sampler(greedy_with(2.0f, 2.0f));
  for (int i = 0; i < 5; ++i) sampler.accept(0);  // prompt
  EXPECT_EQ(sampler.sample(kLogits), 0);
  sampler.accept(0, /*generated=*/true);  // 1.0 - 2 - 2 = -3
  EXPECT_EQ(sampler.sample(kLogits), 1);
}

TEST(SamplerPenaltyTest, NegativePenaltiesFavourRepeats) {
  // Token 2 generated once, presence -0.6: 0.5 + 0.6 = 1.1 > 1.0 -> token 2.
  Sampler sampler(greedy_with(0.0f, -0.6f));
  sampler.accept(2, true);
  EXPECT_EQ(sampler.sample(kLogits), 2);
}

TEST(SamplerPenaltyTest, PenaltiesApplyBeforeTemperatureSampling) {
  // top_k 1 after the penalty: always the penalized argmax (token 1).
  SamplingParams params = greedy_with(0.0f, 0.5f);
  params.temperature = 1.0f;
  params.top_k = 1;
  Sampler sampler(params);
  sampler.accept(0, true);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(sampler.sample(kLogits), 1);
}

TEST(TokenLogprobsTest, LogSoftmaxOfTheRawLogits) {
  // logits log(1..4): p = {0.1, 0.2, 0.3, 0.4}.
  const std::vector<float> logits = {std::log(1.0f), std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  const TokenLogprobs out = token_logprobs(logits, 1, 3);
  EXPECT_EQ(out.token, 1);
  EXPECT_NEAR(out.logprob, std::log(0.2), 1e-6);
  ASSERT_EQ(out.top.size(), 3u);
  EXPECT_EQ(out.top[0].first, 3);
  EXPECT_NEAR(out.top[0].second, std::log(0.4), 1e-6);
  EXPECT_EQ(out.top[1].first, 2);
  EXPECT_NEAR(out.top[1].second, std::log(0.3), 1e-6);
  EXPECT_EQ(out.top[2].first, 1);
  EXPECT_NEAR(out.top[2].second, std::log(0.2), 1e-6);
}

TEST(TokenLogprobsTest, ShiftInvariantTiesByIdAndTopCappedAtTheVocabulary) {
  // Large logits: computed around the max (no overflow); p = {0.5, 0.5, ~0}.
  const std::vector<float> logits = {1000.0f, 1000.0f, 0.0f};
  const TokenLogprobs out = token_logprobs(logits, 0, 20);
  EXPECT_NEAR(out.logprob, std::log(0.5), 1e-6);
  ASSERT_EQ(out.top.size(), 3u);
  EXPECT_EQ(out.top[0].first, 0);
  EXPECT_EQ(out.top[1].first, 1);
  EXPECT_EQ(out.top[2].first, 2);
  EXPECT_LE(out.top[2].second, -999.0f);
  EXPECT_TRUE(token_logprobs(logits, 2, 0).top.empty());
}

}  // namespace
}  // namespace baton
