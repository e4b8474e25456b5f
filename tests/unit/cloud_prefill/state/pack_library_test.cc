// Durable prefix packs (cloud_prefill/state): the directory backend keeps
// packs across a restart (a new backend over the same directory finds them
// by id and by digest, with the quota counted) and a corrupted or foreign
// file is a miss, never a pack; the Redis backend (on a fake tier) shares
// packs, quota and deletes between two replicas, revalidates memory copies,
// serves memory while the tier is down, and PutPrefix's put fails UNAVAILABLE
// (storing nothing) when the tier does; key components are safe file names.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cloud_prefill/state/dir_pack_backend.h"
#include "cloud_prefill/state/pack_library.h"
#include "cloud_prefill/state/redis_pack_backend.h"
#include "common/kv_stream/kv_pack_file.h"
#include "common/kv_stream/prefix_digest.h"
#include "tests/support/fake_pack_redis.h"
#include "tests/support/pack_streams.h"
#include "tests/support/test_models.h"
#include "tests/support/tiny_model.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

const testing::TinyModel& tiny() { return testing::shared_tiny_model(GgmlType::kF32); }

std::vector<int32_t> tokens_of(int n, int seed) { return testing::seeded_prompt(tiny(), n, seed); }

// A verified pack as PutPrefix stores it.
std::shared_ptr<StoredPack> pack_named(const std::string& id, int seed, int n_tokens = 40) {
  const std::vector<int32_t> tokens = tokens_of(n_tokens, seed);
  absl::StatusOr<std::string> value = kv_pack_bytes(testing::make_pack_stream(tiny(), tokens, id));
  EXPECT_TRUE(value.ok()) << value.status();
  absl::StatusOr<std::shared_ptr<StoredPack>> pack = testing::verify_pack_value(tiny(), *value);
  EXPECT_TRUE(pack.ok()) << pack.status();
  return *pack;
}

uint64_t charge(uint32_t tokens, uint64_t value_bytes) { return value_bytes + tokens; }

PackLibrary::DecodeFn decoder() {
  return [](std::string_view value) { return testing::verify_pack_value(tiny(), value); };
}

const std::string kModelId = "0123456789abcdef";

TEST(PackKeyComponentTest, KeepsSafeNamesAndEncodesTheRestInjectively) {
  EXPECT_EQ(pack_key_component("sys-prompt_1"), "sys-prompt_1");
  EXPECT_EQ(pack_key_component(".."), "%2E%2E");
  EXPECT_EQ(pack_key_component("a/b:c{d}"), "a%2Fb%3Ac%7Bd%7D");
  EXPECT_EQ(pack_key_component(""), "%");
  const std::string long_a(200, 'a');
  const std::string long_b = std::string(199, 'a') + "b";
  EXPECT_LE(pack_key_component(long_a).size(), 161u);
  EXPECT_NE(pack_key_component(long_a), pack_key_component(long_b));
  EXPECT_NE(pack_key_component(std::string(128, '/')).find('~'), std::string::npos);
}

// --- directory ---------------------------------------------------------------------

