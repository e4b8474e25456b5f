// The stop-string limits are one pair of constants for HTTP and gRPC
// (edge_decode/generate/stop_matcher.h): the OpenAI parser refuses what
// check_stop_strings refuses, with the same message.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "edge_decode/http/openai_api.h"
#include "edge_decode/generate/stop_matcher.h"

namespace baton {
namespace {

TEST(StopStringLimitsTest, CheckNamesTheCountOrTheLengthAndTheLimit) {
  EXPECT_TRUE(check_stop_strings(std::vector<std::string>(kMaxStopStrings, "s"), "stop").ok());
  const absl::Status many = check_stop_strings(std::vector<std::string>(kMaxStopStrings + 1, "s"), "stop");
  EXPECT_EQ(many.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(many.message(), "'stop' has 17 strings; at most 16");
  EXPECT_TRUE(check_stop_strings({std::string(kMaxStopStringBytes, 'x')}, "stop").ok());
  const absl::Status long_one = check_stop_strings({"a", std::string(kMaxStopStringBytes + 1, 'x')}, "stop");
  EXPECT_EQ(long_one.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(long_one.message(), "'stop[1]' has 1025 bytes; at most 1024");
}

TEST(StopStringLimitsTest, HttpRefusesAStopStringOverTheByteLimit) {
  const std::string too_long(kMaxStopStringBytes + 1, 'x');
  for (const std::string& stop : {"\"" + too_long + "\"", "[\"a\", \"" + too_long + "\"]"}) {
    absl::StatusOr<OpenAiRequest> parsed =
        parse_openai_request(OpenAiEndpoint::kCompletions, R"({"prompt": "p", "stop": )" + stop + "}");
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(parsed.status().message()).find("bytes; at most 1024"), std::string::npos)
        << parsed.status().message();
  }
  EXPECT_TRUE(parse_openai_request(OpenAiEndpoint::kCompletions,
                                   R"({"prompt": "p", "stop": ")" + std::string(kMaxStopStringBytes, 'x') + "\"}")
                  .ok());
}

}  // namespace
}  // namespace baton
