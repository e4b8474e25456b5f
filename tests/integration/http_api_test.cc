// Real-server tests of the OpenAI-compatible HTTP front end
// (edge_decode/http/http_front_end.h) and the cloud's metrics listener
// (common/util/metrics_http.h): real HTTP on 127.0.0.1:0, spoken by
// httplib's client and by curl (Debian's), relaying over real gRPC.
//
// What must hold:
// - against a scripted fake Edge service: requests map to the GenerateRequest
//   the gRPC path takes (chat prompts in the model's template; a known
//   session gets only the new messages), answers and SSE streams have
//   OpenAI's shape, every error has its HTTP code and OpenAI body (400, 401,
//   404, 413, 429, 503 + Retry-After, 500), a client that goes away cancels
//   its Generate, and what was relayed is counted in the registry the agent's
//   own --metrics listener serves (not the API's address);
// - against the real EdgeService: the same text and token counts as gRPC
//   Generate for the same prompt and seed, streaming or not; 503 with
//   Retry-After while the agent loads; a chat session continues over turns;
// - the cloud serves PrefillMetrics on GET /metrics.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "cloud_prefill/prefill_metrics.h"
#include "cloud_prefill/prefill_service.h"
#include "common/gguf/gguf_file.h"
#include "common/model/model_quantize.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/listen_address.h"
#include "common/util/metrics.h"
#include "common/util/metrics_http.h"
#include "edge_decode/edge_metrics.h"
#include "edge_decode/edge_server.h"
#include "edge_decode/edge_service.h"
#include "edge_decode/http/http_front_end.h"
#include "proto/baton.grpc.pb.h"
#include "tests/support/edge_test_env.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

using Json = nlohmann::json;

// ---------------------------------------------------------------------------
// HTTP clients
// ---------------------------------------------------------------------------

struct HttpReply {
  int status = 0;  // 0: no answer
  std::string body;
  std::string content_type;
  std::string retry_after;
};

HttpReply http_call(int port, const std::string& method, const std::string& path, const std::string& body = "",
                    const httplib::Headers& headers = {}) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(std::chrono::seconds(60));
  client.set_connection_timeout(std::chrono::seconds(5));
  httplib::Result result = method == "GET" ? client.Get(path.c_str(), headers)
                                           : client.Post(path.c_str(), headers, body, "application/json");
  HttpReply reply;
  if (!result) return reply;
  reply.status = result->status;
  reply.body = result->body;
  reply.content_type = result->get_header_value("Content-Type");
  reply.retry_after = result->get_header_value("Retry-After");
  return reply;
}

HttpReply post(int port, const std::string& path, const std::string& body, const httplib::Headers& headers = {}) {
  return http_call(port, "POST", path, body, headers);
}

HttpReply get(int port, const std::string& path) { return http_call(port, "GET", path); }

// stdout of a shell command.
std::string run_command(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  pclose(pipe);
  return out;
}

// POSTs `body` with curl -sN (no buffering: an SSE client) and returns what it printed.
std::string curl_post(int port, const std::string& path, const std::string& body, const std::string& extra = "") {
  const std::string dir = testing::make_temp_dir("http-curl");
  const std::string file = dir + "/body.json";
  std::ofstream(file) << body;
  return run_command("curl -sN " + extra + " -X POST -H 'Content-Type: application/json' --data-binary @" + file +
                     " http://127.0.0.1:" + std::to_string(port) + path);
}

// Server-sent events: the data of each "data: ..." event, in order.
std::vector<std::string> sse_data(const std::string& stream) {
  std::vector<std::string> events;
  size_t start = 0;
  while (start < stream.size()) {
    size_t end = stream.find("\n\n", start);
    if (end == std::string::npos) end = stream.size();
    const std::string event = stream.substr(start, end - start);
    if (event.rfind("data: ", 0) == 0) events.push_back(event.substr(6));
    start = end + 2;
  }
  return events;
}

// Text of a streamed answer (completion text or chat deltas), its
// finish_reason, the usage chunk and any error event; checks the stream ends
// with [DONE] and every event is JSON.
struct StreamedAnswer {
  std::string text;
  std::string finish_reason;
  Json usage;
  Json error;
  bool done = false;
  int chunks = 0;
  bool first_chunk_has_role = false;
};

