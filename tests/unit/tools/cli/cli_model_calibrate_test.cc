// `baton model calibrate` on the bundled model (deploy/models) over
// deploy/examples/chapter.txt: the file it writes loads back bound to the
// model (fingerprint digest, geometry), the keys it calibrates are pre-RoPE,
// and the real model's KV is compressible (the top half of the components
// holds most of the variance). Also the text chunking it shares with
// `baton bench kv-quality` (text_chunks.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "common/engine/engine.h"
#include "common/kv_codec/kv_calibration.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "kv_calibrate.h"
#include "tests/support/test_models.h"
#include "text_chunks.h"

namespace baton::cli {
namespace {

std::string bundled_model_path() { return testing::source_dir() + "/deploy/models/baton-tiny-kjv-f16.gguf"; }
std::string chapter_path() { return testing::source_dir() + "/deploy/examples/chapter.txt"; }

TEST(ModelCalibrateCommand, WritesACalibrationBoundToTheBundledModel) {
  const std::string out = testing::make_temp_dir("calibrate") + "/tiny.batoncal";
  ASSERT_TRUE(model_calibrate({"--model", bundled_model_path(), "--text-file", chapter_path(), "-o", out, "--chunk",
                               "256", "--threads", "1"})
                  .ok());
  absl::StatusOr<KvCalibration> c = load_kv_calibration(out);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(bundled_model_path());
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<ModelFingerprint> fingerprint = model_fingerprint(**model);
  ASSERT_TRUE(fingerprint.ok()) << fingerprint.status();
  EXPECT_EQ(c->model_digest, fingerprint->digest);
  EXPECT_TRUE(c->check_geometry(kv_geometry_for((*model)->spec())).ok());
  EXPECT_TRUE(c->pre_rope_keys);
  EXPECT_EQ(c->source, "chapter.txt");
  EXPECT_GT(c->tokens, 256);  // two chunks of the chapter's ~500 tokens
  for (const bool is_key : {true, false}) {
    const double top_half = variance_share(*c, is_key, 0.5);
    EXPECT_GT(top_half, 0.5) << (is_key ? "K" : "V");
    EXPECT_LE(top_half, 1.0);
    EXPECT_GE(top_half, variance_share(*c, is_key, 0.25));
  }
}

TEST(ModelCalibrateCommand, RefusesMissingFlagsAndATextTooShort) {
  const std::string dir = testing::make_temp_dir("calibrate-bad");
  EXPECT_FALSE(model_calibrate({"--model", bundled_model_path(), "-o", dir + "/x.batoncal"}).ok());
  EXPECT_FALSE(model_calibrate({"--model", bundled_model_path(), "--text-file", chapter_path(), "-o",
                                dir + "/x.batoncal", "--chunk", "1"})
                   .ok());
  // 20 tokens: one chunk, fewer tokens than head_dim.
  const absl::Status few = model_calibrate({"--model", bundled_model_path(), "--text-file", chapter_path(), "-o",
                                            dir + "/x.batoncal", "--max-tokens", "20", "--threads", "1"});
  EXPECT_EQ(few.code(), absl::StatusCode::kFailedPrecondition) << few;
  EXPECT_FALSE(std::filesystem::exists(dir + "/x.batoncal"));
}

// Layer 0's key of a token depends on the token alone before RoPE: one token
// repeated gives the same pre-RoPE key at every position, so the calibrated
// layer-0 K variance is ~0 when the un-rotation is exact (the rotated keys
// would spread over a circle per frequency pair).
TEST(ModelCalibrateCommand, KeysAreUnrotatedToPreRope) {
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(bundled_model_path());
  ASSERT_TRUE(model.ok()) << model.status();
  Engine engine(**model, EngineOptions{1, 64});
  const std::vector<std::vector<int32_t>> chunks = {std::vector<int32_t>(96, 100)};
  absl::StatusOr<KvCalibration> c = calibrate_kv(**model, engine, chunks, "one token repeated");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->tokens, 96);
  for (int head = 0; head < c->n_head_kv; ++head) {
    const KvCalibrationHead& k = c->head(0, /*is_key=*/true, head);
    double energy = 0.0, variance = 0.0;
    for (const float m : k.mean) energy += static_cast<double>(m) * m;
    for (const float v : k.variance) variance += v;
    EXPECT_GT(energy, 0.0);
    EXPECT_LT(variance, 1e-8 * energy) << "head " << head;
  }
}

TEST(TextChunks, EachChunkStartsWithBosAndAShortTailIsKeptFromEightTokens) {
  std::vector<int32_t> text(25);
  for (int i = 0; i < 25; ++i) text[static_cast<size_t>(i)] = 10 + i;
  const std::vector<std::vector<int32_t>> with_bos = cut_chunks(text, 10, 1);
  ASSERT_EQ(with_bos.size(), 3u);  // 9 + 9 + 7 text tokens, each after BOS
  for (const std::vector<int32_t>& chunk : with_bos) EXPECT_EQ(chunk.front(), 1);
  EXPECT_EQ(with_bos[2].size(), 8u);
  EXPECT_EQ(with_bos[1][1], 19);
  const std::vector<std::vector<int32_t>> no_bos = cut_chunks(text, 10, -1);
  ASSERT_EQ(no_bos.size(), 2u);  // the 5-token tail is dropped
  EXPECT_EQ(no_bos[1].front(), 20);
}

}  // namespace
}  // namespace baton::cli
