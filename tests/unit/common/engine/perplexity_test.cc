#include "common/engine/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/engine/reference_engine.h"
#include "common/model/model.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

TEST(Perplexity, UniformLogitsGiveLogVocab) {
  std::vector<float> logits(100, 3.0f);
  EXPECT_NEAR(negative_log_likelihood(logits, 7), std::log(100.0), 1e-12);
}

TEST(Perplexity, ChunkedEvaluationMatchesReferenceForwardByHand) {
  auto model = Model::Load(testing::synth_model_path("tiny", GgmlType::kF32));
  ASSERT_TRUE(model.ok());
  std::vector<int32_t> tokens;
  for (int i = 0; i < 23; ++i) tokens.push_back((i * 37 + 5) % 512);
  Engine engine(**model, EngineOptions{2, 8});
  auto result = evaluate_perplexity(engine, tokens, 10);
  ASSERT_TRUE(result.ok()) << result.status();
  // Chunks [0,10) [10,20) [20,23): 9 + 9 + 2 scored tokens, each chunk fresh.
  EXPECT_EQ(result->chunks, 3);
  EXPECT_EQ(result->scored_tokens, 20);
  double nll = 0;
  for (size_t begin = 0; begin < tokens.size(); begin += 10) {
    ReferenceEngine ref(**model);
    const size_t end = std::min(tokens.size(), begin + 10);
    for (size_t i = begin; i + 1 < end; ++i) nll += negative_log_likelihood(ref.forward(tokens[i]), tokens[i + 1]);
  }
  EXPECT_NEAR(result->mean_nll, nll / 20, 1e-4);
  EXPECT_NEAR(result->perplexity, std::exp(nll / 20), 1e-3 * result->perplexity);
}

TEST(Perplexity, BosRecipeScoresEveryChunkTokenAfterBos) {
  auto model = Model::Load(testing::synth_model_path("tiny", GgmlType::kF32));
  ASSERT_TRUE(model.ok());
  std::vector<int32_t> tokens;
  for (int i = 0; i < 13; ++i) tokens.push_back((i * 53 + 11) % 512);
  Engine engine(**model, EngineOptions{2, 8});
  auto result = evaluate_perplexity(engine, tokens, 5, nullptr, /*bos_id=*/1);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->chunks, 3);          // [0,5) [5,10) [10,13)
  EXPECT_EQ(result->scored_tokens, 13);  // every token, the first from BOS alone
  double nll = 0;
  for (size_t begin = 0; begin < tokens.size(); begin += 5) {
    ReferenceEngine ref(**model);
    std::vector<float> logits = ref.forward(1);
    for (size_t i = begin; i < std::min(tokens.size(), begin + 5); ++i) {
      nll += negative_log_likelihood(logits, tokens[i]);
      logits = ref.forward(tokens[i]);
    }
  }
  EXPECT_NEAR(result->mean_nll, nll / 13, 1e-4);
}

TEST(Perplexity, TooShortChunkIsAnError) {
  auto model = Model::Load(testing::synth_model_path("tiny", GgmlType::kF32));
  ASSERT_TRUE(model.ok());
  Engine engine(**model, EngineOptions{1, 8});
  std::vector<int32_t> tokens = {1, 2, 3};
  EXPECT_EQ(evaluate_perplexity(engine, tokens, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace baton
