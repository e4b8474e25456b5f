// Synthetic models, quantization and the model fingerprint.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/gguf/gguf_file.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "common/model/model_metadata.h"
#include "common/model/model_quantize.h"
#include "common/gguf/gguf_writer.h"
#include "common/model/model_synth.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

ModelFingerprint fingerprint_of(const std::string& path) {
  auto model = Model::Load(path);
  EXPECT_TRUE(model.ok()) << model.status();
  auto fp = model_fingerprint(**model);
  EXPECT_TRUE(fp.ok()) << fp.status();
  return *fp;
}

TEST(ModelSynth, EveryShapeHasItsRealHyperparameters) {
  const SynthShape* s = find_synth_shape("llama-3.2-1b");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->n_layer, 16);
  EXPECT_EQ(s->n_embd, 2048);
  EXPECT_EQ(s->n_head_kv, 8);
  EXPECT_EQ(s->n_vocab, 128256);
  for (const char* name : {"tiny", "llama-3.2-3b", "qwen2.5-0.5b", "qwen2.5-1.5b", "llama-3.1-8b"}) {
    EXPECT_NE(find_synth_shape(name), nullptr) << name;
  }
  EXPECT_EQ(find_synth_shape("gpt-5"), nullptr);
}

TEST(ModelSynth, SameSeedGivesIdenticalFiles) {
  const std::string dir = testing::make_temp_dir("synth");
  const SynthShape& shape = *find_synth_shape("tiny");
  ASSERT_TRUE(synthesize_model(shape, SynthOptions{GgmlType::kQ4_0, 9, 1}, dir + "/a.gguf").ok());
  ASSERT_TRUE(synthesize_model(shape, SynthOptions{GgmlType::kQ4_0, 9, 2}, dir + "/b.gguf").ok());
  ASSERT_TRUE(synthesize_model(shape, SynthOptions{GgmlType::kQ4_0, 10, 2}, dir + "/c.gguf").ok());
  auto a = GgufFile::Open(dir + "/a.gguf");
  auto b = GgufFile::Open(dir + "/b.gguf");
  auto c = GgufFile::Open(dir + "/c.gguf");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(compute_weights_digest(**a), compute_weights_digest(**b)) << "threads must not change weights";
  EXPECT_NE(compute_weights_digest(**a), compute_weights_digest(**c));
  std::filesystem::remove_all(dir);
}

TEST(ModelSynth, WeightsHaveTheIntendedScale) {
  auto model = Model::Load(testing::synth_model_path("tiny", GgmlType::kF32));
  ASSERT_TRUE(model.ok());
  const WeightMatrix& wq = (*model)->layer(0).wq;
  const float* w = static_cast<const float*>(wq.data);
  double sum = 0, sum_sq = 0;
  const int64_t n = wq.rows * wq.cols;
  for (int64_t i = 0; i < n; ++i) {
    sum += w[i];
    sum_sq += double{w[i]} * w[i];
  }
  const double std = std::sqrt(sum_sq / n - (sum / n) * (sum / n));
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(std, 1.0 / std::sqrt(64.0), 0.01);  // 1/sqrt(fan_in)
}

TEST(ModelQuantize, QuantizedCopyKeepsTheSourceFingerprint) {
  const std::string dir = testing::make_temp_dir("quant");
  const std::string& f16 = testing::synth_model_path("tiny", GgmlType::kF16);
  ASSERT_TRUE(quantize_model(f16, dir + "/q4.gguf", QuantizeOptions{GgmlType::kQ4_0, 2}).ok());
  auto q4 = GgufFile::Open(dir + "/q4.gguf");
  ASSERT_TRUE(q4.ok());
  EXPECT_EQ((*q4)->find_tensor("blk.0.attn_q.weight")->type, GgmlType::kQ4_0);
  EXPECT_EQ((*q4)->find_tensor("blk.0.attn_norm.weight")->type, GgmlType::kF32);
  EXPECT_EQ(fingerprint_of(f16).digest, fingerprint_of(dir + "/q4.gguf").digest);
  std::filesystem::remove_all(dir);
}

