// OpenAI compatibility as real clients use it, over real HTTP against the
// real EdgeService (edge_decode/http/http_front_end.h, openai_api.h,
// generate_turn.cc). What must hold:
// - any `model` name is served by the loaded model and answers name it;
//   /v1/models lists the id and its aliases;
// - logprobs come from the model: the greedy token is the most likely one,
//   its logprob equals the first alternative's, alternatives are sorted, and
//   a stream carries the same figures as one JSON answer;
// - frequency/presence penalties reach the sampler (a strong presence
//   penalty forbids repeats in a greedy answer), out of range is 400;
// - a field Baton cannot honour is 400 naming it and generates nothing;
// - CORS: preflight and responses carry Access-Control-Allow-Origin for the
//   configured origins only; no --cors-origin: no CORS headers; '*' needs
//   API keys.
#include <httplib.h>

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/rpc/api_keys.h"
#include "edge_decode/http/http_front_end.h"
#include "tests/support/edge_test_env.h"

namespace baton {
namespace {

using Json = nlohmann::json;

using Agent = edge_test::Edge;

// A loaded agent with the HTTP front end; `options` adds aliases, CORS, keys.
std::unique_ptr<Agent> start_agent(HttpFrontEndOptions options = {}) {
  auto agent = std::make_unique<Agent>();
  edge_test::start_edge_in(*agent, edge_test::edge_model_path("tiny"), edge_test::edge_options(""), options);
  return agent;
}

httplib::Client client_for(const Agent& agent) {
  httplib::Client client("127.0.0.1", agent.http->port());
  client.set_read_timeout(std::chrono::seconds(60));
  return client;
}

Json post_json(const Agent& agent, const std::string& path, const std::string& body, int expected_status = 200) {
  httplib::Client client = client_for(agent);
  httplib::Result result = client.Post(path.c_str(), body, "application/json");
  EXPECT_TRUE(result) << "no answer for " << body;
  if (!result) return Json();
  EXPECT_EQ(result->status, expected_status) << result->body;
  return Json::parse(result->body, nullptr, false);
}

// The JSON events of an SSE stream, [DONE] excluded.
std::vector<Json> post_stream(const Agent& agent, const std::string& path, const std::string& body) {
  httplib::Client client = client_for(agent);
  httplib::Result result = client.Post(path.c_str(), body, "application/json");
  std::vector<Json> events;
  EXPECT_TRUE(result && result->status == 200) << (result ? result->body : "no answer");
  if (!result) return events;
  size_t start = 0;
  const std::string& stream = result->body;
  while (start < stream.size()) {
    size_t end = stream.find("\n\n", start);
    if (end == std::string::npos) end = stream.size();
    const std::string event = stream.substr(start, end - start);
    if (event.rfind("data: ", 0) == 0 && event != "data: [DONE]") events.push_back(Json::parse(event.substr(6)));
    start = end + 2;
  }
  return events;
}

constexpr char kGreedyChat[] =
    R"({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "In the beginning"}],
        "temperature": 0, "max_tokens": 8, "baton": {"policy": "local"}})";

std::string with(const std::string& body, const std::string& extra) {
  return body.substr(0, body.rfind('}')) + ", " + extra + "}";
}

TEST(OpenAiCompatHttpTest, AnyModelNameIsServedByTheLoadedModelAndAliasesAreListed) {
  HttpFrontEndOptions options;
  options.model_name = "baton-tiny";
  options.model_aliases = {"gpt-4o-mini", "llama"};
  auto agent = start_agent(options);
  for (const char* name : {"gpt-4o-mini", "llama", "no-such-model", "baton-tiny"}) {
    const Json answer = post_json(*agent, "/v1/chat/completions",
                                  with(R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})",
                                       absl::StrCat("\"model\": \"", name, "\"")));
    EXPECT_EQ(answer["model"], "baton-tiny") << name << ": " << answer.dump();
  }
  httplib::Client client = client_for(*agent);
  httplib::Result list = client.Get("/v1/models");
  ASSERT_TRUE(list);
  const Json models = Json::parse(list->body);
  ASSERT_EQ(models["data"].size(), 3u) << list->body;
  EXPECT_EQ(models["data"][0]["id"], "baton-tiny");
  EXPECT_EQ(models["data"][1]["id"], "gpt-4o-mini");
  EXPECT_EQ(models["data"][2]["id"], "llama");
  httplib::Result alias = client.Get("/v1/models/llama");
  ASSERT_TRUE(alias);
  EXPECT_EQ(alias->status, 200);
  EXPECT_EQ(Json::parse(alias->body)["id"], "llama");
  httplib::Result unknown = client.Get("/v1/models/gpt-5");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
}

