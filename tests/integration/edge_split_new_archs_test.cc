// Split == local for the architectures added with issue 17 (qwen3, phi3): a
// real PrefillServer and EdgeServer on loopback serving the synthetic tiny
// model (the edge's Q4_0 copy, which the cloud serves too), lossless F16 KV.
// Generation through the cloud handoff must equal local-only generation token
// for token, first turn and follow-up. It fails if the cloud's KV differs from
// what the edge computes itself (QK-norm, fused tensors, LongRoPE set or
// attention factor applied on one side only) or if the fingerprints disagree.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/integration/edge_test_env.h"

namespace baton::edge_test {
namespace {

class EdgeSplitNewArchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EdgeSplitNewArchTest, CloudHandoffEqualsLocalTokenForTokenOverTwoTurns) {
  const std::string& model_path = edge_model_path(GetParam());
  std::unique_ptr<Cloud> cloud = start_cloud(model_path);
  std::unique_ptr<Edge> edge = start_edge(model_path, edge_options(cloud->address()));
  ASSERT_NE(edge->stub, nullptr);

  const std::vector<uint32_t> turn1 = prompt(45, 1);
  const std::vector<uint32_t> turn2 = prompt(30, 2);
  GenerateResult local1 = generate(*edge->stub, greedy_request(turn1, "local", v1::SPLIT_POLICY_LOCAL));
  GenerateResult cloud1 = generate(*edge->stub, greedy_request(turn1, "cloud", v1::SPLIT_POLICY_CLOUD));
  ASSERT_TRUE(local1.status.ok()) << local1.status.error_message();
  ASSERT_TRUE(cloud1.status.ok()) << cloud1.status.error_message();
  EXPECT_EQ(local1.stats.plan().place(), v1::PREFILL_PLACE_LOCAL);
  EXPECT_EQ(cloud1.stats.plan().place(), v1::PREFILL_PLACE_CLOUD) << cloud1.stats.plan().reason();
  EXPECT_EQ(cloud1.stats.fallback_reason(), "");
  EXPECT_GT(cloud1.stats.kv_wire_bytes(), 0u);
  ASSERT_FALSE(local1.tokens.empty());
  EXPECT_EQ(cloud1.tokens, local1.tokens);
  EXPECT_EQ(cloud1.text, local1.text);

  GenerateResult local2 = generate(*edge->stub, greedy_request(turn2, "local", v1::SPLIT_POLICY_LOCAL));
  GenerateResult cloud2 = generate(*edge->stub, greedy_request(turn2, "cloud", v1::SPLIT_POLICY_CLOUD));
  ASSERT_TRUE(local2.status.ok()) << local2.status.error_message();
  ASSERT_TRUE(cloud2.status.ok()) << cloud2.status.error_message();
  EXPECT_EQ(cloud2.stats.plan().place(), v1::PREFILL_PLACE_CLOUD) << cloud2.stats.plan().reason();
  EXPECT_EQ(cloud2.stats.fallback_reason(), "");
  ASSERT_FALSE(local2.tokens.empty());
  EXPECT_EQ(cloud2.tokens, local2.tokens);
  EXPECT_EQ(session_tokens(*edge->stub, "cloud"), session_tokens(*edge->stub, "local"));
}

INSTANTIATE_TEST_SUITE_P(Shapes, EdgeSplitNewArchTest, ::testing::Values("tiny-qwen3", "tiny-phi3"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           std::string name = param_info.param;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

}  // namespace
}  // namespace baton::edge_test
