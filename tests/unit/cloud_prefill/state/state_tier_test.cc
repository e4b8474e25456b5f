// StateTier over FakeRedisClient (cloud_prefill/state/state_tier.h): blocks
// and sessions round-trip bit for bit (compressed or not); every kind of bad
// value (short, magic, fingerprint, another key, checksum, geometry) is a
// miss counted as corrupt and leaves the request cache untouched; a
// session is reused only by a request extending its history, and a
// non-owner never replaces it; a full write queue drops and counts; a tier
// that is down is skipped.
#include "cloud_prefill/state/state_tier.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/engine/engine.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "tests/support/fake_redis_client.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

const KvGeometry kGeometry{/*n_layer=*/2, /*n_head=*/2, /*n_head_kv=*/1, /*head_dim=*/4, {}};

ModelFingerprint fingerprint(const std::string& digest_char) {
  ModelFingerprint fp;
  fp.fields = {{"arch", "test"}};
  fp.digest = std::string(64, digest_char[0]);
  return fp;
}

std::vector<int32_t> tokens(int n, int salt) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 7 + salt * 131 + 3) % 500);
  return t;
}

// Holds `n` tokens whose values name (tag, layer, K/V, position, channel),
// with a few values whose bits a lossy path would change.
std::shared_ptr<F32KvCache> filled(int64_t n, float tag) {
  auto kv = std::make_shared<F32KvCache>(kGeometry, n);
  const int64_t dim = kGeometry.kv_dim();
  for (int layer = 0; layer < kGeometry.n_layer; ++layer) {
    std::vector<float> k(static_cast<size_t>(n * dim)), v(k.size());
    for (int64_t i = 0; i < n * dim; ++i) {
      k[static_cast<size_t>(i)] = tag * 1e6f + static_cast<float>(layer * 100000 + i) + 1.0f / 3.0f;
      v[static_cast<size_t>(i)] = -k[static_cast<size_t>(i)] * 1e-30f;
    }
    EXPECT_TRUE(kv->store(layer, 0, n, k.data(), v.data()).ok());
  }
  kv->set_size(n);
  return kv;
}

bool same_rows(const F32KvCache& a, const F32KvCache& b, int64_t from, int64_t n) {
  const size_t bytes = static_cast<size_t>(n * kGeometry.kv_dim()) * sizeof(float);
  for (int layer = 0; layer < kGeometry.n_layer; ++layer) {
    if (std::memcmp(a.k_row(layer, from), b.k_row(layer, from), bytes) != 0) return false;
    if (std::memcmp(a.v_row(layer, from), b.v_row(layer, from), bytes) != 0) return false;
  }
  return true;
}

struct Tier {
  explicit Tier(StateTierOptions options = {}, const std::string& fp = "a")
      : redis(std::make_shared<FakeRedisClient>()), tier(redis, fingerprint(fp), kGeometry, options) {}
  std::shared_ptr<FakeRedisClient> redis;
  StateTier tier;
};

int64_t load_blocks(StateTier& tier, const std::vector<int32_t>& t, const std::string& partition = "tenant") {
  F32KvCache kv(kGeometry, static_cast<int64_t>(t.size()));
  return tier.load_prefix_blocks(partition, t, 1 << 20, kv);
}

class StateTierRoundTrip : public ::testing::TestWithParam<bool> {};

