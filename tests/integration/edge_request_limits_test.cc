// Limits on what one Generate may ask for (issue 15, items 2 and 6): a
// per-request cap on max_tokens (--max-tokens-cap; it bounds what a stream
// buffers for a slow reader) and the stop-string limits HTTP already had,
// now the same on gRPC. Each refusal is INVALID_ARGUMENT naming the value
// and the limit.
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "edge_decode/generate/stop_matcher.h"
#include "tests/support/edge_test_env.h"

namespace baton {
namespace {

using edge_test::Edge;

class EdgeRequestLimitsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EdgeServiceOptions options = edge_test::edge_options("");
    options.max_tokens_cap = kCap;
    edge_ = edge_test::start_edge(edge_test::edge_model_path("tiny"), options).release();
  }
  static void TearDownTestSuite() {
    delete edge_;
    edge_ = nullptr;
  }

  static v1::GenerateRequest request(uint32_t max_tokens) {
    return edge_test::greedy_request(edge_test::prompt(4, 3), "", v1::SPLIT_POLICY_LOCAL, max_tokens);
  }

  static constexpr uint32_t kCap = 40;
  static Edge* edge_;
};

Edge* EdgeRequestLimitsTest::edge_ = nullptr;

TEST_F(EdgeRequestLimitsTest, MaxTokensOverTheCapIsRefusedNamingBothNumbers) {
  const edge_test::GenerateResult result = edge_test::generate(*edge_->stub, request(kCap + 1));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << result.status.error_message();
  EXPECT_NE(result.status.error_message().find("max_tokens = 41"), std::string::npos) << result.status.error_message();
  EXPECT_NE(result.status.error_message().find("cap of 40"), std::string::npos) << result.status.error_message();
  EXPECT_TRUE(result.tokens.empty());
}

TEST_F(EdgeRequestLimitsTest, MaxTokensAtTheCapIsServed) {
  const edge_test::GenerateResult result = edge_test::generate(*edge_->stub, request(kCap));
  EXPECT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_TRUE(result.has_stats);
}

TEST_F(EdgeRequestLimitsTest, MoreStopStringsThanTheHttpLimitIsInvalidArgument) {
  v1::GenerateRequest over = request(4);
  for (size_t i = 0; i <= kMaxStopStrings; ++i) over.add_stop("stop" + std::to_string(i));
  const edge_test::GenerateResult result = edge_test::generate(*edge_->stub, over);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << result.status.error_message();
  EXPECT_NE(result.status.error_message().find("'stop' has 17 strings; at most 16"), std::string::npos)
      << result.status.error_message();
}

TEST_F(EdgeRequestLimitsTest, StopStringLongerThanTheLimitIsInvalidArgument) {
  v1::GenerateRequest over = request(4);
  over.add_stop("fine");
  over.add_stop(std::string(kMaxStopStringBytes + 1, 'x'));
  const edge_test::GenerateResult result = edge_test::generate(*edge_->stub, over);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << result.status.error_message();
  EXPECT_NE(result.status.error_message().find("'stop[1]' has 1025 bytes; at most 1024"), std::string::npos)
      << result.status.error_message();
}

TEST_F(EdgeRequestLimitsTest, SixteenStopStringsAreServed) {
  v1::GenerateRequest at_limit = request(4);
  for (size_t i = 0; i < kMaxStopStrings; ++i) at_limit.add_stop(std::string(kMaxStopStringBytes, static_cast<char>('a' + i)));
  const edge_test::GenerateResult result = edge_test::generate(*edge_->stub, at_limit);
  EXPECT_TRUE(result.status.ok()) << result.status.error_message();
}

}  // namespace
}  // namespace baton
