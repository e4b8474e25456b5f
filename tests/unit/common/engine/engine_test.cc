// The fast CPU engine against the golden reference, per architecture and
// weight type, with a stated tolerance for each.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <ostream>

#include "common/engine/engine.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/engine/reference_engine.h"
#include "common/engine/sampler.h"
#include "common/model/model.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

struct EngineCase {
  std::string shape;
  GgmlType type;
  // Max |fast - reference| over all logits, relative to the largest |reference logit|.
  double tolerance;
  // Normalized mean squared error sum((fast - ref)^2) / sum(ref^2), as llama.cpp's
  // test-backend-ops measures backends.
  double nmse;
};

void PrintTo(const EngineCase& c, std::ostream* os) {
  *os << c.shape << "/" << ggml_type_name(c.type);
}

std::string case_name(const ::testing::TestParamInfo<EngineCase>& info) {
  std::string name = info.param.shape + "_" + std::string(ggml_type_name(info.param.type));
  for (char& c : name) {
    if (c == '-' || c == '.') c = '_';
  }
  return name;
}

std::vector<int32_t> test_tokens(int n, int n_vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> tokens(n);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.next() % n_vocab);
  return tokens;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

class EngineVsReference : public ::testing::TestWithParam<EngineCase> {
 protected:
  void SetUp() override {
    auto model = Model::Load(testing::synth_model_path(GetParam().shape, GetParam().type));
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
  }
  std::unique_ptr<Model> model_;
};

TEST_P(EngineVsReference, PrefillLogitsMatchReferenceWithinTolerance) {
  const int n = 40;
  const ModelSpec& s = model_->spec();
  auto tokens = test_tokens(n, s.n_vocab, 11);
  Engine engine(*model_, EngineOptions{2, 16});
  auto kv = engine.new_f32_kv_cache(n);
  std::vector<float> all;
  ASSERT_TRUE(engine.prefill(tokens, *kv, nullptr, &all).ok());
  ASSERT_EQ(kv->size(), n);

  ReferenceEngine ref(*model_);
  double worst = 0, err_sq = 0, ref_sq = 0;
  for (int t = 0; t < n; ++t) {
    std::vector<float> expected = ref.forward(tokens[t]);
    const double scale = std::max(1.0, max_abs(expected));
    for (int i = 0; i < s.n_vocab; ++i) {
      const double diff = all[static_cast<size_t>(t) * s.n_vocab + i] - expected[i];
      worst = std::max(worst, std::fabs(diff) / scale);
      err_sq += diff * diff;
      ref_sq += double{expected[i]} * expected[i];
    }
  }
  EXPECT_LE(worst, GetParam().tolerance) << "worst relative logit error";
  EXPECT_LE(err_sq / ref_sq, GetParam().nmse) << "logit NMSE";
  RecordProperty("logit_nmse", std::to_string(err_sq / ref_sq));
  RecordProperty("logit_max_rel_error", std::to_string(worst));
  // The KV the engine stored is the reference's K/V (after RoPE).
  const auto& f32 = static_cast<const F32KvCache&>(*kv);
  double worst_kv = 0;
  for (int l = 0; l < s.n_layer; ++l) {
    for (int t = 0; t < n; ++t) {
      for (int64_t i = 0; i < s.kv_dim(); ++i) {
        worst_kv = std::max(worst_kv, std::fabs(static_cast<double>(f32.k_row(l, t)[i]) - ref.k(l, t)[i]));
        worst_kv = std::max(worst_kv, std::fabs(static_cast<double>(f32.v_row(l, t)[i]) - ref.v(l, t)[i]));
      }
    }
  }
  EXPECT_LE(worst_kv, 20 * GetParam().tolerance) << "worst absolute K/V error";
}

// Float weights only: with 8-bit activations tokens may differ (logits are checked above).
class GreedyVsReference : public EngineVsReference {};

TEST_P(GreedyVsReference, GreedyTokensMatchReferenceForFloatWeights) {
  const ModelSpec& s = model_->spec();
  auto prompt = test_tokens(12, s.n_vocab, 5);
  Engine engine(*model_, EngineOptions{2, 64});
  auto kv = engine.new_f32_kv_cache(64);
  std::vector<float> logits;
  ASSERT_TRUE(engine.prefill(prompt, *kv, &logits).ok());
  ReferenceEngine ref(*model_);
  std::vector<float> ref_logits;
  for (int32_t t : prompt) ref_logits = ref.forward(t);
  Sampler greedy(SamplingParams{});
  for (int step = 0; step < 24; ++step) {
    const int32_t fast_token = greedy.sample(logits);
    const int32_t ref_token = greedy.sample(ref_logits);
    ASSERT_EQ(fast_token, ref_token) << "at step " << step;
    ASSERT_TRUE(engine.decode_step(fast_token, *kv, &logits).ok());
    ref_logits = ref.forward(ref_token);
  }
}