TEST_P(StateTierRoundTrip, PrefixBlocksComeBackBitForBit) {
  StateTierOptions options;
  options.compress = GetParam();
  Tier t(options);
  const std::vector<int32_t> prompt = tokens(200, 1);  // 3 full blocks
  auto kv = filled(200, 1);
  t.tier.store_prefix_blocks("tenant", prompt, kv, 0);
  t.tier.flush();
  EXPECT_EQ(t.redis->values().size(), 3u);
  F32KvCache loaded(kGeometry, 200);
  EXPECT_EQ(t.tier.load_prefix_blocks("tenant", prompt, 1 << 20, loaded), 192);
  EXPECT_EQ(loaded.size(), 192);
  EXPECT_TRUE(same_rows(*kv, loaded, 0, 192));
  EXPECT_EQ(t.tier.stats().prefix.hits, 3u);
  EXPECT_EQ(t.tier.stats().prefix.writes, 3u);
  EXPECT_EQ(t.tier.stats().prefix.written_tokens, 192u);
  // Continuing from an L1 hit of one block reads only the next ones.
  F32KvCache partial(kGeometry, 200);
  std::vector<float> zeros(64 * kGeometry.kv_dim(), 0.0f);
  for (int layer = 0; layer < kGeometry.n_layer; ++layer) {
    ASSERT_TRUE(partial.store(layer, 0, 64, kv->k_row(layer, 0), kv->v_row(layer, 0)).ok());
  }
  partial.set_size(64);
  EXPECT_EQ(t.tier.load_prefix_blocks("tenant", prompt, 1 << 20, partial), 192);
  EXPECT_TRUE(same_rows(*kv, partial, 0, 192));
  // max_tokens bounds it.
  F32KvCache bounded(kGeometry, 200);
  EXPECT_EQ(t.tier.load_prefix_blocks("tenant", prompt, 130, bounded), 128);
}

INSTANTIATE_TEST_SUITE_P(Compression, StateTierRoundTrip, ::testing::Bool());

TEST(StateTierTest, ADifferentTokenOrPartitionIsAMissFromThatBlockOn) {
  Tier t;
  const std::vector<int32_t> prompt = tokens(256, 1);
  t.tier.store_prefix_blocks("tenant", prompt, filled(256, 1), 0);
  t.tier.flush();
  std::vector<int32_t> changed = prompt;
  changed[100] += 1;  // inside block 1
  EXPECT_EQ(load_blocks(t.tier, changed), 64);
  EXPECT_EQ(load_blocks(t.tier, prompt, "other tenant"), 0);
  EXPECT_EQ(load_blocks(t.tier, prompt, std::string("tenant\0salt:x", 13)), 0);
}

// Each way a value can be wrong: applied to block 0's stored value.
enum class Damage { kShort, kMagic, kChecksum, kPayloadBit, kAnotherKey, kEmpty };

class StateTierCorruption : public ::testing::TestWithParam<Damage> {};

TEST_P(StateTierCorruption, IsAMissCountedAsCorruptAndTheCacheStaysEmpty) {
  Tier t;
  const std::vector<int32_t> prompt = tokens(128, 1);
  t.tier.store_prefix_blocks("tenant", prompt, filled(128, 1), 0);
  t.tier.flush();
  const std::vector<Digest256> digests = prefix_block_digests(prompt);
  const std::string key0 = t.tier.prefix_block_key("tenant", digests[0]);
  const std::string key1 = t.tier.prefix_block_key("tenant", digests[1]);
  const std::string value0 = t.redis->values().at(key0);
  switch (GetParam()) {
    case Damage::kShort: t.redis->put_raw(key0, value0.substr(0, value0.size() - 5)); break;
    case Damage::kMagic: ASSERT_TRUE(t.redis->corrupt(key0, 0)); break;
    case Damage::kChecksum: ASSERT_TRUE(t.redis->corrupt(key0, 4 + 4 + 64 + 2 + static_cast<int64_t>(key0.size()) + 16)); break;
    case Damage::kPayloadBit: ASSERT_TRUE(t.redis->corrupt(key0, -1)); break;
    case Damage::kAnotherKey: t.redis->put_raw(key0, t.redis->values().at(key1)); break;
    case Damage::kEmpty: t.redis->put_raw(key0, ""); break;
  }
  F32KvCache kv(kGeometry, 128);
  EXPECT_EQ(t.tier.load_prefix_blocks("tenant", prompt, 1 << 20, kv), 0);
  EXPECT_EQ(kv.size(), 0);
  EXPECT_EQ(t.tier.stats().prefix.corrupt, 1u);
  EXPECT_EQ(t.tier.stats().prefix.hits, 0u);
}

