// Gemma 3 (common/model/arch/gemma3.cc): the spec read from a synthetic
// gemma3 GGUF (windows, norms, the two RoPE tables), the real shapes, the
// fingerprint fields, and the sliding-window mask of every KvCache, exact to
// the position. Logits against NumPy: numpy_reference_test.cc; fast engine
// against the reference: engine_test.cc; split == local:
// tests/integration/edge_service_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/engine/engine.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/model/arch/arch.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "common/model/synth_shapes.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

std::unique_ptr<Model> load(const std::string& shape) {
  auto model = Model::Load(testing::synth_model_path(shape, GgmlType::kF32));
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

TEST(Gemma3Spec, TinyShapeReadsWindowsNormsAndBothRopeTables) {
  std::unique_ptr<Model> model = load("tiny-gemma3");
  ASSERT_NE(model, nullptr);
  const ModelSpec& s = model->spec();
  EXPECT_EQ(s.arch, "gemma3");
  EXPECT_EQ(s.layer_window, (std::vector<int32_t>{8, 8, 8, 8, 8, 0}));  // layer 5 = 6th: global
  EXPECT_TRUE(s.qk_norm);
  EXPECT_TRUE(s.post_norms);
  EXPECT_TRUE(s.gelu_ffn);
  EXPECT_TRUE(s.tied_embeddings);
  EXPECT_FLOAT_EQ(s.embedding_scale, 8.0f);  // sqrt(64)
  EXPECT_EQ(s.rope.type, RopeType::kNeox);
  EXPECT_FLOAT_EQ(s.rope.freq_base, 1e6f);
  EXPECT_EQ(s.rope.scaling_type, "linear");
  EXPECT_FLOAT_EQ(s.rope.scaling_factor, 8.0f);
  EXPECT_FLOAT_EQ(s.rope_swa_freq_base, 10000.0f);
  EXPECT_FLOAT_EQ(s.query_scale, 1.0f);
  EXPECT_EQ(kv_geometry_for(s).window(0), 8);
  EXPECT_EQ(kv_geometry_for(s).window(5), 0);
  // Local layers: base 10000, unscaled; the global one: base 1e6, positions / 8.
  const int n_rot = s.rope.n_rot;
  ASSERT_EQ(n_rot, 16);
  for (int il = 0; il < s.n_layer; ++il) {
    const std::vector<float>& table = model->rope_inv_freq(il);
    ASSERT_EQ(table.size(), 8u);
    const double base = il == 5 ? 1e6 : 1e4;
    const double scale = il == 5 ? 1.0 / 8 : 1.0;
    for (int i = 0; i < n_rot / 2; ++i) {
      EXPECT_NEAR(table[i], std::pow(base, -2.0 * i / n_rot) * scale, 1e-7) << "layer " << il << " pair " << i;
    }
  }
  EXPECT_EQ(&model->rope_inv_freq(5), &model->rope_inv_freq());
  const LayerWeights& l = model->layer(0);
  EXPECT_EQ(l.attn_q_norm.size(), 16u);
  EXPECT_EQ(l.attn_k_norm.size(), 16u);
  EXPECT_EQ(l.post_attn_norm.size(), 64u);
  EXPECT_EQ(l.post_ffn_norm.size(), 64u);
  // Norm weights are stored as (1 + w), w ~ N(0, 0.1): near 1, not all 1.
  double sum = 0;
  for (float w : l.post_attn_norm) sum += w;
  EXPECT_NEAR(sum / 64, 1.0, 0.1);
  EXPECT_NE(l.post_attn_norm[0], l.post_attn_norm[1]);
}

TEST(Gemma3Spec, OtherArchitecturesKeepLlamaDefaults) {
  std::unique_ptr<Model> model = load("tiny-qwen2");
  ASSERT_NE(model, nullptr);
  const ModelSpec& s = model->spec();
  EXPECT_TRUE(s.layer_window.empty());
  EXPECT_FALSE(s.qk_norm || s.post_norms || s.gelu_ffn);
  EXPECT_EQ(s.embedding_scale, 1.0f);
  EXPECT_EQ(s.rope_swa_freq_base, 0.0f);
  EXPECT_TRUE(model->rope_swa_inv_freq().empty());
  EXPECT_EQ(&model->rope_inv_freq(0), &model->rope_inv_freq());
  EXPECT_TRUE(model->layer(0).post_attn_norm.empty());
}

TEST(Gemma3Spec, RealShapesHaveTheirPublishedHyperparameters) {
  const SynthShape* one_b = find_synth_shape("gemma-3-1b");
  ASSERT_NE(one_b, nullptr);
  EXPECT_EQ(one_b->arch, "gemma3");
  EXPECT_EQ(one_b->n_layer, 26);
  EXPECT_EQ(one_b->n_embd, 1152);
  EXPECT_EQ(one_b->n_head, 4);
  EXPECT_EQ(one_b->n_head_kv, 1);
  EXPECT_EQ(one_b->head_dim, 256);
  EXPECT_EQ(one_b->n_ff, 6912);
  EXPECT_EQ(one_b->n_vocab, 262144);
  EXPECT_EQ(one_b->sliding_window, 512);
  EXPECT_EQ(one_b->rope_freq_base, 1e6f);
  EXPECT_EQ(one_b->rope_linear_factor, 0.0f);
  const SynthShape* four_b = find_synth_shape("gemma-3-4b");
  ASSERT_NE(four_b, nullptr);
  EXPECT_EQ(four_b->n_layer, 34);
  EXPECT_EQ(four_b->sliding_window, 1024);
  EXPECT_EQ(four_b->rope_linear_factor, 8.0f);
  // llama.cpp: every sixth layer is global: 1B has layers 5, 11, 17, 23.
  std::vector<int> global;
  for (int il = 0; il < one_b->n_layer; ++il) {
    if (gemma3_layer_is_global(il)) global.push_back(il);
  }
  EXPECT_EQ(global, (std::vector<int>{5, 11, 17, 23}));
}

TEST(Gemma3Fingerprint, WindowsAndLocalRopeAreFieldsOfWindowedModelsOnly) {
  std::unique_ptr<Model> gemma = load("tiny-gemma3");
  std::unique_ptr<Model> llama = load("tiny");
  ASSERT_NE(gemma, nullptr);
  ASSERT_NE(llama, nullptr);
  auto g = model_fingerprint(*gemma);
  auto l = model_fingerprint(*llama);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(l.ok()) << l.status();
  ASSERT_NE(g->find("layer_window"), nullptr);
  EXPECT_EQ(*g->find("layer_window"), "8x5,0");
  ASSERT_NE(g->find("rope.swa_inv_freq_digest"), nullptr);
  EXPECT_NE(*g->find("rope.swa_inv_freq_digest"), *g->find("rope.inv_freq_digest"));
  EXPECT_NE(g->find("qk_norm"), nullptr);
  // Full-attention models keep the fields (and so the digests) they had.
  EXPECT_EQ(l->find("layer_window"), nullptr);
  EXPECT_EQ(l->find("rope.swa_inv_freq_digest"), nullptr);
  EXPECT_EQ(l->find("qk_norm"), nullptr);
}

// ---------------------------------------------------------------------------
// The sliding-window mask of KvCache::attend, for the F32 cache and the edge's
// quantized store: a query at p sees keys (p - W, p] exactly.
// ---------------------------------------------------------------------------

constexpr int kWindow = 5;
// Layer 0 has window kWindow, layer 1 full attention; 4 query heads on 2 KV heads (GQA).
KvGeometry window_geometry() { return KvGeometry{2, 4, 2, 32, {kWindow, 0}}; }

std::vector<float> random_rows(int64_t n, int64_t width, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * width));
  for (float& v : x) v = normal(rng);
  return x;
}

