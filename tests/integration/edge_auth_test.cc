// Real-server tests of the edge agent's authentication (--api-key-file),
// session ownership, TLS listeners (--tls-cert/--tls-key) and the HTTP
// front end's caps: a real EdgeServer (and HttpFrontEnd) on 127.0.0.1:0 with
// two keys, spoken to over gRPC and HTTP.
//
// What must hold:
// - every RPC but Health needs a valid key (UNAUTHENTICATED otherwise), and
//   over HTTP every route but /health (401 in OpenAI's shape);
// - a session belongs to the key that created it: another key does not see
//   it (ListSessions), cannot delete it (NOT_FOUND) nor continue it (the
//   same id names a separate session of its own), over gRPC and over HTTP;
//   ownership survives a restart of the agent; without keys all is as before;
// - the gRPC listener speaks TLS with a certificate (a plaintext client gets
//   nothing) and the HTTP API speaks HTTPS, relaying over the loopback port;
// - a body over the HTTP cap is 413 naming its size and the limit, and a
//   prompt under the cap but over gRPC's default 4 MiB is not refused as 429.
#include <httplib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/rpc/api_keys.h"
#include "edge_decode/http/http_front_end.h"
#include "tests/support/edge_test_env.h"
#include "tests/support/test_certs.h"

namespace baton::edge_test {
namespace {

using Json = nlohmann::json;

constexpr char kAlice[] = "alice-key-0123456789";
constexpr char kBob[] = "bob-key-0123456789ab";

std::shared_ptr<const ApiKeySet> two_keys() {
  absl::StatusOr<ApiKeySet> keys = ApiKeySet::FromKeys({kAlice, kBob});
  EXPECT_TRUE(keys.ok()) << keys.status();
  return std::make_shared<const ApiKeySet>(*keys);
}

EdgeServiceOptions keyed_options() {
  EdgeServiceOptions options = edge_options("");
  options.api_keys = two_keys();
  return options;
}

// A context with a deadline and, when `key` is not empty, the key.
void prepare(grpc::ClientContext& context, const std::string& key) {
  live_call(context, 60);
  if (!key.empty()) context.AddMetadata("authorization", "Bearer " + key);
}

struct Turn {
  grpc::Status status;
  v1::Stats stats;
};

Turn generate_as(v1::Edge::Stub& stub, const std::string& key, const v1::GenerateRequest& request) {
  grpc::ClientContext context;
  prepare(context, key);
  auto reader = stub.Generate(&context, request);
  Turn turn;
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
    if (response.has_stats()) turn.stats = response.stats();
  }
  turn.status = reader->Finish();
  return turn;
}

grpc::Status list_as(v1::Edge::Stub& stub, const std::string& key, v1::ListSessionsResponse* response) {
  grpc::ClientContext context;
  prepare(context, key);
  return stub.ListSessions(&context, v1::ListSessionsRequest(), response);
}

// The session's token count as `key` sees it; -1 when not listed.
int64_t tokens_as(v1::Edge::Stub& stub, const std::string& key, const std::string& id) {
  v1::ListSessionsResponse response;
  const grpc::Status status = list_as(stub, key, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  for (const v1::SessionInfo& info : response.sessions()) {
    if (info.session_id() == id) return info.token_count();
  }
  return -1;
}

grpc::Status delete_as(v1::Edge::Stub& stub, const std::string& key, const std::string& id) {
  grpc::ClientContext context;
  prepare(context, key);
  v1::DeleteSessionRequest request;
  request.set_session_id(id);
  v1::DeleteSessionResponse response;
  return stub.DeleteSession(&context, request, &response);
}

grpc::Status list_packs_as(v1::Edge::Stub& stub, const std::string& key) {
  grpc::ClientContext context;
  prepare(context, key);
  v1::ListPacksResponse response;
  return stub.ListPacks(&context, v1::ListPacksRequest(), &response);
}

grpc::Status pull_pack_as(v1::Edge::Stub& stub, const std::string& key) {
  grpc::ClientContext context;
  prepare(context, key);
  v1::PullPackRequest request;
  request.set_pack_id("p");
  auto reader = stub.PullPack(&context, request);
  v1::PullPackResponse response;
  while (reader->Read(&response)) {
  }
  return reader->Finish();
}

TEST(EdgeAuthTest, EveryRpcButHealthNeedsAValidKey) {
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), keyed_options());
  v1::Edge::Stub& stub = *edge->stub;
  EXPECT_EQ(health(stub).state(), v1::SERVING_STATE_READY) << "Health stays open for probes";
  const v1::GenerateRequest request = greedy_request(prompt(8, 1), "s", v1::SPLIT_POLICY_LOCAL, 2);
  for (const std::string& key : {std::string(), std::string("wrong-key-0123456789"), std::string(kAlice) + "x"}) {
    SCOPED_TRACE("key '" + key + "'");
    EXPECT_EQ(generate_as(stub, key, request).status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    v1::ListSessionsResponse sessions;
    EXPECT_EQ(list_as(stub, key, &sessions).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(delete_as(stub, key, "s").error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(list_packs_as(stub, key).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(pull_pack_as(stub, key).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(tokens_as(stub, kAlice, "s"), -1) << "a refused Generate created a session";
  EXPECT_TRUE(generate_as(stub, kAlice, request).status.ok());
  EXPECT_TRUE(list_packs_as(stub, kBob).ok());
  // A valid key gets past authentication (this agent has no cloud to pull from).
  EXPECT_EQ(pull_pack_as(stub, kBob).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST(EdgeAuthTest, ASessionBelongsToTheKeyThatCreatedIt) {
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), keyed_options());
  v1::Edge::Stub& stub = *edge->stub;
  Turn first = generate_as(stub, kAlice, greedy_request(prompt(12, 2), "chat", v1::SPLIT_POLICY_LOCAL, 4));
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  EXPECT_EQ(first.stats.session_id(), "chat") << "the client sees its own id, not the stored one";
  const int64_t alice_tokens = tokens_as(stub, kAlice, "chat");
  ASSERT_GT(alice_tokens, 0);

  EXPECT_EQ(tokens_as(stub, kBob, "chat"), -1) << "Bob lists Alice's session";
  v1::ListSessionsResponse bob_list;
  ASSERT_TRUE(list_as(stub, kBob, &bob_list).ok());
  EXPECT_EQ(bob_list.sessions_size(), 0);
  const grpc::Status bob_delete = delete_as(stub, kBob, "chat");
  EXPECT_EQ(bob_delete.error_code(), grpc::StatusCode::NOT_FOUND) << bob_delete.error_message();
  EXPECT_EQ(bob_delete.error_message().find(api_key_owner_tag(kAlice)), std::string::npos);
  EXPECT_EQ(tokens_as(stub, kAlice, "chat"), alice_tokens);

  // Bob's Generate naming "chat" starts a session of his own: Alice's is untouched.
  Turn bob_turn = generate_as(stub, kBob, greedy_request(prompt(5, 3), "chat", v1::SPLIT_POLICY_LOCAL, 2));
  ASSERT_TRUE(bob_turn.status.ok()) << bob_turn.status.error_message();
  EXPECT_LT(bob_turn.stats.context_tokens(), static_cast<uint32_t>(alice_tokens)) << "Bob continued Alice's conversation";
  EXPECT_EQ(tokens_as(stub, kAlice, "chat"), alice_tokens);
  EXPECT_EQ(tokens_as(stub, kBob, "chat"), 5 + 2 - 1);

  // Alice continues hers.
  Turn second = generate_as(stub, kAlice, greedy_request(prompt(3, 4), "chat", v1::SPLIT_POLICY_LOCAL, 2));
  ASSERT_TRUE(second.status.ok()) << second.status.error_message();
  EXPECT_GT(second.stats.context_tokens(), static_cast<uint32_t>(alice_tokens));
  EXPECT_TRUE(delete_as(stub, kAlice, "chat").ok());
  EXPECT_EQ(tokens_as(stub, kAlice, "chat"), -1);
  EXPECT_GT(tokens_as(stub, kBob, "chat"), 0) << "Alice's delete removed Bob's session";
}

TEST(EdgeAuthTest, OwnershipSurvivesARestartAndTheFileHoldsNoKey) {
  const std::string dir = testing::make_temp_dir("edge-auth-sessions");
  EdgeServiceOptions options = keyed_options();
  options.sessions_dir = dir;
  {
    std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), options);
    ASSERT_TRUE(
        generate_as(*edge->stub, kAlice, greedy_request(prompt(9, 5), "kept", v1::SPLIT_POLICY_LOCAL, 3)).status.ok());
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(bytes.find(kAlice), std::string::npos) << entry.path() << " holds the key";
  }
  std::unique_ptr<Edge> restarted = start_edge(edge_model_path("tiny"), options);
  EXPECT_EQ(tokens_as(*restarted->stub, kAlice, "kept"), 9 + 3 - 1);
  EXPECT_EQ(tokens_as(*restarted->stub, kBob, "kept"), -1);
  EXPECT_EQ(delete_as(*restarted->stub, kBob, "kept").error_code(), grpc::StatusCode::NOT_FOUND);
  restarted.reset();
  std::filesystem::remove_all(dir);
}

TEST(EdgeAuthTest, WithoutKeysEveryCallIsOpenAndIdsAreKeptAsGiven) {
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), edge_options(""));
  ASSERT_TRUE(generate_as(*edge->stub, "", greedy_request(prompt(6, 6), "open", v1::SPLIT_POLICY_LOCAL, 2)).status.ok());
  EXPECT_EQ(tokens_as(*edge->stub, "", "open"), 6 + 2 - 1);
  EXPECT_TRUE(delete_as(*edge->stub, "", "open").ok());
}

// ---------------------------------------------------------------------------
// TLS and HTTP
// ---------------------------------------------------------------------------

const testing::TestCertificate& certs() { return testing::test_pki().server; }

std::string read_text(const std::string& path) { return testing::read_text_file(path); }

// A keyed agent whose gRPC listener speaks TLS, with the HTTP API (HTTPS when
// `https`) relaying over the loopback relay port.
struct SecureAgent {
  std::unique_ptr<EdgeService> service;
  std::unique_ptr<EdgeServer> server;
  std::unique_ptr<HttpFrontEnd> http;
  ~SecureAgent() {
    if (http) http->Stop();
    if (server) server->Shutdown();
    server.reset();
    service.reset();
  }
};

std::unique_ptr<SecureAgent> start_secure_agent(bool tls, bool https) {
  auto agent = std::make_unique<SecureAgent>();
  agent->service = std::make_unique<EdgeService>(keyed_options());
  EdgeServerOptions server_options;
  if (tls) server_options.tls = {certs().cert, certs().key, ""};
  server_options.loopback_relay_port = true;
  auto server = EdgeServer::Start("127.0.0.1:0", *agent->service, server_options);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return agent;
  agent->server = std::move(*server);
  HttpFrontEndOptions http;
  http.grpc_target = "127.0.0.1:" + std::to_string(agent->server->relay_port());
  http.api_keys = agent->service == nullptr ? nullptr : two_keys();
  if (https) {
    http.tls_cert_path = certs().cert;
    http.tls_key_path = certs().key;
  }
  auto front = HttpFrontEnd::Start(http);
  EXPECT_TRUE(front.ok()) << front.status();
  if (front.ok()) agent->http = std::move(*front);
  absl::Status loaded = agent->service->Load(edge_model_path("tiny"));
  EXPECT_TRUE(loaded.ok()) << loaded;
  return agent;
}

TEST(EdgeAuthTlsTest, TheGrpcListenerSpeaksTlsAndRefusesPlaintext) {
  if (!testing::have_openssl()) GTEST_SKIP() << "no openssl to make a test certificate";
  auto agent = start_secure_agent(/*tls=*/true, /*https=*/false);
  ASSERT_NE(agent->server, nullptr);
  const std::string address = "127.0.0.1:" + std::to_string(agent->server->port());
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = read_text(certs().cert);
  auto tls_stub = v1::Edge::NewStub(grpc::CreateChannel(address, grpc::SslCredentials(ssl)));
  EXPECT_EQ(health(*tls_stub).state(), v1::SERVING_STATE_READY);
  EXPECT_TRUE(generate_as(*tls_stub, kAlice, greedy_request(prompt(6, 7), "t", v1::SPLIT_POLICY_LOCAL, 2)).status.ok());
  EXPECT_EQ(tokens_as(*tls_stub, kAlice, "t"), 6 + 2 - 1);

  auto plain_stub = v1::Edge::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(deadline_in(3));
  v1::EdgeHealthResponse response;
  EXPECT_EQ(plain_stub->Health(&context, v1::HealthRequest(), &response).error_code(), grpc::StatusCode::UNAVAILABLE);
}

struct HttpReply {
  int status = 0;
  Json body;
};

HttpReply post(httplib::Client& client, const std::string& key, const std::string& body) {
  httplib::Headers headers;
  if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
  httplib::Result result = client.Post("/v1/completions", headers, body, "application/json");
  HttpReply reply;
  if (!result) return reply;
  reply.status = result->status;
  reply.body = Json::parse(result->body, nullptr, false);
  return reply;
}

TEST(EdgeAuthHttpTest, HttpNeedsAKeyAndRelaysItSoSessionsStayTheirOwners) {
  auto agent = start_secure_agent(/*tls=*/false, /*https=*/false);
  ASSERT_NE(agent->http, nullptr);
  httplib::Client client("127.0.0.1", agent->http->port());
  client.set_read_timeout(std::chrono::seconds(60));
  const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 3, "temperature": 0,
                               "baton": {"policy": "local", "session": "web"}})";
  for (const std::string& key : {std::string(), std::string("wrong-key-0123456789")}) {
    const HttpReply refused = post(client, key, body);
    EXPECT_EQ(refused.status, 401) << refused.body;
    EXPECT_EQ(refused.body["error"]["type"], "invalid_request_error") << refused.body;
    EXPECT_EQ(refused.body["error"]["code"], "invalid_api_key") << refused.body;
  }
  EXPECT_EQ(client.Get("/v1/models")->status, 401);
  EXPECT_EQ(client.Get("/health")->status, 200) << "/health stays open for probes";