INSTANTIATE_TEST_SUITE_P(Damages, StateTierCorruption,
                         ::testing::Values(Damage::kShort, Damage::kMagic, Damage::kChecksum, Damage::kPayloadBit,
                                           Damage::kAnotherKey, Damage::kEmpty));

TEST(StateTierTest, AnotherModelsValueOrAWrongSizeForTheGeometryIsAMiss) {
  Tier writer({}, "a");
  const std::vector<int32_t> prompt = tokens(64, 1);
  writer.tier.store_prefix_blocks("tenant", prompt, filled(64, 1), 0);
  writer.tier.flush();
  // Another fingerprint with the same key prefix (its first 12 digits): the envelope refuses it.
  ModelFingerprint other = fingerprint("a");
  other.digest[63] = 'b';
  StateTier reader(writer.redis, other, kGeometry);
  EXPECT_EQ(load_blocks(reader, prompt), 0);
  EXPECT_EQ(reader.stats().prefix.corrupt, 1u);
  // A well-sealed value of the wrong size for this geometry.
  const std::string key = writer.tier.prefix_block_key("tenant", prefix_block_digests(prompt)[0]);
  writer.redis->put_raw(key, writer.tier.seal(StateTier::Kind::kPrefixBlock, key, std::string(64, 'x'), true));
  EXPECT_EQ(load_blocks(writer.tier, prompt), 0);
  EXPECT_EQ(writer.tier.stats().prefix.corrupt, 1u);
  // A session value under a block's key: another kind.
  writer.redis->put_raw(key, writer.tier.seal(StateTier::Kind::kSession, key, std::string(64, 'x'), true));
  EXPECT_EQ(load_blocks(writer.tier, prompt), 0);
  EXPECT_EQ(writer.tier.stats().prefix.corrupt, 2u);
}

TEST(StateTierTest, KeysCarryTheFingerprintIdAndNoSecretsAndTagEachBlock) {
  Tier t;
  const std::string session = std::string(40, 's');
  const std::string key = t.tier.session_key("tenant-a", session);
  EXPECT_EQ(key.rfind("bt1:aaaaaaaaaaaa:ss:", 0), 0u) << key;
  EXPECT_EQ(key.find(session), std::string::npos);
  EXPECT_EQ(key.find("tenant-a"), std::string::npos);
  EXPECT_NE(key, t.tier.session_key("tenant-b", session));
  const std::vector<Digest256> digests = prefix_block_digests(tokens(128, 1));
  const std::string k0 = t.tier.prefix_block_key("tenant-a", digests[0]);
  const std::string k1 = t.tier.prefix_block_key("tenant-a", digests[1]);
  EXPECT_EQ(k0.rfind("bt1:aaaaaaaaaaaa:pb:", 0), 0u) << k0;
  auto tag = [](const std::string& k) { return k.substr(k.find('{')); };
  EXPECT_EQ(tag(k0), "{" + to_hex(digests[0]) + "}") << "the hash tag is the block's own digest";
  EXPECT_NE(tag(k0), tag(k1)) << "blocks of one prompt spread over the cluster's slots";
  EXPECT_NE(k0, t.tier.prefix_block_key("tenant-b", digests[0]));
}

int64_t load_session(StateTier& tier, const std::string& tenant, const std::vector<int32_t>& request,
                     F32KvCache* out = nullptr, bool* exact = nullptr) {
  F32KvCache kv(kGeometry, static_cast<int64_t>(request.size()));
  const int64_t n = tier.load_session(tenant, std::string(40, 's'), request, 1 << 20, kv, exact);
  EXPECT_EQ(kv.size(), n);
  if (out != nullptr && n > 0) {
    for (int layer = 0; layer < kGeometry.n_layer; ++layer) {
      EXPECT_TRUE(out->store(layer, 0, n, kv.k_row(layer, 0), kv.v_row(layer, 0)).ok());
    }
    out->set_size(n);
  }
  return n;
}

