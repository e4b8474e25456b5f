#include "common/engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>

namespace baton {
namespace {

std::vector<float> logits_of(std::initializer_list<float> v) { return std::vector<float>(v); }

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  Sampler s(SamplingParams{});
  EXPECT_EQ(s.sample(logits_of({0.1f, 2.0f, -1.0f, 2.0f})), 1);
}

TEST(Sampler, GreedyIsTheFirstLargestLogitForAnyLengthTiesNansAndInfinities) {
  // The plain loop greedy sampling stands for: the lowest id of the largest
  // value, a NaN never taken unless it comes first.
  auto reference = [](const std::vector<float>& x) {
    int32_t best = 0;
    for (int32_t i = 1; i < static_cast<int32_t>(x.size()); ++i) {
      if (x[i] > x[best]) best = i;
    }
    return best;
  };
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  Sampler s(SamplingParams{});
  for (int trial = 0; trial < 400; ++trial) {
    const size_t n = trial < 300 ? 1 + static_cast<size_t>(trial) * 3 : 128256;
    std::vector<float> x(n);
    for (float& v : x) v = std::round(u(rng) * 4) / 4;  // coarse values: many ties
    const int specials = trial % 7;
    for (int k = 0; k < specials; ++k) {
      const size_t at = rng() % n;
      x[at] = k % 4 == 0 ? nan : k % 4 == 1 ? -inf : k % 4 == 2 ? -0.0f : 0.0f;
    }
    if (trial % 11 == 0) x[0] = nan;
    if (trial % 13 == 0) x[rng() % n] = inf;
    if (trial % 17 == 0) std::fill(x.begin(), x.end(), -inf);
    ASSERT_EQ(s.sample(x), reference(x)) << "trial " << trial << " n " << n;
  }
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDiffers) {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = std::sin(i * 0.7f);
  auto run = [&](uint64_t seed) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) out.push_back(s.sample(logits));
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(Sampler, TopKOneIsGreedy) {
  SamplingParams p;
  p.temperature = 5.0f;
  p.top_k = 1;
  Sampler s(p);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(logits_of({0.0f, 0.5f, 0.4f})), 1);
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingMass) {
  // probs at T=1: softmax(log(.5), log(.3), log(.2)) = .5 .3 .2; top_p .6 keeps {0, 1}.
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 0.6f;
  Sampler s(p);
  std::map<int32_t, int> counts;
  for (int i = 0; i < 2000; ++i) counts[s.sample(logits_of({std::log(.5f), std::log(.3f), std::log(.2f)}))]++;
  EXPECT_EQ(counts.count(2), 0u);
  EXPECT_GT(counts[1], 500);  // 0.3/0.8 = 37.5% of 2000 = 750
}

TEST(Sampler, MinPDropsTokensBelowFractionOfMax) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.min_p = 0.5f;  // keeps p >= 0.25 when p_max = 0.5
  Sampler s(p);
  for (int i = 0; i < 2000; ++i) {
    EXPECT_NE(s.sample(logits_of({std::log(.5f), std::log(.3f), std::log(.2f)})), 2);
  }
}

TEST(Sampler, FrequenciesFollowSoftmaxAtTemperature) {
  SamplingParams p;
  p.temperature = 2.0f;
  p.top_k = 0;
  p.seed = 3;
  Sampler s(p);
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f};
  std::vector<double> expected(3);
  double total = 0;
  for (int i = 0; i < 3; ++i) total += (expected[i] = std::exp(logits[i] / 2.0));
  std::vector<int> counts(3, 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) counts[s.sample(logits)]++;
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(counts[i] / static_cast<double>(n), expected[i] / total, 0.02) << i;
}

TEST(Sampler, RepetitionPenaltyDemotesRecentTokens) {
  SamplingParams p;
  p.repeat_penalty = 2.0f;
  Sampler s(p);
  EXPECT_EQ(s.sample(logits_of({1.0f, 1.5f})), 1);
  s.accept(1);  // 1.5 / 2 = 0.75 < 1.0
  EXPECT_EQ(s.sample(logits_of({1.0f, 1.5f})), 0);
  // Negative logits are multiplied: -0.1 * 2 = -0.2 < -0.15.
  EXPECT_EQ(s.sample(logits_of({-0.15f, -0.1f})), 0);
}

TEST(Sampler, GreedyAppliesFrequencyAndPresencePenaltiesToGeneratedTokens) {
  // The greedy argmax without a copy of the logits must not skip them.
  SamplingParams p;
  p.frequency_penalty = 0.3f;
  p.presence_penalty = 0.1f;
  Sampler s(p);
  EXPECT_EQ(s.sample(logits_of({1.0f, 1.3f})), 1);
  s.accept(1, /*generated=*/true);  // 1.3 - 0.3 - 0.1 = 0.9 < 1.0
  EXPECT_EQ(s.sample(logits_of({1.0f, 1.3f})), 0);
  s.accept(0, /*generated=*/false);  // a prompt token: no penalty
  EXPECT_EQ(s.sample(logits_of({1.0f, 0.95f})), 0);
}

}  // namespace
}  // namespace baton
