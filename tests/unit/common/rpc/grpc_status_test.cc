// The RPC boundary: status codes and messages cross unchanged both ways, and
// the retry hint parses only as a whole number of milliseconds.
#include "common/rpc/grpc_status.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

TEST(GrpcStatusTest, EveryCodeAndMessageRoundTrips) {
  for (int code = 1; code <= 16; ++code) {
    const absl::Status status(static_cast<absl::StatusCode>(code), "message " + std::to_string(code));
    const grpc::Status grpc_status = to_grpc_status(status);
    EXPECT_EQ(static_cast<int>(grpc_status.error_code()), code);
    EXPECT_EQ(grpc_status.error_message(), "message " + std::to_string(code));
    EXPECT_EQ(from_grpc_status(grpc_status), status);
  }
  EXPECT_TRUE(to_grpc_status(absl::OkStatus()).ok());
  EXPECT_TRUE(from_grpc_status(grpc::Status::OK, "cloud: ").ok());
}

TEST(GrpcStatusTest, FromGrpcPrefixesTheMessageAndKeepsTheCode) {
  const absl::Status status =
      from_grpc_status(grpc::Status(grpc::StatusCode::UNAVAILABLE, "warming up"), "cloud Health: ");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(), "cloud Health: warming up");
}

TEST(GrpcStatusTest, RetryAfterIsAWholeNumberOfMilliseconds) {
  EXPECT_EQ(parse_retry_after_ms("1000"), 1000u);
  EXPECT_EQ(parse_retry_after_ms("0"), 0u);
  EXPECT_EQ(parse_retry_after_ms("4294967295"), 4294967295u);
  for (const char* bad : {"", "-5", "+5", " 5", "5 ", "1.5", "ms", "4294967296"}) {
    EXPECT_EQ(parse_retry_after_ms(bad), std::nullopt) << "'" << bad << "'";
  }
}

TEST(GrpcStatusTest, NoTrailerIsNoHint) {
  grpc::ClientContext context;
  EXPECT_EQ(trailing_retry_after_ms(context), std::nullopt);
}

}  // namespace
}  // namespace baton
