// Two Prefill replicas sharing one real redis-server (tests/support/
// redis_server.h) as the L2 of their prefix and session caches (--state,
// cloud_prefill/state/state_tier.h): what one replica computed is an L2 hit
// on the other, bit for bit the KV of a fresh one-shot prefill; a session
// moves with its owner to another replica; Redis killed mid-run costs only
// misses (Health says the tier is down) and hits resume once it is back; a
// value corrupted through a raw client is a miss with correct KV; tenants
// never share blocks or sessions across replicas; on a 3-node Redis Cluster
// one prompt's blocks spread over the nodes and still hit. Skipped, with the
// fixture's message, only when redis-server cannot run here.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "cloud_prefill/prefill_metrics.h"
#include "cloud_prefill/prefill_service.h"
#include "cloud_prefill/state/redis_client.h"
#include "cloud_prefill/state/state_tier.h"
#include "cloud_prefill/tenant_auth.h"
#include "common/engine/engine.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/kv_stream/kv_stream_writer.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/util/check.h"
#include "common/util/metrics.h"
#include "proto/baton.grpc.pb.h"
#include "tests/support/edge_test_env.h"
#include "tests/support/kv_streams.h"
#include "tests/support/redis_server.h"
#include "tests/support/tiny_model.h"

namespace baton {
namespace {

using testing::RedisServer;
using testing::RedisTestCluster;

constexpr int64_t kMaxContext = 512;
constexpr char kSessionId[] = "0123456789abcdef0123456789abcdef-shared-1";
constexpr char kTokenA[] = "tenant-a-token-0123456789";
constexpr char kTokenB[] = "tenant-b-token-0123456789";

const testing::TinyModel& reference() { return testing::shared_tiny_model(GgmlType::kF32); }

std::vector<int32_t> prompt(int n, int seed) { return testing::seeded_prompt(reference(), n, seed); }

v1::PrefillRequest request_for(const std::vector<int32_t>& tokens, uint32_t first = 0,
                               const std::string& session = "") {
  v1::PrefillRequest request;
  for (int32_t token : tokens) request.mutable_tokens()->add_ids(static_cast<uint32_t>(token));
  request.mutable_codec()->set_codec(v1::KV_CODEC_F16);
  request.set_first_position(first);
  request.set_session_id(session);
  return request;
}

struct Call {
  grpc::Status status;
  std::vector<v1::KvStreamMessage> messages;
  uint32_t cached() const {
    return !messages.empty() && messages.back().has_trailer() ? messages.back().trailer().producer().cached_tokens()
                                                              : 0u;
  }
};

Call call_prefill(v1::Prefill::Stub& stub, const v1::PrefillRequest& request, const std::string& token = "") {
  grpc::ClientContext context;
  edge_test::live_call(context, 60);
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  Call call;
  auto reader = stub.Prefill(&context, request);
  v1::KvStreamMessage message;
  while (reader->Read(&message)) call.messages.push_back(message);
  call.status = reader->Finish();
  return call;
}

v1::StateTier health_of(v1::Prefill::Stub& stub) {
  grpc::ClientContext context;
  edge_test::live_call(context, 10);
  v1::HealthResponse health;
  EXPECT_TRUE(stub.Health(&context, v1::HealthRequest(), &health).ok());
  return health.state_tier();
}

// `messages` carry bit for bit what a fresh one-shot prefill of `tokens`
// streams through the same codec.
void expect_equals_one_shot(const std::vector<int32_t>& tokens, uint32_t first,
                            const std::vector<v1::KvStreamMessage>& messages) {
  const testing::TinyModel& ref = reference();
  auto codec = parse_kv_codec_config("f16");
  ASSERT_TRUE(codec.ok());
  const std::vector<v1::KvStreamMessage> exact_messages =
      testing::one_shot_stream(ref, tokens, first, *codec, kMaxContext);
  auto got = testing::receive_stream(ref, tokens, first, messages, kMaxContext);
  auto exact = testing::receive_stream(ref, tokens, first, exact_messages, kMaxContext);
  ASSERT_NE(got, nullptr);
  ASSERT_NE(exact, nullptr);
  const size_t row_bytes = static_cast<size_t>(ref.geometry.kv_dim()) * sizeof(float);
  for (int layer = 0; layer < ref.geometry.n_layer; ++layer) {
    for (int64_t t = first; t < static_cast<int64_t>(tokens.size()); ++t) {
      ASSERT_EQ(std::memcmp(got->k_row(layer, t), exact->k_row(layer, t), row_bytes), 0) << layer << " " << t;
      ASSERT_EQ(std::memcmp(got->v_row(layer, t), exact->v_row(layer, t), row_bytes), 0) << layer << " " << t;
    }
  }
}

// A replica whose state tier uses a client with `client_options`.
std::unique_ptr<edge_test::Cloud> replica_on(const RedisOptions& client_options, PrefillServiceOptions options = {}) {
  auto client = make_redis_client(client_options);
  EXPECT_TRUE(client.ok()) << client.status();
  options.state_redis = std::shared_ptr<RedisClient>(std::move(*client));
  options.max_context_tokens = kMaxContext;
  options.threads = 1;
  return edge_test::start_cloud_with(reference().path, std::move(options));
}

class SharedStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = RedisServer::start();
    BATON_REDIS_OR_SKIP(started);
    redis_ = std::move(*started);
  }

