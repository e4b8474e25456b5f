// The OpenAI API's "cache_salt" (as vLLM accepts it) reaches
// GenerateRequest.cache_salt, and a salt over 256 bytes is refused by name.
#include <string>

#include <gtest/gtest.h>

#include "edge_decode/http/openai_api.h"

namespace baton {
namespace {

TEST(OpenAiCacheSaltTest, CacheSaltIsPassedToTheGenerateRequest) {
  absl::StatusOr<OpenAiRequest> parsed =
      parse_openai_request(OpenAiEndpoint::kCompletions, R"({"prompt": "hi", "cache_salt": "team-a"})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<v1::GenerateRequest> generate = to_generate_request(*parsed);
  ASSERT_TRUE(generate.ok()) << generate.status();
  EXPECT_EQ(generate->cache_salt(), "team-a");

  absl::StatusOr<OpenAiRequest> unsalted = parse_openai_request(OpenAiEndpoint::kCompletions, R"({"prompt": "hi"})");
  ASSERT_TRUE(unsalted.ok());
  EXPECT_TRUE(to_generate_request(*unsalted)->cache_salt().empty());
}

TEST(OpenAiCacheSaltTest, OverlongOrNonStringSaltIsRefusedNamingTheField) {
  const std::string body = R"({"prompt": "hi", "cache_salt": ")" + std::string(257, 's') + R"("})";
  absl::StatusOr<OpenAiRequest> refused = parse_openai_request(OpenAiEndpoint::kCompletions, body);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("'cache_salt' has 257 bytes"), std::string::npos) << refused.status();

  absl::StatusOr<OpenAiRequest> wrong_type =
      parse_openai_request(OpenAiEndpoint::kChatCompletions,
                           R"({"messages": [{"role": "user", "content": "hi"}], "cache_salt": 7})");
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_NE(wrong_type.status().message().find("cache_salt"), std::string::npos) << wrong_type.status();
}

}  // namespace
}  // namespace baton
