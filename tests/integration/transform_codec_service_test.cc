// Real-server tests of the transform codec (tc-*) between the services: the
// cloud's --kv-calibration (resolve_codec's tc cases, Health, the
// GetKvCalibration stream), an edge that fetches the cloud's calibration and
// prefills through the cloud with tc, an edge whose calibration differs
// (FAILED_PRECONDITION naming tc_calibration), and a hostile cloud whose
// calibration stream lies about its size, its digest, its model or its bytes.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cloud_prefill/prefill_service.h"
#include "cloud_prefill/tenant_auth.h"
#include "common/kv_codec/kv_calibration.h"
#include "common/kv_codec/kv_geometry.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "common/util/sha256.h"
#include "edge_decode/link/cloud_client.h"
#include "proto/baton.grpc.pb.h"
#include "tests/support/edge_test_env.h"
#include "tests/support/synthetic_calibration.h"
#include "tests/support/test_models.h"

namespace baton::edge_test {
namespace {

using ::testing::HasSubstr;

struct ModelFacts {
  std::string digest;  // ModelFingerprint::digest
  KvGeometry geometry;
};

ModelFacts facts_of(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(path);
  EXPECT_TRUE(model.ok()) << model.status();
  absl::StatusOr<ModelFingerprint> fingerprint = model_fingerprint(**model);
  EXPECT_TRUE(fingerprint.ok()) << fingerprint.status();
  return {fingerprint->digest, kv_geometry_for((*model)->spec())};
}

// A calibration of the model's shape, claimed for `digest` (its numbers are
// synthetic: the codec works with any calibration both ends share).
std::shared_ptr<const KvCalibration> calibration_for(const ModelFacts& facts, uint64_t seed) {
  KvCalibration calibration = testing::synthetic_kv_calibration(facts.geometry, seed);
  calibration.model_digest = facts.digest;
  return std::make_shared<const KvCalibration>(std::move(calibration));
}

std::string digest_bytes(const Digest256& digest) {
  return std::string(reinterpret_cast<const char*>(digest.data()), digest.size());
}

v1::PrefillRequest tc_request(int n_tokens) {
  v1::PrefillRequest request;
  for (uint32_t id : prompt(n_tokens, 5)) request.mutable_tokens()->add_ids(id);
  request.mutable_codec()->set_codec(v1::KV_CODEC_TC);
  return request;
}

// A greedy request through the cloud with the edge's default codec (tc-b2 here).
v1::GenerateRequest cloud_request(int n_tokens) {
  v1::GenerateRequest request = greedy_request(prompt(n_tokens, 7), "", v1::SPLIT_POLICY_CLOUD);
  request.clear_codec();
  return request;
}

grpc::Status call_prefill(v1::Prefill::Stub& stub, const v1::PrefillRequest& request,
                          std::vector<v1::KvStreamMessage>* messages) {
  grpc::ClientContext context;
  live_call(context, 60);
  auto reader = stub.Prefill(&context, request);
  v1::KvStreamMessage message;
  while (reader->Read(&message)) messages->push_back(message);
  return reader->Finish();
}

TEST(TransformCodecServiceTest, CloudWithoutCalibrationRefusesTcAndHasNoneToHandOut) {
  std::unique_ptr<Cloud> cloud = start_cloud(edge_model_path("tiny"));
  ASSERT_NE(cloud->stub, nullptr);
  std::vector<v1::KvStreamMessage> messages;
  grpc::Status status = call_prefill(*cloud->stub, tc_request(20), &messages);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("holds no KV calibration (--kv-calibration)"));

  grpc::ClientContext context;
  live_call(context, 30);
  auto reader = cloud->stub->GetKvCalibration(&context, v1::GetKvCalibrationRequest());
  v1::KvCalibrationChunk chunk;
  EXPECT_FALSE(reader->Read(&chunk));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);

  grpc::ClientContext health_context;
  v1::HealthResponse health;
  ASSERT_TRUE(cloud->stub->Health(&health_context, v1::HealthRequest(), &health).ok());
  EXPECT_TRUE(health.kv_calibration_sha256().empty());
}