  // A replica with its own Redis client; `options` as given otherwise.
  std::unique_ptr<edge_test::Cloud> replica(PrefillServiceOptions options = {},
                                           std::chrono::milliseconds backoff = std::chrono::milliseconds(50)) {
    RedisOptions client_options = redis_->client_options();
    client_options.backoff_initial = backoff;
    client_options.backoff_max = backoff;
    return replica_on(client_options, std::move(options));
  }

  std::unique_ptr<RedisServer> redis_;
};

TEST_F(SharedStateTest, APrefixPrefilledOnOneReplicaIsAnL2HitOnTheOtherWithTheOneShotKv) {
  auto a = replica();
  auto b = replica();
  ASSERT_TRUE(a->server && b->server);
  EXPECT_EQ(health_of(*a->stub).kind(), "redis");
  EXPECT_TRUE(health_of(*a->stub).healthy());
  const std::vector<int32_t> tokens = prompt(300, 1);
  Call cold = call_prefill(*a->stub, request_for(tokens));
  ASSERT_TRUE(cold.status.ok()) << cold.status.error_message();
  EXPECT_EQ(cold.cached(), 0u);
  a->service->flush_state_tier();
  const StateTierStats written = a->service->state_tier_stats();
  EXPECT_EQ(written.prefix.writes, 4u) << "the 4 full blocks A computed";

  Call hit = call_prefill(*b->stub, request_for(tokens));
  ASSERT_TRUE(hit.status.ok()) << hit.status.error_message();
  EXPECT_EQ(hit.cached(), 256u) << "4 blocks from L2";
  EXPECT_EQ(b->service->state_tier_stats().prefix.hits, 4u);
  expect_equals_one_shot(tokens, 0, hit.messages);
  // And now from B's own L1.
  Call again = call_prefill(*b->stub, request_for(tokens));
  EXPECT_EQ(again.cached(), 256u);
  EXPECT_EQ(b->service->state_tier_stats().prefix.hits, 4u) << "L1 first: no L2 read";
  MetricsRegistry registry;
  PrefillMetrics metrics(registry);
  metrics.collect(*b->service);
  const std::string scraped = registry.render();
  EXPECT_NE(scraped.find("baton_prefill_state_tier_hits_total{kind=\"prefix\"} 4"), std::string::npos) << scraped;
  EXPECT_NE(scraped.find("baton_prefill_state_tier_up 1"), std::string::npos) << scraped;
  std::printf("[ shared state ] tiny model: %.1f bytes per cached token in Redis (%llu bytes, %llu tokens)\n",
              static_cast<double>(written.prefix.written_bytes) / static_cast<double>(written.prefix.written_tokens),
              static_cast<unsigned long long>(written.prefix.written_bytes),
              static_cast<unsigned long long>(written.prefix.written_tokens));
}