// Two paths of the engine over the same tokens (prefill micro-batches against
// decode steps, or a last micro-batch of one token) use different matmul
// kernels: the prefill kernel and the decode tile. Float weights then differ
// only in float summation order
// (1e-4). 8-bit activations re-quantize every layer's input, and a value
// that lands near a rounding boundary flips by one quantum (1/127 of its
// block's scale) on one path and not the other: that propagates to ~1e-3 of
// the logits (5e-3 measured on tiny/q8_0), still 5x below the tolerance
// against the reference.
double path_tolerance(GgmlType type) {
  return type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0 ? 1e-2 : 1e-4;
}

TEST_P(EngineVsReference, PrefillThenDecodeEqualsTokenByToken) {
  const ModelSpec& s = model_->spec();
  auto tokens = test_tokens(30, s.n_vocab, 3);
  Engine batched(*model_, EngineOptions{2, 64});
  Engine single(*model_, EngineOptions{1, 64});
  auto kv_a = batched.new_f32_kv_cache(40);
  auto kv_b = single.new_f32_kv_cache(40);
  std::vector<float> a, b;
  ASSERT_TRUE(batched.prefill(std::span<const int32_t>(tokens.data(), 20), *kv_a, &a).ok());
  for (int i = 20; i < 30; ++i) ASSERT_TRUE(batched.decode_step(tokens[i], *kv_a, &a).ok());
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(single.decode_step(tokens[i], *kv_b, &b).ok());
  const double scale = std::max(1.0, max_abs(b));
  const double tol = path_tolerance(GetParam().type);
  for (int i = 0; i < s.n_vocab; ++i) ASSERT_NEAR(a[i], b[i], tol * scale) << "logit " << i;
}

TEST_P(EngineVsReference, ChunkedPrefillEqualsOneShot) {
  const ModelSpec& s = model_->spec();
  auto tokens = test_tokens(33, s.n_vocab, 9);
  Engine chunked(*model_, EngineOptions{2, 7});
  Engine one_shot(*model_, EngineOptions{2, 64});
  auto kv_a = chunked.new_f32_kv_cache(33);
  auto kv_b = one_shot.new_f32_kv_cache(33);
  std::vector<float> a, b;
  ASSERT_TRUE(chunked.prefill(tokens, *kv_a, &a).ok());
  ASSERT_TRUE(one_shot.prefill(tokens, *kv_b, &b).ok());
  const double scale = std::max(1.0, max_abs(b));
  const double tol = path_tolerance(GetParam().type);
  for (int i = 0; i < s.n_vocab; ++i) ASSERT_NEAR(a[i], b[i], tol * scale) << "logit " << i;
}

INSTANTIATE_TEST_SUITE_P(
    AllArchsAndTypes, EngineVsReference,
    ::testing::Values(EngineCase{"tiny", GgmlType::kF32, 2e-5, 1e-9},
                      EngineCase{"tiny", GgmlType::kF16, 2e-5, 1e-9},
                      EngineCase{"tiny", GgmlType::kBF16, 2e-5, 1e-9},
                      EngineCase{"tiny", GgmlType::kQ8_0, 5e-2, 1e-3},
                      EngineCase{"tiny", GgmlType::kQ4_0, 5e-2, 1e-3},
                      EngineCase{"tiny-llama3", GgmlType::kF16, 2e-5, 1e-9},
                      EngineCase{"tiny-llama3", GgmlType::kQ4_0, 5e-2, 1e-3},
                      EngineCase{"tiny-qwen2", GgmlType::kF32, 2e-5, 1e-9},
                      EngineCase{"tiny-qwen2", GgmlType::kQ8_0, 5e-2, 1e-3},
                      EngineCase{"tiny-qwen2", GgmlType::kQ4_0, 5e-2, 1e-3},
                      // 6 layers, window 8: 40 tokens in micro-batches of 16 cross the window.
                      EngineCase{"tiny-gemma3", GgmlType::kF32, 2e-5, 1e-9},
                      EngineCase{"tiny-gemma3", GgmlType::kF16, 2e-5, 1e-9},
                      EngineCase{"tiny-gemma3", GgmlType::kQ8_0, 5e-2, 1e-3},
                      EngineCase{"tiny-gemma3", GgmlType::kQ4_0, 5e-2, 1e-3}),
    case_name);