StreamedAnswer parse_stream(const std::string& stream) {
  StreamedAnswer answer;
  const std::vector<std::string> events = sse_data(stream);
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i] == "[DONE]") {
      answer.done = true;
      EXPECT_EQ(i + 1, events.size()) << "events after [DONE]";
      break;
    }
    const Json chunk = Json::parse(events[i], nullptr, false);
    EXPECT_FALSE(chunk.is_discarded()) << events[i];
    if (chunk.is_discarded()) continue;
    if (chunk.contains("error")) {
      answer.error = chunk["error"];
      continue;
    }
    if (chunk.contains("usage")) answer.usage = chunk["usage"];
    if (chunk["choices"].empty()) continue;
    const Json& choice = chunk["choices"][0];
    if (answer.chunks++ == 0) answer.first_chunk_has_role = choice.contains("delta") && choice["delta"].contains("role");
    if (choice.contains("text")) answer.text += choice["text"].get<std::string>();
    if (choice.contains("delta") && choice["delta"].contains("content")) {
      answer.text += choice["delta"]["content"].get<std::string>();
    }
    if (!choice["finish_reason"].is_null()) answer.finish_reason = choice["finish_reason"];
  }
  return answer;
}

// ---------------------------------------------------------------------------
// A scripted Edge service (sync API: test code)
// ---------------------------------------------------------------------------

class FakeEdge final : public v1::Edge::Service {
 public:
  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override {
    std::unique_lock<std::mutex> lock(mu);
    requests.push_back(*request);
    const grpc::Status fail = error;
    const std::string retry = retry_after_ms;
    const std::vector<std::string> to_send = pieces;
    const bool fail_after_text = error_after_text;
    const bool forever = slow;
    lock.unlock();
    if (!fail.ok() && !fail_after_text) {
      if (!retry.empty()) context->AddTrailingMetadata("baton-retry-after-ms", retry);
      return fail;
    }
    for (const std::string& piece : to_send) {
      v1::GenerateResponse response;
      response.mutable_text()->set_text(piece);
      response.mutable_text()->add_token_ids(7);
      writer->Write(response);
    }
    if (forever) {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!context->IsCancelled() && std::chrono::steady_clock::now() < give_up) {
        v1::GenerateResponse response;
        response.mutable_text()->set_text(".");
        writer->Write(response);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      saw_cancel = context->IsCancelled();
      return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    }
    if (fail_after_text) return fail;
    v1::GenerateResponse response;
    v1::Stats* stats = response.mutable_stats();
    stats->set_prompt_tokens(request->has_tokens() ? request->tokens().ids_size() : 3);
    stats->set_generated_tokens(static_cast<uint32_t>(to_send.size()));
    stats->set_ttft_ms(12);
    stats->set_decode_tokens_per_s(40);
    stats->set_finish_reason(v1::FINISH_REASON_LENGTH);
    stats->mutable_plan()->set_place(v1::PREFILL_PLACE_LOCAL);
    writer->Write(response);
    return grpc::Status::OK;
  }

  grpc::Status Health(grpc::ServerContext*, const v1::HealthRequest*, v1::EdgeHealthResponse* response) override {
    std::lock_guard<std::mutex> lock(mu);
    response->set_state(state);
    if (state != v1::SERVING_STATE_READY) response->set_retry_after_ms(1500);
    response->mutable_memory()->set_kv_used_bytes(4242);
    return grpc::Status::OK;
  }

  grpc::Status ListSessions(grpc::ServerContext*, const v1::ListSessionsRequest*,
                            v1::ListSessionsResponse* response) override {
    std::lock_guard<std::mutex> lock(mu);
    for (const std::string& id : sessions) response->add_sessions()->set_session_id(id);
    return grpc::Status::OK;
  }

  v1::GenerateRequest last_request() {
    std::lock_guard<std::mutex> lock(mu);
    return requests.empty() ? v1::GenerateRequest() : requests.back();
  }
  void fail_with(grpc::Status status, std::string retry = "", bool after_text = false) {
    std::lock_guard<std::mutex> lock(mu);
    error = std::move(status);
    retry_after_ms = std::move(retry);
    error_after_text = after_text;
  }
  // Under mu, as Generate reads it: the test thread sets it while the
  // server runs (the HTTP request that follows orders them only through
  // sockets, which ThreadSanitizer does not see).
  void set_slow() {
    std::lock_guard<std::mutex> lock(mu);
    slow = true;
  }

  std::mutex mu;
  std::vector<v1::GenerateRequest> requests;
  grpc::Status error;
  std::string retry_after_ms;
  bool error_after_text = false;
  bool slow = false;  // guarded by mu
  std::vector<std::string> pieces = {"Hello", ",", " world"};
  v1::ServingState state = v1::SERVING_STATE_READY;
  std::vector<std::string> sessions;
  std::atomic<bool> saw_cancel{false};
};

