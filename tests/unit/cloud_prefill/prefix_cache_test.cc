// PrefixCache on its own (cloud_prefill/prefix_cache.h): hits are the longest
// cached block-aligned prefix, bounded by max_tokens and the target's
// capacity; the chained digest makes a difference anywhere before a block
// end a miss for that block and every later one; partitions (tenant, salt)
// never share blocks; least recently used blocks go first over the byte cap.
#include "cloud_prefill/prefix_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/kv_stream/prefix_digest.h"

namespace baton {
namespace {

const KvGeometry kGeometry{/*n_layer=*/2, /*n_head=*/2, /*n_head_kv=*/1, /*head_dim=*/4, {}};

std::vector<int32_t> tokens(int n, int salt) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 7 + salt * 131 + 3) % 500);
  return t;
}

// An F32 cache holding `n` tokens whose every value names (tag, layer, K/V, position, channel).
F32KvCache filled(int64_t n, float tag) {
  F32KvCache kv(kGeometry, n);
  const int64_t dim = kGeometry.kv_dim();
  for (int layer = 0; layer < kGeometry.n_layer; ++layer) {
    std::vector<float> k(static_cast<size_t>(n * dim)), v(k.size());
    for (int64_t i = 0; i < n * dim; ++i) {
      k[static_cast<size_t>(i)] = tag * 1e6f + static_cast<float>(layer * 100000 + i);
      v[static_cast<size_t>(i)] = -k[static_cast<size_t>(i)];
    }
    EXPECT_TRUE(kv.store(layer, 0, n, k.data(), v.data()).ok());
  }
  kv.set_size(n);
  return kv;
}

// True when rows [0, n) of every layer of `a` and `b` are bit-identical.
bool same_rows(const F32KvCache& a, const F32KvCache& b, int64_t n) {
  const size_t bytes = static_cast<size_t>(n * kGeometry.kv_dim()) * sizeof(float);
  for (int layer = 0; layer < kGeometry.n_layer; ++layer) {
    if (std::memcmp(a.k_row(layer, 0), b.k_row(layer, 0), bytes) != 0) return false;
    if (std::memcmp(a.v_row(layer, 0), b.v_row(layer, 0), bytes) != 0) return false;
  }
  return true;
}

int64_t hit(PrefixCache& cache, const std::string& partition, const std::vector<int32_t>& t,
            int64_t max_tokens = 1 << 20, int64_t capacity = 1024) {
  F32KvCache kv(kGeometry, capacity);
  const int64_t n = cache.load_longest(partition, t, max_tokens, kv);
  EXPECT_EQ(kv.size(), n) << "the hit is committed, nothing more";
  return n;
}

TEST(PrefixCacheTest, LoadsTheLongestCachedBlockAlignedPrefixWithItsExactRows) {
  PrefixCache cache(uint64_t{1} << 20, kGeometry);
  const std::vector<int32_t> prompt = tokens(200, 1);
  const F32KvCache source = filled(200, 1);
  cache.insert("alice", prompt, source);
  EXPECT_EQ(cache.stats().entries, 3u) << "200 tokens hold 3 full blocks";
  EXPECT_EQ(cache.stats().inserted_tokens, 192u);
  EXPECT_EQ(cache.stats().bytes, 3 * cache.block_bytes());

  F32KvCache kv(kGeometry, 256);
  ASSERT_EQ(cache.load_longest("alice", prompt, 1 << 20, kv), 192);
  EXPECT_EQ(kv.size(), 192);
  EXPECT_TRUE(same_rows(kv, source, 192));
  EXPECT_EQ(cache.stats().hit_tokens, 192u);
}

TEST(PrefixCacheTest, ADifferenceMissesItsBlockAndEveryLaterOne) {
  PrefixCache cache(uint64_t{1} << 20, kGeometry);
  const std::vector<int32_t> prompt = tokens(192, 2);
  cache.insert("alice", prompt, filled(192, 2));

  std::vector<int32_t> late = prompt;
  late[100] += 1;  // inside block 1
  EXPECT_EQ(hit(cache, "alice", late), 64);
  std::vector<int32_t> early = prompt;
  early[0] += 1;  // block 0 differs: blocks 1 and 2 are keyed by the whole prefix, so they miss too
  EXPECT_EQ(hit(cache, "alice", early), 0);
  // A longer prompt with the same start still hits the cached blocks.
  std::vector<int32_t> longer = prompt;
  longer.insert(longer.end(), {1, 2, 3, 4, 5});
  EXPECT_EQ(hit(cache, "alice", longer), 192);
}

