// Logits of the engines against an independent NumPy implementation that
// parses the GGUF file itself (tests/tools/gguf_numpy_reference.py).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/engine/engine.h"
#include "common/engine/reference_engine.h"
#include "common/model/model.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

class NumpyReference : public ::testing::TestWithParam<std::string> {};

TEST_P(NumpyReference, EnginesAgreeWithIndependentNumpyForward) {
  const std::string& path = testing::synth_model_path(GetParam(), GgmlType::kF32);
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelSpec& s = (*model)->spec();
  std::vector<int32_t> tokens = {1, 300, 17, 450, 299, 8, 511, 42, 260, 3, 77, 128};
  // gemma3: 40 tokens, five times its window of 8, so the mask matters.
  for (int i = 12; s.arch == "gemma3" && i < 40; ++i) tokens.push_back((i * 131 + 7) % s.n_vocab);
  std::string error;
  std::vector<float> expected = testing::numpy_reference_logits(path, tokens, &error);
  ASSERT_EQ(expected.size(), tokens.size() * s.n_vocab) << "numpy reference failed: " << error;

  ReferenceEngine ref(**model);
  Engine engine(**model, EngineOptions{2, 5});
  auto kv = engine.new_f32_kv_cache(static_cast<int64_t>(tokens.size()));
  std::vector<float> fast;
  ASSERT_TRUE(engine.prefill(tokens, *kv, nullptr, &fast).ok());
  double worst_ref = 0, worst_fast = 0, scale = 1;
  for (float x : expected) scale = std::max(scale, std::fabs(static_cast<double>(x)));
  for (size_t t = 0; t < tokens.size(); ++t) {
    std::vector<float> r = ref.forward(tokens[t]);
    for (int i = 0; i < s.n_vocab; ++i) {
      const double e = expected[t * s.n_vocab + i];
      worst_ref = std::max(worst_ref, std::fabs(r[i] - e));
      worst_fast = std::max(worst_fast, std::fabs(fast[t * s.n_vocab + i] - e));
    }
  }
  // F32 weights: float32 vs float64 arithmetic only.
  EXPECT_LE(worst_ref / scale, 1e-5);
  EXPECT_LE(worst_fast / scale, 2e-5);
  RecordProperty("max_abs_logit_error_reference", absl::StrFormat("%.3g", worst_ref));
  RecordProperty("max_abs_logit_error_engine", absl::StrFormat("%.3g", worst_fast));
  RecordProperty("max_abs_logit", absl::StrFormat("%.4g", scale));
}

INSTANTIATE_TEST_SUITE_P(Archs, NumpyReference,
                         ::testing::Values("tiny", "tiny-llama3", "tiny-qwen2", "tiny-qwen3", "tiny-phi3", "tiny-gemma3"),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           for (char& c : n) c = (c == '-') ? '_' : c;
                           return n;
                         });

}  // namespace
}  // namespace baton
