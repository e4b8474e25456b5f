// Real-server tests of the chat page baton-edge serves on its --http address
// (edge_decode/http/web_ui.h) and of the two things the page needs from the API:
// the caller's session list, and the turn's figures on the last streamed
// chunk. Real HTTP on 127.0.0.1:0 (httplib's client), relaying over real gRPC
// to a real EdgeService (and PrefillService for the split turn).
//
// What must hold:
// - GET / is the page (text/html) and every page file carries a strict
//   Content-Security-Policy (this origin only, no inline script or style, no
//   framing) and nosniff; the page loads nothing from another origin, and
//   needs no API key even when the agent has keys;
// - GET /v1/baton/sessions and DELETE /v1/baton/sessions/{id} need a key when
//   keys are configured (401 in OpenAI's shape) and see only the caller's
//   sessions: another key's session is neither listed nor deletable;
// - a streamed chat answer ends with a chunk that carries finish_reason and
//   Baton's figures under "baton" (without stream_options.include_usage):
//   for a split turn the cloud's prefill time and the KV bytes.
// The browser test of the page itself is tests/e2e/web_ui_test.sh.
#include <httplib.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/rpc/api_keys.h"
#include "edge_decode/http/http_front_end.h"
#include "edge_decode/http/web_ui.h"
#include "tests/support/edge_test_env.h"

