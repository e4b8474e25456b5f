// qwen3 (QK-norm, head_dim from key_length) and phi3 (fused QKV and gate|up,
// partial rotary, LongRoPE with short/long factors and the attention factor):
// the spec read from GGUF, the zero-copy fused views, the golden reference
// and the fast engine against the independent NumPy forward, the fast engine
// against the reference per weight type, and the fingerprint fields that say
// which LongRoPE set the KV was made with.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/engine/engine.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/engine/reference_engine.h"
#include "common/gguf/ggml_quant.h"
#include "common/gguf/gguf_file.h"
#include "common/gguf/gguf_writer.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

std::unique_ptr<Model> load(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(path);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

// A copy of `in` with its metadata passed through `edit` (tensors unchanged).
std::string rewrite_metadata(const std::string& in, const std::string& tag,
                             const std::function<void(const std::string& key, const GgufValue& value,
                                                      GgufWriter& out)>& edit) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(in);
  EXPECT_TRUE(file.ok()) << file.status();
  GgufWriter w;
  for (const auto& [key, value] : (*file)->metadata()) {
    if (key != "general.alignment") edit(key, value, w);
  }
  for (const GgufTensorInfo& t : (*file)->tensors()) w.add_tensor_copy(t.name, t.type, t.dims, t.data);
  const std::string out = testing::make_temp_dir(tag) + "/model.gguf";
  EXPECT_TRUE(w.write(out).ok());
  return out;
}

// tiny-phi3 (F32) served with a trained context of `context` tokens, and
// without rope.scaling.attn_factor when drop_attn_factor (computed instead).
std::string phi3_variant(int context, bool drop_attn_factor) {
  return rewrite_metadata(testing::synth_model_path("tiny-phi3", GgmlType::kF32), "phi3-variant",
                          [&](const std::string& key, const GgufValue& value, GgufWriter& out) {
                            if (key == "phi3.context_length") {
                              out.set_u32(key, static_cast<uint32_t>(context));
                            } else if (!(drop_attn_factor && key == "phi3.rope.scaling.attn_factor")) {
                              out.set(key, value);
                            }
                          });
}

