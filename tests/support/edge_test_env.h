// In-process cloud and edge for the integration tests: synthetic models
// (the edge's Q4_0 file, which the cloud serves too), a real PrefillServer
// and EdgeServer on 127.0.0.1:0, and gRPC client helpers with deadlines.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "cloud_prefill/prefill_server.h"
#include "cloud_prefill/prefill_service.h"
#include "common/model/model_quantize.h"
#include "edge_decode/edge_server.h"
#include "edge_decode/edge_service.h"
#include "edge_decode/http/http_front_end.h"
#include "proto/baton.grpc.pb.h"
#include "tests/support/test_certs.h"
#include "tests/support/test_models.h"

namespace baton::edge_test {

// The edge's Q4_0 file for a synthetic shape, quantized from the F16 source
// once per run (the fingerprint then carries the source's weights digest).
inline const std::string& edge_model_path(const std::string& shape, uint64_t seed = 1) {
  static std::mutex mu;
  static std::map<std::string, std::string> paths;
  std::lock_guard<std::mutex> lock(mu);
  const std::string key = shape + "-" + std::to_string(seed);
  auto it = paths.find(key);
  if (it != paths.end()) return it->second;
  static const std::string dir = testing::make_temp_dir("edge-models");
  const std::string path = dir + "/" + key + "-q4_0.gguf";
  QuantizeOptions options;
  options.type = GgmlType::kQ4_0;
  options.n_threads = 1;
  absl::Status status = quantize_model(testing::synth_model_path(shape, GgmlType::kF16, seed), path, options);
  if (!status.ok()) {
    ADD_FAILURE() << status;
    std::abort();
  }
  return paths.emplace(key, path).first->second;
}

inline std::chrono::system_clock::time_point deadline_in(int seconds) {
  return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

// A call to a server the test started and that listens (its edge, its
// cloud): within `seconds`, and waiting for the channel to connect
// (wait_for_ready) instead of failing at the first connection attempt that
// does not get through. Clean-clone CI once failed a Generate at once that
// way ("failed to connect to all addresses; last error: UNKNOWN:
// ipv4:127.0.0.1:44873: No such file or directory", with ~3,200 tests run
// in parallel). What the server answers (UNAVAILABLE while it loads,
// UNAUTHENTICATED, a cloud's refusals) comes back as before. Not for calls
// that expect the connection itself to fail (a stopped server, plaintext to
// TLS): those would wait out their deadline.
inline void live_call(grpc::ClientContext& context, int seconds) {
  context.set_deadline(deadline_in(seconds));
  context.set_wait_for_ready(true);
}

// A PrefillService serving a model through a PrefillServer; `stub` talks to
// it over plaintext (null when the server speaks TLS or did not start).
struct Cloud {
  std::unique_ptr<PrefillService> service;
  std::unique_ptr<PrefillServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Prefill::Stub> stub;
  std::string address() const { return "127.0.0.1:" + std::to_string(server->port()); }
  ~Cloud() {
    if (server) server->Shutdown();
    server.reset();
    service.reset();
  }
};

// Starts a cloud with `options` exactly as given; `server` stays null (with
// a test failure) when it cannot listen.
inline std::unique_ptr<Cloud> start_cloud_with(const std::string& model_path, PrefillServiceOptions options,
                                               const PrefillServerOptions& server_options = {},
                                               const std::string& listen = "127.0.0.1:0") {
  auto cloud = std::make_unique<Cloud>();
  cloud->service = std::make_unique<PrefillService>(std::move(options));
  absl::Status loaded = cloud->service->Load(model_path);
  EXPECT_TRUE(loaded.ok()) << loaded;
  auto server = PrefillServer::Start(listen, *cloud->service, server_options);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return cloud;
  cloud->server = std::move(*server);
  if (server_options.tls.cert_path.empty()) {
    cloud->channel = grpc::CreateChannel(cloud->address(), grpc::InsecureChannelCredentials());
    cloud->stub = v1::Prefill::NewStub(cloud->channel);
  }
  return cloud;
}

// The edge tests' cloud: one worker thread, one request at a time, 16-token
// chunks (several blocks per layer).
inline std::unique_ptr<Cloud> start_cloud(const std::string& model_path, PrefillServiceOptions options = {},
                                   const PrefillServerOptions& server_options = {},
                                   const std::string& listen = "127.0.0.1:0") {
  options.threads = 1;
  options.max_running = 1;
  options.chunk_tokens = 16;  // several blocks per layer
  return start_cloud_with(model_path, std::move(options), server_options, listen);
}

// An EdgeService behind an EdgeServer, a plaintext stub to it, and
// optionally the HTTP front end relaying to it.
struct Edge {
  std::unique_ptr<EdgeService> service;
  std::unique_ptr<EdgeServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Edge::Stub> stub;
  std::unique_ptr<HttpFrontEnd> http;
  ~Edge() { stop(); }
  void stop() {
    if (http) http->Stop();
    if (server) server->Shutdown();
    server.reset();
    service.reset();
  }
};

inline EdgeServiceOptions edge_options(const std::string& cloud_address) {
  EdgeServiceOptions options;
  options.threads = 1;
  options.memory_budget_bytes = uint64_t{1} << 30;
  options.codec = "f16";
  options.max_tokens = 12;
  if (!cloud_address.empty()) {
    CloudClientOptions cloud;
    cloud.address = cloud_address;
    cloud.prefill_timeout = std::chrono::seconds(30);
    cloud.health_interval = std::chrono::milliseconds(100);
    options.cloud = cloud;
  }
  return options;
}

// Starts `edge`'s server, then (with `http`) the HTTP front end relaying to
// its gRPC port and naming `model_path`, then loads (so Health could answer
// while loading).
inline void start_edge_in(Edge& edge, const std::string& model_path, const EdgeServiceOptions& options,
                          const std::optional<HttpFrontEndOptions>& http = std::nullopt, bool load = true) {
  edge.service = std::make_unique<EdgeService>(options);
  auto server = EdgeServer::Start("127.0.0.1:0", *edge.service);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return;
  edge.server = std::move(*server);
  const std::string target = "127.0.0.1:" + std::to_string(edge.server->port());
  edge.channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  edge.stub = v1::Edge::NewStub(edge.channel);
  if (http.has_value()) {
    HttpFrontEndOptions front_options = *http;
    front_options.grpc_target = target;
    front_options.model_path = model_path;
    auto front = HttpFrontEnd::Start(front_options);
    EXPECT_TRUE(front.ok()) << front.status();
    if (front.ok()) edge.http = std::move(*front);
  }
  if (load) {
    absl::Status loaded = edge.service->Load(model_path);
    EXPECT_TRUE(loaded.ok()) << loaded;
  }
}

inline std::unique_ptr<Edge> start_edge(const std::string& model_path, const EdgeServiceOptions& options,
                                        bool load = true) {
  auto edge = std::make_unique<Edge>();
  start_edge_in(*edge, model_path, options, std::nullopt, load);
  return edge;
}

inline v1::EdgeHealthResponse health(v1::Edge::Stub& stub) {
  grpc::ClientContext context;
  live_call(context, 10);
  v1::EdgeHealthResponse response;
  grpc::Status status = stub.Health(&context, v1::HealthRequest(), &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response;
}

// Policy AUTO only offloads to a cloud it has seen READY.
inline void wait_for_cloud(v1::Edge::Stub& stub) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < give_up) {
    const v1::EdgeHealthResponse response = health(stub);
    if (response.cloud().reachable() && response.cloud().state() == v1::SERVING_STATE_READY) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ADD_FAILURE() << "the edge never saw its cloud READY";
}

struct GenerateResult {
  grpc::Status status;
  std::vector<uint32_t> tokens;
  std::vector<float> logprobs;  // per token, when the request set `logprobs`
  std::string text;
  bool has_stats = false;
  v1::Stats stats;
  bool has_plan = false;
  v1::Plan plan;
  std::vector<v1::Progress> progress;
  std::string retry_after_ms;  // trailing metadata
};

inline GenerateResult generate(v1::Edge::Stub& stub, const v1::GenerateRequest& request) {
  GenerateResult result;
  grpc::ClientContext context;
  live_call(context, 60);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub.Generate(&context, request);
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
    EXPECT_FALSE(result.has_stats) << "a message after Stats";
    switch (response.event_case()) {
      case v1::GenerateResponse::kText:
        result.text += response.text().text();
        for (uint32_t id : response.text().token_ids()) result.tokens.push_back(id);
        for (const v1::TokenLogprob& logprob : response.text().logprobs()) result.logprobs.push_back(logprob.logprob());
        break;
      case v1::GenerateResponse::kStats:
        result.has_stats = true;
        result.stats = response.stats();
        break;
      case v1::GenerateResponse::kPlan:
        result.has_plan = true;
        result.plan = response.plan();
        break;
      case v1::GenerateResponse::kProgress:
        result.progress.push_back(response.progress());
        break;
      default:
        break;
    }
  }
  result.status = reader->Finish();
  const auto& trailing = context.GetServerTrailingMetadata();
  if (auto it = trailing.find("baton-retry-after-ms"); it != trailing.end()) {
    result.retry_after_ms = std::string(it->second.data(), it->second.size());
  }
  return result;
}

// A prompt of `n` token ids (bytes and letters of the synthetic vocabulary,
// no specials), different per salt.
inline std::vector<uint32_t> prompt(int n, int salt) {
  std::vector<uint32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(static_cast<uint32_t>(3 + (i * 37 + salt * 101) % 500));
  return tokens;
}

inline v1::GenerateRequest greedy_request(const std::vector<uint32_t>& tokens, const std::string& session_id,
                                   v1::SplitPolicy policy, uint32_t max_tokens = 12) {
  v1::GenerateRequest request;
  for (uint32_t id : tokens) request.mutable_tokens()->add_ids(id);
  request.set_session_id(session_id);
  request.set_policy(policy);
  request.mutable_sampling()->set_temperature(0.0f);
  request.mutable_codec()->set_codec(v1::KV_CODEC_F16);
  request.set_max_tokens(max_tokens);
  return request;
}

// ListSessions' row of `id` (empty when not listed).
inline v1::SessionInfo session_info(v1::Edge::Stub& stub, const std::string& id) {
  grpc::ClientContext context;
  live_call(context, 10);
  v1::ListSessionsResponse response;
  const grpc::Status status = stub.ListSessions(&context, v1::ListSessionsRequest(), &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  for (const v1::SessionInfo& info : response.sessions()) {
    if (info.session_id() == id) return info;
  }
  return {};
}

// The session's token count, or -1 when the edge does not list it.
inline int64_t session_tokens(v1::Edge::Stub& stub, const std::string& id) {
  const v1::SessionInfo info = session_info(stub, id);
  return info.session_id().empty() ? -1 : static_cast<int64_t>(info.token_count());
}

}  // namespace baton::edge_test
