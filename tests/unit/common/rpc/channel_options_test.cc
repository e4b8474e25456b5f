// Client calls: a steady-clock deadline carries its time left over to gRPC's
// system-clock deadline; channels open with or without credentials.
#include "common/rpc/channel_options.h"

#include <chrono>

#include <gtest/gtest.h>

namespace baton {
namespace {

TEST(ChannelOptionsTest, ASteadyDeadlineKeepsItsTimeLeft) {
  grpc::ClientContext context;
  const auto before = std::chrono::system_clock::now();
  prepare_call(context, std::chrono::steady_clock::now() + std::chrono::seconds(30), "");
  const auto left = context.deadline() - before;
  EXPECT_GT(left, std::chrono::seconds(29));
  EXPECT_LE(left, std::chrono::seconds(31));
}

TEST(ChannelOptionsTest, APassedSteadyDeadlineIsNow) {
  grpc::ClientContext context;
  prepare_call(context, std::chrono::steady_clock::now() - std::chrono::hours(1), "token");
  EXPECT_LE(context.deadline(), std::chrono::system_clock::now());
  EXPECT_GT(context.deadline(), std::chrono::system_clock::now() - std::chrono::seconds(5));
}

TEST(ChannelOptionsTest, OpensPlaintextWithoutCredentials) {
  ChannelTuning tuning;
  tuning.max_receive_bytes = 8 << 20;
  tuning.fast_reconnect = true;
  EXPECT_NE(open_channel("127.0.0.1:1", nullptr, tuning), nullptr);
  EXPECT_NE(open_channel("127.0.0.1:1", grpc::InsecureChannelCredentials()), nullptr);
}

}  // namespace
}  // namespace baton