// Checks one chat logprobs entry: greedy picks the most likely token.
void expect_greedy_entry(const Json& entry, size_t top_n) {
  ASSERT_EQ(entry["top_logprobs"].size(), top_n) << entry.dump();
  EXPECT_LE(entry["logprob"].get<double>(), 0.0);
  EXPECT_EQ(entry["token"], entry["top_logprobs"][0]["token"]) << entry.dump();
  EXPECT_DOUBLE_EQ(entry["logprob"].get<double>(), entry["top_logprobs"][0]["logprob"].get<double>());
  for (size_t i = 1; i < top_n; ++i) {
    EXPECT_LE(entry["top_logprobs"][i]["logprob"].get<double>(), entry["top_logprobs"][i - 1]["logprob"].get<double>());
  }
  const std::string token = entry["token"];
  if (token.rfind("bytes:", 0) == 0) return;  // a cut character: "bytes:\\xNN"
  ASSERT_EQ(entry["bytes"].size(), token.size());
  for (size_t i = 0; i < token.size(); ++i) EXPECT_EQ(entry["bytes"][i], static_cast<unsigned char>(token[i]));
}

TEST(OpenAiCompatHttpTest, ChatLogprobsComeFromTheModelStreamedOrNot) {
  auto agent = start_agent();
  const std::string body = with(kGreedyChat, R"("logprobs": true, "top_logprobs": 3)");
  const Json answer = post_json(*agent, "/v1/chat/completions", body);
  const Json& content = answer["choices"][0]["logprobs"]["content"];
  ASSERT_TRUE(content.is_array()) << answer.dump();
  EXPECT_EQ(content.size(), answer["usage"]["completion_tokens"].get<size_t>()) << answer.dump();
  ASSERT_FALSE(content.empty());
  for (const Json& entry : content) expect_greedy_entry(entry, 3);

  const std::vector<Json> events = post_stream(*agent, "/v1/chat/completions", with(body, R"("stream": true)"));
  Json streamed = Json::array();
  for (const Json& event : events) {
    const Json& logprobs = event["choices"][0]["logprobs"];
    if (!logprobs.is_null()) {
      for (const Json& entry : logprobs["content"]) streamed.push_back(entry);
    }
  }
  EXPECT_EQ(streamed, content) << "a stream carries the same logprobs as one answer";

  // Not asked: null, as OpenAI.
  const Json plain = post_json(*agent, "/v1/chat/completions", kGreedyChat);
  EXPECT_TRUE(plain["choices"][0]["logprobs"].is_null());
}