std::unique_ptr<KvCache> make_cache(const std::string& kind, const KvGeometry& g, int64_t capacity) {
  if (kind == "f32") return std::make_unique<F32KvCache>(g, capacity);
  auto config = parse_kv_codec_config(kind);
  EXPECT_TRUE(config.ok()) << config.status();
  auto cache = QuantizedKvCache::Create(g, capacity, *config);
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? std::move(*cache) : nullptr;
}

class SlidingWindowAttend : public ::testing::TestWithParam<std::string> {
 protected:
  static constexpr int64_t kTokens = 24;
  void SetUp() override {
    cache_ = make_cache(GetParam(), g_, kTokens);
    ASSERT_NE(cache_, nullptr);
    for (int layer = 0; layer < g_.n_layer; ++layer) {
      const auto k = random_rows(kTokens, g_.kv_dim(), 10 + layer);
      const auto v = random_rows(kTokens, g_.kv_dim(), 20 + layer);
      ASSERT_TRUE(cache_->store(layer, 0, kTokens, k.data(), v.data()).ok());
    }
    cache_->set_size(kTokens);
  }
  // Attention output of one query at position p.
  std::vector<float> attend_one(int layer, int64_t p, const std::vector<float>& q) const {
    std::vector<float> out(g_.q_dim());
    cache_->attend(layer, p, 1, q.data(), out.data(), nullptr);
    return out;
  }
  // Overwrites token t's K and V in `layer` with rows unlike the others.
  void overwrite(int layer, int64_t t) {
    const auto k = random_rows(1, g_.kv_dim(), 999);
    std::vector<float> v = random_rows(1, g_.kv_dim(), 998);
    for (float& x : v) x *= 10;
    ASSERT_TRUE(cache_->store(layer, t, 1, k.data(), v.data()).ok());
  }
  static double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
    return m;
  }

  const KvGeometry g_ = window_geometry();
  std::unique_ptr<KvCache> cache_;
};

