// Context shift (edge_decode/generate/context_overflow.h, shift_kv_tail):
//   - the re-rotation is RoPE's: layer 0's keys depend on the token and its
//     position only, so the shifted keys equal a fresh prefill's keys at the
//     new positions up to f16 rounding, for NORM (llama) and NEOX (qwen2)
//     pairs and Llama 3.1 frequency factors, while keys moved without the
//     rotation are far off; layer 0's values are bit-identical;
//   - the next turn's perplexity on the bundled model's held-out text after a
//     shift, against the truncate baseline (a fresh prefill of the kept
//     tokens), per store codec (both printed).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/engine/engine.h"
#include "common/engine/sampler.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/model/model.h"
#include "common/util/fp16.h"
#include "edge_decode/generate/context_overflow.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

// A store of the default variant of `bits` ("f16", "int8", "int4") for `geometry`.
std::unique_ptr<QuantizedKvCache> store_of(const KvGeometry& geometry, const std::string& bits, int64_t capacity) {
  const KvCodecConfig::Bits width = bits == "f16"    ? KvCodecConfig::Bits::kF16
                                    : bits == "int8" ? KvCodecConfig::Bits::kInt8
                                                     : KvCodecConfig::Bits::kInt4;
  const KvCodecConfig config = default_kv_codec_config(width, geometry);
  absl::StatusOr<std::unique_ptr<QuantizedKvCache>> store =
      QuantizedKvCache::Create(geometry, capacity, QuantizedKvCache::store_config_for(config));
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(*store);
}

// Layer 0's F16 keys or values of positions [first, first + n), f32.
std::vector<float> layer0(const QuantizedKvCache& store, bool is_key, int64_t first, int64_t n) {
  absl::StatusOr<QuantizedKvBlock> block = store.export_block(0, is_key, first, n);
  EXPECT_TRUE(block.ok()) << block.status();
  std::vector<float> out(block->codes.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    const uint16_t half = static_cast<uint16_t>(block->codes[2 * i] | (block->codes[2 * i + 1] << 8));
    out[i] = fp16_to_fp32(half);
  }
  return out;
}

// Largest ||a - b|| / ||b|| over the rows of `row` elements.
double max_row_error(const std::vector<float>& a, const std::vector<float>& b, int64_t row) {
  double worst = 0;
  for (size_t start = 0; start < b.size(); start += static_cast<size_t>(row)) {
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < row; ++i) {
      diff += std::pow(a[start + i] - b[start + i], 2);
      norm += std::pow(b[start + i], 2);
    }
    worst = std::max(worst, std::sqrt(diff / std::max(norm, 1e-12)));
  }
  return worst;
}

class ShiftRotationTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ShiftRotationTest, ShiftedLayer0KeysEqualAFreshPrefillAtTheNewPositions) {
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(testing::synth_model_path(GetParam(), GgmlType::kF16));
  ASSERT_TRUE(model.ok()) << model.status();
  Engine engine(**model, EngineOptions{1, 16});
  const KvGeometry geometry = engine.kv_geometry();
  const KvRope rope = kv_rope_of(**model);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 60; ++i) tokens.push_back(3 + (i * 37 + 11) % 500);
  constexpr int64_t kPrefix = 8, kTail = 30, kEnd = 60;

  std::unique_ptr<QuantizedKvCache> full = store_of(geometry, "f16", 64);
  ASSERT_TRUE(engine.prefill(tokens, *full, nullptr).ok());
  std::unique_ptr<QuantizedKvCache> shifted = store_of(geometry, "f16", 64);
  ASSERT_EQ(*copy_kv_prefix(*full, kPrefix, *shifted), kPrefix);
  const absl::StatusOr<int64_t> held = shift_kv_tail(*full, kTail, kEnd, rope, *shifted);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(*held, kPrefix + kEnd - kTail);

  std::vector<int32_t> kept(tokens.begin(), tokens.begin() + kPrefix);
  kept.insert(kept.end(), tokens.begin() + kTail, tokens.end());
  std::unique_ptr<QuantizedKvCache> fresh = store_of(geometry, "f16", 64);
  ASSERT_TRUE(engine.prefill(kept, *fresh, nullptr).ok());

  const int64_t n = kEnd - kTail;
  const double error = max_row_error(layer0(*shifted, true, kPrefix, n), layer0(*fresh, true, kPrefix, n),
                                     geometry.head_dim);
  EXPECT_LT(error, 3e-3) << "shifted keys vs keys computed at the new positions";
  // Without the rotation the keys sit at their old positions: far off.
  const double unrotated = max_row_error(layer0(*full, true, kTail, n), layer0(*fresh, true, kPrefix, n),
                                         geometry.head_dim);
  EXPECT_GT(unrotated, 0.1);
  EXPECT_EQ(layer0(*shifted, false, kPrefix, n), layer0(*fresh, false, kPrefix, n)) << "values moved as they are";
  std::printf("[ shift ] %s: layer-0 key error %.2e after the shift, %.2e without the rotation\n", GetParam(), error,
              unrotated);
}