TEST(OpenAiCompatHttpTest, CompletionLogprobsHaveTheLegacyShape) {
  auto agent = start_agent();
  const std::string body =
      R"({"model": "x", "prompt": "In the beginning", "temperature": 0, "max_tokens": 6, "logprobs": 2,
          "baton": {"policy": "local"}})";
  const Json answer = post_json(*agent, "/v1/completions", body);
  const Json& logprobs = answer["choices"][0]["logprobs"];
  const size_t n = answer["usage"]["completion_tokens"];
  ASSERT_GT(n, 0u) << answer.dump();
  ASSERT_EQ(logprobs["tokens"].size(), n) << answer.dump();
  ASSERT_EQ(logprobs["token_logprobs"].size(), n);
  ASSERT_EQ(logprobs["top_logprobs"].size(), n);
  ASSERT_EQ(logprobs["text_offset"].size(), n);
  size_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(logprobs["text_offset"][i], offset);
    // A cut character reads "bytes:\\xNN..." (4 characters a byte).
    const std::string token = logprobs["tokens"][i];
    offset += token.rfind("bytes:", 0) == 0 ? (token.size() - 6) / 4 : token.size();
    EXPECT_LE(logprobs["top_logprobs"][i].size(), 2u);
    // Greedy: the chosen token is among the alternatives with the highest logprob.
    double best = -1e30;
    for (const auto& [key, value] : logprobs["top_logprobs"][i].items()) best = std::max(best, value.get<double>());
    EXPECT_DOUBLE_EQ(logprobs["token_logprobs"][i].get<double>(), best) << logprobs.dump();
  }
  // The streamed chunks continue text_offset across chunks.
  std::vector<size_t> offsets;
  for (const Json& event : post_stream(*agent, "/v1/completions", with(body, R"("stream": true)"))) {
    const Json& chunk_logprobs = event["choices"][0]["logprobs"];
    if (chunk_logprobs.is_null()) continue;
    for (const Json& value : chunk_logprobs["text_offset"]) offsets.push_back(value);
  }
  EXPECT_EQ(Json(offsets), logprobs["text_offset"]);
}

TEST(OpenAiCompatHttpTest, PresencePenaltyReachesTheSampler) {
  auto agent = start_agent();
  const std::string body =
      R"({"prompt": "In the beginning", "temperature": 0, "max_tokens": 12, "logprobs": 0,
          "baton": {"policy": "local"}})";
  auto token_counts = [&](const std::string& request) {
    std::map<std::string, int> counts;
    const Json answer = post_json(*agent, "/v1/completions", request);
    for (const Json& token : answer["choices"][0]["logprobs"]["tokens"]) ++counts[token.get<std::string>()];
    return counts;
  };
  auto max_count = [](const std::map<std::string, int>& counts) {
    int most = 0;
    for (const auto& [token, count] : counts) most = std::max(most, count);
    return most;
  };
  // The tiny synthetic model repeats itself when greedy; a presence penalty
  // of 2 (more than the logit gap between its top tokens) stops the repeats.
  const std::map<std::string, int> plain = token_counts(body);
  ASSERT_GT(max_count(plain), 1) << "the greedy answer has no repeat to penalize";
  const std::map<std::string, int> penalized = token_counts(with(body, R"("presence_penalty": 2)"));
  EXPECT_LT(max_count(penalized), max_count(plain));
  // Out of range: 400 naming the field.
  const Json error = post_json(*agent, "/v1/completions", with(body, R"("frequency_penalty": 2.5)"), 400);
  EXPECT_NE(error["error"]["message"].get<std::string>().find("frequency_penalty"), std::string::npos);
}

TEST(OpenAiCompatHttpTest, UnsupportedFieldIs400NamingItAndGeneratesNothing) {
  auto agent = start_agent();
  const Json error = post_json(
      *agent, "/v1/chat/completions",
      with(kGreedyChat, R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}])"),
      400);
  EXPECT_EQ(error["error"]["param"], "tools") << error.dump();
  EXPECT_EQ(error["error"]["code"], "unsupported_parameter");
  EXPECT_EQ(error["error"]["type"], "invalid_request_error");
}

struct Reply {
  int status = 0;
  httplib::Headers headers;
};

Reply call(const Agent& agent, const std::string& method, const std::string& path, const httplib::Headers& headers,
           const std::string& body = "") {
  httplib::Client client = client_for(agent);
  httplib::Result result = method == "OPTIONS" ? client.Options(path.c_str(), headers)
                           : method == "GET"   ? client.Get(path.c_str(), headers)
                                               : client.Post(path.c_str(), headers, body, "application/json");
  Reply reply;
  if (!result) return reply;
  reply.status = result->status;
  reply.headers = result->headers;
  return reply;
}

std::string header(const Reply& reply, const std::string& name) {
  auto it = reply.headers.find(name);
  return it == reply.headers.end() ? "" : it->second;
}

httplib::Headers preflight_from(const std::string& origin) {
  return {{"Origin", origin},
          {"Access-Control-Request-Method", "POST"},
          {"Access-Control-Request-Headers", "authorization, content-type, x-stainless-os"}};
}