TEST(ModelQuantize, UnstampedSourceGetsItsComputedDigest) {
  // An F32 file without the stamp, as from another tool.
  const std::string dir = testing::make_temp_dir("unstamped");
  auto file = GgufFile::Open(testing::synth_model_path("tiny", GgmlType::kF32));
  ASSERT_TRUE(file.ok());
  GgufWriter w;
  for (const auto& [key, value] : (*file)->metadata()) {
    if (key != kSourceWeightsDigestKey) w.set(key, value);
  }
  for (const GgufTensorInfo& t : (*file)->tensors()) w.add_tensor_copy(t.name, t.type, t.dims, t.data);
  ASSERT_TRUE(w.write(dir + "/plain.gguf").ok());
  auto plain = GgufFile::Open(dir + "/plain.gguf");
  ASSERT_TRUE(plain.ok());
  const std::string content_digest = to_hex(compute_weights_digest(**plain));
  EXPECT_EQ(*source_weights_digest(**plain), content_digest);
  ASSERT_TRUE(quantize_model(dir + "/plain.gguf", dir + "/q8.gguf", QuantizeOptions{GgmlType::kQ8_0, 1}).ok());
  auto q8 = GgufFile::Open(dir + "/q8.gguf");
  ASSERT_TRUE(q8.ok());
  EXPECT_EQ(*source_weights_digest(**q8), content_digest);
  EXPECT_NE(to_hex(compute_weights_digest(**q8)), content_digest);
  EXPECT_EQ(fingerprint_of(dir + "/plain.gguf").digest, fingerprint_of(dir + "/q8.gguf").digest);
  std::filesystem::remove_all(dir);
}

TEST(ModelFingerprint, MismatchNamesTheFieldAndBothValues) {
  ModelFingerprint llama = fingerprint_of(testing::synth_model_path("tiny", GgmlType::kF32));
  ModelFingerprint qwen = fingerprint_of(testing::synth_model_path("tiny-qwen2", GgmlType::kF32));
  absl::Status status = compare_model_fingerprints(llama, qwen, "the KV stream");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("arch is 'llama' here, 'qwen2' in the KV stream"), std::string::npos)
      << status;
  ModelFingerprint other_seed = fingerprint_of(testing::synth_model_path("tiny", GgmlType::kF32, 2));
  status = compare_model_fingerprints(llama, other_seed, "the cloud");
  EXPECT_NE(status.message().find("source_weights_digest"), std::string::npos) << status;
  EXPECT_TRUE(compare_model_fingerprints(llama, llama, "x").ok());
}

TEST(ModelLoad, UnsupportedArchitectureIsNamed) {
  const std::string dir = testing::make_temp_dir("arch");
  auto file = GgufFile::Open(testing::synth_model_path("tiny", GgmlType::kF32));
  ASSERT_TRUE(file.ok());
  GgufWriter w;
  for (const auto& [key, value] : (*file)->metadata()) w.set(key, value);
  w.set_string("general.architecture", "mamba");
  for (const GgufTensorInfo& t : (*file)->tensors()) w.add_tensor_copy(t.name, t.type, t.dims, t.data);
  ASSERT_TRUE(w.write(dir + "/m.gguf").ok());
  auto model = Model::Load(dir + "/m.gguf");
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("architecture 'mamba' is not supported"), std::string::npos)
      << model.status();
  std::filesystem::remove_all(dir);
}

TEST(ModelLoad, WrongTensorShapeIsNamed) {
  const std::string dir = testing::make_temp_dir("shape");
  auto file = GgufFile::Open(testing::synth_model_path("tiny", GgmlType::kF32));
  ASSERT_TRUE(file.ok());
  GgufWriter w;
  for (const auto& [key, value] : (*file)->metadata()) w.set(key, value);
  w.set_u32("llama.attention.head_count_kv", 4);  // K/V tensors are sized for 2
  for (const GgufTensorInfo& t : (*file)->tensors()) w.add_tensor_copy(t.name, t.type, t.dims, t.data);
  ASSERT_TRUE(w.write(dir + "/m.gguf").ok());
  auto model = Model::Load(dir + "/m.gguf");
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("tensor 'blk.0.attn_k.weight' has dims [64, 32], expected [64, 64]"),
            std::string::npos)
      << model.status();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace baton
