// SessionCache on its own (cloud_prefill/session_cache.h): an entry is
// reused, and replaced, only by a request that extends its stored history
// (the owner's next turn); anything else learns nothing and changes nothing.
// Entries are per (tenant, session id); least recently used sessions go
// first over the byte cap.
#include "cloud_prefill/session_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

namespace baton {
namespace {

const KvGeometry kGeometry{/*n_layer=*/2, /*n_head=*/2, /*n_head_kv=*/1, /*head_dim=*/4, {}};
constexpr char kId[] = "0123456789abcdef0123456789abcdef";

std::vector<int32_t> tokens(int n, int salt) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 7 + salt * 131 + 3) % 500);
  return t;
}

// A cache of `n` tokens (capacity `capacity`, at least n) whose values name (tag, layer, position, channel).
std::shared_ptr<F32KvCache> filled(int64_t n, float tag, int64_t capacity = 0) {
  auto kv = std::make_shared<F32KvCache>(kGeometry, capacity > 0 ? capacity : n);
  const int64_t dim = kGeometry.kv_dim();
  for (int layer = 0; layer < kGeometry.n_layer; ++layer) {
    std::vector<float> k(static_cast<size_t>(n * dim)), v(k.size());
    for (int64_t i = 0; i < n * dim; ++i) {
      k[static_cast<size_t>(i)] = tag * 1e6f + static_cast<float>(layer * 100000 + i);
      v[static_cast<size_t>(i)] = -k[static_cast<size_t>(i)];
    }
    EXPECT_TRUE(kv->store(layer, 0, n, k.data(), v.data()).ok());
  }
  kv->set_size(n);
  return kv;
}

bool same_rows(const F32KvCache& a, const F32KvCache& b, int64_t n) {
  const size_t bytes = static_cast<size_t>(n * kGeometry.kv_dim()) * sizeof(float);
  for (int layer = 0; layer < kGeometry.n_layer; ++layer) {
    if (std::memcmp(a.k_row(layer, 0), b.k_row(layer, 0), bytes) != 0) return false;
    if (std::memcmp(a.v_row(layer, 0), b.v_row(layer, 0), bytes) != 0) return false;
  }
  return true;
}

// Bytes the cache counts for an entry of `capacity` tokens.
uint64_t entry_bytes(int64_t capacity) {
  return static_cast<uint64_t>(capacity) * kGeometry.kv_dim() * 2 * kGeometry.n_layer * sizeof(float);
}

int64_t load(SessionCache& cache, const std::string& tenant, const std::string& id, const std::vector<int32_t>& t,
             int64_t max_tokens = 1 << 20, int64_t capacity = 256, bool* exact = nullptr) {
  F32KvCache kv(kGeometry, capacity);
  const int64_t n = cache.load(tenant, id, t, max_tokens, kv, exact);
  EXPECT_EQ(kv.size(), n);
  return n;
}

TEST(SessionCacheTest, TheOwnersNextTurnReusesTheStoredHistoryRowForRow) {
  SessionCache cache(uint64_t{1} << 20);
  const std::vector<int32_t> turn2 = tokens(15, 1);
  const std::vector<int32_t> turn1(turn2.begin(), turn2.begin() + 10);
  auto source = filled(10, 1);
  cache.store("alice", kId, turn1, source);
  EXPECT_EQ(cache.stats().sessions, 1u);
  EXPECT_EQ(cache.stats().bytes, entry_bytes(10));

  F32KvCache kv(kGeometry, 15);
  bool exact = false;
  ASSERT_EQ(cache.load("alice", kId, turn2, 1 << 20, kv, &exact), 10);
  EXPECT_TRUE(same_rows(kv, *source, 10));
  EXPECT_TRUE(exact);
  EXPECT_EQ(load(cache, "alice", kId, turn1), 10) << "a request equal to the history owns it too";
  EXPECT_EQ(cache.stats().hit_tokens, 20u);
}

TEST(SessionCacheTest, ADivergingOrShorterRequestLearnsNothingAndChangesNothing) {
  SessionCache cache(uint64_t{1} << 20);
  const std::vector<int32_t> history = tokens(10, 2);
  auto source = filled(10, 2);
  cache.store("alice", kId, history, source);

  std::vector<int32_t> diverged = history;
  diverged[5] += 1;
  diverged.push_back(7);
  EXPECT_EQ(load(cache, "alice", kId, diverged), 0) << "no matched length leaks";
  EXPECT_EQ(load(cache, "alice", kId, std::vector<int32_t>(history.begin(), history.begin() + 5)), 0);
  EXPECT_EQ(cache.stats().hit_tokens, 0u);

  // Storing the diverged history does not overwrite the owner's entry.
  cache.store("alice", kId, diverged, filled(11, 99));
  F32KvCache kv(kGeometry, 10);
  ASSERT_EQ(cache.load("alice", kId, history, 1 << 20, kv), 10);
  EXPECT_TRUE(same_rows(kv, *source, 10));
}

