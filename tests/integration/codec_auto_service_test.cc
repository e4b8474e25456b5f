// Real-server tests of --codec auto (edge_decode/plan/codec_choice.h): a
// cloud holding a calibration with a quality table, edges on a modeled slow
// and fast link (assumed_link_bytes_per_s over loopback). The slow link
// takes the smallest transform codec within the floor, streams it and says
// so in the plan; the fast one takes the least lossy codec (INT8); a request
// may say "auto" to an agent whose default is another codec; a continuing
// session keeps its store; without any table the INT4 default, with the
// reason.
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cloud_prefill/prefill_service.h"
#include "common/kv_codec/kv_calibration.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "common/util/sha256.h"
#include "proto/baton.grpc.pb.h"
#include "tests/support/edge_test_env.h"
#include "tests/support/synthetic_calibration.h"
#include "tests/support/test_models.h"

namespace baton::edge_test {
namespace {

using ::testing::HasSubstr;

// A calibration of the tiny model's shape (synthetic numbers: the codec works
// with any calibration both ends share) with a quality table whose figures
// decide the choice (the tiny test model has head_dim 16: groups of 16):
// tc-b1 the smallest, INT8 the least lossy, int4-g16-z3
// over the 1% floor.
std::shared_ptr<const KvCalibration> calibration_with_table(const std::string& model_path) {
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(model_path);
  EXPECT_TRUE(model.ok()) << model.status();
  absl::StatusOr<ModelFingerprint> fingerprint = model_fingerprint(**model);
  EXPECT_TRUE(fingerprint.ok()) << fingerprint.status();
  KvCalibration calibration = testing::synthetic_kv_calibration(kv_geometry_for((*model)->spec()), 1);
  calibration.model_digest = fingerprint->digest;
  calibration.quality = {{"int8-g16-z3", 0.50, 0.01, 8.5e-6},
                         {"int4-g16-z3", 0.30, 2.00, 1.8e-3},
                         {"int4-pc-kg128-g16-z3", 0.27, 0.07, 1.8e-3},
                         {"tc-b1", 0.14, 0.01, 1.4e-3},
                         {"tc-b2", 0.20, 0.03, 3.4e-4}};
  return std::make_shared<const KvCalibration>(std::move(calibration));
}

// Greedy, policy auto, the agent's codec (unset in the request).
v1::GenerateRequest auto_request(int n_tokens, const std::string& session_id, int salt) {
  v1::GenerateRequest request = greedy_request(prompt(n_tokens, salt), session_id, v1::SPLIT_POLICY_AUTO);
  request.clear_codec();
  return request;
}

class CodecAutoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    calibration_ = calibration_with_table(edge_model_path("tiny"));
    PrefillServiceOptions options;
    options.kv_calibration = calibration_;
    cloud_ = start_cloud(edge_model_path("tiny"), options);
    ASSERT_NE(cloud_->stub, nullptr);
  }

  // An edge on a link of `bytes_per_s` whose local prefill is assumed slow
  // (2 tok/s), so that the cloud pays; its calibration is fetched.
  std::unique_ptr<Edge> edge_on_link(double bytes_per_s, const std::string& codec = "auto") {
    EdgeServiceOptions options = edge_options(cloud_->address());
    options.codec = codec;
    options.assumed_local_prefill_tokens_per_s = 2;
    options.assumed_link_bytes_per_s = bytes_per_s;
    std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), options);
    EXPECT_NE(edge->stub, nullptr);
    if (edge->stub != nullptr) wait_for_cloud(*edge->stub);
    return edge;
  }

  std::shared_ptr<const KvCalibration> calibration_;
  std::unique_ptr<Cloud> cloud_;
};

