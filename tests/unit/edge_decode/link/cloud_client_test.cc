// CloudClient (edge_decode/link/cloud_client.h) against a fake Prefill server
// (tests/support/fake_prefill_server.h): what a Prefill call carries (tokens,
// a keyed session id, the bearer token, the affinity header), what Health
// reports, and that every kind of bad answer — a cloud error, another
// model's stream, a corrupt block, another history, a stall, a cancel —
// ends with its code while the target cache stays as it was.
#include "edge_decode/link/cloud_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_stream/kv_stream_writer.h"
#include "common/kv_stream/prefix_digest.h"
#include "tests/support/fake_prefill_server.h"
#include "tests/support/test_models.h"
#include "tests/support/tiny_model.h"

namespace baton {
namespace {

using ::testing::HasSubstr;
using testing::FakePrefillServer;
using testing::FakePrefillService;

std::vector<int32_t> prompt(int n, int salt) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 7 + salt * 131 + 3) % 500);
  return t;
}

KvCodecConfig f16() {
  auto codec = parse_kv_codec_config("f16");
  EXPECT_TRUE(codec.ok());
  return *codec;
}

// A cache of `n` tokens with values that name (layer, position, channel).
F32KvCache source_kv(const KvGeometry& geometry, int64_t n) {
  F32KvCache kv(geometry, n);
  const int64_t dim = geometry.kv_dim();
  for (int layer = 0; layer < geometry.n_layer; ++layer) {
    std::vector<float> k(static_cast<size_t>(n * dim)), v(k.size());
    for (int64_t i = 0; i < n * dim; ++i) {
      k[static_cast<size_t>(i)] = static_cast<float>(layer + 1) * 0.5f + static_cast<float>(i % 29) * 0.125f;
      v[static_cast<size_t>(i)] = -k[static_cast<size_t>(i)];
    }
    EXPECT_TRUE(kv.store(layer, 0, n, k.data(), v.data()).ok());
  }
  kv.set_size(n);
  return kv;
}

class CloudClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = FakePrefillServer::Start();
    ASSERT_NE(server_, nullptr);
    v1::HealthResponse health;
    health.set_state(v1::SERVING_STATE_READY);
    health.set_prefill_tokens_per_s(1234);
    health.mutable_model()->set_digest(std::string("\x01\xab", 2));
    server_->service().set_health(health);
  }

  std::unique_ptr<CloudClient> client(CloudClientOptions options = {}) {
    options.address = server_->address();
    options.prefill_timeout = std::chrono::seconds(20);
    // The first Health call also connects: a loaded machine under TSan took
    // over the 2 s default for it. No test here is about that deadline.
    options.health_timeout = std::chrono::seconds(20);
    auto made = CloudClient::Create(options);
    EXPECT_TRUE(made.ok()) << made.status();
    return made.ok() ? std::move(*made) : nullptr;
  }

  // The KV stream a cloud of `fingerprint` sends for `tokens` from `first`.
  std::vector<v1::KvStreamMessage> stream(const std::vector<int32_t>& tokens, uint32_t first,
                                          const ModelFingerprint& fingerprint) {
    std::vector<v1::KvStreamMessage> messages;
    KvStreamWriter writer([&](const v1::KvStreamMessage& m) {
      messages.push_back(m);
      return absl::OkStatus();
    });
    KvStreamHeaderInfo info;
    info.model = fingerprint;
    info.codec = f16();
    info.first_position = first;
    info.token_ids.assign(tokens.begin() + first, tokens.end());
    info.prefix_digest = prefix_digest(tokens);
    const F32KvCache source = source_kv(tiny_.geometry, static_cast<int64_t>(tokens.size()));
    v1::ProducerStats producer;
    producer.set_prefill_ms(5);
    EXPECT_TRUE(write_kv_segment(source, info, &tiny_.rope, writer, &producer).ok());
    return messages;
  }

  absl::StatusOr<CloudPrefillResult> prefill(CloudClient& cloud, const CloudPrefillRequest& request, F32KvCache& target,
                                             const CancelledFn& cancelled = {}, CancelSlot* slot = nullptr) {
    return cloud.prefill(request, tiny_.fingerprint, tiny_.rope, target, {}, cancelled, slot);
  }

  static CloudPrefillRequest request_for(const std::vector<int32_t>& tokens) {
    CloudPrefillRequest request;
    request.tokens = tokens;
    request.codec = f16();
    return request;
  }

  const testing::TinyModel& tiny_ = testing::shared_tiny_model(GgmlType::kF16);
  std::unique_ptr<FakePrefillServer> server_;
};

