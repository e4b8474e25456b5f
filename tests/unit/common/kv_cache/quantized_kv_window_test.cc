// The edge store's sliding-window layers (QuantizedKvCache with
// KvGeometry::layer_window): a windowed layer keeps window + 64 rows that
// slide forward, attend over them equals a full store's attention with the
// window mask (decode steps and 64-token micro-batches far past the window),
// a rollback to the pinned point restores the window the turn pushed out,
// capacity changes keep it, memory counts only the window, and positions
// pushed out cannot be exported.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/model/layer_window.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

constexpr int kWindow = 8;

KvGeometry geometry(bool windowed) {
  KvGeometry g{3, 4, 2, 16, {}};
  if (windowed) g.layer_window = {kWindow, 0, 5};
  return g;
}

KvCodecConfig codec(const std::string& name) {
  auto c = parse_kv_codec_config(name);
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

std::vector<float> random_rows(std::mt19937& rng, int64_t n, int64_t dim) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * dim));
  for (float& v : x) v = dist(rng);
  return x;
}

// The store under test (windowed, capacity far past the window: it slides)
// and a full-attention store holding the same rows (the reference: its
// attention is masked by hand in masked_attend).
struct Pair {
  std::unique_ptr<QuantizedKvCache> sliding;
  std::unique_ptr<QuantizedKvCache> reference;
};

Pair make_pair_of_stores(int64_t capacity, const std::string& name) {
  auto sliding = QuantizedKvCache::Create(geometry(true), capacity, codec(name));
  auto reference = QuantizedKvCache::Create(geometry(false), capacity, codec(name));
  EXPECT_TRUE(sliding.ok() && reference.ok());
  return Pair{std::move(*sliding), std::move(*reference)};
}

// Attention of query q at position p over keys [from, p] of a full store:
// a full store's attend over a copy of its rows shifted so that row 0 is
// `from` — done by storing the same rows into a scratch full store at
// positions [0, p - from] and attending at position p - from. (RoPE is not
// involved: keys are stored as given.)
std::vector<float> masked_attend(const QuantizedKvCache& full, int layer, int64_t p, int64_t from,
                                 const float* q, const KvCodecConfig& c) {
  const KvGeometry& g = full.geometry();
  auto scratch = QuantizedKvCache::Create(g, p - from + 1, c);
  EXPECT_TRUE(scratch.ok());
  for (bool is_key : {true, false}) {
    auto block = full.export_block(layer, is_key, from, p - from + 1);
    EXPECT_TRUE(block.ok()) << block.status();
    EXPECT_TRUE((*scratch)->ingest_block(layer, is_key, 0, *block).ok());
  }
  std::vector<float> out(static_cast<size_t>(g.q_dim()));
  (*scratch)->attend(layer, p - from, 1, q, out.data(), nullptr);
  return out;
}

void expect_same_attention(const QuantizedKvCache& sliding, const QuantizedKvCache& full, int64_t p,
                           std::mt19937& rng, const KvCodecConfig& c) {
  const KvGeometry& g = sliding.geometry();
  const std::vector<float> q = random_rows(rng, 1, g.q_dim());
  for (int layer = 0; layer < g.n_layer; ++layer) {
    const int64_t from = window_first_kept_position(g.window(layer), p);
    const std::vector<float> want = masked_attend(full, layer, p, from, q.data(), c);
    std::vector<float> got(want.size());
    sliding.attend(layer, p, 1, q.data(), got.data(), nullptr);
    // Not bit for bit: attention folds keys in tiles that start at absolute
    // positions (tiled_attention.h), and the reference's keys sit at other
    // positions. A lost or misplaced row moves an output by ~1e-1.
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-6f) << "layer " << layer << " position " << p << " element " << i;
    }
  }
}

// Fails if a slide loses or misplaces rows, or attend reads outside the window.
TEST(QuantizedKvWindow, DecodeAndMicroBatchesFarPastTheWindowMatchTheMask) {
  for (const std::string name : {"f16", "int8-g16", "int4-g16"}) {
    SCOPED_TRACE(name);
    const KvCodecConfig c = codec(name);
    constexpr int64_t kCapacity = 400;
    Pair stores = make_pair_of_stores(kCapacity, name);
    const KvGeometry g = geometry(true);
    std::mt19937 rng(5);
    int64_t pos = 0;
    // Micro-batches of 64 (the engine's), then single decode steps.
    auto append = [&](int64_t n) {
      for (int layer = 0; layer < g.n_layer; ++layer) {
        const std::vector<float> k = random_rows(rng, n, g.kv_dim());
        const std::vector<float> v = random_rows(rng, n, g.kv_dim());
        ASSERT_TRUE(stores.sliding->store(layer, pos, n, k.data(), v.data()).ok());
        ASSERT_TRUE(stores.reference->store(layer, pos, n, k.data(), v.data()).ok());
      }
      // Every query of the batch attends over its own window.
      for (int64_t t = 0; t < n; ++t) expect_same_attention(*stores.sliding, *stores.reference, pos + t, rng, c);
      pos += n;
      stores.sliding->set_size(pos);
      stores.reference->set_size(pos);
    };
    for (int i = 0; i < 3; ++i) append(64);
    for (int i = 0; i < 150; ++i) append(1);
    ASSERT_EQ(pos, 342);
    const auto [first, end] = stores.sliding->held_positions(0);
    EXPECT_LE(first, pos - kWindow + 1);
    EXPECT_EQ(end - first, kWindow + QuantizedKvCache::kWindowSlackTokens);
  }
}