struct FakeAgent {
  FakeEdge service;
  std::unique_ptr<grpc::Server> server;
  int grpc_port = 0;
  MetricsRegistry registry;
  std::unique_ptr<HttpFrontEnd> http;
  int port() const { return http->port(); }
  ~FakeAgent() {
    if (http) http->Stop();
    if (server) server->Shutdown(std::chrono::system_clock::now());
  }
};

std::unique_ptr<FakeAgent> start_fake(HttpFrontEndOptions options = {}) {
  auto agent = std::make_unique<FakeAgent>();
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &agent->grpc_port);
  builder.RegisterService(&agent->service);
  agent->server = builder.BuildAndStart();
  EXPECT_NE(agent->server, nullptr);
  options.grpc_target = "127.0.0.1:" + std::to_string(agent->grpc_port);
  if (options.model_name.empty()) options.model_name = "tiny-test";
  options.metrics = &agent->registry;
  absl::StatusOr<std::unique_ptr<HttpFrontEnd>> http = HttpFrontEnd::Start(options);
  EXPECT_TRUE(http.ok()) << http.status();
  if (http.ok()) agent->http = std::move(*http);
  return agent;
}

Json parse_json(const std::string& text) {
  Json value = Json::parse(text, nullptr, false);
  EXPECT_FALSE(value.is_discarded()) << text;
  return value;
}

// An OpenAI error body with the given type.
void expect_openai_error(const HttpReply& reply, int status, const std::string& type) {
  EXPECT_EQ(reply.status, status) << reply.body;
  EXPECT_NE(reply.content_type.find("application/json"), std::string::npos) << reply.content_type;
  const Json body = parse_json(reply.body);
  ASSERT_TRUE(body.contains("error")) << reply.body;
  EXPECT_EQ(body["error"]["type"], type) << reply.body;
  EXPECT_TRUE(body["error"]["message"].is_string()) << reply.body;
  EXPECT_FALSE(body["error"]["message"].get<std::string>().empty()) << reply.body;
}

constexpr char kCompletionBody[] =
    R"({"model": "tiny-test", "prompt": "Once upon a time", "max_tokens": 3, "temperature": 0.5,
        "seed": 9, "stop": "\n", "baton": {"policy": "local"}})";

// ---------------------------------------------------------------------------
// Against the fake Edge
// ---------------------------------------------------------------------------

TEST(HttpApiFakeEdgeTest, ModelsListTheServedModel) {
  auto agent = start_fake();
  const HttpReply list = get(agent->port(), "/v1/models");
  ASSERT_EQ(list.status, 200) << list.body;
  const Json models = parse_json(list.body);
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], "tiny-test");
  EXPECT_EQ(get(agent->port(), "/v1/models/tiny-test").status, 200);
  expect_openai_error(get(agent->port(), "/v1/models/gpt-4"), 404, "not_found_error");
}

