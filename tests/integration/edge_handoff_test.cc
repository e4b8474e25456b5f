// Real-server tests of the edge's KV handoff failures: a cloud serving a
// different model, a relay that corrupts a block, truncates the stream or
// dies mid-stream, an unreachable cloud; policy local never contacting the
// cloud; the bearer token and TLS to the cloud. Each failure leaves the
// session unchanged and says why: an error under policy cloud, a local
// fallback with Stats.fallback_reason under auto.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include "cloud_prefill/tenant_auth.h"
#include "common/kv_stream/kv_stream.h"
#include "tests/support/edge_test_env.h"
#include "tests/support/test_certs.h"
#include "tests/integration/faulty_prefill.h"

namespace baton::edge_test {
namespace {

// ---------------------------------------------------------------------------
// Handoff failures
// ---------------------------------------------------------------------------

TEST(EdgeHandoffTest, FingerprintMismatchFailsUnderCloudAndFallsBackUnderAuto) {
  const std::string& model_path = edge_model_path("tiny");
  std::unique_ptr<Cloud> other_cloud = start_cloud(edge_model_path("tiny", /*seed=*/2));
  EdgeServiceOptions options = edge_options(other_cloud->address());
  options.assumed_local_prefill_tokens_per_s = 0.01;  // so AUTO prefers the cloud
  std::unique_ptr<Edge> edge = start_edge(model_path, options);
  ASSERT_NE(edge->stub, nullptr);
  wait_for_cloud(*edge->stub);

  const std::vector<uint32_t> turn1 = prompt(20, 3);
  const std::vector<uint32_t> turn2 = prompt(25, 4);
  ASSERT_TRUE(generate(*edge->stub, greedy_request(turn1, "m", v1::SPLIT_POLICY_LOCAL)).status.ok());
  ASSERT_TRUE(generate(*edge->stub, greedy_request(turn1, "ref", v1::SPLIT_POLICY_LOCAL)).status.ok());
  const int64_t before = session_tokens(*edge->stub, "m");
  ASSERT_GT(before, 0);

  GenerateResult refused = generate(*edge->stub, greedy_request(turn2, "m", v1::SPLIT_POLICY_CLOUD));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << refused.status.error_message();
  EXPECT_NE(refused.status.error_message().find("weights_digest"), std::string::npos)
      << refused.status.error_message();
  EXPECT_TRUE(refused.tokens.empty());
  EXPECT_EQ(session_tokens(*edge->stub, "m"), before);

  GenerateResult fell_back = generate(*edge->stub, greedy_request(turn2, "m", v1::SPLIT_POLICY_AUTO));
  GenerateResult reference = generate(*edge->stub, greedy_request(turn2, "ref", v1::SPLIT_POLICY_LOCAL));
  ASSERT_TRUE(fell_back.status.ok()) << fell_back.status.error_message();
  ASSERT_TRUE(reference.status.ok()) << reference.status.error_message();
  EXPECT_NE(fell_back.stats.fallback_reason().find("weights_digest"), std::string::npos)
      << fell_back.stats.fallback_reason();
  EXPECT_EQ(fell_back.stats.plan().place(), v1::PREFILL_PLACE_LOCAL);
  EXPECT_EQ(fell_back.tokens, reference.tokens);
}

// The process's resident-memory high-water mark, KiB.
long max_rss_kib() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

struct FaultCase {
  const char* name;
  FaultyPrefill::Fault fault;
  grpc::StatusCode code;  // under policy cloud
  const char* why;        // in the message / fallback reason
};

class EdgeHandoffFaultTest : public ::testing::TestWithParam<FaultCase> {};

TEST_P(EdgeHandoffFaultTest, BadStreamLeavesTheSessionUnchangedAndSaysWhy) {
  const FaultCase& fault = GetParam();
  const std::string& model_path = edge_model_path("tiny");
  std::unique_ptr<Cloud> cloud = start_cloud(model_path);
  std::unique_ptr<FaultyCloud> faulty = start_faulty_cloud(cloud->address(), fault.fault);
  EdgeServiceOptions options = edge_options(faulty->address());
  options.assumed_local_prefill_tokens_per_s = 0.01;  // so AUTO prefers the cloud
  std::unique_ptr<Edge> edge = start_edge(model_path, options);
  ASSERT_NE(edge->stub, nullptr);
  wait_for_cloud(*edge->stub);

  const std::vector<uint32_t> turn1 = prompt(20, 5);
  const std::vector<uint32_t> turn2 = prompt(40, 6);
  ASSERT_TRUE(generate(*edge->stub, greedy_request(turn1, "s", v1::SPLIT_POLICY_LOCAL)).status.ok());
  ASSERT_TRUE(generate(*edge->stub, greedy_request(turn1, "ref", v1::SPLIT_POLICY_LOCAL)).status.ok());
  const int64_t before = session_tokens(*edge->stub, "s");

  if (fault.fault == FaultyPrefill::Fault::kStall) {
    // Kill the cloud while it streams: shut its server down mid-stream.
    std::future<void> stalled = faulty->service->stalled();
    auto call = std::async(std::launch::async, [&] {
      return generate(*edge->stub, greedy_request(turn2, "s", v1::SPLIT_POLICY_CLOUD));
    });
    ASSERT_EQ(stalled.wait_for(std::chrono::seconds(30)), std::future_status::ready);
    faulty->server->Shutdown(std::chrono::system_clock::now());
    GenerateResult killed = call.get();
    EXPECT_FALSE(killed.status.ok());
    EXPECT_EQ(killed.status.error_code(), fault.code) << killed.status.error_message();
    EXPECT_NE(killed.status.error_message().find(fault.why), std::string::npos) << killed.status.error_message();
    EXPECT_EQ(session_tokens(*edge->stub, "s"), before);
    // With the cloud gone, AUTO goes local and gives the reference's tokens.
    GenerateResult after = generate(*edge->stub, greedy_request(turn2, "s", v1::SPLIT_POLICY_AUTO));
    GenerateResult reference = generate(*edge->stub, greedy_request(turn2, "ref", v1::SPLIT_POLICY_LOCAL));
    ASSERT_TRUE(after.status.ok()) << after.status.error_message();
    EXPECT_EQ(after.tokens, reference.tokens);
    return;
  }

  const long max_rss_before_kib = max_rss_kib();
  GenerateResult refused = generate(*edge->stub, greedy_request(turn2, "s", v1::SPLIT_POLICY_CLOUD));
  // Refusing costs no memory worth the name (a bomb is never expanded).
  EXPECT_LT(max_rss_kib() - max_rss_before_kib, 128 * 1024);
  EXPECT_EQ(refused.status.error_code(), fault.code) << refused.status.error_message();
  EXPECT_NE(refused.status.error_message().find(fault.why), std::string::npos) << refused.status.error_message();
  EXPECT_EQ(session_tokens(*edge->stub, "s"), before);

  GenerateResult fell_back = generate(*edge->stub, greedy_request(turn2, "s", v1::SPLIT_POLICY_AUTO));
  GenerateResult reference = generate(*edge->stub, greedy_request(turn2, "ref", v1::SPLIT_POLICY_LOCAL));
  ASSERT_TRUE(fell_back.status.ok()) << fell_back.status.error_message();
  EXPECT_NE(fell_back.stats.fallback_reason().find(fault.why), std::string::npos)
      << fell_back.stats.fallback_reason();
  EXPECT_EQ(fell_back.tokens, reference.tokens);
}

INSTANTIATE_TEST_SUITE_P(
    Faults, EdgeHandoffFaultTest,
    ::testing::Values(FaultCase{"CorruptBlock", FaultyPrefill::Fault::kCorruptBlock, grpc::StatusCode::DATA_LOSS,
                                "checksum"},
                      FaultCase{"TruncatedStream", FaultyPrefill::Fault::kTruncate, grpc::StatusCode::DATA_LOSS,
                                "trailer"},
                      FaultCase{"CloudKilledMidStream", FaultyPrefill::Fault::kStall,
                                grpc::StatusCode::UNAVAILABLE, "cloud prefill failed"},
                      FaultCase{"DecompressionBomb", FaultyPrefill::Fault::kBomb,
                                grpc::StatusCode::INVALID_ARGUMENT, "raw_size"},
                      FaultCase{"OversizedMessage", FaultyPrefill::Fault::kOversized,
                                grpc::StatusCode::RESOURCE_EXHAUSTED, "larger than max"}),
    [](const ::testing::TestParamInfo<FaultCase>& param_info) { return std::string(param_info.param.name); });

// A cloud that goes silent mid-stream (connection open, nothing sent) is
// ended by the stall timeout: DEADLINE_EXCEEDED with the reason under policy
// cloud, the session unchanged.
TEST(EdgeHandoffTest, SilentCloudIsEndedByTheStallTimeout) {
  const std::string& model_path = edge_model_path("tiny");
  std::unique_ptr<Cloud> cloud = start_cloud(model_path);
  std::unique_ptr<FaultyCloud> silent = start_faulty_cloud(cloud->address(), FaultyPrefill::Fault::kStall);
  EdgeServiceOptions options = edge_options(silent->address());
  options.cloud->stall_timeout = std::chrono::milliseconds(1500);
  std::unique_ptr<Edge> edge = start_edge(model_path, options);
  wait_for_cloud(*edge->stub);
  ASSERT_TRUE(generate(*edge->stub, greedy_request(prompt(20, 7), "s", v1::SPLIT_POLICY_LOCAL)).status.ok());
  const int64_t before = session_tokens(*edge->stub, "s");

  GenerateResult ended = generate(*edge->stub, greedy_request(prompt(40, 8), "s", v1::SPLIT_POLICY_CLOUD));
  EXPECT_EQ(ended.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << ended.status.error_message();
  EXPECT_NE(ended.status.error_message().find("sent nothing for"), std::string::npos)
      << ended.status.error_message();
  EXPECT_EQ(session_tokens(*edge->stub, "s"), before);
  silent->server->Shutdown(std::chrono::system_clock::now());
}

// Under policy auto, a cloud stream that turns slow mid-way (one block per
// 400 ms after the first quarter: a bandwidth collapse) is abandoned once
// its projected rest exceeds local prefill, and the turn completes locally
// with the reason; the text is the local one, the session consistent.
TEST(EdgeHandoffTest, StreamSlowerThanLocalPrefillIsAbandonedUnderAuto) {
  const std::string& model_path = edge_model_path("tiny");
  std::unique_ptr<Cloud> cloud = start_cloud(model_path);
  std::unique_ptr<FaultyCloud> slow = start_faulty_cloud(cloud->address(), FaultyPrefill::Fault::kSlow);
  EdgeServiceOptions options = edge_options(slow->address());
  // Local prefill assumed at 100 tok/s: 60 tokens, about 0.6 s; the relay's
  // Health claims 1e6 tok/s, so auto starts on the cloud.
  options.assumed_local_prefill_tokens_per_s = 100;
  std::unique_ptr<Edge> edge = start_edge(model_path, options);
  wait_for_cloud(*edge->stub);
  ASSERT_TRUE(generate(*edge->stub, greedy_request(prompt(20, 9), "s", v1::SPLIT_POLICY_LOCAL)).status.ok());
  ASSERT_TRUE(generate(*edge->stub, greedy_request(prompt(20, 9), "ref", v1::SPLIT_POLICY_LOCAL)).status.ok());

  const std::vector<uint32_t> turn2 = prompt(60, 10);
  GenerateResult result = generate(*edge->stub, greedy_request(turn2, "s", v1::SPLIT_POLICY_AUTO));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(slow->service->prefill_calls(), 1);
  EXPECT_NE(result.stats.fallback_reason().find("too slow"), std::string::npos)
      << "plan: " << result.stats.plan().reason() << "; fallback: " << result.stats.fallback_reason();
  GenerateResult reference = generate(*edge->stub, greedy_request(turn2, "ref", v1::SPLIT_POLICY_LOCAL));
  ASSERT_TRUE(reference.status.ok()) << reference.status.error_message();
  EXPECT_EQ(result.tokens, reference.tokens);
  EXPECT_EQ(session_tokens(*edge->stub, "s"), session_tokens(*edge->stub, "ref"));
  slow->server->Shutdown(std::chrono::system_clock::now());
}

// A client that leaves while the cloud stream stalls frees the one
// generation worker: at once when gRPC reports the cancellation, and at the
// latest after the stall timeout (with Debian's gRPC 1.51 a cancel during an
// in-flight write is sometimes reported only at the call's deadline, cf.
// grpc/grpc#41492; the watchdog does not depend on it).
TEST(EdgeHandoffTest, ClientLeavingDuringAStalledCloudStreamFreesTheAgent) {
  const std::string& model_path = edge_model_path("tiny");
  std::unique_ptr<Cloud> cloud = start_cloud(model_path);
  std::unique_ptr<FaultyCloud> stalling = start_faulty_cloud(cloud->address(), FaultyPrefill::Fault::kStall);
  EdgeServiceOptions options = edge_options(stalling->address());
  options.cloud->prefill_timeout = std::chrono::seconds(120);  // the stall would hold the worker this long
  options.cloud->stall_timeout = std::chrono::seconds(3);
  std::unique_ptr<Edge> edge = start_edge(model_path, options);
  wait_for_cloud(*edge->stub);
  ASSERT_TRUE(generate(*edge->stub, greedy_request(prompt(20, 1), "s", v1::SPLIT_POLICY_LOCAL)).status.ok());
  const int64_t before = session_tokens(*edge->stub, "s");

  std::future<void> stalled = stalling->service->stalled();
  grpc::ClientContext context;
  live_call(context, 120);
  auto call = std::async(std::launch::async, [&] {
    auto reader = edge->stub->Generate(&context, greedy_request(prompt(40, 2), "s", v1::SPLIT_POLICY_CLOUD));
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
    }
    return reader->Finish();
  });
  ASSERT_EQ(stalled.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  context.TryCancel();
  EXPECT_EQ(call.get().error_code(), grpc::StatusCode::CANCELLED);

  // The one generation worker is free again well before the cloud deadline.
  v1::GenerateRequest next = greedy_request(prompt(10, 3), "s", v1::SPLIT_POLICY_LOCAL);
  GenerateResult result;
  {
    grpc::ClientContext next_context;
    live_call(next_context, 20);
    auto reader = edge->stub->Generate(&next_context, next);
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      if (response.has_stats()) result.stats = response.stats();
    }
    result.status = reader->Finish();
  }
  if (result.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
    // The cancelled turn may still be handing the session back; then once more.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    result = generate(*edge->stub, next);
  }
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.stats.plan().reused_tokens(), static_cast<uint32_t>(before));
  stalling->server->Shutdown(std::chrono::system_clock::now());
}

// A cloud that comes up after the agent (or restarts) is picked up: calls
// before it are UNAVAILABLE at once, calls after it go to the cloud. (The
// reconnect backoff cap of 4 s matters after minutes of absence, which a
// test does not wait for: gRPC's own backoff reaches 120 s only then.)
TEST(EdgeHandoffTest, CloudStartedAfterTheAgentIsPickedUp) {
  // A free port: bound, then released for the cloud to take later.
  int probe = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(probe, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(probe, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const std::string cloud_address = "127.0.0.1:" + std::to_string(ntohs(address.sin_port));
  close(probe);

  const std::string& model_path = edge_model_path("tiny");
  std::unique_ptr<Edge> edge = start_edge(model_path, edge_options(cloud_address));
  ASSERT_NE(edge->stub, nullptr);
  // Long enough for several failed connection attempts.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  GenerateResult refused = generate(*edge->stub, greedy_request(prompt(20, 11), "r", v1::SPLIT_POLICY_CLOUD));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.status.error_message();

  std::unique_ptr<Cloud> cloud = start_cloud(model_path, {}, {}, cloud_address);
  ASSERT_NE(cloud->server, nullptr);
  wait_for_cloud(*edge->stub);
  GenerateResult served = generate(*edge->stub, greedy_request(prompt(20, 11), "r", v1::SPLIT_POLICY_CLOUD));
  ASSERT_TRUE(served.status.ok()) << served.status.error_message();
  EXPECT_EQ(served.stats.plan().place(), v1::PREFILL_PLACE_CLOUD);
}

TEST(EdgeHandoffTest, PolicyLocalNeverContactsTheCloud) {
  const std::string& model_path = edge_model_path("tiny");
  std::unique_ptr<Cloud> cloud = start_cloud(model_path);
  std::unique_ptr<FaultyCloud> relay = start_faulty_cloud(cloud->address(), FaultyPrefill::Fault::kNone);
  EdgeServiceOptions options = edge_options(relay->address());
  options.assumed_local_prefill_tokens_per_s = 0.01;  // AUTO would offload anything
  std::unique_ptr<Edge> edge = start_edge(model_path, options);
  wait_for_cloud(*edge->stub);
  for (int turn = 0; turn < 2; ++turn) {
    GenerateResult local = generate(*edge->stub, greedy_request(prompt(40, turn), "private", v1::SPLIT_POLICY_LOCAL));
    ASSERT_TRUE(local.status.ok()) << local.status.error_message();
    EXPECT_EQ(local.stats.plan().place(), v1::PREFILL_PLACE_LOCAL);
  }
  EXPECT_EQ(relay->service->prefill_calls(), 0);
  // The same relay does see AUTO's requests (so the count above can fail).
  GenerateResult offloaded = generate(*edge->stub, greedy_request(prompt(40, 5), "", v1::SPLIT_POLICY_AUTO));
  ASSERT_TRUE(offloaded.status.ok()) << offloaded.status.error_message();
  EXPECT_EQ(offloaded.stats.plan().place(), v1::PREFILL_PLACE_CLOUD) << offloaded.stats.plan().reason();
  EXPECT_EQ(relay->service->prefill_calls(), 1);
}

TEST(EdgeHandoffTest, UnreachableCloudMeansLocalUnderAutoAndUnavailableUnderCloud) {
  // A port that was free a moment ago: nothing listens there.
  int dead_port = 0;
  {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    socklen_t length = sizeof(address);
    ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
    dead_port = ntohs(address.sin_port);
    close(fd);
  }
  EdgeServiceOptions options = edge_options("127.0.0.1:" + std::to_string(dead_port));
  options.assumed_local_prefill_tokens_per_s = 0.01;
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), options);
  // Until the first Health check of the cloud has answered (or failed), the
  // plan truthfully says "not checked yet"; this test is about a cloud that
  // was checked and found dead.
  for (int i = 0; i < 200 && health(*edge->stub).cloud().checked_unix_ms() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_NE(health(*edge->stub).cloud().checked_unix_ms(), 0u) << "the agent never checked the cloud's Health";
  GenerateResult automatic = generate(*edge->stub, greedy_request(prompt(30, 1), "u", v1::SPLIT_POLICY_AUTO));
  ASSERT_TRUE(automatic.status.ok()) << automatic.status.error_message();
  EXPECT_EQ(automatic.stats.plan().place(), v1::PREFILL_PLACE_LOCAL);
  EXPECT_NE(automatic.stats.plan().reason().find("unreachable"), std::string::npos)
      << automatic.stats.plan().reason();
  const int64_t before = session_tokens(*edge->stub, "u");
  GenerateResult cloud_only = generate(*edge->stub, greedy_request(prompt(30, 2), "u", v1::SPLIT_POLICY_CLOUD));
  EXPECT_EQ(cloud_only.status.error_code(), grpc::StatusCode::UNAVAILABLE) << cloud_only.status.error_message();
  EXPECT_EQ(session_tokens(*edge->stub, "u"), before);
  const v1::EdgeHealthResponse h = health(*edge->stub);
  EXPECT_FALSE(h.cloud().reachable());
}
TEST(EdgeHandoffTest, BearerTokenFromTheTokenFileReachesTheCloud) {
  const std::string& model_path = edge_model_path("tiny");
  constexpr char kToken[] = "edge-test-token-0123456789";
  PrefillServiceOptions cloud_options;
  absl::StatusOr<TenantAuth> auth = TenantAuth::FromText(std::string(kToken) + " edge\n", "test");
  ASSERT_TRUE(auth.ok()) << auth.status();
  cloud_options.auth = *auth;
  std::unique_ptr<Cloud> cloud = start_cloud(model_path, cloud_options);
  const std::string dir = testing::make_temp_dir("edge-token");
  {
    std::ofstream(dir + "/token") << kToken << "\n";
    std::ofstream(dir + "/wrong") << "not-the-token-0123456789\n";
  }
  EdgeServiceOptions with_token = edge_options(cloud->address());
  with_token.cloud->token_path = dir + "/token";
  std::unique_ptr<Edge> edge = start_edge(model_path, with_token);
  GenerateResult served = generate(*edge->stub, greedy_request(prompt(20, 1), "", v1::SPLIT_POLICY_CLOUD));
  ASSERT_TRUE(served.status.ok()) << served.status.error_message();
  EXPECT_EQ(served.stats.plan().place(), v1::PREFILL_PLACE_CLOUD);
  edge->stop();

  EdgeServiceOptions wrong_token = edge_options(cloud->address());
  wrong_token.cloud->token_path = dir + "/wrong";
  std::unique_ptr<Edge> refused_edge = start_edge(model_path, wrong_token);
  GenerateResult refused = generate(*refused_edge->stub, greedy_request(prompt(20, 1), "", v1::SPLIT_POLICY_CLOUD));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << refused.status.error_message();
  refused_edge->stop();
  std::filesystem::remove_all(dir);
}

TEST(EdgeHandoffTest, TlsCloudWithTheCaRootsFromCloudCa) {
  if (!testing::have_openssl()) GTEST_SKIP() << "openssl is not installed";
  const testing::TestCertificate& server = testing::test_pki().server;
  const std::string& model_path = edge_model_path("tiny");
  PrefillServerOptions server_options;
  server_options.tls.cert_path = server.cert;
  server_options.tls.key_path = server.key;
  std::unique_ptr<Cloud> cloud = start_cloud(model_path, {}, server_options);
  ASSERT_NE(cloud->server, nullptr);

  EdgeServiceOptions tls = edge_options(cloud->address());
  tls.cloud->ca_path = server.cert;
  std::unique_ptr<Edge> edge = start_edge(model_path, tls);
  GenerateResult served = generate(*edge->stub, greedy_request(prompt(20, 1), "", v1::SPLIT_POLICY_CLOUD));
  ASSERT_TRUE(served.status.ok()) << served.status.error_message();
  EXPECT_EQ(served.stats.plan().place(), v1::PREFILL_PLACE_CLOUD);
  edge->stop();

  // Plaintext to a TLS cloud does not get through.
  std::unique_ptr<Edge> plain = start_edge(model_path, edge_options(cloud->address()));
  GenerateResult refused = generate(*plain->stub, greedy_request(prompt(20, 1), "", v1::SPLIT_POLICY_CLOUD));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.status.error_message();
  plain->stop();
}

// Mutual TLS between edge and cloud: the cloud requires client
// certificates signed by its client CA; an agent with --cloud-cert/--cloud-key
// signed by it streams, one without a certificate or with a stranger's is
// refused (UNAVAILABLE under policy cloud) and its session is unchanged.
TEST(EdgeHandoffTest, MutualTlsAdmitsOnlyAnAgentWithATrustedCertificate) {
  if (!testing::have_openssl()) GTEST_SKIP() << "openssl is not installed";
  const testing::TestPki& pki = testing::test_pki();
  const std::string& model_path = edge_model_path("tiny");
  PrefillServerOptions server_options;
  server_options.tls.cert_path = pki.server.cert;
  server_options.tls.key_path = pki.server.key;
  server_options.tls.client_ca_path = pki.client.cert;  // self-signed: its own CA
  std::unique_ptr<Cloud> cloud = start_cloud(model_path, {}, server_options);
  ASSERT_NE(cloud->server, nullptr);

  EdgeServiceOptions trusted = edge_options(cloud->address());
  trusted.cloud->ca_path = pki.server.cert;
  trusted.cloud->cert_path = pki.client.cert;
  trusted.cloud->key_path = pki.client.key;
  std::unique_ptr<Edge> edge = start_edge(model_path, trusted);
  GenerateResult served = generate(*edge->stub, greedy_request(prompt(20, 1), "", v1::SPLIT_POLICY_CLOUD));
  ASSERT_TRUE(served.status.ok()) << served.status.error_message();
  EXPECT_EQ(served.stats.plan().place(), v1::PREFILL_PLACE_CLOUD);
  edge->stop();

  for (const char* who : {"", "stranger"}) {
    SCOPED_TRACE(*who ? who : "no certificate");
    EdgeServiceOptions options = edge_options(cloud->address());
    options.cloud->ca_path = pki.server.cert;
    if (*who) {
      options.cloud->cert_path = pki.stranger.cert;
      options.cloud->key_path = pki.stranger.key;
    }
    std::unique_ptr<Edge> other = start_edge(model_path, options);
    ASSERT_TRUE(generate(*other->stub, greedy_request(prompt(10, 2), "s", v1::SPLIT_POLICY_LOCAL)).status.ok());
    const int64_t before = session_tokens(*other->stub, "s");
    GenerateResult refused = generate(*other->stub, greedy_request(prompt(20, 1), "s", v1::SPLIT_POLICY_CLOUD));
    EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.status.error_message();
    EXPECT_EQ(session_tokens(*other->stub, "s"), before);
    other->stop();
  }
}

}  // namespace
}  // namespace baton::edge_test