  const HttpReply alice = post(client, kAlice, body);
  ASSERT_EQ(alice.status, 200) << alice.body;
  auto stub = v1::Edge::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(agent->server->relay_port()), grpc::InsecureChannelCredentials()));
  const int64_t alice_tokens = tokens_as(*stub, kAlice, "web");
  EXPECT_GT(alice_tokens, 0) << "the relay did not carry Alice's key";
  EXPECT_EQ(tokens_as(*stub, kBob, "web"), -1);
  const HttpReply bob = post(client, kBob, body);
  ASSERT_EQ(bob.status, 200) << bob.body;
  EXPECT_EQ(tokens_as(*stub, kAlice, "web"), alice_tokens) << "Bob's HTTP turn continued Alice's session";
  EXPECT_EQ(tokens_as(*stub, kBob, "web"), alice_tokens) << "Bob's first turn is as long as Alice's first";
}

TEST(EdgeAuthHttpTest, HttpsServesWithTheCertificate) {
  if (!testing::have_openssl()) GTEST_SKIP() << "no openssl to make a test certificate";
  auto agent = start_secure_agent(/*tls=*/true, /*https=*/true);
  ASSERT_NE(agent->http, nullptr);
  httplib::SSLClient client("127.0.0.1", agent->http->port());
  client.set_ca_cert_path(certs().cert.c_str());
  client.enable_server_certificate_verification(true);
  httplib::Result health_reply = client.Get("/health");
  ASSERT_TRUE(health_reply) << httplib::to_string(health_reply.error());
  EXPECT_EQ(health_reply->status, 200);
  httplib::Headers headers{{"Authorization", std::string("Bearer ") + kAlice}};
  httplib::Result answer = client.Post(
      "/v1/completions", headers, R"({"prompt": "Once", "max_tokens": 2, "baton": {"policy": "local"}})",
      "application/json");
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 200) << answer->body;
  httplib::Client plain("127.0.0.1", agent->http->port());
  plain.set_read_timeout(std::chrono::seconds(5));
  httplib::Result plain_reply = plain.Get("/health");
  EXPECT_TRUE(!plain_reply || plain_reply->status != 200) << "plain HTTP answered on the HTTPS port";
}