TEST(HttpApiFakeEdgeTest, CompletionRelaysToGenerateAndAnswersOpenAiJson) {
  auto agent = start_fake();
  const HttpReply reply = post(agent->port(), "/v1/completions", kCompletionBody);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json answer = parse_json(reply.body);
  EXPECT_EQ(answer["object"], "text_completion");
  EXPECT_EQ(answer["model"], "tiny-test");
  EXPECT_EQ(answer["choices"][0]["text"], "Hello, world");
  EXPECT_EQ(answer["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(answer["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(answer["usage"]["completion_tokens"], 3);
  EXPECT_EQ(answer["usage"]["total_tokens"], 6);
  const v1::GenerateRequest request = agent->service.last_request();
  EXPECT_EQ(request.text(), "Once upon a time");
  EXPECT_EQ(request.max_tokens(), 3u);
  EXPECT_FLOAT_EQ(request.sampling().temperature(), 0.5f);
  EXPECT_EQ(request.sampling().seed(), 9u);
  ASSERT_EQ(request.stop_size(), 1);
  EXPECT_EQ(request.stop(0), "\n");
  EXPECT_EQ(request.policy(), v1::SPLIT_POLICY_LOCAL);
}

TEST(HttpApiFakeEdgeTest, StreamedCompletionParsedByCurl) {
  auto agent = start_fake();
  std::string body = kCompletionBody;
  body.replace(body.find("\"max_tokens\""), 0, "\"stream\": true, ");
  const std::string stream = curl_post(agent->port(), "/v1/completions", body);
  const StreamedAnswer answer = parse_stream(stream);
  EXPECT_TRUE(answer.done) << stream;
  EXPECT_EQ(answer.text, "Hello, world") << stream;
  EXPECT_EQ(answer.finish_reason, "length") << stream;
  EXPECT_EQ(answer.chunks, 4) << stream;  // three pieces, then the finish chunk
  EXPECT_TRUE(answer.usage.is_null()) << "usage without stream_options.include_usage";
  // The headers of an event stream.
  const std::string headers = curl_post(agent->port(), "/v1/completions", body, "-i");
  EXPECT_NE(headers.find("Content-Type: text/event-stream"), std::string::npos) << headers;
}

TEST(HttpApiFakeEdgeTest, StreamedChatWithUsage) {
  auto agent = start_fake();
  const std::string stream = curl_post(agent->port(), "/v1/chat/completions", R"({
      "messages": [{"role": "user", "content": "Hi"}], "stream": true,
      "stream_options": {"include_usage": true}})");
  const StreamedAnswer answer = parse_stream(stream);
  EXPECT_TRUE(answer.done) << stream;
  EXPECT_TRUE(answer.first_chunk_has_role) << stream;
  EXPECT_EQ(answer.text, "Hello, world") << stream;
  EXPECT_EQ(answer.finish_reason, "length");
  ASSERT_FALSE(answer.usage.is_null()) << stream;
  EXPECT_EQ(answer.usage["completion_tokens"], 3);
}

TEST(HttpApiFakeEdgeTest, ErrorsByCode) {
  HttpFrontEndOptions options;
  options.max_body_bytes = 4096;
  auto agent = start_fake(options);
  const int port = agent->port();
  expect_openai_error(post(port, "/v1/completions", "{\"prompt\": "), 400, "invalid_request_error");
  expect_openai_error(post(port, "/v1/completions", R"({"prompt": "p", "temperature": "hot"})"), 400,
                      "invalid_request_error");
  const HttpReply unsupported = post(port, "/v1/completions", R"({"prompt": "p", "response_format": {"type": "json_object"}})");
  expect_openai_error(unsupported, 400, "invalid_request_error");
  EXPECT_EQ(parse_json(unsupported.body)["error"]["param"], "response_format");
  const std::string big = R"({"prompt": ")" + std::string(10000, 'x') + "\"}";
  expect_openai_error(post(port, "/v1/completions", big), 413, "invalid_request_error");
  expect_openai_error(get(port, "/v2/nothing"), 404, "not_found_error");
  EXPECT_EQ(agent->service.requests.size(), 0u) << "rejected requests must not reach the agent";

  struct Case {
    grpc::Status status;
    std::string retry_after_ms;
    int http;
    std::string retry_after;
    std::string type;
  };
  const std::vector<Case> cases = {
      {grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "sampling.top_p = 7; in (0, 1]"), "", 400, "",
       "invalid_request_error"},
      {grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no token"), "", 401, "", "invalid_request_error"},
      {grpc::Status(grpc::StatusCode::NOT_FOUND, "pack 'docs' is not held"), "", 404, "", "not_found_error"},
      {grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "session needs 9000 tokens; this device fits 6144"), "",
       413, "", "invalid_request_error"},
      {grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "16 Generate calls are already waiting"), "1000", 429,
       "1", "rate_limit_error"},
      {grpc::Status(grpc::StatusCode::UNAVAILABLE, "the edge agent is WARMING"), "2500", 503, "3",
       "service_unavailable"},
      {grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "fingerprint differs"), "", 500, "", "server_error"},
  };
  for (const Case& c : cases) {
    agent->service.fail_with(c.status, c.retry_after_ms);
    for (const bool stream : {false, true}) {
      SCOPED_TRACE(c.status.error_message() + (stream ? " (stream)" : ""));
      const HttpReply reply =
          post(port, "/v1/completions", std::string(R"({"prompt": "p", "stream": )") + (stream ? "true" : "false") + "}");
      expect_openai_error(reply, c.http, c.type);
      EXPECT_EQ(reply.retry_after, c.retry_after);
      EXPECT_EQ(parse_json(reply.body)["error"]["message"], c.status.error_message());
    }
  }
}