// Fails if the window starts one token early (p - W) or late (p - W + 2).
TEST_P(SlidingWindowAttend, QuerySeesExactlyTheLastWindowKeys) {
  const auto q = random_rows(1, g_.q_dim(), 77);
  const int64_t p = 15;
  const std::vector<float> before = attend_one(0, p, q);
  overwrite(0, p - kWindow);  // just outside: no effect, bit for bit
  EXPECT_EQ(attend_one(0, p, q), before) << "key p - W must be masked";
  overwrite(0, p - kWindow + 1);  // the oldest key inside
  EXPECT_GT(max_diff(attend_one(0, p, q), before), 1e-3) << "key p - W + 1 must be seen";
}

TEST_P(SlidingWindowAttend, FullAttentionLayerAndEarlyQueriesSeeEveryKey) {
  const auto q = random_rows(1, g_.q_dim(), 78);
  const std::vector<float> full_before = attend_one(1, 15, q);
  const std::vector<float> early_before = attend_one(0, kWindow - 1, q);  // window not yet full
  overwrite(1, 0);
  overwrite(0, 0);
  EXPECT_GT(max_diff(attend_one(1, 15, q), full_before), 1e-3) << "layer 1 has no window";
  EXPECT_GT(max_diff(attend_one(0, kWindow - 1, q), early_before), 1e-3) << "p < W sees key 0";
}

// A batch of queries (prefill) gets, row by row, what single queries (decode) get.
TEST_P(SlidingWindowAttend, BatchedQueriesEqualOneByOne) {
  const int64_t pos = 3, n = kTokens - pos;  // crosses the point where the window fills
  const auto q = random_rows(n, g_.q_dim(), 79);
  std::vector<float> batched(q.size());
  cache_->attend(0, pos, n, q.data(), batched.data(), nullptr);
  for (int64_t t = 0; t < n; ++t) {
    const std::vector<float> qt(q.begin() + t * g_.q_dim(), q.begin() + (t + 1) * g_.q_dim());
    const std::vector<float> one = attend_one(0, pos + t, qt);
    for (int64_t i = 0; i < g_.q_dim(); ++i) {
      ASSERT_NEAR(batched[t * g_.q_dim() + i], one[i], 1e-6) << "query " << pos + t << " i " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Caches, SlidingWindowAttend, ::testing::Values("f32", "f16", "int8-g32", "int4-g32"),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

// The engine masks as the reference does: with window 8 and 40 tokens, the
// logits of a windowed model depend on the window (a model with every layer
// global gives other logits), and the fast engine matches the reference
// (see engine_test.cc) only with the mask applied.
TEST(Gemma3Engine, WindowChangesTheLogitsOfLongPrompts) {
  std::unique_ptr<Model> model = load("tiny-gemma3");
  ASSERT_NE(model, nullptr);
  std::vector<int32_t> tokens(40);
  for (int i = 0; i < 40; ++i) tokens[i] = (i * 37 + 11) % model->spec().n_vocab;
  Engine engine(*model, EngineOptions{2, 16});
  auto windowed = engine.new_f32_kv_cache(40);
  KvGeometry no_window = engine.kv_geometry();
  no_window.layer_window.clear();
  F32KvCache full(no_window, 40);
  std::vector<float> a, b;
  ASSERT_TRUE(engine.prefill(tokens, *windowed, nullptr, &a).ok());
  ASSERT_TRUE(engine.prefill(tokens, full, nullptr, &b).ok());
  const int64_t v = model->spec().n_vocab;
  double first_rows = 0, last_row = 0;
  for (int64_t i = 0; i < 8 * v; ++i) first_rows = std::max(first_rows, std::fabs(double{a[i]} - b[i]));
  for (int64_t i = 39 * v; i < 40 * v; ++i) last_row = std::max(last_row, std::fabs(double{a[i]} - b[i]));
  EXPECT_EQ(first_rows, 0.0) << "positions < W see every key either way";
  EXPECT_GT(last_row, 1e-2) << "position 39 sees only keys 32..39 in the local layers";
}

}  // namespace
}  // namespace baton
