// Issue 16 (numbers that disagree): the figures a turn reports agree with
// the rest of the system. The cloud's cache hit reaches the turn's Stats
// (a turn the cloud served from its prefix cache says how many tokens it
// reused), the context a turn reports is what ListSessions lists, and
// Health names the model as the logs and the HTTP API do (GGUF general.name),
// the architecture in its own field.
#include "tests/support/edge_test_env.h"

namespace baton::edge_test {
namespace {

TEST(TurnNumbersTest, ACloudPrefixCacheHitReportsTheCloudsReusedTokens) {
  const std::string& model = edge_model_path("tiny");
  auto cloud = start_cloud(model);
  auto edge = start_edge(model, edge_options(cloud->address()));
  wait_for_cloud(*edge->stub);
  // 200 tokens: the cloud keeps the prefix cache per 64-token block.
  const std::vector<uint32_t> tokens = prompt(200, 7);
  GenerateResult first = generate(*edge->stub, greedy_request(tokens, "numbers-a", v1::SPLIT_POLICY_CLOUD, 2));
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  ASSERT_EQ(first.stats.plan().place(), v1::PREFILL_PLACE_CLOUD);
  EXPECT_EQ(first.stats.cloud_reused_tokens(), 0u);  // a cold cloud computed all of it
  // Another session, the same prompt: the edge holds nothing of it
  // (plan.reused_tokens 0), the cloud serves the full blocks from its cache.
  GenerateResult second = generate(*edge->stub, greedy_request(tokens, "numbers-b", v1::SPLIT_POLICY_CLOUD, 2));
  ASSERT_TRUE(second.status.ok()) << second.status.error_message();
  ASSERT_EQ(second.stats.plan().place(), v1::PREFILL_PLACE_CLOUD);
  EXPECT_EQ(second.stats.plan().reused_tokens(), 0u);
  EXPECT_GE(second.stats.cloud_reused_tokens(), 192u);  // three full 64-token blocks of 199
  EXPECT_LE(second.stats.cloud_reused_tokens(), 199u);
}

TEST(TurnNumbersTest, ContextTokensOfATurnAreWhatTheSessionListShows) {
  const std::string& model = edge_model_path("tiny");
  auto edge = start_edge(model, edge_options(""));
  GenerateResult turn = generate(*edge->stub, greedy_request(prompt(40, 3), "numbers-ctx", v1::SPLIT_POLICY_LOCAL, 5));
  ASSERT_TRUE(turn.status.ok()) << turn.status.error_message();
  EXPECT_EQ(static_cast<int64_t>(turn.stats.context_tokens()), session_tokens(*edge->stub, "numbers-ctx"));
  // 40 prompt tokens + the generated ones; after max tokens the last one
  // enters the KV at the next turn.
  const uint32_t generated = turn.stats.generated_tokens();
  if (turn.stats.finish_reason() == v1::FINISH_REASON_LENGTH) {
    EXPECT_EQ(turn.stats.context_tokens(), 40u + generated - 1);
  } else {
    EXPECT_EQ(turn.stats.context_tokens(), 40u + generated);
  }
  EXPECT_EQ(turn.stats.cloud_reused_tokens(), 0u);
}

TEST(TurnNumbersTest, HealthNamesTheModelByItsNameAndTheArchitectureApart) {
  const std::string& model = edge_model_path("tiny");
  auto edge = start_edge(model, edge_options(""));
  const v1::EdgeHealthResponse response = health(*edge->stub);
  EXPECT_EQ(response.model().name(), "baton-synth-tiny");  // general.name of the synthetic model
  EXPECT_EQ(response.model().architecture(), "llama");
  EXPECT_EQ(response.model().weights_type(), "Q4_0");
}

}  // namespace
}  // namespace baton::edge_test