TEST(HttpApiFakeEdgeTest, ApiKeyIsRequiredWhenConfigured) {
  HttpFrontEndOptions options;
  options.api_keys = std::make_shared<const ApiKeySet>(*ApiKeySet::FromKeys({"sk-local-test-0123456789"}));
  auto agent = start_fake(options);
  expect_openai_error(post(agent->port(), "/v1/completions", kCompletionBody), 401, "invalid_request_error");
  expect_openai_error(post(agent->port(), "/v1/completions", kCompletionBody, {{"Authorization", "Bearer nope"}}),
                      401, "invalid_request_error");
  EXPECT_EQ(post(agent->port(), "/v1/completions", kCompletionBody, {{"Authorization", "Bearer sk-local-test-0123456789"}}).status,
            200);
}

TEST(HttpApiFakeEdgeTest, AnErrorAfterTheFirstTextEndsTheStreamWithAnErrorEvent) {
  auto agent = start_fake();
  agent->service.fail_with(grpc::Status(grpc::StatusCode::INTERNAL, "decode failed"), "", /*after_text=*/true);
  const std::string stream = curl_post(agent->port(), "/v1/completions", R"({"prompt": "p", "stream": true})");
  const StreamedAnswer answer = parse_stream(stream);
  EXPECT_EQ(answer.text, "Hello, world") << stream;
  ASSERT_FALSE(answer.error.is_null()) << stream;
  EXPECT_EQ(answer.error["message"], "decode failed");
  EXPECT_TRUE(answer.done) << stream;
}

TEST(HttpApiFakeEdgeTest, AClientThatGoesAwayCancelsItsGenerate) {
  auto agent = start_fake();
  agent->service.set_slow();
  // curl gives up after 1 s; the next piece the front end writes fails.
  const std::string stream =
      curl_post(agent->port(), "/v1/completions", R"({"prompt": "p", "stream": true})", "--max-time 1");
  EXPECT_NE(stream.find("data: "), std::string::npos) << stream;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!agent->service.saw_cancel && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(agent->service.saw_cancel) << "the Generate call outlived its HTTP client";
}

TEST(HttpApiFakeEdgeTest, ChatPromptsUseTheTemplateAndASessionGetsOnlyNewMessages) {
  HttpFrontEndOptions options;
  options.model_path = testing::synth_model_path("tiny", GgmlType::kF16);
  auto agent = start_fake(options);
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(options.model_path);
  ASSERT_TRUE(file.ok());
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tokenizer.ok());
  auto sent_prompt = [&](const v1::GenerateRequest& request) {
    std::vector<int32_t> ids(request.tokens().ids().begin(), request.tokens().ids().end());
    // The llama tokenizer puts a space mark after each control token (as
    // llama.cpp does); this vocabulary spells it as the raw U+2581.
    std::string text = (*tokenizer)->decode(ids, {.render_special = true});
    for (size_t at; (at = text.find("\xE2\x96\x81")) != std::string::npos;) text.erase(at, 3);
    return std::make_pair(ids, text);
  };

  // A new conversation: BOS, then the default layout; "</s>" is the
  // vocabulary's control token, the user's "</s>" is text.
  ASSERT_EQ(post(agent->port(), "/v1/chat/completions",
                 R"({"messages": [{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": "Hi </s>"}]})")
                .status,
            200);
  v1::GenerateRequest first = agent->service.last_request();
  ASSERT_TRUE(first.has_tokens());
  auto [ids, text] = sent_prompt(first);
  EXPECT_EQ(ids.front(), (*tokenizer)->bos_id());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), (*tokenizer)->eos_id()), 2) << text;
  // (Spaces are space marks too, removed with them: "Hi </s>" reads "Hi</s>".)
  EXPECT_NE(text.find("<|system|>\nBe brief.</s>\n<|user|>\nHi</s></s>\n<|assistant|>\n"), std::string::npos)
      << text;
  EXPECT_EQ(first.stop(first.stop_size() - 1), "<|user|>");

  // The agent holds session s1: only the turn after the last answer is sent.
  {
    std::lock_guard<std::mutex> lock(agent->service.mu);  // the server is running
    agent->service.sessions = {"s1"};
  }
  ASSERT_EQ(post(agent->port(), "/v1/chat/completions",
                 R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                                  {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Why?"}],
                     "baton": {"session": "s1"}})")
                .status,
            200);
  v1::GenerateRequest second = agent->service.last_request();
  EXPECT_EQ(second.session_id(), "s1");
  auto [ids2, text2] = sent_prompt(second);
  EXPECT_NE(ids2.front(), (*tokenizer)->bos_id());
  EXPECT_EQ(text2.find("Be brief"), std::string::npos) << text2;
  EXPECT_NE(text2.find("<|user|>\nWhy?</s>\n<|assistant|>\n"), std::string::npos) << text2;

  // Nothing new for the session: a client error, not a silent empty turn.
  expect_openai_error(post(agent->port(), "/v1/chat/completions",
                           R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}],
                               "baton": {"session": "s1"}})"),
                      400, "invalid_request_error");
}