TEST(TransformCodecServiceTest, CloudLoadRefusesACalibrationOfAnotherModel) {
  ModelFacts facts = facts_of(edge_model_path("tiny"));
  const std::string ours = facts.digest;
  facts.digest = std::string(64, 'a');
  PrefillServiceOptions options;
  options.threads = 1;
  options.max_running = 1;
  options.kv_calibration = calibration_for(facts, 1);
  PrefillService service(std::move(options));
  absl::Status loaded = service.Load(edge_model_path("tiny"));
  EXPECT_TRUE(absl::IsFailedPrecondition(loaded)) << loaded;
  EXPECT_THAT(loaded.message(), HasSubstr(ours));
  EXPECT_THAT(loaded.message(), HasSubstr(facts.digest));
}

class CloudWithCalibration : public ::testing::Test {
 protected:
  void SetUp() override {
    facts_ = facts_of(edge_model_path("tiny"));
    calibration_ = calibration_for(facts_, 1);
    PrefillServiceOptions options;
    options.kv_calibration = calibration_;
    cloud_ = start_cloud(edge_model_path("tiny"), options);
    ASSERT_NE(cloud_->stub, nullptr);
  }

  ModelFacts facts_;
  std::shared_ptr<const KvCalibration> calibration_;
  std::unique_ptr<Cloud> cloud_;
};

TEST_F(CloudWithCalibration, HealthNamesTheCalibrationAndTc) {
  grpc::ClientContext context;
  v1::HealthResponse health;
  ASSERT_TRUE(cloud_->stub->Health(&context, v1::HealthRequest(), &health).ok());
  EXPECT_EQ(health.kv_calibration_sha256(), to_hex(kv_calibration_digest(*calibration_)));
  EXPECT_THAT(health.codecs(), ::testing::Contains(v1::KV_CODEC_TC));
}

TEST_F(CloudWithCalibration, UnsetTransformParamsTakeTheDefaultsAndTheCloudsCalibration) {
  std::vector<v1::KvStreamMessage> messages;
  grpc::Status status = call_prefill(*cloud_->stub, tc_request(40), &messages);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_FALSE(messages.empty());
  ASSERT_TRUE(messages.front().has_header());
  ASSERT_TRUE(messages.back().has_trailer());
  const v1::CodecParams& codec = messages.front().header().codec();
  EXPECT_EQ(codec.codec(), v1::KV_CODEC_TC);
  const KvTransformParams defaults;
  EXPECT_EQ(codec.transform().budget_tenths(), static_cast<uint32_t>(defaults.budget_tenths));
  EXPECT_EQ(codec.transform().sink_tokens(), static_cast<uint32_t>(defaults.sink_tokens));
  EXPECT_EQ(codec.transform().recent_tokens(), static_cast<uint32_t>(defaults.recent_tokens));
  EXPECT_EQ(codec.transform().calibration_sha256(), digest_bytes(kv_calibration_digest(*calibration_)));
  EXPECT_TRUE(codec.has_zstd_level());
  EXPECT_EQ(codec.zstd_level(), 0);  // rANS
}

TEST_F(CloudWithCalibration, ARequestNamingAnotherCalibrationIsFailedPreconditionWithBothDigests) {
  v1::PrefillRequest request = tc_request(20);
  Digest256 other{};
  other.fill(0x11);
  request.mutable_codec()->mutable_transform()->set_calibration_sha256(digest_bytes(other));
  std::vector<v1::KvStreamMessage> messages;
  grpc::Status status = call_prefill(*cloud_->stub, request, &messages);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr(to_hex(other)));
  EXPECT_THAT(status.error_message(), HasSubstr(to_hex(kv_calibration_digest(*calibration_))));
  EXPECT_TRUE(messages.empty());

  request.mutable_codec()->mutable_transform()->set_calibration_sha256("short");
  messages.clear();
  status = call_prefill(*cloud_->stub, request, &messages);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
}