INSTANTIATE_TEST_SUITE_P(RopeKinds, ShiftRotationTest, ::testing::Values("tiny", "tiny-llama3", "tiny-qwen2"),
                         [](const auto& test_param) {
                           std::string name = test_param.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

TEST(ShiftWindowTest, SlidingWindowModelsAreRefused) {
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(testing::synth_model_path("tiny-gemma3", GgmlType::kF16));
  ASSERT_TRUE(model.ok()) << model.status();
  Engine engine(**model, EngineOptions{1, 16});
  std::unique_ptr<QuantizedKvCache> full = store_of(engine.kv_geometry(), "f16", 32);
  std::vector<int32_t> tokens(20, 7);
  ASSERT_TRUE(engine.prefill(tokens, *full, nullptr).ok());
  std::unique_ptr<QuantizedKvCache> to = store_of(engine.kv_geometry(), "f16", 32);
  const absl::StatusOr<int64_t> held = shift_kv_tail(*full, 10, 20, kv_rope_of(**model), *to);
  EXPECT_EQ(held.status().code(), absl::StatusCode::kFailedPrecondition) << held.status();
}

// The bundled model's held-out token stream (deploy/models).
std::vector<int32_t> heldout_ids() {
  std::ifstream in(testing::source_dir() + "/deploy/models/baton-tiny-kjv.heldout.ids");
  std::vector<int32_t> ids;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    for (int32_t id; words >> id;) ids.push_back(id);
  }
  return ids;
}

// Perplexity of `next` after `last` on `store` (teacher forcing, decode steps).
double next_turn_perplexity(Engine& engine, QuantizedKvCache& store, int32_t last, const std::vector<int32_t>& next) {
  std::vector<float> logits;
  EXPECT_TRUE(engine.decode_step(last, store, &logits).ok());
  double nll = 0;
  for (size_t i = 0; i < next.size(); ++i) {
    nll -= token_logprobs(logits, next[i], 0).logprob;
    if (i + 1 < next.size()) {
      EXPECT_TRUE(engine.decode_step(next[i], store, &logits).ok());
    }
  }
  return std::exp(nll / static_cast<double>(next.size()));
}

class ShiftPerplexityTest : public ::testing::TestWithParam<const char*> {};

// A conversation of 700 held-out tokens whose tokens [32, 300) are dropped
// (the first 32 kept), then the next 128 tokens: their perplexity after a
// shift of the kept cells vs after a fresh prefill of the kept tokens.
TEST_P(ShiftPerplexityTest, NextTurnPerplexityAfterAShiftIsCloseToTheTruncateBaseline) {
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Load(testing::source_dir() + "/deploy/models/baton-tiny-kjv-f16.gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  Engine engine(**model, EngineOptions{1, 16});
  const KvGeometry geometry = engine.kv_geometry();
  const std::vector<int32_t> ids = heldout_ids();
  constexpr int64_t kPrefix = 32, kTail = 300, kEnd = 700, kNext = 128;
  ASSERT_GE(static_cast<int64_t>(ids.size()), kEnd + kNext);
  const std::vector<int32_t> held(ids.begin(), ids.begin() + kEnd - 1);  // the last one runs as a decode step
  const std::vector<int32_t> next(ids.begin() + kEnd, ids.begin() + kEnd + kNext);

  std::unique_ptr<QuantizedKvCache> full = store_of(geometry, GetParam(), kEnd + kNext);
  ASSERT_TRUE(engine.prefill(held, *full, nullptr).ok());
  std::unique_ptr<QuantizedKvCache> shifted = store_of(geometry, GetParam(), kEnd + kNext);
  ASSERT_EQ(*copy_kv_prefix(*full, kPrefix, *shifted), kPrefix);
  ASSERT_TRUE(shift_kv_tail(*full, kTail, kEnd - 1, kv_rope_of(**model), *shifted).ok());

  std::vector<int32_t> kept(held.begin(), held.begin() + kPrefix);
  kept.insert(kept.end(), held.begin() + kTail, held.end());
  std::unique_ptr<QuantizedKvCache> truncated = store_of(geometry, GetParam(), kEnd + kNext);
  ASSERT_TRUE(engine.prefill(kept, *truncated, nullptr).ok());
  ASSERT_EQ(shifted->size(), truncated->size());

  const int32_t last = ids[kEnd - 1];
  const double shift_ppl = next_turn_perplexity(engine, *shifted, last, next);
  const double truncate_ppl = next_turn_perplexity(engine, *truncated, last, next);
  const double full_ppl = next_turn_perplexity(engine, *full, last, next);
  std::printf("[ shift ] %s: next-turn perplexity %.3f after shift, %.3f truncate baseline (%+.2f%%), %.3f with "
              "nothing dropped\n",
              GetParam(), shift_ppl, truncate_ppl, 100.0 * (shift_ppl / truncate_ppl - 1), full_ppl);
  RecordProperty("shift_ppl", std::to_string(shift_ppl));
  RecordProperty("truncate_ppl", std::to_string(truncate_ppl));
  ASSERT_TRUE(std::isfinite(shift_ppl) && std::isfinite(truncate_ppl));
  EXPECT_LT(shift_ppl, 1.10 * truncate_ppl);
}

INSTANTIATE_TEST_SUITE_P(StoreCodecs, ShiftPerplexityTest, ::testing::Values("f16", "int8", "int4"),
                         [](const auto& test_param) { return std::string(test_param.param); });

}  // namespace
}  // namespace baton