TEST_F(CloudClientTest, HealthReportsTheCloudAndAFailedPollSaysWhy) {
  auto cloud = client();
  ASSERT_NE(cloud, nullptr);
  ASSERT_TRUE(cloud->check_health().ok());
  CloudLinkStatus link = cloud->link();
  EXPECT_TRUE(link.reachable);
  EXPECT_EQ(link.state, v1::SERVING_STATE_READY);
  EXPECT_EQ(link.prefill_tokens_per_s, 1234);
  EXPECT_EQ(link.model_digest, "01ab");
  EXPECT_EQ(link.address, server_->address());

  server_->service().set_health(v1::HealthResponse(), grpc::Status(grpc::StatusCode::UNAVAILABLE, "warming up"));
  const absl::Status failed = cloud->check_health();
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(failed.message(), "cloud Health: warming up");
  link = cloud->link();
  EXPECT_FALSE(link.reachable);
  EXPECT_EQ(link.state, v1::SERVING_STATE_UNSPECIFIED);
  EXPECT_EQ(link.last_error, "Health: warming up");
}

TEST_F(CloudClientTest, PrefillSendsTokensAKeyedSessionIdTheTokenAndTheAffinityHeader) {
  const std::string token_path = testing::make_temp_dir("cloud-client") + "/token";
  std::ofstream(token_path) << "secret-token-0123456789\n";
  CloudClientOptions options;
  options.token_path = token_path;
  auto cloud = client(options);
  ASSERT_NE(cloud, nullptr);
  const std::vector<int32_t> tokens = prompt(40, 1);
  server_->service().set_prefill({stream(tokens, 0, tiny_.fingerprint)});

  CloudPrefillRequest request = request_for(tokens);
  request.session_id = "my-session";
  request.cache_salt = "salt-1";
  F32KvCache target(tiny_.geometry, 40);
  auto result = prefill(*cloud, request, target);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->load.token_count, 40u);
  EXPECT_EQ(target.size(), 40);
  const F32KvCache source = source_kv(tiny_.geometry, 40);
  EXPECT_NEAR(target.k_row(1, 39)[3], source.k_row(1, 39)[3], 1e-3);
  EXPECT_EQ(result->producer.prefill_ms(), 5);
  EXPECT_TRUE(cloud->link().reachable) << "a served call proves the cloud up";

  const std::vector<FakePrefillService::SeenCall> calls = server_->service().prefill_calls();
  ASSERT_EQ(calls.size(), 1u);
  const v1::PrefillRequest& sent = calls[0].request;
  ASSERT_EQ(sent.tokens().ids_size(), 40);
  EXPECT_EQ(sent.tokens().ids(39), static_cast<uint32_t>(tokens[39]));
  EXPECT_EQ(sent.first_position(), 0u);
  EXPECT_EQ(sent.codec().codec(), v1::KV_CODEC_F16);
  EXPECT_EQ(sent.cache_salt(), "salt-1");
  EXPECT_EQ(sent.expected_model().digest(), model_fingerprint_to_proto(tiny_.fingerprint).digest());
  EXPECT_NE(sent.session_id(), "my-session") << "session ids never leave the edge in clear";
  EXPECT_GE(sent.session_id().size(), 32u);
  auto header = [&](const std::string& key) {
    auto it = calls[0].metadata.find(key);
    return it == calls[0].metadata.end() ? std::string("(none)") : it->second;
  };
  EXPECT_EQ(header("authorization"), "Bearer secret-token-0123456789");
  EXPECT_EQ(header(kPrefixDigestMetadataKey), prefix_affinity_key(tokens, ""));
}

