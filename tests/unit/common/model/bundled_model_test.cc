// The bundled tiny model (deploy/models/): the C++ tokenizer and engine
// reproduce what the PyTorch trainer exported (reference logits, spm_encode
// ids of the held-out text, held-out perplexity).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/engine/engine.h"
#include "common/engine/perplexity.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "common/model/model_quantize.h"
#include "common/tokenizer/tokenizer.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

std::string models_dir() { return testing::source_dir() + "/deploy/models"; }

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class BundledModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto model = Model::Load(models_dir() + "/baton-tiny-kjv-f16.gguf");
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = model->release();
    auto tokenizer = Tokenizer::FromGguf(model_->file());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = tokenizer->release();
    std::ifstream in(models_dir() + "/baton-tiny-kjv.reference.json");
    ASSERT_TRUE(in.good()) << "reference.json missing";
    reference_ = new nlohmann::json(nlohmann::json::parse(in));
  }
  static void TearDownTestSuite() {
    delete reference_;
    delete tokenizer_;
    delete model_;
  }
  // The held-out token stream: per-line spm_encode ids, concatenated.
  static std::vector<int32_t> heldout_ids() {
    std::vector<int32_t> ids;
    for (const std::string& line : read_lines(models_dir() + "/baton-tiny-kjv.heldout.ids")) {
      std::istringstream in(line);
      for (int32_t id; in >> id;) ids.push_back(id);
    }
    return ids;
  }
  static Model* model_;
  static Tokenizer* tokenizer_;
  static nlohmann::json* reference_;
};
Model* BundledModel::model_ = nullptr;
Tokenizer* BundledModel::tokenizer_ = nullptr;
nlohmann::json* BundledModel::reference_ = nullptr;

TEST_F(BundledModel, TokenizerReproducesSpmEncodeOnEveryHeldOutLine) {
  const auto text = read_lines(models_dir() + "/baton-tiny-kjv.heldout.txt");
  const auto ids = read_lines(models_dir() + "/baton-tiny-kjv.heldout.ids");
  ASSERT_EQ(text.size(), ids.size());
  ASSERT_GT(text.size(), 600u);
  EncodeOptions no_bos;
  no_bos.add_bos = false;
  for (size_t i = 0; i < text.size(); ++i) {
    std::vector<int32_t> expected;
    std::istringstream in(ids[i]);
    for (int32_t id; in >> id;) expected.push_back(id);
    ASSERT_EQ(tokenizer_->encode(text[i], no_bos), expected) << "line " << i << ": " << text[i];
    ASSERT_EQ(tokenizer_->decode(expected), text[i]) << "line " << i;
  }
}

TEST_F(BundledModel, EngineReproducesPyTorchLogits) {
  std::vector<int32_t> tokens = (*reference_)["tokens"].get<std::vector<int32_t>>();
  ASSERT_EQ(tokens.size(), 32u);
  Engine engine(*model_, EngineOptions{2, 64});
  auto kv = engine.new_f32_kv_cache(static_cast<int64_t>(tokens.size()));
  std::vector<float> logits;
  ASSERT_TRUE(engine.prefill(tokens, *kv, nullptr, &logits).ok());
  const int n_vocab = model_->spec().n_vocab;
  // PyTorch: float32 compute with the f16-rounded weights; the exported
  // values are rounded to 5 decimals.
  const double tolerance = 2e-3;
  double worst = 0;
  for (const auto& row : (*reference_)["top20"]) {
    const int pos = row["pos"].get<int>();
    const auto ids = row["ids"].get<std::vector<int>>();
    const auto values = row["logits"].get<std::vector<double>>();
    for (size_t j = 0; j < ids.size(); ++j) {
      worst = std::max(worst, std::fabs(logits[static_cast<size_t>(pos) * n_vocab + ids[j]] - values[j]));
    }
  }
  const auto last = (*reference_)["last_logits"].get<std::vector<double>>();
  ASSERT_EQ(static_cast<int>(last.size()), n_vocab);
  for (int i = 0; i < n_vocab; ++i) {
    worst = std::max(worst, std::fabs(logits[(tokens.size() - 1) * n_vocab + i] - last[i]));
  }
  EXPECT_LE(worst, tolerance) << "max |C++ - PyTorch| logit";
  RecordProperty("max_abs_logit_diff", std::to_string(worst));
}

TEST_F(BundledModel, GreedyContinuationEqualsPyTorch) {
  std::vector<int32_t> tokens = (*reference_)["tokens"].get<std::vector<int32_t>>();
  const auto expected = (*reference_)["greedy_continuation_ids"].get<std::vector<int32_t>>();
  Engine engine(*model_, EngineOptions{2, 64});
  auto kv = engine.new_f32_kv_cache(static_cast<int64_t>(tokens.size() + expected.size()));
  std::vector<float> logits;
  ASSERT_TRUE(engine.prefill(tokens, *kv, &logits).ok());
  std::vector<int32_t> got;
  for (size_t i = 0; i < expected.size(); ++i) {
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    got.push_back(next);
    ASSERT_TRUE(engine.decode_step(next, *kv, &logits).ok());
  }
  EXPECT_EQ(got, expected);
}

TEST_F(BundledModel, HeldOutPerplexityMatchesPyTorchWithinHalfAPercent) {
  const auto& ppl = (*reference_)["perplexity"];
  const double expected = ppl["heldout_f16_weights"].get<double>();
  const int64_t chunk = ppl["chunk_tokens"].get<int64_t>();
  const auto ids = heldout_ids();
  ASSERT_EQ(static_cast<int64_t>(ids.size()), ppl["scored_tokens"].get<int64_t>());
  Engine engine(*model_, EngineOptions{2, 64});
  auto result = evaluate_perplexity(engine, ids, chunk, nullptr, tokenizer_->bos_id());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->scored_tokens, static_cast<int64_t>(ids.size()));
  EXPECT_NEAR(result->perplexity, expected, 0.005 * expected);
  RecordProperty("perplexity_f16", std::to_string(result->perplexity));
}

TEST_F(BundledModel, Q4_0DerivativeKeepsFingerprintAndStaysClose) {
  const std::string dir = testing::make_temp_dir("bundled-q4");
  ASSERT_TRUE(quantize_model(models_dir() + "/baton-tiny-kjv-f16.gguf", dir + "/q4.gguf",
                             QuantizeOptions{GgmlType::kQ4_0, 2})
                  .ok());
  auto q4 = Model::Load(dir + "/q4.gguf");
  ASSERT_TRUE(q4.ok()) << q4.status();
  EXPECT_EQ(model_fingerprint(**q4)->digest, model_fingerprint(*model_)->digest);
  const auto& ppl = (*reference_)["perplexity"];
  const double f16 = ppl["heldout_f16_weights"].get<double>();
  Engine engine(**q4, EngineOptions{2, 64});
  auto result = evaluate_perplexity(engine, heldout_ids(), ppl["chunk_tokens"].get<int64_t>(), nullptr,
                                    tokenizer_->bos_id());
  ASSERT_TRUE(result.ok()) << result.status();
  // 4-bit weights cost quality; a broken Q4_0 path would be far off.
  EXPECT_GT(result->perplexity, f16 * 0.99);
  EXPECT_LT(result->perplexity, f16 * 1.03);
  RecordProperty("perplexity_q4_0", std::to_string(result->perplexity));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace baton