TEST(SessionCacheTest, TenantsAndSessionIdsNeverShareAnEntry) {
  SessionCache cache(uint64_t{1} << 20);
  const std::vector<int32_t> history = tokens(10, 3);
  cache.store("alice", kId, history, filled(10, 3));
  EXPECT_EQ(load(cache, "bob", kId, history), 0);
  EXPECT_EQ(load(cache, "alice", "ffffffffffffffffffffffffffffffff", history), 0);
  EXPECT_EQ(load(cache, "alice", kId, history), 10);
}

TEST(SessionCacheTest, MaxTokensAndTheTargetsCapacityBoundTheReuse) {
  SessionCache cache(uint64_t{1} << 20);
  const std::vector<int32_t> history = tokens(10, 4);
  cache.store("alice", kId, history, filled(10, 4));
  EXPECT_EQ(load(cache, "alice", kId, history, /*max_tokens=*/4), 4);
  EXPECT_EQ(load(cache, "alice", kId, history, 1 << 20, /*capacity=*/6), 6);
  EXPECT_EQ(load(cache, "alice", kId, history, /*max_tokens=*/0), 0);
}

TEST(SessionCacheTest, TheNextTurnReplacesTheEntryAndKeepsItsExactFlag) {
  SessionCache cache(uint64_t{1} << 20);
  const std::vector<int32_t> turn2 = tokens(15, 5);
  cache.store("alice", kId, std::vector<int32_t>(turn2.begin(), turn2.begin() + 10), filled(10, 5));
  auto second = filled(15, 6);
  cache.store("alice", kId, turn2, second, /*exact=*/false);
  EXPECT_EQ(cache.stats().sessions, 1u);
  EXPECT_EQ(cache.stats().bytes, entry_bytes(15));
  F32KvCache kv(kGeometry, 20);
  bool exact = true;
  ASSERT_EQ(cache.load("alice", kId, turn2, 1 << 20, kv, &exact), 15);
  EXPECT_TRUE(same_rows(kv, *second, 15));
  EXPECT_FALSE(exact) << "KV built on a pack stays marked as such";
}

TEST(SessionCacheTest, EvictsTheLeastRecentlyUsedSessionOverTheByteCap) {
  SessionCache cache(2 * entry_bytes(10));
  const std::vector<int32_t> a = tokens(10, 7), b = tokens(10, 8), c = tokens(10, 9);
  cache.store("t", "a-0123456789abcdef0123456789abcdef", a, filled(10, 7));
  cache.store("t", "b-0123456789abcdef0123456789abcdef", b, filled(10, 8));
  EXPECT_EQ(load(cache, "t", "a-0123456789abcdef0123456789abcdef", a), 10);  // a is now more recent
  cache.store("t", "c-0123456789abcdef0123456789abcdef", c, filled(10, 9));
  EXPECT_EQ(cache.stats().evicted, 1u);
  EXPECT_EQ(cache.stats().sessions, 2u);
  EXPECT_EQ(cache.stats().bytes, 2 * entry_bytes(10));
  EXPECT_EQ(load(cache, "t", "b-0123456789abcdef0123456789abcdef", b), 0);
  EXPECT_EQ(load(cache, "t", "a-0123456789abcdef0123456789abcdef", a), 10);
  EXPECT_EQ(load(cache, "t", "c-0123456789abcdef0123456789abcdef", c), 10);
}

TEST(SessionCacheTest, BytesCountTheEntrysCapacityAndAnEntryOverTheCapIsNotKept) {
  SessionCache cache(entry_bytes(16));
  cache.store("t", kId, tokens(10, 10), filled(10, 10, /*capacity=*/32));
  EXPECT_EQ(cache.stats().sessions, 0u) << "32 tokens of capacity pass a 16-token cap";
  cache.store("t", kId, tokens(10, 10), filled(10, 10, /*capacity=*/16));
  EXPECT_EQ(cache.stats().bytes, entry_bytes(16));

  SessionCache off(0);
  off.store("t", kId, tokens(10, 10), filled(10, 10));
  EXPECT_EQ(off.stats().sessions, 0u);
  EXPECT_EQ(load(off, "t", kId, tokens(10, 10)), 0);
}

}  // namespace
}  // namespace baton