TEST_F(SharedStateTest, ASessionsTurnTwoOnAnotherReplicaReusesTurnOneAfterTheFirstIsGone) {
  PrefillServiceOptions options;
  options.prefix_cache_bytes = 0;  // only the session can help
  auto a = replica(options);
  const std::vector<int32_t> turn1 = prompt(90, 5);
  ASSERT_TRUE(call_prefill(*a->stub, request_for(turn1, 0, kSessionId)).status.ok());
  a.reset();  // its write-behind queue is written out as it goes

  auto b = replica(options);
  std::vector<int32_t> history = turn1;
  for (int i = 0; i < 70; ++i) history.push_back((i * 11 + 9) % reference().model->spec().n_vocab);
  Call turn2 = call_prefill(*b->stub, request_for(history, 90, kSessionId));
  ASSERT_TRUE(turn2.status.ok()) << turn2.status.error_message();
  EXPECT_EQ(turn2.cached(), 90u);
  expect_equals_one_shot(history, 90, turn2.messages);
  EXPECT_EQ(b->service->state_tier_stats().session.hits, 1u);
}

TEST_F(SharedStateTest, RedisKilledMidRunCostsOnlyMissesAndHitsResumeWhenItIsBack) {
  constexpr std::chrono::milliseconds kBackoff(2000);
  auto a = replica({}, kBackoff);
  auto b = replica({}, kBackoff);
  ASSERT_TRUE(call_prefill(*a->stub, request_for(prompt(200, 2))).status.ok());
  a->service->flush_state_tier();
  ASSERT_TRUE(redis_->kill().ok());

  const std::vector<int32_t> tokens = prompt(200, 2);
  Call miss = call_prefill(*b->stub, request_for(tokens, 0, kSessionId));
  ASSERT_TRUE(miss.status.ok()) << miss.status.error_message();
  EXPECT_EQ(miss.cached(), 0u);
  expect_equals_one_shot(tokens, 0, miss.messages);
  const v1::StateTier down = health_of(*b->stub);
  EXPECT_EQ(down.kind(), "redis");
  EXPECT_FALSE(down.healthy()) << down.detail();
  EXPECT_GE(b->service->state_tier_stats().prefix.errors + b->service->state_tier_stats().session.errors, 1u);

  ASSERT_TRUE(redis_->restart().ok());
  // Past the backoff the replicas reconnect on their next call.
  std::this_thread::sleep_for(kBackoff + std::chrono::milliseconds(300));
  const std::vector<int32_t> fresh = prompt(200, 3);
  ASSERT_TRUE(call_prefill(*a->stub, request_for(fresh)).status.ok());
  a->service->flush_state_tier();
  Call hit = call_prefill(*b->stub, request_for(fresh));
  ASSERT_TRUE(hit.status.ok());
  EXPECT_EQ(hit.cached(), 192u) << "hits resume";
  expect_equals_one_shot(fresh, 0, hit.messages);
  EXPECT_TRUE(health_of(*b->stub).healthy());
}

TEST_F(SharedStateTest, AValueCorruptedThroughARawClientIsAMissAndTheKvIsRight) {
  auto a = replica();
  auto b = replica();
  const std::vector<int32_t> tokens = prompt(200, 4);
  ASSERT_TRUE(call_prefill(*a->stub, request_for(tokens)).status.ok());
  a->service->flush_state_tier();
  // Block 0 gets block 1's value (a valid envelope under another key), then
  // block 1 a truncated copy of itself.
  StateTier keys(nullptr, reference().fingerprint, reference().geometry);
  const std::vector<Digest256> digests = prefix_block_digests(tokens);
  auto raw = make_redis_client(redis_->client_options());
  ASSERT_TRUE(raw.ok());
  auto listed = redis_->cli({"--scan", "--pattern", "bt1:*:pb:*"});
  ASSERT_TRUE(listed.ok()) << listed.status();
  std::vector<std::string> block_keys;
  for (size_t i = 0; i < 3; ++i) {
    block_keys.push_back(keys.prefix_block_key(kDefaultTenant, digests[i]));
    EXPECT_NE(listed->find(block_keys.back()), std::string::npos) << "key layout: " << *listed;
  }
  auto value1 = (*raw)->get(block_keys[1]);
  ASSERT_TRUE(value1.ok() && value1->has_value());
  ASSERT_TRUE((*raw)->set(block_keys[0], **value1).ok());
  ASSERT_TRUE((*raw)->set(block_keys[1], (*value1)->substr(0, (*value1)->size() / 2)).ok());

  Call call = call_prefill(*b->stub, request_for(tokens));
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  EXPECT_EQ(call.cached(), 0u) << "block 0 is refused, so nothing after it is read";
  expect_equals_one_shot(tokens, 0, call.messages);
  EXPECT_EQ(b->service->state_tier_stats().prefix.corrupt, 1u);
}