std::vector<int32_t> test_tokens(int n, int n_vocab, uint32_t salt) {
  std::vector<int32_t> tokens(n);
  for (int i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>((7 + i * 131 + salt * 53) % n_vocab);
  return tokens;
}

// ---------------------------------------------------------------------------
// What is read from the file
// ---------------------------------------------------------------------------

TEST(ArchQwen3, SpecHasQkNormNoBiasesAndHeadDimFromKeyLength) {
  std::unique_ptr<Model> model = load(testing::synth_model_path("tiny-qwen3", GgmlType::kF32));
  ASSERT_NE(model, nullptr);
  const ModelSpec& s = model->spec();
  EXPECT_EQ(s.arch, "qwen3");
  EXPECT_TRUE(s.qk_norm);
  EXPECT_FALSE(s.qkv_bias);
  EXPECT_EQ(s.rope.type, RopeType::kNeox);
  EXPECT_EQ(s.head_dim, 32);
  EXPECT_NE(s.head_dim, s.n_embd / s.n_head);
  EXPECT_TRUE(s.tied_embeddings);
  ASSERT_EQ(model->layer(1).attn_q_norm.size(), 32u);
  ASSERT_EQ(model->layer(1).attn_k_norm.size(), 32u);
  EXPECT_TRUE(model->layer(1).bq.empty());
}

TEST(ArchPhi3, SpecHasPartialRotaryAndTheLongFactorsWhenTheContextExceedsTheOriginal) {
  std::unique_ptr<Model> model = load(testing::synth_model_path("tiny-phi3", GgmlType::kF32));
  ASSERT_NE(model, nullptr);
  const ModelSpec& s = model->spec();
  EXPECT_EQ(s.arch, "phi3");
  EXPECT_FALSE(s.qk_norm);
  EXPECT_EQ(s.rope.n_rot, 12);
  EXPECT_EQ(s.rope.scaling_type, "longrope");
  EXPECT_EQ(s.rope.original_context, 1024);
  EXPECT_EQ(s.rope.long_rope, LongRopeFactors::kLong);  // 4096 > 1024
  EXPECT_FLOAT_EQ(s.rope.attn_factor, static_cast<float>(std::sqrt(1.0 + std::log(4.0) / std::log(1024.0))));
  // inv_freq = base^(-2i/n_rot) / long_factor[i]; the last long factor is 4.
  const std::vector<float>& inv_freq = model->rope_inv_freq();
  ASSERT_EQ(inv_freq.size(), 6u);
  EXPECT_NEAR(inv_freq[5], std::pow(10000.0, -10.0 / 12) / 4.0, 1e-9);

  std::unique_ptr<Model> short_model = load(phi3_variant(1024, false));
  ASSERT_NE(short_model, nullptr);
  EXPECT_EQ(short_model->spec().rope.long_rope, LongRopeFactors::kShort);  // 1024 is not > 1024
  EXPECT_NEAR(short_model->rope_inv_freq()[5], std::pow(10000.0, -10.0 / 12) / 1.5, 1e-9);
}

TEST(ArchPhi3, AttnFactorIsComputedWhenTheFileDoesNotStateIt) {
  std::unique_ptr<Model> model = load(phi3_variant(8192, true));
  ASSERT_NE(model, nullptr);
  EXPECT_FLOAT_EQ(model->spec().rope.attn_factor,
                  static_cast<float>(std::sqrt(1.0 + std::log(8.0) / std::log(1024.0))));
}

TEST(ArchPhi3, FusedTensorsAreZeroCopyRowRangesInQkvAndGateUpOrder) {
  std::unique_ptr<Model> model = load(testing::synth_model_path("tiny-phi3", GgmlType::kQ8_0));
  ASSERT_NE(model, nullptr);
  const ModelSpec& s = model->spec();
  const GgufTensorInfo* qkv = model->file().find_tensor("blk.1.attn_qkv.weight");
  const GgufTensorInfo* gate_up = model->file().find_tensor("blk.1.ffn_up.weight");
  ASSERT_NE(qkv, nullptr);
  ASSERT_NE(gate_up, nullptr);
  EXPECT_EQ(model->file().find_tensor("blk.1.ffn_gate.weight"), nullptr);
  const int64_t row_bytes = ggml_row_bytes(GgmlType::kQ8_0, s.n_embd);
  const LayerWeights& l = model->layer(1);
  EXPECT_EQ(l.wq.data, qkv->data);
  EXPECT_EQ(l.wk.data, qkv->data + s.q_dim() * row_bytes);
  EXPECT_EQ(l.wv.data, qkv->data + (s.q_dim() + s.kv_dim()) * row_bytes);
  EXPECT_EQ(l.wq.rows, s.q_dim());
  EXPECT_EQ(l.wk.rows, s.kv_dim());
  EXPECT_EQ(l.wv.rows, s.kv_dim());
  EXPECT_EQ(l.w_gate.data, gate_up->data);
  EXPECT_EQ(l.w_up.data, gate_up->data + s.n_ff * row_bytes);
  EXPECT_EQ(l.w_gate.rows, s.n_ff);
  EXPECT_EQ(l.w_up.rows, s.n_ff);
}

TEST(ArchPhi3, OneLongRopeFactorTensorWithoutTheOtherIsRefusedByName) {
  const std::string path = testing::synth_model_path("tiny-phi3", GgmlType::kF32);
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok());
  GgufWriter w;
  for (const auto& [key, value] : (*file)->metadata()) {
    if (key != "general.alignment") w.set(key, value);
  }
  for (const GgufTensorInfo& t : (*file)->tensors()) {
    if (t.name != "rope_factors_short.weight") w.add_tensor_copy(t.name, t.type, t.dims, t.data);
  }
  const std::string out = testing::make_temp_dir("phi3-half") + "/model.gguf";
  ASSERT_TRUE(w.write(out).ok());
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(out);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("rope_factors_short.weight"), std::string::npos) << model.status();
}

// ---------------------------------------------------------------------------
// Golden reference and fast engine against the independent NumPy forward
// ---------------------------------------------------------------------------

struct NumpyCase {
  std::string name;
  std::function<std::string()> path;
};

void PrintTo(const NumpyCase& c, std::ostream* os) { *os << c.name; }

class NewArchNumpy : public ::testing::TestWithParam<NumpyCase> {};