TEST_F(CloudClientTest, ACloudErrorKeepsItsCodeAndTheTargetIsUnchanged) {
  auto cloud = client();
  ASSERT_NE(cloud, nullptr);
  const std::vector<int32_t> tokens = prompt(40, 2);
  std::vector<v1::KvStreamMessage> part = stream(tokens, 0, tiny_.fingerprint);
  part.resize(3);  // header and two blocks, then the error
  for (const auto& [messages, code] :
       {std::pair{std::vector<v1::KvStreamMessage>{}, grpc::StatusCode::RESOURCE_EXHAUSTED},
        std::pair{part, grpc::StatusCode::UNAVAILABLE}}) {
    SCOPED_TRACE(messages.size());
    server_->service().set_prefill({messages, grpc::Status(code, "over the memory limit")});
    F32KvCache target(tiny_.geometry, 40);
    auto result = prefill(*cloud, request_for(tokens), target);
    EXPECT_EQ(static_cast<int>(result.status().code()), static_cast<int>(code)) << result.status();
    EXPECT_EQ(result.status().message(), "cloud: over the memory limit");
    EXPECT_EQ(target.size(), 0);
  }
}

TEST_F(CloudClientTest, AnUnreachableCloudIsUnavailable) {
  auto cloud = client();
  ASSERT_NE(cloud, nullptr);
  server_->Shutdown();
  EXPECT_EQ(cloud->check_health().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(cloud->link().reachable);
  F32KvCache target(tiny_.geometry, 40);
  auto result = prefill(*cloud, request_for(prompt(40, 3)), target);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("cloud: "));
}

TEST_F(CloudClientTest, AStreamOfAnotherModelIsRefusedNamingWhatDiffers) {
  auto cloud = client();
  ASSERT_NE(cloud, nullptr);
  auto other = testing::load_tiny_model(GgmlType::kF16, /*seed=*/2);
  ASSERT_TRUE(other.ok()) << other.status();
  const std::vector<int32_t> tokens = prompt(40, 4);
  server_->service().set_prefill({stream(tokens, 0, other->fingerprint)});
  F32KvCache target(tiny_.geometry, 40);
  auto result = prefill(*cloud, request_for(tokens), target);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("weights"));
  EXPECT_EQ(target.size(), 0);
}

TEST_F(CloudClientTest, ACorruptBlockIsDataLossAndTheTargetIsUnchanged) {
  auto cloud = client();
  ASSERT_NE(cloud, nullptr);
  const std::vector<int32_t> tokens = prompt(40, 5);
  std::vector<v1::KvStreamMessage> messages = stream(tokens, 0, tiny_.fingerprint);
  ASSERT_TRUE(messages[2].has_block());
  std::string* payload = messages[2].mutable_block()->mutable_payload();
  (*payload)[payload->size() / 2] ^= 0x40;
  server_->service().set_prefill({messages});
  F32KvCache target(tiny_.geometry, 40);
  auto result = prefill(*cloud, request_for(tokens), target);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDataLoss) << result.status();
  EXPECT_EQ(target.size(), 0);
}

TEST_F(CloudClientTest, AStreamForAnotherHistoryIsRefused) {
  auto cloud = client();
  ASSERT_NE(cloud, nullptr);
  // A delta from position 20: the cloud's answer is for another prefix [0, 20).
  const std::vector<int32_t> ours = prompt(40, 6);
  std::vector<int32_t> theirs = ours;
  theirs[3] += 1;
  server_->service().set_prefill({stream(theirs, 20, tiny_.fingerprint)});
  CloudPrefillRequest request = request_for(ours);
  request.first_position = 20;
  F32KvCache target = source_kv(tiny_.geometry, 40);
  target.set_size(20);
  auto result = prefill(*cloud, request, target);
  EXPECT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("digest"));
  EXPECT_EQ(target.size(), 20);
}

TEST_F(CloudClientTest, AnEmptyRangeIsInvalidAndNeverReachesTheCloud) {
  auto cloud = client();
  ASSERT_NE(cloud, nullptr);
  CloudPrefillRequest request = request_for(prompt(10, 7));
  request.first_position = 10;
  F32KvCache target(tiny_.geometry, 10);
  auto result = prefill(*cloud, request, target);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(result.status().message(), "cloud prefill of [10, 10) is empty");
  EXPECT_TRUE(server_->service().prefill_calls().empty());
}