TEST_F(CloudWithCalibration, GetKvCalibrationStreamsTheFileInChunks) {
  grpc::ClientContext context;
  live_call(context, 30);
  auto reader = cloud_->stub->GetKvCalibration(&context, v1::GetKvCalibrationRequest());
  v1::KvCalibrationChunk chunk;
  std::string bytes;
  int chunks = 0;
  uint64_t total = 0;
  std::string sha, model;
  while (reader->Read(&chunk)) {
    if (chunks++ == 0) {
      total = chunk.total_bytes();
      sha = chunk.sha256();
      model = chunk.model_digest();
    }
    EXPECT_LE(chunk.data().size(), kKvCalibrationChunkBytes);
    bytes += chunk.data();
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(bytes, serialize_kv_calibration(*calibration_));
  EXPECT_EQ(total, bytes.size());
  EXPECT_EQ(sha, digest_bytes(sha256(bytes)));
  EXPECT_EQ(model, facts_.digest);
  EXPECT_EQ(chunks, static_cast<int>((bytes.size() + kKvCalibrationChunkBytes - 1) / kKvCalibrationChunkBytes));
}

// GetKvCalibration sits behind the Prefill service's tokens like every
// other RPC: without a token (or with a wrong one) nothing is streamed.
TEST(TransformCodecServiceTest, GetKvCalibrationNeedsAToken) {
  constexpr char kToken[] = "calibration-token-0123456789";
  const ModelFacts facts = facts_of(edge_model_path("tiny"));
  PrefillServiceOptions options;
  options.kv_calibration = calibration_for(facts, 1);
  absl::StatusOr<TenantAuth> auth = TenantAuth::FromText(std::string(kToken) + " edge\n", "test");
  ASSERT_TRUE(auth.ok()) << auth.status();
  options.auth = *auth;
  std::unique_ptr<Cloud> cloud = start_cloud(edge_model_path("tiny"), options);
  ASSERT_NE(cloud->stub, nullptr);
  for (const std::string token : {"", "wrong-token-000000000000", kToken}) {
    grpc::ClientContext context;
    live_call(context, 30);
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    auto reader = cloud->stub->GetKvCalibration(&context, v1::GetKvCalibrationRequest());
    v1::KvCalibrationChunk chunk;
    int chunks = 0;
    while (reader->Read(&chunk)) ++chunks;
    const grpc::Status status = reader->Finish();
    if (token == kToken) {
      EXPECT_TRUE(status.ok()) << status.error_message();
      EXPECT_GT(chunks, 0);
    } else {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << "token '" << token << "'";
      EXPECT_EQ(chunks, 0) << "token '" << token << "'";
    }
  }
}

TEST_F(CloudWithCalibration, EdgeFetchesTheCalibrationAndPrefillsThroughTheCloudWithTc) {
  EdgeServiceOptions options = edge_options(cloud_->address());
  options.codec = "tc-b2";  // no kv_calibration_path: fetched
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), options);
  ASSERT_NE(edge->stub, nullptr);
  wait_for_cloud(*edge->stub);
  GenerateResult result = generate(*edge->stub, cloud_request(40));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.stats.kv_codec(), "tc-b2");
  EXPECT_EQ(result.stats.plan().place(), v1::PREFILL_PLACE_CLOUD);
  EXPECT_GT(result.stats.kv_wire_bytes(), 0u);
  EXPECT_LT(result.stats.kv_wire_bytes(), result.stats.kv_raw_bytes() / 2);
  EXPECT_FALSE(result.tokens.empty());
}

TEST_F(CloudWithCalibration, EdgeWithAnotherCalibrationIsRefusedNamingTcCalibration) {
  const std::string dir = testing::make_temp_dir("tc-edge");
  const std::string path = dir + "/other.batoncal";
  ASSERT_TRUE(save_kv_calibration(*calibration_for(facts_, 2), path).ok());
  EdgeServiceOptions options = edge_options(cloud_->address());
  options.codec = "tc-b2";
  options.kv_calibration_path = path;
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), options);
  ASSERT_NE(edge->stub, nullptr);
  wait_for_cloud(*edge->stub);
  GenerateResult refused = generate(*edge->stub, cloud_request(40));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << refused.status.error_message();
  EXPECT_THAT(refused.status.error_message(), HasSubstr("tc_calibration"));

  // A request that names a calibration the edge does not hold is refused before the cloud is asked.
  v1::GenerateRequest named = cloud_request(40);
  named.mutable_codec()->set_codec(v1::KV_CODEC_TC);
  named.mutable_codec()->mutable_transform()->set_calibration_sha256(
      digest_bytes(kv_calibration_digest(*calibration_)));
  refused = generate(*edge->stub, named);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << refused.status.error_message();
  EXPECT_THAT(refused.status.error_message(), HasSubstr("tc_calibration"));
}