TEST(EdgeHttpCapsTest, ABodyOverTheCapIs413NamingItsSizeAndTheLimit) {
  auto agent = start_secure_agent(/*tls=*/false, /*https=*/false);
  ASSERT_NE(agent->http, nullptr);
  httplib::Client client("127.0.0.1", agent->http->port());
  client.set_read_timeout(std::chrono::seconds(60));
  const size_t limit = size_t{8} << 20;
  const std::string body = R"({"prompt": ")" + std::string(limit, 'a') + R"("})";
  const HttpReply reply = post(client, kAlice, body);
  EXPECT_EQ(reply.status, 413);
  ASSERT_TRUE(reply.body.contains("error")) << reply.body;
  EXPECT_EQ(reply.body["error"]["type"], "invalid_request_error");
  const std::string message = reply.body["error"]["message"];
  EXPECT_NE(message.find(std::to_string(body.size())), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(limit)), std::string::npos) << message;
}

TEST(EdgeHttpCapsTest, APromptUnderTheBodyCapButOverGrpcsDefaultIsNotRateLimited) {
  auto agent = start_secure_agent(/*tls=*/false, /*https=*/false);
  ASSERT_NE(agent->http, nullptr);
  httplib::Client client("127.0.0.1", agent->http->port());
  client.set_read_timeout(std::chrono::seconds(120));
  // 7.5 MB of text: under the 8 MiB body cap, over gRPC's default 4 MiB.
  std::string words;
  while (words.size() < 7'500'000) words += "and ";
  const HttpReply reply =
      post(client, kAlice, R"({"prompt": ")" + words + R"(", "max_tokens": 1, "baton": {"policy": "local"}})");
  EXPECT_NE(reply.status, 429) << "an OpenAI client retries 429 forever: " << reply.body.dump().substr(0, 300);
  // Past the model's trained context: 400 (as OpenAI answers a prompt over
  // the context length), naming that limit.
  EXPECT_EQ(reply.status, 400) << reply.body.dump().substr(0, 300);
  EXPECT_EQ(reply.body["error"]["type"], "invalid_request_error");
  EXPECT_NE(reply.body.dump().find("trained context"), std::string::npos) << reply.body.dump().substr(0, 300);
}

}  // namespace
}  // namespace baton::edge_test