TEST(PrefixCacheTest, MaxTokensTheTargetsCapacityAndShortPromptsBoundTheHit) {
  PrefixCache cache(uint64_t{1} << 20, kGeometry);
  const std::vector<int32_t> prompt = tokens(192, 3);
  cache.insert("alice", prompt, filled(192, 3));
  EXPECT_EQ(hit(cache, "alice", prompt, /*max_tokens=*/130), 128);
  EXPECT_EQ(hit(cache, "alice", prompt, /*max_tokens=*/63), 0);
  EXPECT_EQ(hit(cache, "alice", prompt, 1 << 20, /*capacity=*/100), 64);
  EXPECT_EQ(hit(cache, "alice", std::vector<int32_t>(prompt.begin(), prompt.begin() + 63)), 0);
}

TEST(PrefixCacheTest, PartitionsOfTenantsAndSaltsNeverShareBlocks) {
  EXPECT_EQ(prefix_cache_partition("alice", ""), "alice");
  EXPECT_NE(prefix_cache_partition("alice", "s1"), prefix_cache_partition("alice", ""));
  EXPECT_NE(prefix_cache_partition("alice", "s1"), prefix_cache_partition("alice", "s2"));
  EXPECT_NE(prefix_cache_partition("alice", "s1"), prefix_cache_partition("bob", "s1"));
  EXPECT_EQ(prefix_cache_partition("alice", "s1").find("s1"), std::string::npos) << "the salt is hashed";

  PrefixCache cache(uint64_t{1} << 20, kGeometry);
  const std::vector<int32_t> prompt = tokens(128, 4);
  cache.insert(prefix_cache_partition("alice", "s1"), prompt, filled(128, 4));
  EXPECT_EQ(hit(cache, prefix_cache_partition("alice", "s1"), prompt), 128);
  EXPECT_EQ(hit(cache, prefix_cache_partition("alice", ""), prompt), 0);
  EXPECT_EQ(hit(cache, prefix_cache_partition("alice", "s2"), prompt), 0);
  EXPECT_EQ(hit(cache, prefix_cache_partition("bob", "s1"), prompt), 0);
}

TEST(PrefixCacheTest, EvictsTheLeastRecentlyUsedBlockFirstOverTheByteCap) {
  PrefixCache probe(1, kGeometry);
  PrefixCache cache(2 * probe.block_bytes(), kGeometry);
  const std::vector<int32_t> a = tokens(64, 5), b = tokens(64, 6), c = tokens(64, 7);
  cache.insert("t", a, filled(64, 5));
  cache.insert("t", b, filled(64, 6));
  EXPECT_EQ(hit(cache, "t", a), 64);  // a is now more recent than b
  cache.insert("t", c, filled(64, 7));
  EXPECT_EQ(cache.stats().evicted_entries, 1u);
  EXPECT_EQ(cache.stats().entries, 2u);
  EXPECT_EQ(cache.stats().bytes, 2 * cache.block_bytes());
  EXPECT_EQ(hit(cache, "t", b), 0) << "b was the least recently used";
  EXPECT_EQ(hit(cache, "t", a), 64);
  EXPECT_EQ(hit(cache, "t", c), 64);
}

TEST(PrefixCacheTest, ReinsertingHeldBlocksStoresNothingNewButRefreshesThem) {
  PrefixCache probe(1, kGeometry);
  PrefixCache cache(2 * probe.block_bytes(), kGeometry);
  const std::vector<int32_t> a = tokens(64, 8), b = tokens(64, 9), c = tokens(64, 10);
  cache.insert("t", a, filled(64, 8));
  cache.insert("t", b, filled(64, 9));
  cache.insert("t", a, filled(64, 8));  // refreshes a
  EXPECT_EQ(cache.stats().inserted_tokens, 128u);
  cache.insert("t", c, filled(64, 10));
  EXPECT_EQ(hit(cache, "t", a), 64);
  EXPECT_EQ(hit(cache, "t", b), 0);
}

TEST(PrefixCacheTest, AZeroCapOrACapUnderOneBlockHoldsNothing) {
  PrefixCache off(0, kGeometry);
  const std::vector<int32_t> prompt = tokens(128, 11);
  off.insert("t", prompt, filled(128, 11));
  EXPECT_EQ(off.stats().entries, 0u);
  EXPECT_EQ(hit(off, "t", prompt), 0);

  PrefixCache probe(1, kGeometry);
  PrefixCache small(probe.block_bytes() - 1, kGeometry);
  small.insert("t", prompt, filled(128, 11));
  EXPECT_EQ(small.stats().entries, 0u);
  EXPECT_EQ(small.stats().evicted_entries, 0u) << "nothing is inserted only to be evicted";
  EXPECT_EQ(hit(small, "t", prompt), 0);
}

}  // namespace
}  // namespace baton