namespace baton::edge_test {
namespace {

using Json = nlohmann::json;

constexpr char kAlice[] = "alice-web-key-0123456789";
constexpr char kBob[] = "bob-web-key-0123456789ab";

std::shared_ptr<const ApiKeySet> two_keys() {
  absl::StatusOr<ApiKeySet> keys = ApiKeySet::FromKeys({kAlice, kBob});
  EXPECT_TRUE(keys.ok()) << keys.status();
  return std::make_shared<const ApiKeySet>(*keys);
}

// An agent (with `keys`, or none) and its HTTP front end; with `cloud` set,
// the agent's cloud.
struct WebAgent {
  std::unique_ptr<Cloud> cloud;
  std::unique_ptr<Edge> edge;
  std::unique_ptr<HttpFrontEnd> http;
  ~WebAgent() {
    if (http) http->Stop();
    if (edge) edge->stop();
  }
};

std::unique_ptr<WebAgent> start_web_agent(std::shared_ptr<const ApiKeySet> keys, bool with_cloud) {
  auto agent = std::make_unique<WebAgent>();
  if (with_cloud) agent->cloud = start_cloud(edge_model_path("tiny"));
  EdgeServiceOptions options = edge_options(with_cloud && agent->cloud->server ? agent->cloud->address() : "");
  options.api_keys = keys;
  agent->edge = start_edge(edge_model_path("tiny"), options);
  if (agent->edge->server == nullptr) return agent;
  HttpFrontEndOptions http;
  http.grpc_target = "127.0.0.1:" + std::to_string(agent->edge->server->port());
  http.model_path = edge_model_path("tiny");
  http.api_keys = keys;
  absl::StatusOr<std::unique_ptr<HttpFrontEnd>> front = HttpFrontEnd::Start(http);
  EXPECT_TRUE(front.ok()) << front.status();
  if (front.ok()) agent->http = std::move(*front);
  return agent;
}

httplib::Headers bearer(const std::string& key) {
  httplib::Headers headers;
  if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
  return headers;
}

std::unique_ptr<httplib::Client> client_for(const HttpFrontEnd& http) {
  auto client = std::make_unique<httplib::Client>("127.0.0.1", http.port());
  client->set_read_timeout(std::chrono::seconds(60));
  client->set_connection_timeout(std::chrono::seconds(5));
  return client;
}

Json parse(const std::string& body) { return Json::parse(body, nullptr, /*allow_exceptions=*/false); }

// The session ids `key` sees on GET /v1/baton/sessions (the test fails on
// anything but 200).
std::set<std::string> listed_sessions(httplib::Client& client, const std::string& key) {
  std::set<std::string> ids;
  httplib::Result result = client.Get("/v1/baton/sessions", bearer(key));
  EXPECT_TRUE(result) << "no answer";
  if (!result) return ids;
  EXPECT_EQ(result->status, 200) << result->body;
  EXPECT_EQ(result->get_header_value("Content-Type"), "application/json");
  const Json body = parse(result->body);
  const bool listed = body.is_object() && body.contains("data") && body["data"].is_array();
  EXPECT_TRUE(listed && body["object"] == "list") << result->body;
  if (!listed) return {"(no list)"};
  for (const Json& session : body["data"]) {
    ids.insert(session["id"].get<std::string>());
    EXPECT_GT(session["token_count"].get<int64_t>(), 0) << session;
    EXPECT_GT(session["kv_bytes"].get<int64_t>(), 0) << session;
    EXPECT_TRUE(session["codec"].is_string()) << session;
  }
  return ids;
}

int chat_turn(httplib::Client& client, const std::string& key, const std::string& session) {
  const Json body = {{"messages", Json::array({{{"role", "user"}, {"content", "Once upon a time"}}})},
                     {"max_tokens", 2},
                     {"temperature", 0},
                     {"baton", {{"session", session}, {"policy", "local"}}}};
  httplib::Result result = client.Post("/v1/chat/completions", bearer(key), body.dump(), "application/json");
  return result ? result->status : 0;
}

TEST(WebUiTest, TheRootServesThePageWithAStrictContentSecurityPolicy) {
  // Keys configured: the page itself still loads without one (it asks for it).
  auto agent = start_web_agent(two_keys(), /*with_cloud=*/false);
  ASSERT_NE(agent->http, nullptr);
  auto client = client_for(*agent->http);
  const std::vector<std::pair<std::string, std::string>> files = {
      {"/", "text/html; charset=utf-8"},
      {"/app.js", "text/javascript; charset=utf-8"},
      {"/app.css", "text/css; charset=utf-8"}};
  ASSERT_EQ(web_ui_assets().size(), files.size());
  for (const auto& [path, type] : files) {
    SCOPED_TRACE(path);
    httplib::Result result = client->Get(path);
    ASSERT_TRUE(result);
    EXPECT_EQ(result->status, 200) << result->body.substr(0, 200);
    EXPECT_EQ(result->get_header_value("Content-Type"), type);
    const std::string csp = result->get_header_value("Content-Security-Policy");
    EXPECT_EQ(csp, kWebUiContentSecurityPolicy);
    for (const char* directive : {"default-src 'none'", "script-src 'self'", "style-src 'self'",
                                  "connect-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"}) {
      EXPECT_NE(csp.find(directive), std::string::npos) << "CSP lacks " << directive << ": " << csp;
    }
    EXPECT_EQ(csp.find("unsafe"), std::string::npos) << csp;
    EXPECT_EQ(result->get_header_value("X-Content-Type-Options"), "nosniff");
    EXPECT_GT(result->body.size(), 500u);
    // Nothing from another origin: the only "://" is the SVG namespace name.
    size_t at = 0;
    while ((at = result->body.find("://", at)) != std::string::npos) {
      EXPECT_EQ(result->body.compare(at - 4, 26, "http://www.w3.org/2000/svg"), 0)
          << "an external URL: " << result->body.substr(at - 10, 60);
      at += 3;
    }
  }
  const std::string page = client->Get("/")->body;
  EXPECT_NE(page.find("<title>Baton chat</title>"), std::string::npos);
  EXPECT_NE(page.find(R"(<script src="/app.js" defer></script>)"), std::string::npos);
  EXPECT_EQ(page.find("<script>"), std::string::npos) << "an inline script (the CSP would block it)";
  EXPECT_EQ(page.find("style="), std::string::npos) << "an inline style (the CSP would block it)";
  const std::string script = client->Get("/app.js")->body;
  for (const char* uses : {"/v1/chat/completions", "/v1/baton/sessions", "getReader()", "Authorization"}) {
    EXPECT_NE(script.find(uses), std::string::npos) << "app.js does not use " << uses;
  }
  EXPECT_EQ(client->Get("/app.jsx")->status, 404);
  EXPECT_EQ(client->Get("/appxjs")->status, 404) << "a route pattern matched '.' as any character";
}

TEST(WebUiSessionsTest, RefusesWithoutAKeyAndListsOnlyTheCallersSessions) {
  auto agent = start_web_agent(two_keys(), /*with_cloud=*/false);
  ASSERT_NE(agent->http, nullptr);
  auto client = client_for(*agent->http);
  for (const std::string& key : {std::string(), std::string("wrong-key-0123456789")}) {
    SCOPED_TRACE("key '" + key + "'");
    httplib::Result refused = client->Get("/v1/baton/sessions", bearer(key));
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 401) << refused->body;
    EXPECT_NE(refused->body.find(R"("code":"invalid_api_key")"), std::string::npos) << refused->body;
    refused = client->Delete("/v1/baton/sessions/web-a", bearer(key));
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 401) << refused->body;
  }
  EXPECT_TRUE(listed_sessions(*client, kAlice).empty());
  ASSERT_EQ(chat_turn(*client, kAlice, "web-a"), 200);
  ASSERT_EQ(chat_turn(*client, kAlice, "web-a2"), 200);
  ASSERT_EQ(chat_turn(*client, kBob, "web-b"), 200);
  EXPECT_EQ(listed_sessions(*client, kAlice), (std::set<std::string>{"web-a", "web-a2"}));
  EXPECT_EQ(listed_sessions(*client, kBob), (std::set<std::string>{"web-b"}));