// Max |engine - numpy| relative to the largest |numpy logit|, for both engines.
TEST_P(NewArchNumpy, ReferenceAndEngineMatchNumpyLogits) {
  const std::string path = GetParam().path();
  std::unique_ptr<Model> model = load(path);
  ASSERT_NE(model, nullptr);
  const ModelSpec& s = model->spec();
  const std::vector<int32_t> tokens = test_tokens(24, s.n_vocab, 1);
  std::string error;
  const std::vector<float> expected = testing::numpy_reference_logits(path, tokens, &error);
  ASSERT_EQ(expected.size(), tokens.size() * s.n_vocab) << "numpy reference failed: " << error;

  ReferenceEngine ref(*model);
  Engine engine(*model, EngineOptions{2, 7});
  std::unique_ptr<KvCache> kv = engine.new_f32_kv_cache(static_cast<int64_t>(tokens.size()));
  std::vector<float> fast;
  ASSERT_TRUE(engine.prefill(tokens, *kv, nullptr, &fast).ok());
  double worst_ref = 0, worst_fast = 0, scale = 1;
  for (float x : expected) scale = std::max(scale, std::fabs(static_cast<double>(x)));
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::vector<float> r = ref.forward(tokens[t]);
    for (int i = 0; i < s.n_vocab; ++i) {
      const double e = expected[t * s.n_vocab + i];
      worst_ref = std::max(worst_ref, std::fabs(r[i] - e));
      worst_fast = std::max(worst_fast, std::fabs(fast[t * s.n_vocab + i] - e));
    }
  }
  std::printf("[ figures  ] %s vs numpy: reference max |err| %.3g, engine %.3g (largest |logit| %.3g)\n",
              GetParam().name.c_str(), worst_ref, worst_fast, scale);
  RecordProperty("reference_vs_numpy_max_rel", std::to_string(worst_ref / scale));
  RecordProperty("engine_vs_numpy_max_rel", std::to_string(worst_fast / scale));
  // F32 weights: float32 vs float64 arithmetic only.
  EXPECT_LE(worst_ref / scale, 1e-5);
  EXPECT_LE(worst_fast / scale, 2e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, NewArchNumpy,
    ::testing::Values(
        NumpyCase{"tiny_qwen3", [] { return testing::synth_model_path("tiny-qwen3", GgmlType::kF32); }},
        NumpyCase{"tiny_phi3_long", [] { return testing::synth_model_path("tiny-phi3", GgmlType::kF32); }},
        NumpyCase{"tiny_phi3_short", [] { return phi3_variant(1024, false); }},
        NumpyCase{"tiny_phi3_computed_attn_factor", [] { return phi3_variant(8192, true); }}),
    [](const ::testing::TestParamInfo<NumpyCase>& param_info) { return param_info.param.name; });

// ---------------------------------------------------------------------------
// Fast engine against the golden reference, per weight type
// ---------------------------------------------------------------------------

struct EngineCase {
  std::string shape;
  GgmlType type;
  double tolerance;  // max |fast - reference| / max |reference logit|
  double nmse;       // sum((fast - ref)^2) / sum(ref^2), as llama.cpp's test-backend-ops
  double kv_error;   // max |fast K/V - reference K/V|
};

class NewArchEngine : public ::testing::TestWithParam<EngineCase> {};

TEST_P(NewArchEngine, PrefillLogitsAndKvMatchTheReference) {
  std::unique_ptr<Model> model = load(testing::synth_model_path(GetParam().shape, GetParam().type));
  ASSERT_NE(model, nullptr);
  const ModelSpec& s = model->spec();
  const int n = 40;
  const std::vector<int32_t> tokens = test_tokens(n, s.n_vocab, 2);
  Engine engine(*model, EngineOptions{2, 16});
  std::unique_ptr<KvCache> kv = engine.new_f32_kv_cache(n);
  std::vector<float> all;
  ASSERT_TRUE(engine.prefill(tokens, *kv, nullptr, &all).ok());
  ReferenceEngine ref(*model);
  double worst = 0, worst_kv = 0, err_sq = 0, ref_sq = 0;
  for (int t = 0; t < n; ++t) {
    const std::vector<float> expected = ref.forward(tokens[t]);
    double scale = 1;
    for (float x : expected) scale = std::max(scale, std::fabs(static_cast<double>(x)));
    for (int i = 0; i < s.n_vocab; ++i) {
      const double diff = all[static_cast<size_t>(t) * s.n_vocab + i] - expected[i];
      worst = std::max(worst, std::fabs(diff) / scale);
      err_sq += diff * diff;
      ref_sq += double{expected[i]} * expected[i];
    }
  }
  const auto& f32 = static_cast<const F32KvCache&>(*kv);
  for (int l = 0; l < s.n_layer; ++l) {
    for (int t = 0; t < n; ++t) {
      for (int64_t i = 0; i < s.kv_dim(); ++i) {
        worst_kv = std::max(worst_kv, std::fabs(static_cast<double>(f32.k_row(l, t)[i]) - ref.k(l, t)[i]));
        worst_kv = std::max(worst_kv, std::fabs(static_cast<double>(f32.v_row(l, t)[i]) - ref.v(l, t)[i]));
      }
    }
  }
  std::printf("[ figures  ] %s/%s engine vs reference: max rel logit err %.3g, NMSE %.3g, max |K/V err| %.3g\n",
              GetParam().shape.c_str(), std::string(ggml_type_name(GetParam().type)).c_str(), worst,
              err_sq / ref_sq, worst_kv);
  RecordProperty("logit_max_rel_error", std::to_string(worst));
  EXPECT_LE(worst, GetParam().tolerance);
  EXPECT_LE(err_sq / ref_sq, GetParam().nmse);
  EXPECT_LE(worst_kv, GetParam().kv_error);
}