INSTANTIATE_TEST_SUITE_P(FloatWeights, GreedyVsReference,
                         ::testing::Values(EngineCase{"tiny", GgmlType::kF32, 2e-5, 1e-9},
                                           EngineCase{"tiny", GgmlType::kF16, 2e-5, 1e-9},
                                           EngineCase{"tiny", GgmlType::kBF16, 2e-5, 1e-9},
                                           EngineCase{"tiny-llama3", GgmlType::kF16, 2e-5, 1e-9},
                                           EngineCase{"tiny-qwen2", GgmlType::kF32, 2e-5, 1e-9},
                                           EngineCase{"tiny-gemma3", GgmlType::kF32, 2e-5, 1e-9}),
                         case_name);

class EngineErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = Model::Load(testing::synth_model_path("tiny", GgmlType::kF32));
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
  }
  std::unique_ptr<Model> model_;
};

TEST_F(EngineErrors, TokenOutsideVocabularyIsInvalidArgument) {
  Engine engine(*model_, EngineOptions{1, 16});
  auto kv = engine.new_f32_kv_cache(8);
  std::vector<int32_t> tokens = {1, 2, model_->spec().n_vocab};
  absl::Status status = engine.prefill(tokens, *kv, nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("outside the vocabulary"), std::string::npos) << status;
  EXPECT_EQ(kv->size(), 0);
}

TEST_F(EngineErrors, PromptLargerThanCacheIsResourceExhaustedAndKeepsCache) {
  Engine engine(*model_, EngineOptions{1, 4});
  auto kv = engine.new_f32_kv_cache(10);
  std::vector<int32_t> first = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(engine.prefill(first, *kv, nullptr).ok());
  absl::Status status = engine.prefill(first, *kv, nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("10 tokens"), std::string::npos) << status;
  EXPECT_EQ(kv->size(), 6);
}

// Engine::set_part_times: while set, a decode step and a decode_rows call
// charge time to every part of the pass (llama: no part is skipped), the
// parts add up to no more than the calls' wall time, nothing is charged once
// it is reset, and the logits are the same bits timed or not.
TEST(EnginePartTimes, EveryPartTimedAndLogitsUnchanged) {
  auto model = Model::Load(testing::synth_model_path("tiny", GgmlType::kQ4_0));
  ASSERT_TRUE(model.ok()) << model.status();
  Engine engine(**model, EngineOptions{2, 16});
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  auto plain_kv = engine.new_f32_kv_cache(16), timed_kv = engine.new_f32_kv_cache(16);
  ASSERT_TRUE(engine.prefill(prompt, *plain_kv, nullptr).ok());
  ASSERT_TRUE(engine.prefill(prompt, *timed_kv, nullptr).ok());
  std::vector<float> plain, timed;
  ASSERT_TRUE(engine.decode_step(7, *plain_kv, &plain).ok());

  StepPartTimes parts;
  engine.set_part_times(&parts);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(engine.decode_step(7, *timed_kv, &timed).ok());
  std::vector<float> rows_logits(static_cast<size_t>((*model)->spec().n_vocab));
  const Engine::DecodeRow row{8, timed_kv.get()};
  ASSERT_TRUE(engine.decode_rows(std::span<const Engine::DecodeRow>(&row, 1), rows_logits.data()).ok());
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  engine.set_part_times(nullptr);

  EXPECT_EQ(plain, timed);
  double total = 0;
  for (int p = 0; p < kStepParts; ++p) {
    EXPECT_GT(parts.seconds[p], 0.0) << step_part_name(static_cast<StepPart>(p));
    total += parts.seconds[p];
  }
  EXPECT_LE(total, wall);
  const StepPartTimes before = parts;
  ASSERT_TRUE(engine.decode_step(9, *plain_kv, &plain).ok());
  for (int p = 0; p < kStepParts; ++p) EXPECT_EQ(parts.seconds[p], before.seconds[p]);
}

}  // namespace
}  // namespace baton