TEST_F(SharedStateTest, ATenantNeverGetsAnotherTenantsBlocksOrSessionsAcrossReplicas) {
  PrefillServiceOptions options;
  auto auth = TenantAuth::FromText(std::string(kTokenA) + " alpha\n" + kTokenB + " beta\n", "test");
  ASSERT_TRUE(auth.ok()) << auth.status();
  options.auth = *auth;
  auto a = replica(options);
  auto b = replica(options);
  const std::vector<int32_t> tokens = prompt(150, 6);
  ASSERT_TRUE(call_prefill(*a->stub, request_for(tokens, 0, kSessionId), kTokenA).status.ok());
  a->service->flush_state_tier();
  std::vector<int32_t> longer = tokens;
  longer.push_back(7);
  Call beta = call_prefill(*b->stub, request_for(longer, 0, kSessionId), kTokenB);
  ASSERT_TRUE(beta.status.ok()) << beta.status.error_message();
  EXPECT_EQ(beta.cached(), 0u) << "neither alpha's blocks nor alpha's session";
  Call alpha = call_prefill(*b->stub, request_for(longer, 0, kSessionId), kTokenA);
  ASSERT_TRUE(alpha.status.ok());
  EXPECT_EQ(alpha.cached(), 150u) << "alpha's own session, from L2";
  expect_equals_one_shot(longer, 0, alpha.messages);
}

TEST(SharedStateClusterTest, BlocksSpreadOverA3NodeClusterAndAreL2HitsOnAnotherReplica) {
  auto cluster = RedisTestCluster::start(3);
  BATON_REDIS_OR_SKIP(cluster);
  auto a = replica_on((*cluster)->client_options());
  auto b = replica_on((*cluster)->client_options());
  ASSERT_TRUE(a->server && b->server);
  const std::vector<int32_t> tokens = prompt(400, 8);  // 6 full blocks
  ASSERT_TRUE(call_prefill(*a->stub, request_for(tokens)).status.ok());
  a->service->flush_state_tier();
  EXPECT_EQ(a->service->state_tier_stats().prefix.writes, 6u);
  int nodes_holding = 0;
  for (int i = 0; i < (*cluster)->size(); ++i) {
    auto keys = (*cluster)->node(i).cli({"DBSIZE"});
    ASSERT_TRUE(keys.ok()) << keys.status();
    if (std::atoi(keys->c_str()) > 0) ++nodes_holding;
  }
  EXPECT_GE(nodes_holding, 2) << "hash tags per block spread one prompt over the nodes";
  Call hit = call_prefill(*b->stub, request_for(tokens));
  ASSERT_TRUE(hit.status.ok()) << hit.status.error_message();
  EXPECT_EQ(hit.cached(), 384u);
  expect_equals_one_shot(tokens, 0, hit.messages);
  EXPECT_TRUE(health_of(*b->stub).healthy());
}

TEST(SharedStateDefaultTest, WithoutStateTheTierIsMemoryAndHealthy) {
  PrefillServiceOptions options;
  options.max_context_tokens = kMaxContext;
  options.threads = 1;
  auto cloud = edge_test::start_cloud_with(reference().path, options);
  ASSERT_TRUE(cloud->server);
  const v1::StateTier tier = health_of(*cloud->stub);
  EXPECT_EQ(tier.kind(), "memory");
  EXPECT_TRUE(tier.healthy());
}

}  // namespace
}  // namespace baton