TEST(DirPackBackendTest, PacksSurviveARestartByIdAndByDigestWithTheirQuota) {
  const std::string dir = testing::make_temp_dir("pack-dir");
  auto pack = pack_named("sys.1", 1);  // "." is encoded: no "..", no temp-name look-alikes
  uint64_t stored_charge = 0;
  {
    absl::StatusOr<std::unique_ptr<DirPackBackend>> backend = DirPackBackend::open(dir, kModelId, 0, charge);
    ASSERT_TRUE(backend.ok()) << backend.status();
    PrefixPackStore memory(1 << 30, 0, true);
    PackLibrary library(&memory, std::move(*backend), decoder());
    absl::StatusOr<PutPackResult> put = library.put("alice", pack, nullptr);
    ASSERT_TRUE(put.ok()) << put.status();
    EXPECT_FALSE(put->already_present);
    absl::StatusOr<PutPackResult> again = library.put("alice", pack_named("sys.1", 1), nullptr);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_TRUE(again->already_present);
    EXPECT_EQ(library.put("alice", pack_named("sys.1", 2), nullptr).status().code(),
              absl::StatusCode::kAlreadyExists);
    stored_charge = charge(40, kv_pack_bytes(pack->messages)->size());
  }
  EXPECT_TRUE(std::filesystem::exists(dir + "/" + kModelId + "/alice/sys%2E1.batonkv"));

  // "Restart": a new backend and an empty memory over the same directory.
  absl::StatusOr<std::unique_ptr<DirPackBackend>> reopened =
      DirPackBackend::open(dir, kModelId, stored_charge + 10, charge);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ((*reopened)->size(), 1u);
  EXPECT_EQ((*reopened)->check_quota("alice", 11).code(), absl::StatusCode::kResourceExhausted)
      << "the quota counts the pack found on disk";
  EXPECT_TRUE((*reopened)->check_quota("bob", 11).ok());
  PrefixPackStore memory(1 << 30, 0, true);
  PackLibrary library(&memory, std::move(*reopened), decoder());
  absl::StatusOr<std::shared_ptr<const StoredPack>> by_id = library.find_by_id("alice", "sys.1");
  ASSERT_TRUE(by_id.ok()) << by_id.status();
  ASSERT_NE(*by_id, nullptr);
  ASSERT_EQ((*by_id)->messages.size(), pack->messages.size());
  for (size_t i = 0; i < pack->messages.size(); ++i) {
    EXPECT_EQ((*by_id)->messages[i].SerializeAsString(), pack->messages[i].SerializeAsString()) << i;
  }
  EXPECT_EQ(library.stats().loads, 1u);
  memory.remove("alice", "sys.1").IgnoreError();  // as if evicted: reloaded by digest
  absl::StatusOr<std::shared_ptr<const StoredPack>> by_digest = library.find_by_digest("alice", pack->prefix_digest);
  ASSERT_TRUE(by_digest.ok() && *by_digest != nullptr);
  EXPECT_EQ((*by_digest)->pack_id, "sys.1");
  EXPECT_EQ(*library.find_by_id("bob", "sys.1"), nullptr) << "another tenant";

  absl::StatusOr<RemovedPack> removed = library.remove("alice", "sys.1");
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*library.find_by_id("alice", "sys.1"), nullptr);
  EXPECT_FALSE(std::filesystem::exists(dir + "/" + kModelId + "/alice/sys%2E1.batonkv"));
  EXPECT_EQ(library.remove("alice", "sys.1").status().code(), absl::StatusCode::kNotFound);
}

TEST(DirPackBackendTest, ACorruptedOrTruncatedFileIsAMissNeverAPack) {
  const std::string dir = testing::make_temp_dir("pack-dir-corrupt");
  const std::string path = dir + "/" + kModelId + "/default/sys.batonkv";
  auto pack = pack_named("sys", 3);
  {
    auto backend = DirPackBackend::open(dir, kModelId, 0, charge);
    ASSERT_TRUE(backend.ok()) << backend.status();
    ASSERT_TRUE((*backend)->put("default", "sys", pack->prefix_digest, 40, *kv_pack_bytes(pack->messages)).ok());
  }
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 200u);
  for (const bool truncate : {false, true}) {
    std::string damaged = bytes;
    if (truncate) {
      damaged.resize(damaged.size() - 20);
    } else {
      damaged[damaged.size() / 2] ^= 0x10;  // inside a block payload
    }
    std::ofstream(path, std::ios::binary | std::ios::trunc) << damaged;
    auto backend = DirPackBackend::open(dir, kModelId, 0, charge);  // the header still reads
    ASSERT_TRUE(backend.ok()) << backend.status();
    PrefixPackStore memory(1 << 30, 0, true);
    PackLibrary library(&memory, std::move(*backend), decoder());
    absl::StatusOr<std::shared_ptr<const StoredPack>> found = library.find_by_id("default", "sys");
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_EQ(*found, nullptr) << (truncate ? "truncated" : "corrupted");
    EXPECT_EQ(library.stats().rejected_values, 1u);
    EXPECT_EQ(memory.size(), 0u);
  }
  // A file renamed to another pack's name is not that pack.
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  std::filesystem::rename(path, dir + "/" + kModelId + "/default/other.batonkv");
  auto backend = DirPackBackend::open(dir, kModelId, 0, charge);
  ASSERT_TRUE(backend.ok());
  EXPECT_EQ((*backend)->size(), 0u);
}