TEST_F(CloudClientTest, AHeaderOverTheStagingBudgetIsRefusedBeforeAnyBlock) {
  auto cloud = client();
  ASSERT_NE(cloud, nullptr);
  const std::vector<int32_t> tokens = prompt(40, 8);
  server_->service().set_prefill({stream(tokens, 0, tiny_.fingerprint)});
  CloudPrefillRequest request = request_for(tokens);
  request.max_staging_bytes = 1000;
  F32KvCache target(tiny_.geometry, 40);
  auto result = prefill(*cloud, request, target);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted) << result.status();
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("only 1000 bytes of the KV memory budget are free"));
  EXPECT_EQ(target.size(), 0);
}

TEST_F(CloudClientTest, AStalledStreamEndsWithDeadlineExceeded) {
  CloudClientOptions options;
  options.stall_timeout = std::chrono::milliseconds(300);
  auto cloud = client(options);
  ASSERT_NE(cloud, nullptr);
  const std::vector<int32_t> tokens = prompt(40, 9);
  FakePrefillService::PrefillScript script{stream(tokens, 0, tiny_.fingerprint)};
  script.stall = true;
  script.stall_after = 2;  // header and one block, then nothing
  server_->service().set_prefill(script);
  F32KvCache target(tiny_.geometry, 40);
  const auto start = std::chrono::steady_clock::now();
  auto result = prefill(*cloud, request_for(tokens), target);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15)) << "not the 20 s call deadline";
  EXPECT_EQ(target.size(), 0);
}

TEST_F(CloudClientTest, ACancelEndsTheCallWithCancelled) {
  auto cloud = client();
  ASSERT_NE(cloud, nullptr);
  const std::vector<int32_t> tokens = prompt(40, 10);
  FakePrefillService::PrefillScript script{stream(tokens, 0, tiny_.fingerprint)};
  script.stall = true;
  script.stall_after = 1;
  server_->service().set_prefill(script);

  // Through the slot: a client that goes away stops a stalled stream at once.
  CancelSlot slot;
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    slot.cancel();
  });
  F32KvCache target(tiny_.geometry, 40);
  auto result = prefill(*cloud, request_for(tokens), target, {}, &slot);
  canceller.join();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled) << result.status();
  EXPECT_EQ(target.size(), 0);

  // Through the poll between messages.
  server_->service().set_prefill({stream(tokens, 0, tiny_.fingerprint)});
  auto polled = prefill(*cloud, request_for(tokens), target, [] { return true; });
  EXPECT_EQ(polled.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(polled.status().message(), "the Generate call was cancelled during the cloud prefill");
  EXPECT_EQ(target.size(), 0);
}

// The staging a stream is counted for: the store's bytes per token, except a
// transform stream into a store that is not INT8, whose blocks wait as f32
// rows until the trailer (decoded on arrival).
TEST(KvStreamStagingBytes, ATransformStreamIntoANonInt8StoreCountsF32Rows) {
  const KvGeometry& g = testing::shared_tiny_model(GgmlType::kF16).geometry;
  const uint64_t f32_per_token = static_cast<uint64_t>(g.kv_dim()) * 2 * g.n_layer * sizeof(float);
  v1::KvHeader header;
  header.set_token_count(10);
  header.mutable_codec()->set_codec(v1::KV_CODEC_TC);
  auto int8 = QuantizedKvCache::Create(g, 16, default_kv_codec_config(KvCodecConfig::Bits::kInt8, g));
  auto f16_store = QuantizedKvCache::Create(g, 16, f16());
  ASSERT_TRUE(int8.ok() && f16_store.ok());
  EXPECT_EQ(kv_stream_staging_bytes(header, **int8), 10 * static_cast<uint64_t>((*int8)->bytes_per_token()));
  EXPECT_EQ(kv_stream_staging_bytes(header, **f16_store), 10 * f32_per_token);
  header.mutable_codec()->set_codec(v1::KV_CODEC_F16);
  EXPECT_EQ(kv_stream_staging_bytes(header, **f16_store), 10 * static_cast<uint64_t>((*f16_store)->bytes_per_token()));
  F32KvCache f32(g, 16);
  EXPECT_EQ(kv_stream_staging_bytes(header, f32), 10 * f32_per_token);
}

}  // namespace
}  // namespace baton