TEST(QuantizedKvWindow, MemoryCountsOnlyTheWindowedRows) {
  const KvCodecConfig c = codec("int8-g16");
  constexpr int64_t kCapacity = 8192;
  auto full = QuantizedKvCache::Create(geometry(false), kCapacity, c);
  auto windowed = QuantizedKvCache::Create(geometry(true), kCapacity, c);
  ASSERT_TRUE(full.ok() && windowed.ok());
  const int64_t row = QuantizedKvCache::bytes_per_token(c, geometry(false)) / 3;  // one layer, K and V
  EXPECT_EQ((*full)->memory_bytes(), 3 * kCapacity * row);
  // Layer 1 full; layers 0 and 2 keep window + 64 rows and window - 1 for a rollback.
  EXPECT_EQ((*windowed)->memory_bytes(), (kCapacity + (8 + 64 + 7) + (5 + 64 + 4)) * row);
  // A small store never slides: no rollback rows.
  auto small = QuantizedKvCache::Create(geometry(true), 40, c);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ((*small)->memory_bytes(), 3 * 40 * row);
}

// Fails if a failed turn that wrote far past the window leaves the session
// without the keys its next query needs.
TEST(QuantizedKvWindow, RollbackToThePinnedPointRestoresTheWindow) {
  const KvCodecConfig c = codec("int8-g16");
  Pair stores = make_pair_of_stores(600, "int8-g16");
  const KvGeometry g = geometry(true);
  std::mt19937 rng(9);
  auto write = [&](QuantizedKvCache& store, int64_t pos, int64_t n, std::mt19937& r) {
    for (int layer = 0; layer < g.n_layer; ++layer) {
      const std::vector<float> k = random_rows(r, n, g.kv_dim());
      const std::vector<float> v = random_rows(r, n, g.kv_dim());
      ASSERT_TRUE(store.store(layer, pos, n, k.data(), v.data()).ok());
    }
    store.set_size(pos + n);
  };
  std::mt19937 rng_a(1), rng_b(1);
  write(*stores.sliding, 0, 100, rng_a);
  write(*stores.reference, 0, 100, rng_b);
  stores.sliding->pin_rollback_point();
  // The failed turn: a delta far past the window (a cloud tail at a gap
  // included), then the rollback.
  std::mt19937 junk(3);
  write(*stores.sliding, 100, 50, junk);
  write(*stores.sliding, 400, 7, junk);
  stores.sliding->set_size(100);
  EXPECT_TRUE(stores.sliding->holds_window_for(100));
  // The next turn continues from 100 as if nothing happened.
  std::mt19937 rng_c(2), rng_d(2);
  write(*stores.sliding, 100, 1, rng_c);
  write(*stores.reference, 100, 1, rng_d);
  expect_same_attention(*stores.sliding, *stores.reference, 100, rng, c);
  // Without a pin covering it, a rollback deep into the past cannot restore.
  stores.sliding->set_size(40);
  EXPECT_FALSE(stores.sliding->holds_window_for(40));
  stores.sliding->set_size(0);
  EXPECT_TRUE(stores.sliding->holds_window_for(0));
}

TEST(QuantizedKvWindow, CapacityChangesKeepTheWindow) {
  const KvCodecConfig c = codec("f16");
  Pair stores = make_pair_of_stores(200, "f16");
  const KvGeometry g = geometry(true);
  std::mt19937 rng(4), rng_a(8), rng_b(8);
  for (auto* store : {stores.sliding.get(), stores.reference.get()}) {
    std::mt19937& r = store == stores.sliding.get() ? rng_a : rng_b;
    for (int layer = 0; layer < g.n_layer; ++layer) {
      const std::vector<float> k = random_rows(r, 150, g.kv_dim());
      const std::vector<float> v = random_rows(r, 150, g.kv_dim());
      ASSERT_TRUE(store->store(layer, 0, 150, k.data(), v.data()).ok());
    }
    store->set_size(150);
  }
  ASSERT_TRUE(stores.sliding->reserve(1000).ok());
  expect_same_attention(*stores.sliding, *stores.reference, 149, rng, c);
  ASSERT_TRUE(stores.sliding->shrink_to(150).ok());
  expect_same_attention(*stores.sliding, *stores.reference, 149, rng, c);
}

TEST(QuantizedKvWindow, PushedOutPositionsCannotBeExported) {
  auto store = QuantizedKvCache::Create(geometry(true), 500, codec("f16"));
  ASSERT_TRUE(store.ok());
  const KvGeometry g = geometry(true);
  std::mt19937 rng(6);
  for (int layer = 0; layer < g.n_layer; ++layer) {
    const std::vector<float> k = random_rows(rng, 300, g.kv_dim());
    ASSERT_TRUE((*store)->store(layer, 0, 300, k.data(), k.data()).ok());
  }
  (*store)->set_size(300);
  auto old = (*store)->export_block(0, /*is_key=*/true, 0, 10);
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(old.status().message()), HasSubstr("sliding window of 8"));
  EXPECT_TRUE((*store)->export_block(0, /*is_key=*/true, 300 - kWindow + 1, kWindow - 1).ok());
  EXPECT_TRUE((*store)->export_block(1, /*is_key=*/true, 0, 300).ok());  // the full layer keeps everything
}

}  // namespace
}  // namespace baton
