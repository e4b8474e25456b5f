// The sampler on the wire (common/engine/sampling_proto.h): Sampler::adopt
// leaves a sampler where sampling the token would have; the early-token
// request carries the edge's sampler to the cloud whole, and every
// untrusted field is bounded before use.
#include "common/engine/sampling_proto.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

namespace baton {
namespace {

using ::testing::HasSubstr;

std::vector<float> wavy_logits(int n, float phase) {
  std::vector<float> logits(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) logits[static_cast<size_t>(i)] = std::sin(static_cast<float>(i) * 0.37f + phase) * 3.0f;
  return logits;
}

// Samples 40 tokens from `a`, or takes the first `adopted` of them into `b`
// by adopt() and samples the rest: both must give the same tokens.
void expect_adopt_matches_sampling(const SamplingParams& params) {
  Sampler sampled(params);
  Sampler adopted(params);
  for (int32_t t : {3, 9, 27}) {
    sampled.accept(t);
    adopted.accept(t);
  }
  std::vector<int32_t> a, b;
  for (int step = 0; step < 40; ++step) {
    const std::vector<float> logits = wavy_logits(200, static_cast<float>(step));
    const int32_t token = sampled.sample(logits);
    sampled.accept(token, /*generated=*/true);
    a.push_back(token);
    if (step < 10) {
      adopted.adopt(token);  // sampled elsewhere (the cloud) from the same state
      b.push_back(token);
    } else {
      const int32_t own = adopted.sample(logits);
      adopted.accept(own, /*generated=*/true);
      b.push_back(own);
    }
  }
  EXPECT_EQ(a, b);
  EXPECT_EQ(sampled.state().rng, adopted.state().rng);
  EXPECT_EQ(sampled.state().recent, adopted.state().recent);
}

TEST(SamplerAdoptTest, GreedyAndSeededSamplingContinueAsIfSampledHere) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.repeat_penalty = 1.3f;
  expect_adopt_matches_sampling(greedy);
  SamplingParams seeded;
  seeded.temperature = 0.9f;
  seeded.top_k = 0;
  seeded.top_p = 0.95f;
  seeded.seed = 1234;
  seeded.frequency_penalty = 0.5f;
  seeded.presence_penalty = 0.25f;
  expect_adopt_matches_sampling(seeded);
}

TEST(SamplerAdoptTest, AnEndOfGenerationTokenTakesItsDrawButIsNotRecorded) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = 5;
  Sampler a(params), b(params);
  (void)a.sample(wavy_logits(50, 0));  // a decode loop samples EOS and stops: no accept
  b.adopt(7, /*record=*/false);
  EXPECT_EQ(a.state().rng, b.state().rng);
  EXPECT_TRUE(b.state().recent.empty());
}

TEST(EarlyTokensRequestTest, CarriesTheEdgesSamplerWhole) {
  SamplingParams params;
  params.temperature = 0.7f;
  params.top_k = 12;
  params.top_p = 0.9f;
  params.min_p = 0.05f;
  params.repeat_penalty = 1.1f;
  params.repeat_last_n = 8;
  params.frequency_penalty = -0.5f;
  params.presence_penalty = 0.5f;
  params.seed = 42;
  Sampler edge(params);
  for (int32_t t = 0; t < 20; ++t) edge.accept(t * 3);
  const v1::EarlyTokensRequest request = early_tokens_request(edge, 6, 57, 4u);
  absl::StatusOr<EarlySampling> cloud = early_sampling_from_proto(request, 100);
  ASSERT_TRUE(cloud.ok()) << cloud.status();
  EXPECT_EQ(cloud->count, 6u);
  EXPECT_EQ(cloud->last_token, 57);
  EXPECT_EQ(cloud->logprobs, 4u);
  EXPECT_EQ(cloud->state.rng, edge.state().rng);
  EXPECT_EQ(cloud->state.recent, edge.state().recent);
  EXPECT_EQ(cloud->state.recent.size(), 8u);
  EXPECT_FLOAT_EQ(cloud->params.temperature, 0.7f);
  EXPECT_EQ(cloud->params.top_k, 12);
  EXPECT_FLOAT_EQ(cloud->params.top_p, 0.9f);
  EXPECT_FLOAT_EQ(cloud->params.min_p, 0.05f);
  EXPECT_FLOAT_EQ(cloud->params.repeat_penalty, 1.1f);
  EXPECT_EQ(cloud->params.repeat_last_n, 8);
  EXPECT_FLOAT_EQ(cloud->params.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(cloud->params.presence_penalty, 0.5f);
  // Both samplers pick the same tokens from the same logits.
  Sampler there(cloud->params);
  there.restore(cloud->state);
  for (int step = 0; step < 20; ++step) {
    const std::vector<float> logits = wavy_logits(100, static_cast<float>(step) * 0.5f);
    const int32_t here_token = edge.sample(logits);
    const int32_t there_token = there.sample(logits);
    ASSERT_EQ(here_token, there_token) << "step " << step;
    edge.accept(here_token, true);
    there.accept(there_token, true);
  }
}

TEST(EarlyTokensRequestTest, EveryUntrustedFieldIsBounded) {
  Sampler edge(SamplingParams{});
  const v1::EarlyTokensRequest good = early_tokens_request(edge, 4, 10, std::nullopt);
  ASSERT_TRUE(early_sampling_from_proto(good, 100).ok());
  struct Case {
    const char* what;
    std::function<void(v1::EarlyTokensRequest&)> spoil;
  };
  const std::vector<Case> cases = {
      {"count", [](v1::EarlyTokensRequest& r) { r.set_count(0); }},
      {"count", [](v1::EarlyTokensRequest& r) { r.set_count(kMaxEarlyTokens + 1); }},
      {"last_token", [](v1::EarlyTokensRequest& r) { r.set_last_token(100); }},
      {"rng_state", [](v1::EarlyTokensRequest& r) { r.add_rng_state(1); }},
      {"rng_state", [](v1::EarlyTokensRequest& r) { r.clear_rng_state(); }},
      {"temperature", [](v1::EarlyTokensRequest& r) { r.mutable_sampling()->clear_temperature(); }},
      {"temperature", [](v1::EarlyTokensRequest& r) { r.mutable_sampling()->set_temperature(-1); }},
      {"recent_tokens", [](v1::EarlyTokensRequest& r) {
         r.mutable_sampling()->set_repetition_last_n(2);
         for (int i = 0; i < 3; ++i) r.add_recent_tokens(1);
       }},
      {"recent_tokens[0]", [](v1::EarlyTokensRequest& r) { r.add_recent_tokens(1000); }},
      {"logprobs", [](v1::EarlyTokensRequest& r) { r.set_logprobs(kMaxTopLogprobs + 1); }},
  };
  for (const Case& c : cases) {
    v1::EarlyTokensRequest bad = good;
    c.spoil(bad);
    absl::StatusOr<EarlySampling> out = early_sampling_from_proto(bad, 100);
    ASSERT_FALSE(out.ok()) << c.what;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(std::string(out.status().message()), HasSubstr(c.what));
  }
}

}  // namespace
}  // namespace baton
