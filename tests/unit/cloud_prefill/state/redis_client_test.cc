// The parts of the Redis client that need no server: URL parsing and key
// slots (the integration test checks slots against a real CLUSTER KEYSLOT).
#include "cloud_prefill/state/redis_client.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

TEST(RedisUrl, ParsesOneHostAndSeveralSeeds) {
  absl::StatusOr<RedisOptions> one = parse_redis_url("redis://10.0.0.5:7000");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->seeds.size(), 1u);
  EXPECT_EQ(one->seeds[0].host, "10.0.0.5");
  EXPECT_EQ(one->seeds[0].port, 7000);
  EXPECT_FALSE(one->tls);
  EXPECT_TRUE(one->username.empty());

  absl::StatusOr<RedisOptions> many = parse_redis_url("rediss://cache@redis-0.redis:6380,redis-1.redis,[::1]:7001");
  ASSERT_TRUE(many.ok()) << many.status();
  EXPECT_TRUE(many->tls);
  EXPECT_EQ(many->username, "cache");
  ASSERT_EQ(many->seeds.size(), 3u);
  EXPECT_EQ(many->seeds[0].host, "redis-0.redis");
  EXPECT_EQ(many->seeds[0].port, 6380);
  EXPECT_EQ(many->seeds[1].host, "redis-1.redis");
  EXPECT_EQ(many->seeds[1].port, 6379);  // the default port
  EXPECT_EQ(many->seeds[2].host, "::1");
  EXPECT_EQ(many->seeds[2].port, 7001);
}

TEST(RedisUrl, RejectsWhatItCannotHonour) {
  for (const char* url : {"http://h:1", "redis://", "redis://h:0", "redis://h:70000", "redis://h:x", "redis://:6379",
                          "redis://h:1,", "redis://h:1/0", "redis://user:secret@h:1", "redis://[::1:1"}) {
    absl::StatusOr<RedisOptions> options = parse_redis_url(url);
    EXPECT_TRUE(absl::IsInvalidArgument(options.status())) << url << " -> " << options.status();
  }
  // A password in the URL is refused with a pointer to the file flag.
  EXPECT_NE(parse_redis_url("redis://user:secret@h:1").status().message().find("--state-password-file"),
            std::string_view::npos);
}

TEST(RedisKeySlot, MatchesRedisClusterHashing) {
  // CRC16-XMODEM check value of "123456789" is 0x31C3; the rest are CLUSTER
  // KEYSLOT answers of a Redis 7 server.
  EXPECT_EQ(redis_key_slot("123456789"), 0x31C3 % 16384);
  EXPECT_EQ(redis_key_slot("foo"), 12182);
  EXPECT_EQ(redis_key_slot("bar"), 5061);
  EXPECT_EQ(redis_key_slot(""), 0);
  EXPECT_EQ(redis_key_slot("somekey"), 11058);  // the CLUSTER KEYSLOT manual page's examples
  EXPECT_EQ(redis_key_slot("foo{hash_tag}"), 2515);
}

TEST(RedisKeySlot, HashTagsPickTheHashedPart) {
  EXPECT_EQ(redis_key_slot("{user1000}.following"), redis_key_slot("user1000"));
  EXPECT_EQ(redis_key_slot("{user1000}.followers"), redis_key_slot("{user1000}.following"));
  EXPECT_EQ(redis_key_slot("foo{bar}{zap}"), redis_key_slot("bar"));  // the first tag only
  EXPECT_EQ(redis_key_slot("foo{{bar}}zap"), redis_key_slot("{bar"));
  // An empty tag or an unclosed brace: the whole key is hashed.
  EXPECT_NE(redis_key_slot("foo{}{bar}"), redis_key_slot("bar"));
  EXPECT_NE(redis_key_slot("foo{bar"), redis_key_slot("bar"));
}

TEST(RedisClientOptions, BadOptionsAreInvalidArgument) {
  RedisOptions options;
  EXPECT_TRUE(absl::IsInvalidArgument(make_redis_client(options).status()));  // no seed
  options.seeds = {{"127.0.0.1", 1}};
  options.io_timeout = std::chrono::milliseconds(0);
  EXPECT_TRUE(absl::IsInvalidArgument(make_redis_client(options).status()));
  options.io_timeout = std::chrono::milliseconds(100);
  options.tls = true;  // without a CA file
  EXPECT_TRUE(absl::IsInvalidArgument(make_redis_client(options).status()));
  options.tls_ca_file = "/nonexistent/ca.pem";
  EXPECT_TRUE(absl::IsInvalidArgument(make_redis_client(options).status()));
}

TEST(RedisClient, NoServerYetIsUnavailableThenFailsFast) {
  // Port 1 on loopback: nothing listens, the connect is refused at once.
  RedisOptions options;
  options.seeds = {{"127.0.0.1", 1}};
  options.backoff_initial = std::chrono::milliseconds(5000);
  options.backoff_max = std::chrono::milliseconds(5000);
  absl::StatusOr<std::unique_ptr<RedisClient>> client = make_redis_client(options);
  ASSERT_TRUE(client.ok()) << client.status();  // no server needed to make one
  EXPECT_TRUE((*client)->healthy());
  EXPECT_TRUE(absl::IsUnavailable((*client)->get("k").status()));
  EXPECT_FALSE((*client)->healthy());
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::optional<std::string>> again = (*client)->get("k");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
  EXPECT_TRUE(absl::IsUnavailable(again.status()));
  EXPECT_NE(again.status().message().find("down"), std::string_view::npos) << again.status();
  const RedisClientStats stats = (*client)->stats();
  EXPECT_EQ(stats.commands, 2u);
  EXPECT_EQ(stats.errors, 2u);
  EXPECT_EQ(stats.nodes_down, 1);
  EXPECT_FALSE(stats.last_error.empty());
}

}  // namespace
}  // namespace baton