// The edge's Health: its codec and the calibration it holds.
v1::EdgeHealthResponse edge_health(v1::Edge::Stub& stub) {
  grpc::ClientContext context;
  v1::EdgeHealthResponse response;
  grpc::Status status = stub.Health(&context, v1::HealthRequest(), &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response;
}

TEST_F(CodecAutoTest, ASlowLinkStreamsTheSmallestTransformCodecAndThePlanSaysWhy) {
  std::unique_ptr<Edge> edge = edge_on_link(20e3);  // 20 kB/s
  ASSERT_NE(edge->stub, nullptr);
  const v1::EdgeHealthResponse before = edge_health(*edge->stub);
  EXPECT_EQ(before.default_codec(), "auto");
  EXPECT_EQ(before.kv_calibration_sha256(), "");  // not fetched until a turn needs it
  EXPECT_EQ(before.kv_quality_rows(), 0u);
  GenerateResult result = generate(*edge->stub, auto_request(200, "slow", 1));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  const v1::EdgeHealthResponse after = edge_health(*edge->stub);
  EXPECT_EQ(after.kv_calibration_sha256(), to_hex(kv_calibration_digest(*calibration_)));
  EXPECT_EQ(after.kv_quality_rows(), 5u);
  EXPECT_EQ(result.stats.plan().place(), v1::PREFILL_PLACE_CLOUD) << result.stats.plan().reason();
  EXPECT_EQ(result.stats.kv_codec(), "tc-b1");
  const std::string& reason = result.stats.plan().reason();
  EXPECT_THAT(reason, HasSubstr("codec auto: tc-b1 (cloud "));
  EXPECT_THAT(reason, HasSubstr("over tc-b2 (cloud "));
  EXPECT_THAT(reason, HasSubstr("over the loss floor +1.00%: int4-g16-z3 (+2.00%)"));
  EXPECT_FALSE(result.tokens.empty());

  // The next turn continues in the session's INT8 store (where tc lands):
  // INT4 codecs cannot, and the choice is tc-b1 again.
  v1::GenerateRequest next = auto_request(120, "slow", 2);
  GenerateResult second = generate(*edge->stub, next);
  ASSERT_TRUE(second.status.ok()) << second.status.error_message();
  EXPECT_EQ(second.stats.kv_codec(), "tc-b1");
  EXPECT_THAT(second.stats.plan().reason(),
              HasSubstr("not usable: int4-pc-kg128-g16-z3 (lands in int4-g16; the session holds int8-g16)"));
}

TEST_F(CodecAutoTest, AFastLinkTakesTheLeastLossyCodec) {
  std::unique_ptr<Edge> edge = edge_on_link(10e9);  // bytes cost nothing: every codec is equally fast
  ASSERT_NE(edge->stub, nullptr);
  GenerateResult result = generate(*edge->stub, auto_request(200, "", 3));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.stats.plan().place(), v1::PREFILL_PLACE_CLOUD) << result.stats.plan().reason();
  EXPECT_EQ(result.stats.kv_codec(), "int8-g16-z3");
  EXPECT_THAT(result.stats.plan().reason(), HasSubstr("codec auto: int8-g16-z3 (cloud "));
  EXPECT_THAT(result.stats.plan().reason(), HasSubstr("with less loss"));
}

TEST_F(CodecAutoTest, ARequestMaySayAutoToAnAgentWithAnotherDefault) {
  std::unique_ptr<Edge> edge = edge_on_link(20e3, "int4");
  ASSERT_NE(edge->stub, nullptr);
  EXPECT_EQ(edge_health(*edge->stub).default_codec(), "int4-pc-kg128-g16-z3");
  GenerateResult plain = generate(*edge->stub, auto_request(200, "", 4));
  ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();
  EXPECT_EQ(plain.stats.kv_codec(), "int4-pc-kg128-g16-z3");  // exactly as before auto
  EXPECT_THAT(plain.stats.plan().reason(), ::testing::Not(HasSubstr("codec auto")));
  v1::GenerateRequest asked = auto_request(200, "", 4);
  asked.mutable_codec()->set_codec(v1::KV_CODEC_AUTO);
  GenerateResult chosen = generate(*edge->stub, asked);
  ASSERT_TRUE(chosen.status.ok()) << chosen.status.error_message();
  EXPECT_EQ(chosen.stats.kv_codec(), "tc-b1");
}

TEST(CodecAutoWithoutTable, FallsBackToTheInt4DefaultAndSaysWhy) {
  std::unique_ptr<Cloud> cloud = start_cloud(edge_model_path("tiny"));  // no calibration to fetch
  ASSERT_NE(cloud->stub, nullptr);
  EdgeServiceOptions options = edge_options(cloud->address());
  options.codec = "auto";
  options.assumed_local_prefill_tokens_per_s = 2;
  options.assumed_link_bytes_per_s = 20e3;
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), options);
  ASSERT_NE(edge->stub, nullptr);
  wait_for_cloud(*edge->stub);
  GenerateResult result = generate(*edge->stub, auto_request(200, "", 5));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.stats.kv_codec(), "int4-pc-kg128-g16-z3");
  EXPECT_THAT(result.stats.plan().reason(),
              HasSubstr("codec auto: int4-pc-kg128-g16-z3, the default (no quality table: "));
  EXPECT_THAT(result.stats.plan().reason(), HasSubstr("GetKvCalibration"));
}

}  // namespace
}  // namespace baton::edge_test
