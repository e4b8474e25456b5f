// Session files of a model with sliding-window layers: a windowed layer's KV
// is saved and loaded as its window only ([n - W + 1, n), the stream's
// version-2 rule), the file shrinks accordingly, and the loaded session
// attends exactly like the saved one when it goes on decoding. Fails if the
// save writes pushed-out positions (export error), the load misplaces the
// tail, or the file carries the whole context of windowed layers.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/model/layer_window.h"
#include "common/util/sha256.h"
#include "edge_decode/store/session.h"
#include "edge_decode/store/session_file.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

constexpr int kTokens = 300;

KvGeometry geometry(bool windowed) {
  KvGeometry g{3, 4, 2, 16, {}};
  if (windowed) g.layer_window = {8, 0, 5};
  return g;
}

ModelFingerprint fingerprint_of(const KvGeometry& g) {
  ModelFingerprint fp;
  fp.fields = {{"arch", "test"},       {"n_layer", "3"},   {"n_head", "4"},
               {"n_head_kv", "2"},     {"head_dim", "16"}, {"n_vocab", "1000"}};
  if (has_sliding_window(g.layer_window)) fp.fields.emplace_back("layer_window", layer_window_text(g.layer_window));
  fp.digest = to_hex(sha256(fp.canonical()));
  return fp;
}

std::vector<float> rows(std::mt19937& rng, int64_t n, int64_t dim) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * dim));
  for (float& v : x) v = dist(rng);
  return x;
}

std::unique_ptr<Session> make_session(const KvGeometry& g, const KvCodecConfig& codec) {
  auto s = std::make_unique<Session>();
  s->id = "windowed";
  for (int i = 0; i < kTokens; ++i) s->tokens.push_back((i * 31 + 7) % 1000);
  s->codec = codec;
  auto kv = QuantizedKvCache::Create(g, kTokens, codec);
  EXPECT_TRUE(kv.ok());
  s->kv = std::move(*kv);
  std::mt19937 rng(3);
  for (int64_t pos = 0; pos < kTokens - 1; pos += 64) {  // micro-batches, as the engine writes them
    const int64_t n = std::min<int64_t>(64, kTokens - 1 - pos);
    for (int layer = 0; layer < g.n_layer; ++layer) {
      const std::vector<float> k = rows(rng, n, g.kv_dim()), v = rows(rng, n, g.kv_dim());
      EXPECT_TRUE(s->kv->store(layer, pos, n, k.data(), v.data()).ok());
    }
    s->kv->set_size(pos + n);
  }
  return s;
}

TEST(SessionFileWindow, SavesAndLoadsOnlyTheWindow) {
  const std::string dir = testing::make_temp_dir("session-window");
  const KvCodecConfig codec = *parse_kv_codec_config("int8-g16");
  const KvGeometry g = geometry(true);
  auto original = make_session(g, codec);
  ASSERT_TRUE(save_session_file(dir + "/w.session", *original, fingerprint_of(g)).ok());
  auto loaded = load_session_file(dir + "/w.session", fingerprint_of(g), g);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ((*loaded)->kv->size(), kTokens - 1);
  EXPECT_TRUE((*loaded)->kv->holds_window_for(kTokens - 1));
  // Both go on: the next token's K/V, then attention at its position.
  std::mt19937 rng(11);
  const std::vector<float> k = rows(rng, 1, g.kv_dim()), v = rows(rng, 1, g.kv_dim()), q = rows(rng, 1, g.q_dim());
  for (QuantizedKvCache* kv : {original->kv.get(), (*loaded)->kv.get()}) {
    ASSERT_TRUE(kv->reserve(kTokens).ok());  // a loaded session holds exactly its tokens
    for (int layer = 0; layer < g.n_layer; ++layer) ASSERT_TRUE(kv->store(layer, kTokens - 1, 1, k.data(), v.data()).ok());
    kv->set_size(kTokens);
  }
  for (int layer = 0; layer < g.n_layer; ++layer) {
    std::vector<float> want(static_cast<size_t>(g.q_dim())), got(want.size());
    original->kv->attend(layer, kTokens - 1, 1, q.data(), want.data(), nullptr);
    (*loaded)->kv->attend(layer, kTokens - 1, 1, q.data(), got.data(), nullptr);
    EXPECT_EQ(got, want) << "layer " << layer;
  }
  // The windowed file carries one full layer of three plus two short tails.
  const KvGeometry full = geometry(false);
  ASSERT_TRUE(save_session_file(dir + "/f.session", *make_session(full, codec), fingerprint_of(full)).ok());
  EXPECT_LT(fs::file_size(dir + "/w.session") * 2, fs::file_size(dir + "/f.session"));
  // A session file of the full-attention model is refused, naming the field.
  auto other = load_session_file(dir + "/f.session", fingerprint_of(g), g);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(std::string(other.status().message()).find("layer_window"), std::string::npos) << other.status();
}

}  // namespace
}  // namespace baton