// --- redis (fake tier) -----------------------------------------------------------------

struct Replica {
  explicit Replica(std::shared_ptr<testing::FakePackRedis> redis, uint64_t quota = 0)
      : memory(1 << 30, 0, true),
        library(&memory, std::make_unique<RedisPackBackend>(redis, kModelId, quota, charge), decoder()) {}
  PrefixPackStore memory;
  PackLibrary library;
};

TEST(RedisPackBackendTest, TwoReplicasSharePacksDeletesAndTheQuota) {
  auto redis = std::make_shared<testing::FakePackRedis>();
  auto pack = pack_named("sys", 4);
  const uint64_t pack_charge = charge(40, kv_pack_bytes(pack->messages)->size());
  Replica a(redis, pack_charge + 100);
  Replica b(redis, pack_charge + 100);
  ASSERT_TRUE(a.library.put("alice", pack, nullptr).ok());

  // The layout: value, claim, digest index and the tenant's byte counter.
  RedisPackBackend keys(redis, kModelId, 0, charge);
  const std::string prefix = "baton:pack:" + kModelId + ":alice:";
  EXPECT_EQ(keys.meta_key("alice", "sys"), prefix + "m:sys");
  EXPECT_EQ(keys.value_key("alice", "sys", pack->prefix_digest), prefix + "v:sys:" + to_hex(pack->prefix_digest));
  EXPECT_EQ(redis->values().at(prefix + "v:sys:" + to_hex(pack->prefix_digest)), *kv_pack_bytes(pack->messages));
  EXPECT_EQ(redis->values().at(prefix + "d:" + to_hex(pack->prefix_digest)), "sys");
  EXPECT_EQ(redis->values().at(prefix + "bytes"), std::to_string(pack_charge));

  // B loads it; the quota is shared: B cannot store a second pack over it.
  absl::StatusOr<std::shared_ptr<const StoredPack>> on_b = b.library.find_by_id("alice", "sys");
  ASSERT_TRUE(on_b.ok() && *on_b != nullptr);
  EXPECT_EQ((*on_b)->prefix_digest, pack->prefix_digest);
  absl::StatusOr<PutPackResult> over = b.library.put("alice", pack_named("sys2", 5), nullptr);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(over.status().message()), HasSubstr("on all replicas"));
  EXPECT_EQ(b.library.put("alice", pack_named("sys", 6), nullptr).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(*b.library.find_by_id("bob", "sys"), nullptr) << "another tenant";

  // Deleted on A: B's copy in memory is revalidated and dropped.
  absl::StatusOr<RemovedPack> removed = a.library.remove("alice", "sys");
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*b.library.find_by_id("alice", "sys"), nullptr);
  EXPECT_EQ(b.memory.size(), 0u);
  EXPECT_EQ(b.library.stats().stale_dropped, 1u);
  EXPECT_EQ(redis->values().at(prefix + "bytes"), "0");
  EXPECT_EQ(redis->values().count(prefix + "m:sys"), 0u);
  EXPECT_EQ(b.library.remove("alice", "sys").status().code(), absl::StatusCode::kNotFound);
}