  // Bob cannot delete Alice's session: to him it does not exist.
  httplib::Result deleted = client->Delete("/v1/baton/sessions/web-a", bearer(kBob));
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted->status, 404) << deleted->body;
  EXPECT_EQ(listed_sessions(*client, kAlice), (std::set<std::string>{"web-a", "web-a2"}));
  deleted = client->Delete("/v1/baton/sessions/web-a", bearer(kAlice));
  ASSERT_TRUE(deleted);
  ASSERT_EQ(deleted->status, 200) << deleted->body;
  const Json answer = parse(deleted->body);
  EXPECT_EQ(answer["id"], "web-a");
  EXPECT_EQ(answer["deleted"], true);
  EXPECT_GT(answer["freed_bytes"].get<int64_t>(), 0) << deleted->body;
  EXPECT_EQ(listed_sessions(*client, kAlice), (std::set<std::string>{"web-a2"}));
  EXPECT_EQ(listed_sessions(*client, kBob), (std::set<std::string>{"web-b"}));
}

TEST(WebUiStreamTest, TheLastStreamedChunkCarriesTheStatsOfASplitTurn) {
  auto agent = start_web_agent(nullptr, /*with_cloud=*/true);
  ASSERT_NE(agent->http, nullptr);
  wait_for_cloud(*agent->edge->stub);
  auto client = client_for(*agent->http);
  // As the page asks: no stream_options.include_usage.
  const Json body = {{"messages", Json::array({{{"role", "user"}, {"content", "In the beginning was the word"}}})},
                     {"max_tokens", 4},
                     {"temperature", 0},
                     {"stream", true},
                     {"baton", {{"session", "web-split"}, {"policy", "cloud"}}}};
  httplib::Result result = client->Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  std::vector<Json> chunks;
  size_t start = 0;
  for (size_t end; (end = result->body.find("\n\n", start)) != std::string::npos; start = end + 2) {
    const std::string event = result->body.substr(start, end - start);
    ASSERT_EQ(event.rfind("data: ", 0), 0u) << event;
    if (event != "data: [DONE]") chunks.push_back(parse(event.substr(6)));
  }
  ASSERT_GE(chunks.size(), 2u) << result->body;
  const Json& last = chunks.back();
  ASSERT_FALSE(last["choices"][0]["finish_reason"].is_null()) << last;
  ASSERT_TRUE(last.contains("baton")) << "the last chunk has no stats: " << last;
  const Json& stats = last["baton"];
  EXPECT_EQ(stats["prefill"], "cloud") << stats;
  EXPECT_EQ(stats["session"], "web-split") << stats;
  EXPECT_GT(stats["cloud_prefill_ms"].get<double>(), 0.0) << stats;
  EXPECT_GT(stats["ttft_ms"].get<double>(), 0.0) << stats;
  for (const char* part : {"transfer_ms", "ingest_ms", "local_ms"}) {
    EXPECT_GE(stats[part].get<double>(), 0.0) << part << " in " << stats;
  }
  EXPECT_GT(stats["kv_wire_bytes"].get<int64_t>(), 0) << stats;
  EXPECT_GT(stats["kv_quantized_bytes"].get<int64_t>(), 0) << stats;
  EXPECT_GE(stats["kv_raw_bytes"].get<int64_t>(), stats["kv_quantized_bytes"].get<int64_t>()) << stats;
  EXPECT_FALSE(stats["plan_reason"].get<std::string>().empty()) << stats;
}

}  // namespace
}  // namespace baton::edge_test