INSTANTIATE_TEST_SUITE_P(
    Types, NewArchEngine,
    // 8-bit activations for Q8_0/Q4_0 (as llama.cpp): a looser bound on the
    // worst logit, and the NMSE bound of engine_test.cc.
    ::testing::Values(EngineCase{"tiny-qwen3", GgmlType::kF32, 2e-5, 1e-9, 1e-4},
                      EngineCase{"tiny-qwen3", GgmlType::kF16, 2e-5, 1e-9, 1e-4},
                      EngineCase{"tiny-qwen3", GgmlType::kQ8_0, 8e-2, 1e-3, 0.2},
                      EngineCase{"tiny-qwen3", GgmlType::kQ4_0, 8e-2, 1e-3, 0.2},
                      EngineCase{"tiny-phi3", GgmlType::kF32, 2e-5, 1e-9, 1e-4},
                      EngineCase{"tiny-phi3", GgmlType::kF16, 2e-5, 1e-9, 1e-4},
                      EngineCase{"tiny-phi3", GgmlType::kQ8_0, 8e-2, 1e-3, 0.2},
                      EngineCase{"tiny-phi3", GgmlType::kQ4_0, 8e-2, 1e-3, 0.2}),
    [](const ::testing::TestParamInfo<EngineCase>& param_info) {
      std::string name = param_info.param.shape + "_" + std::string(ggml_type_name(param_info.param.type));
      for (char& c : name) c = c == '-' ? '_' : c;
      return name;
    });

// ---------------------------------------------------------------------------
// Fingerprint
// ---------------------------------------------------------------------------

ModelFingerprint fingerprint(const Model& model) {
  absl::StatusOr<ModelFingerprint> fp = model_fingerprint(model);
  EXPECT_TRUE(fp.ok()) << fp.status();
  return fp.ok() ? *fp : ModelFingerprint{};
}

TEST(NewArchFingerprint, Qwen3SaysQkNorm) {
  std::unique_ptr<Model> qwen3 = load(testing::synth_model_path("tiny-qwen3", GgmlType::kF32));
  std::unique_ptr<Model> qwen2 = load(testing::synth_model_path("tiny-qwen2", GgmlType::kF32));
  ASSERT_NE(qwen3, nullptr);
  ASSERT_NE(qwen2, nullptr);
  const ModelFingerprint fp = fingerprint(*qwen3);
  ASSERT_NE(fp.find("qk_norm"), nullptr);
  EXPECT_EQ(*fp.find("qk_norm"), "true");
  EXPECT_EQ(fingerprint(*qwen2).find("qk_norm"), nullptr) << "qwen2's fingerprint must stay as it was";
  EXPECT_EQ(fingerprint(*qwen2).find("rope.long_rope"), nullptr);
}

// The same weights served with the short set give other keys: the KV of one
// must be refused by the other, naming the set.
TEST(NewArchFingerprint, LongRopeSetAndAttnFactorAreInTheFingerprint) {
  std::unique_ptr<Model> long_model = load(testing::synth_model_path("tiny-phi3", GgmlType::kF32));
  std::unique_ptr<Model> short_model = load(phi3_variant(1024, false));
  ASSERT_NE(long_model, nullptr);
  ASSERT_NE(short_model, nullptr);
  const ModelFingerprint long_fp = fingerprint(*long_model);
  const ModelFingerprint short_fp = fingerprint(*short_model);
  ASSERT_NE(long_fp.find("rope.long_rope"), nullptr);
  EXPECT_EQ(*long_fp.find("rope.long_rope"), "long");
  EXPECT_EQ(*short_fp.find("rope.long_rope"), "short");
  ASSERT_NE(long_fp.find("rope.attn_factor"), nullptr);
  EXPECT_EQ(*long_fp.find("rope.attn_factor"), absl::StrFormat("%.9g", long_model->spec().rope.attn_factor));
  const absl::Status status = compare_model_fingerprints(long_fp, short_fp, "the KV stream");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("rope.long_rope is 'long' here, 'short' in the KV stream"), std::string::npos)
      << status;
}

}  // namespace
}  // namespace baton