TEST(RedisPackBackendTest, ATierDownFailsPutUnavailableAndServesMemoryCopies) {
  auto redis = std::make_shared<testing::FakePackRedis>();
  Replica a(redis);
  auto kept = pack_named("kept", 7);
  ASSERT_TRUE(a.library.put("alice", kept, nullptr).ok());
  redis->fail(true);
  absl::StatusOr<PutPackResult> put = a.library.put("alice", pack_named("new", 8), nullptr);
  EXPECT_EQ(put.status().code(), absl::StatusCode::kUnavailable) << put.status();
  EXPECT_THAT(std::string(put.status().message()), HasSubstr("redis"));
  EXPECT_EQ(a.memory.find_by_id("alice", "new"), nullptr) << "never stored only locally";
  EXPECT_EQ(a.library.reserve("alice", 100).status().code(), absl::StatusCode::kUnavailable);
  absl::StatusOr<std::shared_ptr<const StoredPack>> hit = a.library.find_by_id("alice", "kept");
  ASSERT_TRUE(hit.ok() && *hit != nullptr) << "a memory copy is served while the tier is down";
  Replica b(redis);
  EXPECT_EQ(b.library.find_by_id("alice", "kept").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(a.library.remove("alice", "kept").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(a.memory.find_by_id("alice", "kept"), nullptr) << "nothing deleted when the tier could not";
  redis->fail(false);
  EXPECT_EQ(redis->values().count("baton:pack:" + kModelId + ":alice:m:new"), 0u);
}

TEST(RedisPackBackendTest, ACorruptedOrForeignValueIsAMiss) {
  auto redis = std::make_shared<testing::FakePackRedis>();
  Replica a(redis);
  auto pack = pack_named("sys", 9);
  ASSERT_TRUE(a.library.put("alice", pack, nullptr).ok());
  const std::string key = "baton:pack:" + kModelId + ":alice:v:sys:" + to_hex(pack->prefix_digest);
  const std::string good = redis->values().at(key);
  // Corrupted payload, truncated, and another pack's valid value under this key.
  const std::string other = *kv_pack_bytes(pack_named("evil", 10)->messages);
  std::string corrupted = good;
  corrupted[corrupted.size() / 2] ^= 0x01;
  int misses = 0;
  for (const std::string& bad : {corrupted, good.substr(0, good.size() - 9), other}) {
    redis->values()[key] = bad;
    Replica b(redis);
    absl::StatusOr<std::shared_ptr<const StoredPack>> found = b.library.find_by_id("alice", "sys");
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_EQ(*found, nullptr) << "value " << misses;
    EXPECT_EQ(b.library.stats().rejected_values, 1u);
    ++misses;
  }
  redis->values()[key] = good;
  Replica b(redis);
  EXPECT_NE(*b.library.find_by_id("alice", "sys"), nullptr);
}

TEST(PrefixPackStoreEvictableTest, LeastRecentlyUsedPacksMakeRoomAndAnIdIsReplaced) {
  PrefixPackStore store(1000, 0, true);
  auto make = [](const std::string& id, uint64_t bytes, uint8_t digest) {
    auto pack = std::make_shared<StoredPack>();
    pack->pack_id = id;
    pack->prefix_digest.fill(digest);
    pack->stored_bytes = bytes;
    return pack;
  };
  ASSERT_TRUE(store.put("t", make("a", 400, 1)).ok());
  ASSERT_TRUE(store.put("t", make("b", 400, 2)).ok());
  ASSERT_NE(store.find_by_id("t", "a"), nullptr);  // a is now the most recent
  ASSERT_TRUE(store.put("t", make("c", 400, 3)).ok());
  EXPECT_EQ(store.find_by_id("t", "b"), nullptr) << "b was the least recently used";
  EXPECT_NE(store.find_by_id("t", "a"), nullptr);
  EXPECT_EQ(store.evictions(), 1u);
  auto replaced = store.put("t", make("a", 100, 9));
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_EQ(store.find_by_id("t", "a")->prefix_digest[0], 9);
  EXPECT_EQ(store.bytes(), 500u);
  EXPECT_EQ(store.put("t", make("huge", 1001, 4)).status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace baton