TEST(HttpApiFakeEdgeTest, HealthAndMetrics) {
  auto agent = start_fake();
  ASSERT_EQ(post(agent->port(), "/v1/completions", kCompletionBody).status, 200);
  agent->service.fail_with(grpc::Status(grpc::StatusCode::UNAVAILABLE, "warming"), "1000");
  ASSERT_EQ(post(agent->port(), "/v1/completions", kCompletionBody).status, 503);

  const HttpReply health = get(agent->port(), "/health");
  EXPECT_EQ(health.status, 200) << health.body;
  EXPECT_EQ(parse_json(health.body)["status"], "ok");

  // /metrics is not on the API's address but on its own (baton-edge
  // --metrics), which reads Health at each scrape as the agent's does.
  EXPECT_EQ(get(agent->port(), "/metrics").status, 404);
  EdgeMetrics edge_metrics(agent->registry);
  auto stub = v1::Edge::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(agent->grpc_port), grpc::InsecureChannelCredentials()));
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> metrics_server =
      MetricsHttpServer::Start("127.0.0.1:0", agent->registry, [&] {
        grpc::ClientContext context;
        v1::EdgeHealthResponse response;
        if (stub->Health(&context, v1::HealthRequest(), &response).ok()) edge_metrics.record_health(response);
      });
  ASSERT_TRUE(metrics_server.ok()) << metrics_server.status();
  const HttpReply metrics = get((*metrics_server)->port(), "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.content_type.find("text/plain; version=0.0.4"), std::string::npos) << metrics.content_type;
  for (const char* line :
       {"baton_edge_generate_total{outcome=\"ok\"} 1", "baton_edge_generate_total{outcome=\"unavailable\"} 1",
        "baton_edge_ttft_seconds_count 1", "baton_edge_prefills_total{place=\"local\"} 1",
        "baton_edge_generated_tokens_total 3", "baton_edge_memory_kv_used_bytes 4242", "baton_edge_ready 1",
        "baton_http_requests_total{route=\"/v1/completions\",code=\"200\"} 1",
        "baton_http_requests_total{route=\"/v1/completions\",code=\"503\"} 1"}) {
    EXPECT_NE(metrics.body.find(std::string(line) + "\n"), std::string::npos) << line << "\n" << metrics.body;
  }

  {
    std::lock_guard<std::mutex> lock(agent->service.mu);  // the server is running
    agent->service.state = v1::SERVING_STATE_LOADING;
  }
  const HttpReply loading = get(agent->port(), "/health");
  EXPECT_EQ(loading.status, 503);
  EXPECT_EQ(loading.retry_after, "2");
  EXPECT_EQ(parse_json(loading.body)["status"], "loading");
}

