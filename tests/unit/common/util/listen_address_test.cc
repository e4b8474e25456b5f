// The listening address every server parses (a port alone = loopback) and
// the reason a taken port reports.
#include "common/util/listen_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace baton {
namespace {

using ::testing::HasSubstr;

TEST(ListenAddressTest, APortAloneListensOnLoopback) {
  EXPECT_EQ(listen_address_or_loopback("8080"), "127.0.0.1:8080");
  EXPECT_EQ(listen_address_or_loopback(":8080"), "127.0.0.1:8080");
  EXPECT_EQ(listen_address_or_loopback("0"), "127.0.0.1:0");
  // Anything with a host is taken as written; empty stays off.
  EXPECT_EQ(listen_address_or_loopback(""), "");
  EXPECT_EQ(listen_address_or_loopback("0.0.0.0:8080"), "0.0.0.0:8080");
  EXPECT_EQ(listen_address_or_loopback("localhost:1"), "localhost:1");
  EXPECT_EQ(listen_address_or_loopback("[::1]:8080"), "[::1]:8080");
  EXPECT_EQ(listen_address_or_loopback("[::]:8080"), "[::]:8080");
}

TEST(ListenAddressTest, ParsesThePortAloneFormAndRejectsBadOnes) {
  absl::StatusOr<std::pair<std::string, int>> parsed = parse_listen_address("8080");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->first, "127.0.0.1");
  EXPECT_EQ(parsed->second, 8080);
  parsed = parse_listen_address("[::1]:7071");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->first, "::1");
  EXPECT_EQ(parsed->second, 7071);
  parsed = parse_listen_address("http");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("'http' is not a number"));
  EXPECT_FALSE(parse_listen_address("65536").ok());
}

// A listening socket on 127.0.0.1 with SO_REUSEPORT on, as gRPC's default
// made it: the bound port, or 0.
int listen_with_reuseport(int* fd) {
  *fd = socket(AF_INET, SOCK_STREAM, 0);
  int yes = 1;
  setsockopt(*fd, SOL_SOCKET, SO_REUSEPORT, &yes, sizeof(yes));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(*fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || listen(*fd, 4) != 0) return 0;
  socklen_t length = sizeof(address);
  getsockname(*fd, reinterpret_cast<sockaddr*>(&address), &length);
  return ntohs(address.sin_port);
}

TEST(ListenAddressTest, ATakenPortNamesTheOsReasonEvenWhenItsHolderAllowsReuse) {
  int fd = -1;
  const int port = listen_with_reuseport(&fd);
  ASSERT_GT(port, 0);
  // The probe binds without SO_REUSEPORT, as every Baton listener now does.
  EXPECT_EQ(bind_failure_reason("127.0.0.1", port), "address already in use");
  const absl::Status error = listen_error("127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(error.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(error.message(), "cannot listen on 127.0.0.1:" + std::to_string(port) + ": address already in use");
  close(fd);
  EXPECT_EQ(bind_failure_reason("127.0.0.1", port), "");  // free again
}

}  // namespace
}  // namespace baton
