// The HTTP API's "baton" object carries the context overflow choice
// (GenerateRequest.context_overflow, keep_tokens), refuses unknown modes by
// name, and the answer's "baton" object says what a truncating turn dropped.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "edge_decode/http/openai_api.h"

namespace baton {
namespace {

using Json = nlohmann::json;

TEST(OpenAiContextOverflowTest, TheBatonObjectSetsTheModeAndTheKeptTokens) {
  absl::StatusOr<OpenAiRequest> parsed = parse_openai_request(
      OpenAiEndpoint::kCompletions,
      R"({"prompt": "p", "baton": {"session": "s", "context_overflow": "refuse", "keep_tokens": 32}})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<v1::GenerateRequest> generate = to_generate_request(*parsed);
  ASSERT_TRUE(generate.ok()) << generate.status();
  EXPECT_EQ(generate->context_overflow(), v1::CONTEXT_OVERFLOW_REFUSE);
  ASSERT_TRUE(generate->has_keep_tokens());
  EXPECT_EQ(generate->keep_tokens(), 32u);

  parsed = parse_openai_request(OpenAiEndpoint::kCompletions,
                                R"({"prompt": "p", "baton": {"context_overflow": "truncate"}})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  generate = to_generate_request(*parsed);
  ASSERT_TRUE(generate.ok()) << generate.status();
  EXPECT_EQ(generate->context_overflow(), v1::CONTEXT_OVERFLOW_TRUNCATE);
  EXPECT_FALSE(generate->has_keep_tokens());

  // Unset: the agent's --context-overflow.
  parsed = parse_openai_request(OpenAiEndpoint::kCompletions, R"({"prompt": "p"})");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(to_generate_request(*parsed)->context_overflow(), v1::CONTEXT_OVERFLOW_UNSPECIFIED);
}

TEST(OpenAiContextOverflowTest, UnknownModesAndBadCountsAreRefusedByName) {
  absl::StatusOr<OpenAiRequest> unknown = parse_openai_request(
      OpenAiEndpoint::kCompletions, R"({"prompt": "p", "baton": {"context_overflow": "rotate"}})");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(unknown.status().message())
                .find("'baton.context_overflow' is 'rotate'; one of refuse, truncate, shift"),
            std::string::npos)
      << unknown.status();
  absl::StatusOr<OpenAiRequest> negative = parse_openai_request(
      OpenAiEndpoint::kCompletions, R"({"prompt": "p", "baton": {"keep_tokens": -1}})");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(std::string(negative.status().message()).find("baton.keep_tokens"), std::string::npos)
      << negative.status();
}

TEST(OpenAiContextOverflowTest, TheAnswerSaysWhatWasDropped) {
  v1::Stats stats;
  stats.set_finish_reason(v1::FINISH_REASON_LENGTH);
  const OpenAiAnswerInfo info{OpenAiEndpoint::kCompletions, "cmpl-1", 1700000000, "tiny"};
  Json plain = Json::parse(openai_answer_json(info, "hello", stats));
  EXPECT_FALSE(plain["baton"].contains("context_overflow"));
  stats.set_context_overflow("context overflow: dropped turn 1 (40 tokens), kept turns 2-3");
  stats.set_dropped_turns(1);
  stats.set_dropped_tokens(40);
  const Json answer = Json::parse(openai_answer_json(info, "hello", stats));
  EXPECT_EQ(answer["baton"]["context_overflow"], "context overflow: dropped turn 1 (40 tokens), kept turns 2-3");
  EXPECT_EQ(answer["baton"]["dropped_turns"], 1);
  EXPECT_EQ(answer["baton"]["dropped_tokens"], 40);
}

}  // namespace
}  // namespace baton