TEST(HttpApiFakeEdgeTest, StartValidatesOptionsAndAPortAloneIsLoopback) {
  EXPECT_EQ(listen_address_or_loopback("8080"), "127.0.0.1:8080");
  EXPECT_EQ(listen_address_or_loopback(":8080"), "127.0.0.1:8080");
  EXPECT_EQ(listen_address_or_loopback("0.0.0.0:8080"), "0.0.0.0:8080");
  EXPECT_EQ(listen_address_or_loopback("[::1]:8080"), "[::1]:8080");
  HttpFrontEndOptions options;
  EXPECT_EQ(HttpFrontEnd::Start(options).status().code(), absl::StatusCode::kInvalidArgument);  // no grpc_target
  options.grpc_target = "127.0.0.1:1";
  options.listen = "127.0.0.1:99999";
  EXPECT_EQ(HttpFrontEnd::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.listen = "http://127.0.0.1:80";
  EXPECT_EQ(HttpFrontEnd::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.listen = ":0";
  absl::StatusOr<std::unique_ptr<HttpFrontEnd>> front = HttpFrontEnd::Start(options);
  ASSERT_TRUE(front.ok()) << front.status();
  // Served on loopback; the agent behind it is unreachable: /health says so.
  const HttpReply health = get((*front)->port(), "/health");
  EXPECT_EQ(health.status, 503);
  // A port in use is an error, not a shared port.
  options.listen = "127.0.0.1:" + std::to_string((*front)->port());
  EXPECT_EQ(HttpFrontEnd::Start(options).status().code(), absl::StatusCode::kUnavailable);
  MetricsRegistry registry;
  EXPECT_EQ(MetricsHttpServer::Start(options.listen, registry).status().code(), absl::StatusCode::kUnavailable);
  (*front)->Stop();
}

// ---------------------------------------------------------------------------
// Against the real EdgeService
// ---------------------------------------------------------------------------

// The real agent (tests/support) with the HTTP front end and a metrics registry.
struct RealAgent : edge_test::Edge {
  MetricsRegistry registry;
  int port() const { return http->port(); }
  ~RealAgent() { stop(); }  // before `registry` goes
};

std::unique_ptr<RealAgent> start_real(bool load = true) {
  auto agent = std::make_unique<RealAgent>();
  HttpFrontEndOptions http;
  http.metrics = &agent->registry;
  edge_test::start_edge_in(*agent, edge_test::edge_model_path("tiny"), edge_test::edge_options(""), http, load);
  return agent;
}

struct GrpcAnswer {
  grpc::Status status;
  std::string text;
  v1::Stats stats;
};

GrpcAnswer grpc_generate(v1::Edge::Stub& stub, const v1::GenerateRequest& request) {
  GrpcAnswer answer;
  grpc::ClientContext context;
  edge_test::live_call(context, 60);
  auto reader = stub.Generate(&context, request);
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
    if (response.has_text()) answer.text += response.text().text();
    if (response.has_stats()) answer.stats = response.stats();
  }
  answer.status = reader->Finish();
  return answer;
}

TEST(HttpApiRealEdgeTest, SameTextAndTokenCountsAsGrpcGenerateForTheSameSeed) {
  auto agent = start_real();
  ASSERT_NE(agent->http, nullptr);
  const std::string model = agent->http->model_name();
  for (const uint64_t seed : {uint64_t{1234}, uint64_t{99}}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    v1::GenerateRequest request;
    request.set_text("the quick brown fox");
    request.mutable_sampling()->set_temperature(0.9f);
    request.mutable_sampling()->set_top_p(0.95f);
    request.mutable_sampling()->set_seed(seed);
    request.set_max_tokens(10);
    request.set_policy(v1::SPLIT_POLICY_LOCAL);
    const GrpcAnswer expected = grpc_generate(*agent->stub, request);
    ASSERT_TRUE(expected.status.ok()) << expected.status.error_message();
    ASSERT_GT(expected.stats.generated_tokens(), 0u);

    const std::string body = absl::StrFormat(
        R"({"model": "%s", "prompt": "the quick brown fox", "temperature": 0.9, "top_p": 0.95, "seed": %d,
            "max_tokens": 10, "baton": {"policy": "local"}})",
        model, seed);
    const HttpReply reply = post(agent->port(), "/v1/completions", body);
    ASSERT_EQ(reply.status, 200) << reply.body;
    const Json answer = parse_json(reply.body);
    EXPECT_EQ(answer["choices"][0]["text"], expected.text);
    EXPECT_EQ(answer["usage"]["completion_tokens"], expected.stats.generated_tokens());
    EXPECT_EQ(answer["usage"]["prompt_tokens"], expected.stats.prompt_tokens());
    EXPECT_EQ(answer["choices"][0]["finish_reason"],
              expected.stats.finish_reason() == v1::FINISH_REASON_LENGTH ? "length" : "stop");

    const std::string stream_body = absl::StrFormat(
        R"({"model": "%s", "prompt": "the quick brown fox", "temperature": 0.9, "top_p": 0.95, "seed": %d,
            "max_tokens": 10, "stream": true, "stream_options": {"include_usage": true},
            "baton": {"policy": "local"}})",
        model, seed);
    const std::string stream = curl_post(agent->port(), "/v1/completions", stream_body);
    const StreamedAnswer streamed = parse_stream(stream);
    EXPECT_TRUE(streamed.done) << stream;
    EXPECT_EQ(streamed.text, expected.text) << stream;
    ASSERT_FALSE(streamed.usage.is_null()) << stream;
    EXPECT_EQ(streamed.usage["completion_tokens"], expected.stats.generated_tokens());
  }
}

