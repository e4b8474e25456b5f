// Every listener owns its port: a second gRPC server (baton-prefill's,
// baton-edge's) or HTTP listener (/metrics, the OpenAI API) on a port that is
// taken fails with the OS reason instead of sharing it (gRPC's default
// SO_REUSEPORT let two processes split the calls).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "cloud_prefill/prefill_server.h"
#include "cloud_prefill/prefill_service.h"
#include "common/rpc/grpc_listener.h"
#include "common/util/metrics.h"
#include "common/util/metrics_http.h"
#include "proto/baton.grpc.pb.h"

namespace baton {
namespace {

std::string taken_message(int port) {
  return "cannot listen on 127.0.0.1:" + std::to_string(port) + ": address already in use";
}

TEST(ExclusiveListenerTest, ASecondGrpcServerOnATakenPortIsRefused) {
  // Every method UNIMPLEMENTED: a server needs a service, each its own.
  v1::Prefill::Service first_service;
  v1::Prefill::Service second_service;
  grpc::ServerBuilder first_builder;
  first_builder.RegisterService(&first_service);
  int port = 0;
  absl::StatusOr<std::unique_ptr<grpc::Server>> first =
      start_grpc_server(first_builder, {{"127.0.0.1:0", grpc::InsecureServerCredentials(), &port}});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_GT(port, 0);

  grpc::ServerBuilder second_builder;
  second_builder.RegisterService(&second_service);
  int second_port = 0;
  absl::StatusOr<std::unique_ptr<grpc::Server>> second = start_grpc_server(
      second_builder, {{"127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials(), &second_port}});
  ASSERT_FALSE(second.ok()) << "a second server started on port " << port;
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(second.status().message(), taken_message(port));
  (*first)->Shutdown();
}

TEST(ExclusiveListenerTest, ASecondPrefillServerOnATakenPortIsRefused) {
  PrefillService service(PrefillServiceOptions{});  // never loaded: binding needs no model
  PrefillService second_service(PrefillServiceOptions{});
  absl::StatusOr<std::unique_ptr<PrefillServer>> first = PrefillServer::Start("127.0.0.1:0", service);
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port();
  // The port alone is the same address: loopback.
  absl::StatusOr<std::unique_ptr<PrefillServer>> second = PrefillServer::Start(std::to_string(port), second_service);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().message(), taken_message(port));
}

TEST(ExclusiveListenerTest, ASecondMetricsListenerOnATakenPortIsRefused) {
  MetricsRegistry registry;
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> first = MetricsHttpServer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port();
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> second =
      MetricsHttpServer::Start("127.0.0.1:" + std::to_string(port), registry);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(second.status().message(), taken_message(port));
}

}  // namespace
}  // namespace baton