TEST(OpenAiCompatHttpTest, CorsAllowsTheConfiguredOriginsOnly) {
  HttpFrontEndOptions options;
  options.cors_origins = {"http://localhost:5173", "https://app.example.com"};
  auto agent = start_agent(options);
  const std::string allowed = "http://localhost:5173";

  const Reply preflight = call(*agent, "OPTIONS", "/v1/chat/completions", preflight_from(allowed));
  EXPECT_EQ(preflight.status, 204);
  EXPECT_EQ(header(preflight, "Access-Control-Allow-Origin"), allowed);
  EXPECT_NE(header(preflight, "Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_NE(header(preflight, "Access-Control-Allow-Headers").find("authorization"), std::string::npos);

  const Reply refused = call(*agent, "OPTIONS", "/v1/chat/completions", preflight_from("https://evil.example"));
  EXPECT_EQ(refused.status, 403);
  EXPECT_EQ(header(refused, "Access-Control-Allow-Origin"), "");

  // Responses: JSON, an event stream and an error carry the header for the allowed origin.
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})";
  for (const std::string& body : {chat, with(chat, R"("stream": true)"), std::string(R"({"messages": []})")}) {
    const Reply ok = call(*agent, "POST", "/v1/chat/completions", {{"Origin", allowed}}, body);
    EXPECT_NE(ok.status, 0) << body;
    EXPECT_EQ(header(ok, "Access-Control-Allow-Origin"), allowed) << body;
    const Reply other = call(*agent, "POST", "/v1/chat/completions", {{"Origin", "https://evil.example"}}, body);
    EXPECT_EQ(header(other, "Access-Control-Allow-Origin"), "") << body;
  }
  EXPECT_EQ(header(call(*agent, "GET", "/v1/models", {{"Origin", "https://app.example.com"}}),
                   "Access-Control-Allow-Origin"),
            "https://app.example.com");
}

TEST(OpenAiCompatHttpTest, NoCorsOriginsNoCorsHeaders) {
  auto agent = start_agent();
  const Reply preflight = call(*agent, "OPTIONS", "/v1/chat/completions", preflight_from("http://localhost:5173"));
  EXPECT_EQ(header(preflight, "Access-Control-Allow-Origin"), "");
  const Reply models = call(*agent, "GET", "/v1/models", {{"Origin", "http://localhost:5173"}});
  EXPECT_EQ(models.status, 200);
  EXPECT_EQ(header(models, "Access-Control-Allow-Origin"), "");
}

TEST(OpenAiCompatHttpTest, AnyOriginNeedsApiKeysAndPreflightNeedsNoKey) {
  HttpFrontEndOptions options;
  options.grpc_target = "127.0.0.1:1";
  options.cors_origins = {"*"};
  absl::StatusOr<std::unique_ptr<HttpFrontEnd>> refused = HttpFrontEnd::Start(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--api-key-file"), std::string::npos) << refused.status();
  options.cors_origins = {"localhost:5173"};
  refused = HttpFrontEnd::Start(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("localhost:5173"), std::string::npos) << refused.status();

  absl::StatusOr<ApiKeySet> keys = ApiKeySet::FromKeys({"test-key-0123456789abcdef"});
  ASSERT_TRUE(keys.ok()) << keys.status();
  HttpFrontEndOptions with_keys;
  with_keys.cors_origins = {"*"};
  with_keys.api_keys = std::make_shared<const ApiKeySet>(std::move(*keys));
  auto agent = start_agent(with_keys);
  const Reply preflight = call(*agent, "OPTIONS", "/v1/models", preflight_from("https://anywhere.example"));
  EXPECT_EQ(preflight.status, 204);
  EXPECT_EQ(header(preflight, "Access-Control-Allow-Origin"), "https://anywhere.example");
  const Reply no_key = call(*agent, "GET", "/v1/models", {{"Origin", "https://anywhere.example"}});
  EXPECT_EQ(no_key.status, 401);
  EXPECT_EQ(header(no_key, "Access-Control-Allow-Origin"), "https://anywhere.example")
      << "the page can read why it was refused";
}

}  // namespace
}  // namespace baton