// ---------------------------------------------------------------------------
// A hostile cloud's calibration stream
// ---------------------------------------------------------------------------

class HostileCalibration final : public v1::Prefill::Service {
 public:
  enum class Lie { kHugeTotal, kMoreThanDeclared, kShort, kWrongSha, kOtherModel, kGarbage };
  HostileCalibration(Lie lie, std::string bytes, std::string model_digest)
      : lie_(lie), bytes_(std::move(bytes)), model_digest_(std::move(model_digest)) {}

  grpc::Status GetKvCalibration(grpc::ServerContext*, const v1::GetKvCalibrationRequest*,
                                grpc::ServerWriter<v1::KvCalibrationChunk>* writer) override {
    std::string bytes = bytes_;
    if (lie_ == Lie::kGarbage) bytes.assign(bytes.size(), '\x42');
    v1::KvCalibrationChunk chunk;
    chunk.set_total_bytes(lie_ == Lie::kHugeTotal ? uint64_t{1} << 40 : bytes.size());
    chunk.set_sha256(digest_bytes(sha256(lie_ == Lie::kWrongSha ? bytes + "x" : bytes)));
    chunk.set_model_digest(lie_ == Lie::kOtherModel ? std::string(64, 'b') : model_digest_);
    const size_t sent = lie_ == Lie::kShort ? bytes.size() / 2 : bytes.size();
    chunk.set_data(bytes.substr(0, sent));
    writer->Write(chunk);
    if (lie_ == Lie::kMoreThanDeclared) {
      v1::KvCalibrationChunk more;
      more.set_data(std::string(1024, '\0'));
      writer->Write(more);
    }
    return grpc::Status::OK;
  }

 private:
  Lie lie_;
  std::string bytes_;
  std::string model_digest_;
};

TEST(TransformCodecFetchTest, AHostileCalibrationStreamIsRefusedWithTheReason) {
  const ModelFacts facts = facts_of(edge_model_path("tiny"));
  const std::string bytes = serialize_kv_calibration(*calibration_for(facts, 3));
  struct Case {
    HostileCalibration::Lie lie;
    absl::StatusCode code;
    std::string says;
  };
  using Lie = HostileCalibration::Lie;
  for (const Case& c : std::vector<Case>{
           {Lie::kHugeTotal, absl::StatusCode::kResourceExhausted, "1099511627776 bytes"},
           {Lie::kMoreThanDeclared, absl::StatusCode::kDataLoss, "passes the"},
           {Lie::kShort, absl::StatusCode::kDataLoss, "ended at"},
           {Lie::kWrongSha, absl::StatusCode::kDataLoss, "SHA-256"},
           {Lie::kOtherModel, absl::StatusCode::kFailedPrecondition, facts.digest},
           {Lie::kGarbage, absl::StatusCode::kInvalidArgument, "KV calibration"},
       }) {
    HostileCalibration service(c.lie, bytes, facts.digest);
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    ASSERT_NE(server, nullptr);
    CloudClientOptions options;
    options.address = "127.0.0.1:" + std::to_string(port);
    absl::StatusOr<std::unique_ptr<CloudClient>> client = CloudClient::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    absl::StatusOr<std::shared_ptr<const KvCalibration>> fetched =
        (*client)->fetch_kv_calibration(facts.digest, facts.geometry, uint64_t{256} << 20);
    EXPECT_EQ(fetched.status().code(), c.code) << static_cast<int>(c.lie) << ": " << fetched.status();
    EXPECT_THAT(fetched.status().message(), HasSubstr(c.says)) << static_cast<int>(c.lie);
    server->Shutdown();
  }
}

}  // namespace
}  // namespace baton::edge_test