TEST(HttpApiRealEdgeTest, WhileLoadingRequestsGet503WithRetryAfter) {
  auto agent = start_real(/*load=*/false);
  ASSERT_NE(agent->http, nullptr);
  const HttpReply reply = post(agent->port(), "/v1/completions", R"({"prompt": "hello"})");
  expect_openai_error(reply, 503, "service_unavailable");
  EXPECT_FALSE(reply.retry_after.empty()) << "Retry-After missing while the agent loads";
  EXPECT_GE(std::atoi(reply.retry_after.c_str()), 1);
  const HttpReply health = get(agent->port(), "/health");
  EXPECT_EQ(health.status, 503);
}

TEST(HttpApiRealEdgeTest, ChatSessionContinuesOverTurns) {
  auto agent = start_real();
  ASSERT_NE(agent->http, nullptr);
  const HttpReply first = post(agent->port(), "/v1/chat/completions", R"({
      "messages": [{"role": "user", "content": "Tell me a story."}], "temperature": 0, "max_tokens": 6,
      "baton": {"session": "chat-1", "policy": "local"}})");
  ASSERT_EQ(first.status, 200) << first.body;
  const Json one = parse_json(first.body);
  const std::string reply_text = one["choices"][0]["message"]["content"];
  const int context_one = one["baton"]["context_tokens"];
  EXPECT_EQ(one["baton"]["session"], "chat-1");

  Json second_body = {{"messages", Json::array({{{"role", "user"}, {"content", "Tell me a story."}},
                                                {{"role", "assistant"}, {"content", reply_text}},
                                                {{"role", "user"}, {"content", "More."}}})},
                      {"temperature", 0},
                      {"max_tokens", 6},
                      {"baton", {{"session", "chat-1"}, {"policy", "local"}}}};
  const HttpReply second = post(agent->port(), "/v1/chat/completions", second_body.dump());
  ASSERT_EQ(second.status, 200) << second.body;
  const Json two = parse_json(second.body);
  // Only "More." in the template went in, on top of the held conversation
  // (the whole history again would be longer than the first prompt).
  EXPECT_LT(two["usage"]["prompt_tokens"].get<int>(), one["usage"]["prompt_tokens"].get<int>());
  EXPECT_EQ(two["baton"]["context_tokens"].get<int>(), context_one + two["usage"]["total_tokens"].get<int>())
      << "context = previous context + this turn's prompt and answer";
}

// ---------------------------------------------------------------------------
// The cloud's metrics listener
// ---------------------------------------------------------------------------

TEST(PrefillMetricsHttpTest, ServesThePrefillServiceFiguresOnGetMetrics) {
  PrefillServiceOptions options;
  options.threads = 1;
  options.max_running = 1;
  PrefillService service(options);
  ASSERT_TRUE(service.Load(testing::synth_model_path("tiny", GgmlType::kF16)).ok());
  MetricsRegistry registry;
  PrefillMetrics metrics(registry);
  metrics.collect_at_scrape(service);
  PrefillJobResult job;
  job.computed_tokens = 128;
  job.reused_tokens = 64;
  job.queue_ms = 5;
  job.prefill_ms = 20;
  job.encode_tail_ms = 3;
  metrics.record_job(job, /*kv_bytes_per_token=*/1024);
  metrics.record_job(absl::UnavailableError("draining"), 1024);
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server = MetricsHttpServer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(server.ok()) << server.status();
  const HttpReply reply = get((*server)->port(), "/metrics");
  ASSERT_EQ(reply.status, 200);
  EXPECT_NE(reply.content_type.find("version=0.0.4"), std::string::npos);
  for (const char* line : {"# TYPE baton_prefill_running gauge", "baton_prefill_running 0", "baton_prefill_queued 0",
                           "baton_prefill_ready 1", "baton_prefill_tokens_total 128",
                           "baton_prefill_cache_hit_bytes_total 65536",
                           "baton_prefill_requests_total{outcome=\"ok\"} 1",
                           "baton_prefill_requests_total{outcome=\"unavailable\"} 1",
                           "baton_prefill_encode_seconds_sum 0.003", "baton_prefill_seconds_sum 0.025",
                           "# TYPE baton_prefill_encode_seconds histogram"}) {
    EXPECT_NE(reply.body.find(std::string(line) + "\n"), std::string::npos) << line << "\n" << reply.body;
  }
  EXPECT_EQ(get((*server)->port(), "/other").status, 404);
  (*server)->Stop();
  EXPECT_EQ(get((*server)->port(), "/metrics").status, 0) << "still answering after Stop()";
}

}  // namespace
}  // namespace baton
