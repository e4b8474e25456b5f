// `baton model calibrate` on the bundled model (deploy/models) over
// deploy/examples/chapter.txt: the file it writes loads back bound to the
// model (fingerprint digest, geometry), the keys it calibrates are pre-RoPE,
// and the real model's KV is compressible (the top half of the components
// holds most of the variance); the quality table it measures on held-out
// text (kv_quality.h, the core `baton bench kv-quality` shares). Also the text chunking it shares with
// `baton bench kv-quality` (text_chunks.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
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
  EXPECT_GT(c->tokens, 256);  // two chunks of the first 75% of the chapter's ~500 tokens
  // The quality table, measured on the held-out last 25%: every default codec
  // under its canonical name.
  std::vector<std::string> names;
  for (const KvCodecQuality& row : c->quality) names.push_back(row.codec);
  EXPECT_THAT(names, ::testing::ElementsAre("tc-b1", "tc-b1.5", "tc-b2", "tc-b2.5", "tc-b3", "tc-b4", "int8-g32-z3",
                                            "int4-g32-z3", "int4-pc-kg128-g32-z3", "int4-k8-g32-z3"));
  for (const bool is_key : {true, false}) {
    const double top_half = variance_share(*c, is_key, 0.5);
    EXPECT_GT(top_half, 0.5) << (is_key ? "K" : "V");
    EXPECT_LE(top_half, 1.0);
    EXPECT_GE(top_half, variance_share(*c, is_key, 0.25));
  }
}

TEST(ModelCalibrateCommand, MeasuresTheQualityTableOnHoldoutTextOrSkipsIt) {
  const std::string dir = testing::make_temp_dir("calibrate-table");
  const std::string heldout = testing::source_dir() + "/deploy/models/baton-tiny-kjv.heldout.txt";
  ASSERT_TRUE(model_calibrate({"--model", bundled_model_path(), "--text-file", chapter_path(), "-o",
                               dir + "/t.batoncal", "--chunk", "256", "--threads", "1", "--holdout-text", heldout,
                               "--holdout-tokens", "600", "--quality-codecs", "tc-b2,int4-pc-kg128-gG-z3"})
                  .ok());
  absl::StatusOr<KvCalibration> c = load_kv_calibration(dir + "/t.batoncal");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_GT(c->tokens, 384);  // with --holdout-text the whole chapter makes the basis
  ASSERT_EQ(c->quality.size(), 2u);
  const KvCodecQuality& tc = c->quality[0];
  const KvCodecQuality& int4 = c->quality[1];
  EXPECT_EQ(tc.codec, "tc-b2");
  EXPECT_EQ(int4.codec, "int4-pc-kg128-g32-z3");
  // What the README's table says of these codecs: tc-b2 is smaller than the
  // INT4 default, both far below F16, both within a few percent of its
  // perplexity, both lossy.
  EXPECT_LT(tc.wire_ratio, int4.wire_ratio);
  EXPECT_LT(int4.wire_ratio, 0.4);
  EXPECT_GT(tc.wire_ratio, 0.05);
  for (const KvCodecQuality& row : c->quality) {
    EXPECT_LT(std::abs(row.ppl_delta_pct), 5.0) << row.codec;
    EXPECT_GT(row.mean_kl, 0.0) << row.codec;
  }
  ASSERT_TRUE(model_calibrate({"--model", bundled_model_path(), "--text-file", chapter_path(), "-o",
                               dir + "/none.batoncal", "--chunk", "256", "--threads", "1", "--quality-codecs", "none"})
                  .ok());
  absl::StatusOr<KvCalibration> none = load_kv_calibration(dir + "/none.batoncal");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->quality.empty());
  EXPECT_GT(none->tokens, 384);  // no table: nothing held out
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
