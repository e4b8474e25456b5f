// A client that stops reading must not stall a server (issue 15, item 2):
// a real HTTP/2 client (slow_h2_client.h) that grants a 16-byte window and
// never opens it holds one stream of a real EdgeServer / PrefillServer on
// 127.0.0.1:0, and a second, normal client must be served meanwhile. The
// stalled call itself is cancelled after the write-stall timeout.
//
// The time the other client waited is printed ("waited ... ms") for the
// figures in the note; the tests assert only that it was served before its
// deadline (BATON_SLOW_READER_WAIT_S, default 20 s), never a speed.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "common/util/clock.h"
#include "tests/support/edge_test_env.h"
#include "tests/integration/slow_h2_client.h"

namespace baton {
namespace {

using edge_test::Cloud;
using edge_test::Edge;
using testing::SlowH2Client;

// How long the other client may wait before its call fails (DEADLINE_EXCEEDED).
int other_client_wait_s() {
  const char* value = std::getenv("BATON_SLOW_READER_WAIT_S");
  return value != nullptr && std::atoi(value) > 0 ? std::atoi(value) : 20;
}

// Polls `done` every 10 ms for up to 20 s.
template <typename Predicate>
bool eventually(Predicate done) {
  const SteadyClock::time_point give_up = SteadyClock::now() + std::chrono::seconds(20);
  while (SteadyClock::now() < give_up) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

// ---- Edge: Generate ----

// The stalled turn: long enough that its output is far more than the 64
// messages a stream used to queue before the worker blocked (this prompt
// runs greedily to max_tokens on the tiny model, no end-of-sequence).
constexpr uint32_t kStalledMaxTokens = 300;
constexpr int kStalledPromptTokens = 8;

v1::GenerateRequest stalled_generate_request() {
  v1::GenerateRequest request = edge_test::greedy_request(edge_test::prompt(kStalledPromptTokens, /*salt=*/2), "stalled",
                                                          v1::SPLIT_POLICY_LOCAL, kStalledMaxTokens);
  request.set_progress(true);
  return request;
}

std::unique_ptr<Edge> start_edge(std::chrono::milliseconds write_stall_timeout) {
  EdgeServiceOptions options = edge_test::edge_options("");
  options.write_stall_timeout = write_stall_timeout;
  return edge_test::start_edge(edge_test::edge_model_path("tiny"), options);
}

// A short Generate from another client; returns its status and how long it took.
std::pair<grpc::Status, double> timed_generate(v1::Edge::Stub& stub) {
  grpc::ClientContext context;
  edge_test::live_call(context, other_client_wait_s());
  const v1::GenerateRequest request =
      edge_test::greedy_request(edge_test::prompt(4, /*salt=*/3), "", v1::SPLIT_POLICY_LOCAL, /*max_tokens=*/4);
  const SteadyClock::time_point start = SteadyClock::now();
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub.Generate(&context, request);
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
  }
  grpc::Status status = reader->Finish();
  return {status, ms_since(start)};
}

// The stalled call was admitted: it runs, or its turn already ended and committed.
void wait_until_stalled_turn_started(Edge& edge) {
  ASSERT_TRUE(eventually([&] {
    const v1::EdgeHealthResponse health = edge_test::health(*edge.stub);
    return health.running() + health.queued() > 0 || edge_test::session_tokens(*edge.stub, "stalled") >= 0;
  })) << "the stalled Generate never started";
}

TEST(EdgeSlowReaderTest, AnotherClientIsServedWhileAGenerateClientStopsReading) {
  // No write-stall deadline at all: the other client must not depend on it.
  std::unique_ptr<Edge> edge = start_edge(std::chrono::milliseconds(0));
  absl::StatusOr<std::unique_ptr<SlowH2Client>> stalled =
      SlowH2Client::Call(edge->server->port(), "/baton.v1.Edge/Generate", stalled_generate_request());
  ASSERT_TRUE(stalled.ok()) << stalled.status();
  wait_until_stalled_turn_started(*edge);

  const auto [status, waited_ms] = timed_generate(*edge->stub);
  std::printf("edge: the other client waited %.0f ms for its 4-token Generate\n", waited_ms);
  EXPECT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();

  // The stalled client's turn ran to its end and is held by its session,
  // although the client read (almost) nothing of it. (The session's KV holds
  // the prompt and every generated token but the last, which the next turn feeds.)
  EXPECT_TRUE(eventually([&] {
    return edge_test::session_tokens(*edge->stub, "stalled") == kStalledPromptTokens + kStalledMaxTokens - 1;
  })) << "the stalled turn was not committed whole: " << edge_test::session_tokens(*edge->stub, "stalled")
      << " tokens";
  EXPECT_EQ(edge->service->write_stalls(), 0u);
}

TEST(EdgeSlowReaderTest, StalledGenerateIsCancelledAfterTheWriteStallTimeout) {
  std::unique_ptr<Edge> edge = start_edge(std::chrono::milliseconds(1000));
  absl::StatusOr<std::unique_ptr<SlowH2Client>> stalled =
      SlowH2Client::Call(edge->server->port(), "/baton.v1.Edge/Generate", stalled_generate_request());
  ASSERT_TRUE(stalled.ok()) << stalled.status();

  absl::StatusOr<std::string> end = (*stalled)->wait_for_stream_end(std::chrono::seconds(20));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_TRUE(*end == "trailers" || end->rfind("RST_STREAM", 0) == 0) << *end;
  EXPECT_EQ(edge->service->write_stalls(), 1u);
  EXPECT_TRUE(eventually([&] {
    const v1::EdgeHealthResponse health = edge_test::health(*edge->stub);
    return health.running() == 0 && health.queued() == 0;
  }));
}

// ---- Cloud: Prefill ----

// Prefill of `n` tokens in 1-token blocks: 2 layers x K,V x n blocks, far
// more than the 64 messages the stream queues.
v1::PrefillRequest prefill_request(int n, int salt) {
  v1::PrefillRequest request;
  for (uint32_t id : edge_test::prompt(n, salt)) request.mutable_tokens()->add_ids(id);
  request.set_chunk_tokens(1);
  return request;
}

std::unique_ptr<Cloud> start_cloud(std::chrono::milliseconds write_stall_timeout) {
  PrefillServiceOptions options;
  options.write_stall_timeout = write_stall_timeout;
  return edge_test::start_cloud(edge_test::edge_model_path("tiny"), options);  // --max-running 1
}

v1::HealthResponse cloud_health(v1::Prefill::Stub& stub) {
  grpc::ClientContext context;
  edge_test::live_call(context, 10);
  v1::HealthResponse response;
  const grpc::Status status = stub.Health(&context, v1::HealthRequest(), &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response;
}

std::pair<grpc::Status, double> timed_prefill(v1::Prefill::Stub& stub) {
  grpc::ClientContext context;
  edge_test::live_call(context, other_client_wait_s());
  const SteadyClock::time_point start = SteadyClock::now();
  std::unique_ptr<grpc::ClientReader<v1::KvStreamMessage>> reader = stub.Prefill(&context, prefill_request(8, 2));
  v1::KvStreamMessage message;
  while (reader->Read(&message)) {
  }
  grpc::Status status = reader->Finish();
  return {status, ms_since(start)};
}

struct CloudWithStalledPrefill {
  std::unique_ptr<Cloud> cloud;
  std::unique_ptr<v1::Prefill::Stub> stub;
  std::unique_ptr<SlowH2Client> stalled;
};

// A cloud with --max-running 1 whose only worker serves a client that
// stopped reading; with `wait_for_worker`, returns once that call holds the worker.
void start_stalled_prefill(std::chrono::milliseconds write_stall_timeout, bool wait_for_worker,
                           CloudWithStalledPrefill& out) {
  out.cloud = start_cloud(write_stall_timeout);
  ASSERT_NE(out.cloud->server, nullptr);
  out.stub = v1::Prefill::NewStub(grpc::CreateChannel(out.cloud->address(), grpc::InsecureChannelCredentials()));
  absl::StatusOr<std::unique_ptr<SlowH2Client>> stalled =
      SlowH2Client::Call(out.cloud->server->port(), "/baton.v1.Prefill/Prefill", prefill_request(64, 1));
  ASSERT_TRUE(stalled.ok()) << stalled.status();
  out.stalled = std::move(*stalled);
  if (!wait_for_worker) return;
  ASSERT_TRUE(eventually([&] { return cloud_health(*out.stub).running() == 1; }))
      << "the stalled Prefill never took the worker";
}

TEST(PrefillSlowReaderTest, AnotherClientIsServedWhileAPrefillClientStopsReading) {
  CloudWithStalledPrefill setup;
  ASSERT_NO_FATAL_FAILURE(start_stalled_prefill(std::chrono::milliseconds(3000), /*wait_for_worker=*/true, setup));

  const auto [status, waited_ms] = timed_prefill(*setup.stub);
  std::printf("cloud: the other client waited %.0f ms for its Prefill (--max-running 1, --write-stall-timeout 3s)\n",
              waited_ms);
  EXPECT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
}

TEST(PrefillSlowReaderTest, StalledPrefillIsCancelledAndFreesItsWorker) {
  CloudWithStalledPrefill setup;
  ASSERT_NO_FATAL_FAILURE(start_stalled_prefill(std::chrono::milliseconds(1000), /*wait_for_worker=*/false, setup));

  absl::StatusOr<std::string> end = setup.stalled->wait_for_stream_end(std::chrono::seconds(20));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_TRUE(*end == "trailers" || end->rfind("RST_STREAM", 0) == 0) << *end;
  // The call was cancelled for its stalled write (so it held the worker), and the worker is free.
  EXPECT_EQ(setup.cloud->service->write_stalls(), 1u);
  EXPECT_TRUE(eventually([&] { return cloud_health(*setup.stub).running() == 0; }));
  const auto [status, waited_ms] = timed_prefill(*setup.stub);
  EXPECT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
}

// ---- Cloud: GetPrefix ----

TEST(PrefillSlowReaderTest, StalledGetPrefixIsCancelledAfterTheWriteStallTimeout) {
  std::unique_ptr<Cloud> cloud = start_cloud(std::chrono::milliseconds(1000));
  ASSERT_NE(cloud->server, nullptr);
  auto stub = v1::Prefill::NewStub(grpc::CreateChannel(cloud->address(), grpc::InsecureChannelCredentials()));
  // A pack of 1-token blocks (far more than 64 messages), uploaded with PutPrefix.
  std::vector<v1::KvStreamMessage> pack;
  {
    grpc::ClientContext context;
    edge_test::live_call(context, 30);
    auto reader = stub->Prefill(&context, prefill_request(64, 3));
    v1::KvStreamMessage message;
    while (reader->Read(&message)) pack.push_back(message);
    ASSERT_TRUE(reader->Finish().ok());
  }
  ASSERT_GT(pack.size(), 2 * QueuedWriteReactor<v1::KvStreamMessage>::kDefaultMaxPending);
  pack.front().mutable_header()->set_pack_id("stalled-pack");
  {
    grpc::ClientContext context;
    edge_test::live_call(context, 30);
    v1::PutPrefixResponse put;
    auto writer = stub->PutPrefix(&context, &put);
    for (const v1::KvStreamMessage& message : pack) ASSERT_TRUE(writer->Write(message));
    writer->WritesDone();
    const grpc::Status status = writer->Finish();
    ASSERT_TRUE(status.ok()) << status.error_message();
  }

  v1::GetPrefixRequest request;
  request.set_pack_id("stalled-pack");
  absl::StatusOr<std::unique_ptr<SlowH2Client>> stalled =
      SlowH2Client::Call(cloud->server->port(), "/baton.v1.Prefill/GetPrefix", request);
  ASSERT_TRUE(stalled.ok()) << stalled.status();
  absl::StatusOr<std::string> end = (*stalled)->wait_for_stream_end(std::chrono::seconds(20));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_TRUE(*end == "trailers" || end->rfind("RST_STREAM", 0) == 0) << *end;
  EXPECT_EQ(cloud->service->write_stalls(), 1u);
}

}  // namespace
}  // namespace baton