TEST(StateTierTest, ASessionIsReusedOnlyByARequestThatExtendsItsHistory) {
  Tier t;
  const std::vector<int32_t> history = tokens(70, 2);
  auto kv = filled(70, 2);
  t.tier.store_session("tenant", std::string(40, 's'), history, kv, /*exact=*/false, /*replace=*/true);
  t.tier.flush();
  std::vector<int32_t> next = history;
  next.push_back(9);
  next.push_back(10);
  F32KvCache got(kGeometry, 72);
  bool exact = true;
  EXPECT_EQ(load_session(t.tier, "tenant", next, &got, &exact), 70);
  EXPECT_TRUE(same_rows(*kv, got, 0, 70));
  EXPECT_FALSE(exact) << "the exact flag travels";
  EXPECT_EQ(load_session(t.tier, "tenant", history), 70) << "the same history counts";
  std::vector<int32_t> diverged = next;
  diverged[10] += 1;
  EXPECT_EQ(load_session(t.tier, "tenant", diverged), 0);
  EXPECT_EQ(load_session(t.tier, "tenant", std::vector<int32_t>(history.begin(), history.end() - 1)), 0);
  EXPECT_EQ(load_session(t.tier, "other tenant", next), 0);
  // A non-owner's state (replace=false) never replaces the owner's.
  t.tier.store_session("tenant", std::string(40, 's'), diverged, filled(72, 3), true, /*replace=*/false);
  t.tier.flush();
  EXPECT_EQ(load_session(t.tier, "tenant", diverged), 0);
  EXPECT_EQ(load_session(t.tier, "tenant", next), 70);
  // The owner's next turn replaces it.
  t.tier.store_session("tenant", std::string(40, 's'), next, filled(72, 4), true, /*replace=*/true);
  t.tier.flush();
  EXPECT_EQ(load_session(t.tier, "tenant", next), 72);
}

TEST(StateTierTest, ASessionOverTheCapIsNotWrittenAndCounted) {
  StateTierOptions options;
  options.max_session_bytes = 1000;
  Tier t(options);
  t.tier.store_session("tenant", std::string(40, 's'), tokens(70, 2), filled(70, 2), true, true);
  t.tier.flush();
  EXPECT_TRUE(t.redis->values().empty());
  EXPECT_EQ(t.tier.stats().session.dropped_writes, 1u);
}

TEST(StateTierTest, AFullWriteQueueDropsAndCountsWithoutWaiting) {
  StateTierOptions options;
  options.max_queued_writes = 2;
  Tier t(options);
  t.redis->hold();  // a server that does not answer
  const std::vector<int32_t> prompt = tokens(64, 1);
  for (int i = 0; i < 6; ++i) t.tier.store_prefix_blocks("p" + std::to_string(i), prompt, filled(64, 1), 0);
  // The writer holds one, two wait, the rest were dropped at once.
  const uint64_t dropped = t.tier.stats().prefix.dropped_writes;
  EXPECT_GE(dropped, 3u);
  EXPECT_LE(dropped, 4u);
  t.redis->release();
  t.tier.flush();
  EXPECT_EQ(t.tier.stats().prefix.writes, 6u - dropped);
}

TEST(StateTierTest, WhileTheTierIsDownReadsAndWritesAreSkippedAsErrors) {
  Tier t;
  const std::vector<int32_t> prompt = tokens(128, 1);
  t.tier.store_prefix_blocks("tenant", prompt, filled(128, 1), 0);
  t.tier.flush();
  t.redis->set_down(true);
  EXPECT_EQ(load_blocks(t.tier, prompt), 0);
  t.tier.store_prefix_blocks("tenant", tokens(128, 2), filled(128, 2), 0);
  t.tier.flush();
  StateTierStats stats = t.tier.stats();
  EXPECT_EQ(stats.kind, "redis");
  EXPECT_FALSE(stats.healthy);
  EXPECT_GE(stats.prefix.errors, 2u);
  t.redis->set_down(false);
  EXPECT_EQ(load_blocks(t.tier, prompt), 128) << "hits resume";
  EXPECT_TRUE(t.tier.stats().healthy);
}

