// Engine::decode_rows: several decode steps in one pass over the weights
// (a speculative draft of one sequence, or one step of several sequences)
// must be bit-identical to decode_step() token by token, logits and K/V, on
// every weight type, on the edge's quantized store and on sliding windows.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "common/engine/engine.h"
#include "common/engine/sampler.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/model/model.h"
#include "common/model/model_quantize.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

struct RowsCase {
  std::string shape;
  GgmlType type;
  std::string store;  // "f32" or a codec name for QuantizedKvCache
};

void PrintTo(const RowsCase& c, std::ostream* os) {
  *os << c.shape << "/" << ggml_type_name(c.type) << "/" << c.store;
}

std::string case_name(const ::testing::TestParamInfo<RowsCase>& info) {
  std::string name = info.param.shape + "_" + std::string(ggml_type_name(info.param.type)) + "_" + info.param.store;
  for (char& c : name) {
    if (c == '-' || c == '.') c = '_';
  }
  return name;
}

std::vector<int32_t> random_tokens(int n, int n_vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (auto& t : tokens) t = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(n_vocab));
  return tokens;
}

bool bits_equal(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// Shape "kjv": the bundled model quantized to llama.cpp's Q4_K_M mix (Q4_K
// with Q6_K), the K-quant kernels' decode paths.
std::string model_path(const RowsCase& c) {
  if (c.shape != "kjv") return testing::synth_model_path(c.shape, c.type);
  static const std::string path = [] {
    const std::string out = testing::make_temp_dir("decode_rows") + "/kjv-q4_k_m.gguf";
    const absl::Status st =
        quantize_model(testing::source_dir() + "/deploy/models/baton-tiny-kjv-f16.gguf", out,
                       QuantizeOptions{GgmlType::kQ4_K, 2, QuantMix::kLlamaQ4_K_M, std::nullopt});
    EXPECT_TRUE(st.ok()) << st;
    return out;
  }();
  return path;
}

class DecodeRowsTest : public ::testing::TestWithParam<RowsCase> {
 protected:
  void SetUp() override {
    auto model = Model::Load(model_path(GetParam()));
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    engine_ = std::make_unique<Engine>(*model_, EngineOptions{2, 16});
  }

  std::unique_ptr<KvCache> new_cache(int64_t capacity) {
    if (GetParam().store == "f32") return engine_->new_f32_kv_cache(capacity);
    auto config = parse_kv_codec_config(GetParam().store);
    EXPECT_TRUE(config.ok()) << config.status();
    auto cache = QuantizedKvCache::Create(engine_->kv_geometry(), capacity,
                                          QuantizedKvCache::store_config_for(*config));
    EXPECT_TRUE(cache.ok()) << cache.status();
    return std::move(*cache);
  }

  // Prefills `prompt`, then decodes `tokens` one decode_step at a time.
  // Returns the logits of each step, [n, n_vocab].
  std::vector<float> stepwise(const std::vector<int32_t>& prompt, const std::vector<int32_t>& tokens,
                              KvCache& kv) {
    std::vector<float> last;
    EXPECT_TRUE(engine_->prefill(prompt, kv, &last).ok());
    std::vector<float> out;
    for (int32_t t : tokens) {
      std::vector<float> logits;
      EXPECT_TRUE(engine_->decode_step(t, kv, &logits).ok());
      out.insert(out.end(), logits.begin(), logits.end());
    }
    return out;
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Engine> engine_;
};

TEST_P(DecodeRowsTest, DraftOfOneSequenceEqualsDecodeStepsBitForBit) {
  const int n_vocab = model_->spec().n_vocab;
  const auto prompt = random_tokens(37, n_vocab, 5);
  const auto draft = random_tokens(7, n_vocab, 6);
  auto kv_steps = new_cache(64);
  const std::vector<float> expected = stepwise(prompt, draft, *kv_steps);

  auto kv_rows = new_cache(64);
  std::vector<float> last;
  ASSERT_TRUE(engine_->prefill(prompt, *kv_rows, &last).ok());
  std::vector<Engine::DecodeRow> rows;
  for (int32_t t : draft) rows.push_back({t, kv_rows.get()});
  std::vector<float> logits(draft.size() * static_cast<size_t>(n_vocab));
  ASSERT_TRUE(engine_->decode_rows(rows, logits.data()).ok());
  EXPECT_EQ(kv_rows->size(), kv_steps->size());
  for (size_t i = 0; i < draft.size(); ++i) {
    EXPECT_TRUE(bits_equal(logits.data() + i * n_vocab, expected.data() + i * n_vocab, n_vocab)) << "row " << i;
  }
  // The K/V the rows stored is the steps' too: a next step from either
  // cache gives the same logits.
  std::vector<float> next_rows, next_steps;
  ASSERT_TRUE(engine_->decode_step(3, *kv_rows, &next_rows).ok());
  ASSERT_TRUE(engine_->decode_step(3, *kv_steps, &next_steps).ok());
  EXPECT_TRUE(bits_equal(next_rows.data(), next_steps.data(), next_rows.size()));
}

TEST_P(DecodeRowsTest, RejectedRowsRollBackToTheDecodeStepsState) {
  // Verify 6 rows, keep 2 (set_size), then decode on: the same as decoding
  // the 2 kept tokens alone, so rows past the accepted point leave nothing.
  const int n_vocab = model_->spec().n_vocab;
  const auto prompt = random_tokens(29, n_vocab, 7);
  const auto draft = random_tokens(6, n_vocab, 8);
  const std::vector<int32_t> kept_then = {draft[0], draft[1], 17, 18};
  auto kv_steps = new_cache(64);
  const std::vector<float> expected = stepwise(prompt, kept_then, *kv_steps);

  auto kv = new_cache(64);
  std::vector<float> last;
  ASSERT_TRUE(engine_->prefill(prompt, *kv, &last).ok());
  std::vector<Engine::DecodeRow> rows;
  for (int32_t t : draft) rows.push_back({t, kv.get()});
  std::vector<float> logits(draft.size() * static_cast<size_t>(n_vocab));
  ASSERT_TRUE(engine_->decode_rows(rows, logits.data()).ok());
  kv->set_size(static_cast<int64_t>(prompt.size()) + 2);
  std::vector<float> step;
  ASSERT_TRUE(engine_->decode_step(17, *kv, &step).ok());
  EXPECT_TRUE(bits_equal(step.data(), expected.data() + 2 * static_cast<size_t>(n_vocab), n_vocab));
  ASSERT_TRUE(engine_->decode_step(18, *kv, &step).ok());
  EXPECT_TRUE(bits_equal(step.data(), expected.data() + 3 * static_cast<size_t>(n_vocab), n_vocab));
}

TEST_P(DecodeRowsTest, OneStepOfSeveralSequencesEqualsEachAlone) {
  const int n_vocab = model_->spec().n_vocab;
  constexpr int kSequences = 4;
  std::vector<std::unique_ptr<KvCache>> alone, batched;
  std::vector<std::vector<float>> expected;
  std::vector<int32_t> next;
  for (int i = 0; i < kSequences; ++i) {
    // Different prompt lengths: the rows run at different positions.
    const auto prompt = random_tokens(11 + 9 * i, n_vocab, 20 + i);
    next.push_back(static_cast<int32_t>((i * 97 + 5) % n_vocab));
    alone.push_back(new_cache(64));
    expected.push_back(stepwise(prompt, {next.back()}, *alone.back()));
    batched.push_back(new_cache(64));
    std::vector<float> last;
    ASSERT_TRUE(engine_->prefill(prompt, *batched.back(), &last).ok());
  }
  std::vector<Engine::DecodeRow> rows;
  for (int i = 0; i < kSequences; ++i) rows.push_back({next[i], batched[i].get()});
  std::vector<float> logits(kSequences * static_cast<size_t>(n_vocab));
  ASSERT_TRUE(engine_->decode_rows(rows, logits.data()).ok());
  for (int i = 0; i < kSequences; ++i) {
    EXPECT_TRUE(bits_equal(logits.data() + i * n_vocab, expected[i].data(), n_vocab)) << "sequence " << i;
    EXPECT_EQ(batched[i]->size(), alone[i]->size());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DecodeRowsTest,
    ::testing::Values(RowsCase{"tiny", GgmlType::kQ4_0, "f32"}, RowsCase{"tiny", GgmlType::kQ4_0, "int8-g16"},
                      RowsCase{"tiny", GgmlType::kQ4_0, "int4-pc-kg128-g16"},
                      RowsCase{"tiny", GgmlType::kQ8_0, "int8-g16"}, RowsCase{"tiny", GgmlType::kF16, "f32"},
                      RowsCase{"kjv", GgmlType::kQ4_K, "int4-pc-kg128-g32"},
                      RowsCase{"tiny-qwen2", GgmlType::kQ8_0, "int8-g16"},
                      RowsCase{"tiny-gemma3", GgmlType::kQ4_0, "int4-g16"},
                      RowsCase{"tiny-phi3", GgmlType::kQ4_0, "f32"}),
    case_name);

TEST(DecodeRowsArgs, RefusesInterleavedCachesTooManyRowsAndOverflowLeavingCachesUnchanged) {
  auto model = Model::Load(testing::synth_model_path("tiny", GgmlType::kQ4_0));
  ASSERT_TRUE(model.ok());
  Engine engine(**model, EngineOptions{1, 4});
  auto a = engine.new_f32_kv_cache(8);
  auto b = engine.new_f32_kv_cache(2);
  std::vector<float> logits(8 * static_cast<size_t>((*model)->spec().n_vocab));
  const std::vector<Engine::DecodeRow> interleaved = {{1, a.get()}, {2, b.get()}, {3, a.get()}};
  EXPECT_EQ(engine.decode_rows(interleaved, logits.data()).code(), absl::StatusCode::kInvalidArgument);
  const std::vector<Engine::DecodeRow> too_many(5, Engine::DecodeRow{1, a.get()});
  EXPECT_EQ(engine.decode_rows(too_many, logits.data()).code(), absl::StatusCode::kInvalidArgument);
  const std::vector<Engine::DecodeRow> overflow = {{1, a.get()}, {1, b.get()}, {2, b.get()}, {3, b.get()}};
  EXPECT_EQ(engine.decode_rows(overflow, logits.data()).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(a->size(), 0);
  EXPECT_EQ(b->size(), 0);
}

}  // namespace
}  // namespace baton