TEST(StateTierTest, WithoutAClientEverythingIsAMissAndHealthSaysMemory) {
  StateTier tier(nullptr, fingerprint("a"), kGeometry);
  EXPECT_FALSE(tier.enabled());
  tier.store_prefix_blocks("tenant", tokens(64, 1), filled(64, 1), 0);
  EXPECT_EQ(load_blocks(tier, tokens(64, 1)), 0);
  EXPECT_EQ(load_session(tier, "tenant", tokens(64, 1)), 0);
  EXPECT_EQ(tier.stats().kind, "memory");
  EXPECT_TRUE(tier.stats().healthy);
}

// Bytes Redis holds per cached token, on the bundled trained model's KV of
// held-out text (real KV, unlike the synthetic models): the shuffle + zstd
// envelope never grows a block past raw f32 plus its header, and prints the
// figure. Lossless either way: a block reads back bit for bit.
TEST(StateTierSizeTest, BytesPerCachedTokenOfTheBundledModel) {
  auto model = Model::Load(testing::source_dir() + "/deploy/models/baton-tiny-kjv-f16.gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  auto fp = model_fingerprint(**model);
  ASSERT_TRUE(fp.ok());
  std::vector<int32_t> ids;
  std::ifstream in(testing::source_dir() + "/deploy/models/baton-tiny-kjv.heldout.ids");
  for (int32_t id; in >> id && ids.size() < 512;) ids.push_back(id);
  ASSERT_EQ(ids.size(), 512u);
  const KvGeometry geometry = kv_geometry_for((*model)->spec());
  auto kv = std::make_shared<F32KvCache>(geometry, 512);
  Engine engine(**model, EngineOptions{.n_threads = 1});
  ASSERT_TRUE(engine.prefill(ids, *kv, nullptr).ok());
  const double raw_per_token = static_cast<double>(geometry.n_layer) * 2 * geometry.kv_dim() * sizeof(float);
  for (bool compress : {false, true}) {
    StateTierOptions options;
    options.compress = compress;
    auto redis = std::make_shared<FakeRedisClient>();
    StateTier tier(redis, *fp, geometry, options);
    tier.store_prefix_blocks("tenant", ids, kv, 0);
    tier.flush();
    const StateTierKindStats stats = tier.stats().prefix;
    ASSERT_EQ(stats.written_tokens, 512u);
    const double per_token = static_cast<double>(stats.written_bytes) / static_cast<double>(stats.written_tokens);
    EXPECT_LE(per_token, raw_per_token * 1.01 + 4);
    std::printf("[ state tier ] bundled model (%d layers, kv_dim %lld): raw f32 %.0f B/token, stored %s %.1f B/token "
                "(%.1f%%)\n",
                geometry.n_layer, static_cast<long long>(geometry.kv_dim()), raw_per_token,
                compress ? "shuffle+zstd" : "plain", per_token, 100.0 * per_token / raw_per_token);
    F32KvCache back(geometry, 512);
    ASSERT_EQ(tier.load_prefix_blocks("tenant", ids, 512, back), 512);
    for (int layer = 0; layer < geometry.n_layer; ++layer) {
      const size_t bytes = static_cast<size_t>(512 * geometry.kv_dim()) * sizeof(float);
      ASSERT_EQ(std::memcmp(back.k_row(layer, 0), kv->k_row(layer, 0), bytes), 0);
      ASSERT_EQ(std::memcmp(back.v_row(layer, 0), kv->v_row(layer, 0), bytes), 0);
    }
  }
}

}  // namespace
}  // namespace baton
