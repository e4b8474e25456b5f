#include "edge_decode/http/http_front_end.h"

#include <httplib.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/gguf/gguf_file.h"
#include "common/rpc/channel_options.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/server_credentials.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/check.h"
#include "common/util/flags.h"
#include "common/util/http_listener.h"
#include "common/util/listen_address.h"
#include "common/util/log.h"
#include "edge_decode/http/chat_template.h"
#include "edge_decode/edge_metrics.h"
#include "edge_decode/http/openai_api.h"
#include "edge_decode/http/web_ui.h"
#include "proto/baton.grpc.pb.h"

namespace baton {
namespace {

constexpr char kJson[] = "application/json";
// Deadline of the small unary calls (Health, ListSessions) on loopback.
constexpr auto kUnaryTimeout = std::chrono::seconds(5);

// A small unary call on the agent: the loopback deadline and the caller's key.
void prepare_unary(grpc::ClientContext& context, const std::string& authorization) {
  context.set_deadline(std::chrono::system_clock::now() + kUnaryTimeout);
  add_authorization(authorization, context);
}

void send_error(httplib::Response& res, const HttpError& error) {
  res.status = error.http_status;
  if (error.retry_after_s > 0) res.set_header("Retry-After", std::to_string(error.retry_after_s));
  res.set_content(error.body, kJson);
}

void send_error(httplib::Response& res, const absl::Status& status) {
  send_error(res, http_error_from_status(status, 0));
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A bounded label for the request counter.
std::string route_label(const std::string& path) {
  for (const char* route : {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/",
                            "/app.js", "/app.css", "/v1/baton/sessions"}) {
    if (path == route) return route;
  }
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  if (path.rfind("/v1/baton/sessions/", 0) == 0) return "/v1/baton/sessions/{id}";
  return "other";
}

void append_logprobs(const v1::TextPiece& piece, OpenAiLogprobs& out) {
  out.tokens.insert(out.tokens.end(), piece.logprobs().begin(), piece.logprobs().end());
}

}  // namespace

absl::Status check_cors_origin(const std::string& origin, bool has_api_keys) {
  if (origin == "*") {
    if (has_api_keys) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "--cors-origin '*' needs --api-key-file: without keys any web page the user opens could use this agent; "
        "name the page's origin instead (e.g. http://localhost:5173)");
  }
  const size_t scheme_end = origin.find("://");
  const bool scheme_ok = origin.rfind("http://", 0) == 0 || origin.rfind("https://", 0) == 0;
  if (!scheme_ok || origin.size() == scheme_end + 3 || origin.find('/', scheme_end + 3) != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--cors-origin '%s' is not an origin: scheme://host[:port] with http or https and no path, or '*'", origin));
  }
  return absl::OkStatus();
}

namespace {

const char* state_name(v1::ServingState state) {
  switch (state) {
    case v1::SERVING_STATE_LOADING: return "loading";
    case v1::SERVING_STATE_WARMING: return "warming";
    case v1::SERVING_STATE_READY: return "ok";
    case v1::SERVING_STATE_DRAINING: return "draining";
    default: return "unknown";
  }
}

}  // namespace

class HttpFrontEnd::Impl {
 public:
  explicit Impl(HttpFrontEndOptions options) : options_(std::move(options)) {}
  ~Impl() { stop(); }

  absl::Status start();
  void stop();
  // server_: HTTPS with tls_cert_path / tls_key_path, else plain HTTP.
  absl::Status make_server();
  int port() const { return listener_ != nullptr ? listener_->port() : 0; }
  const std::string& model_name() const { return model_name_; }

 private:
  class GenerateCall;
  class SseStream;

  // True when the request may go on; else the 401 is in `res`. Sets
  // *authorization to the header to relay ("" without keys).
  bool authorized(const httplib::Request& req, httplib::Response& res, std::string* authorization) const;
  void handle_generate(OpenAiEndpoint endpoint, const httplib::Request& req, httplib::Response& res);
  void handle_models(const httplib::Request& req, httplib::Response& res) const;
  // CORS (cors_origins): the origin to allow for this request's Origin
  // header, or "" (no CORS headers). A preflight OPTIONS gets 204 + the
  // allowed methods and headers, or 403 for an origin not allowed.
  std::string allowed_origin(const httplib::Request& req) const;
  void handle_preflight(const httplib::Request& req, httplib::Response& res) const;
  void add_cors_headers(const httplib::Request& req, httplib::Response& res) const;
  void install_cors();
  // Token id -> its bytes, for logprobs.
  std::function<std::string(uint32_t)> token_piece_fn() const;
  void handle_health(httplib::Response& res);
  // The web page's session list (web_ui.h): the caller's sessions; DELETE one.
  void handle_sessions(const httplib::Request& req, httplib::Response& res);
  void handle_delete_session(const httplib::Request& req, httplib::Response& res);
  grpc::Status list_sessions(const std::string& authorization, v1::ListSessionsResponse* response);
  absl::StatusOr<v1::GenerateRequest> build_request(const OpenAiRequest& request, const std::string& authorization);
  absl::StatusOr<bool> session_exists(const std::string& session_id, const std::string& authorization);
  grpc::Status health(v1::EdgeHealthResponse* response);

  // Running Generate calls, so stop() can cancel them.
  bool track(grpc::ClientContext* context);
  void untrack(grpc::ClientContext* context);

  HttpFrontEndOptions options_;
  std::unique_ptr<GgufFile> gguf_;
  std::unique_ptr<Tokenizer> tokenizer_;  // nullptr without a model file
  ChatFormat chat_format_;
  std::string model_name_;
  int64_t created_ = 0;                   // unix seconds, for /v1/models
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Edge::Stub> stub_;
  std::unique_ptr<EdgeMetrics> metrics_;  // nullptr without a registry

  std::unique_ptr<HttpListener> listener_;  // over an httplib::SSLServer with TLS
  httplib::Server* server_ = nullptr;       // listener_->server(), to add routes

  std::mutex calls_mu_;
  std::set<grpc::ClientContext*> calls_;  // guarded by calls_mu_
  bool stopping_ = false;                 // guarded by calls_mu_; set once by stop()
};

// One Generate call on the agent: a blocking reader on the HTTP worker
// thread. Ends (Finish, metrics) exactly once; a call dropped before its end
// is cancelled.
class HttpFrontEnd::Impl::GenerateCall {
 public:
  GenerateCall(Impl& owner, const v1::GenerateRequest& request, const std::string& authorization) : owner_(owner) {
    context_.set_deadline(std::chrono::system_clock::now() + owner_.options_.generate_timeout);
    context_.AddMetadata("baton-frontend", "http");
    add_authorization(authorization, context_);
    if (!owner_.track(&context_)) context_.TryCancel();
    reader_ = owner_.stub_->Generate(&context_, request);
  }
  ~GenerateCall() {
    if (!finished_) {
      context_.TryCancel();
      v1::GenerateResponse ignored;
      while (reader_->Read(&ignored)) {
      }
      finish();
    }
    owner_.untrack(&context_);
  }
  GenerateCall(const GenerateCall&) = delete;
  GenerateCall& operator=(const GenerateCall&) = delete;

  // The next message; false at the end of the stream (see status()).
  bool next(v1::GenerateResponse* message) {
    if (finished_) return false;
    if (reader_->Read(message)) {
      if (message->has_stats()) stats_ = message->stats();
      return true;
    }
    finish();
    return false;
  }
  void cancel() { context_.TryCancel(); }

  const absl::Status& status() const { return status_; }
  const std::optional<v1::Stats>& stats() const { return stats_; }
  HttpError http_error() const { return http_error_from_status(status_, trailing_retry_after_ms(context_).value_or(0)); }

 private:
  void finish() {
    finished_ = true;
    status_ = from_grpc_status(reader_->Finish());
    if (status_.ok() && !stats_.has_value()) {
      status_ = absl::InternalError("the agent's Generate stream ended without its Stats message");
    }
    if (owner_.metrics_ != nullptr && owner_.options_.record_generate_metrics) {
      owner_.metrics_->record_outcome(status_);
      if (status_.ok()) owner_.metrics_->record_stats(*stats_);
    }
    if (!status_.ok()) BATON_DEBUG("Generate over HTTP ended: %s", status_.ToString().c_str());
  }

  Impl& owner_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader_;
  bool finished_ = false;
  absl::Status status_;
  std::optional<v1::Stats> stats_;
};

// stream: true. Each pump() writes what the gRPC stream delivered next as SSE
// events, and at the end the finish chunk, the usage chunk (if asked) and
// [DONE] — or an error event when the stream failed after it started.
class HttpFrontEnd::Impl::SseStream {
 public:
  // `logprobs` set: the request asked for them; it holds those of the tokens
  // read before the headers went out.
  SseStream(std::unique_ptr<GenerateCall> call, OpenAiAnswerInfo info, bool include_usage, std::string first_text,
            bool ended, std::optional<OpenAiLogprobs> logprobs)
      : call_(std::move(call)),
        info_(std::move(info)),
        include_usage_(include_usage),
        pending_(std::move(first_text)),
        ended_(ended),
        logprobs_(std::move(logprobs)) {}

  bool pump(httplib::DataSink& sink) {
    std::string out;
    if (!sent_role_ && info_.endpoint == OpenAiEndpoint::kChatCompletions) {
      out += sse_event(openai_chunk_json(info_, "", std::nullopt, /*role=*/true));
      sent_role_ = true;
    }
    if (!pending_.empty()) {
      out += text_chunk(pending_);
      pending_.clear();
    }
    v1::GenerateResponse message;
    while (out.empty() && !ended_) {
      if (!call_->next(&message)) {
        ended_ = true;
      } else if (message.has_text()) {
        if (logprobs_.has_value()) append_logprobs(message.text(), *logprobs_);
        if (!message.text().text().empty()) out += text_chunk(message.text().text());
      }
    }
    if (ended_) {
      // Tokens whose bytes never became text (a cut character) keep their logprobs.
      if (logprobs_.has_value() && !logprobs_->tokens.empty()) out += text_chunk("");
      if (call_->status().ok()) {
        out += sse_event(openai_final_chunk_json(info_, *call_->stats()));
        if (include_usage_) out += sse_event(openai_usage_chunk_json(info_, *call_->stats()));
      } else {
        out += sse_event(call_->http_error().body);
      }
      out += kSseDone;
    }
    if (!sink.write(out.data(), out.size())) {
      call_->cancel();  // the client went away
      return false;
    }
    if (ended_) sink.done();
    return true;
  }

  void cancel() { call_->cancel(); }

 private:
  // A chunk of `text` with the log-probabilities of the tokens read since the
  // last chunk (if asked); a completions stream's text_offset moves on.
  std::string text_chunk(std::string_view text) {
    if (!logprobs_.has_value()) return sse_event(openai_chunk_json(info_, text, std::nullopt));
    std::string chunk = sse_event(openai_chunk_json(info_, text, std::nullopt, false, &*logprobs_));
    for (const v1::TokenLogprob& token : logprobs_->tokens) {
      logprobs_->text_offset += logprobs_->piece(token.token_id()).size();
    }
    logprobs_->tokens.clear();
    return chunk;
  }

  std::unique_ptr<GenerateCall> call_;
  const OpenAiAnswerInfo info_;
  const bool include_usage_;
  std::string pending_;  // text read before the headers went out
  bool ended_;
  bool sent_role_ = false;
  std::optional<OpenAiLogprobs> logprobs_;  // set when asked: tokens not yet sent
};

bool HttpFrontEnd::Impl::track(grpc::ClientContext* context) {
  std::lock_guard<std::mutex> lock(calls_mu_);
  calls_.insert(context);
  return !stopping_;
}

void HttpFrontEnd::Impl::untrack(grpc::ClientContext* context) {
  std::lock_guard<std::mutex> lock(calls_mu_);
  calls_.erase(context);
}

absl::Status HttpFrontEnd::Impl::start() {
  if (options_.grpc_target.empty()) return absl::InvalidArgumentError("HttpFrontEndOptions.grpc_target is empty");
  if (options_.threads < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("HTTP threads = %d; at least 1", options_.threads));
  }
  absl::StatusOr<std::pair<std::string, int>> host_port = parse_listen_address(options_.listen);
  if (!host_port.ok()) return absl::InvalidArgumentError(absl::StrCat("HTTP ", host_port.status().message()));
  if (!options_.model_path.empty()) {
    BATON_ASSIGN_OR_RETURN(gguf_, GgufFile::Open(options_.model_path));
    BATON_ASSIGN_OR_RETURN(tokenizer_, Tokenizer::FromGguf(*gguf_));
    chat_format_ = chat_format_from_gguf(*gguf_, *tokenizer_);
  }
  model_name_ = options_.model_name;
  // The model's one name, as Health and the logs show it (GGUF general.name);
  // a file without one goes by its file name.
  if (model_name_.empty() && gguf_ != nullptr && gguf_->find("general.name") != nullptr) {
    if (absl::StatusOr<std::string> name = gguf_->get_string("general.name"); name.ok()) model_name_ = *name;
  }
  if (model_name_.empty()) {
    model_name_ =
        options_.model_path.empty() ? "baton" : std::filesystem::path(options_.model_path).stem().string();
  }
  for (const std::string& origin : options_.cors_origins) {
    BATON_RETURN_IF_ERROR(check_cors_origin(origin, options_.api_keys != nullptr));
  }
  created_ = unix_seconds();
  // Twice the body cap both ways: a prompt the HTTP API accepts is never
  // refused by the relay's own gRPC message cap (4 MiB by default).
  ChannelTuning relay_tuning;
  relay_tuning.max_send_bytes = static_cast<int>(std::min<size_t>(size_t{2} * options_.max_body_bytes, INT32_MAX));
  relay_tuning.max_receive_bytes = relay_tuning.max_send_bytes;
  channel_ = open_channel(options_.grpc_target, grpc::InsecureChannelCredentials(), relay_tuning);
  stub_ = v1::Edge::NewStub(channel_);
  if (options_.metrics != nullptr) metrics_ = std::make_unique<EdgeMetrics>(*options_.metrics);

  BATON_RETURN_IF_ERROR(make_server());
  server_->set_payload_max_length(options_.max_body_bytes);
  // Streams can pause for a long local prefill between writes.
  server_->set_write_timeout(std::chrono::seconds(60));
  server_->set_tcp_nodelay(true);  // each SSE event goes out as written
  const size_t max_body_bytes = options_.max_body_bytes;
  server_->set_error_handler(httplib::Server::HandlerWithResponse([max_body_bytes](const httplib::Request& req,
                                                                                   httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // ours, already in shape
    std::string message;
    std::string type = "invalid_request_error";
    switch (res.status) {
      case 404:
        message = absl::StrFormat("no route for %s %s", req.method, req.path);
        type = "not_found_error";
        break;
      case 413:
        message = req.has_header("Content-Length")
                      ? absl::StrFormat("the request body is %s bytes, over the limit of %d bytes",
                                        req.get_header_value("Content-Length"), max_body_bytes)
                      : absl::StrFormat("the request body is over the limit of %d bytes", max_body_bytes);
        break;
      default:
        message = absl::StrFormat("HTTP %d", res.status);
        if (res.status >= 500) type = "server_error";
        break;
    }
    res.set_content(openai_error_json(message, type), kJson);
    return httplib::Server::HandlerResponse::Handled;
  }));
  server_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    res.status = 500;
    res.set_content(openai_error_json("internal error while answering the request", "server_error"), kJson);
  });
  if (metrics_ != nullptr) {
    MetricsRegistry* registry = options_.metrics;
    server_->set_logger([registry](const httplib::Request& req, const httplib::Response& res) {
      registry
          ->counter("baton_http_requests_total", "HTTP requests by route and status code.",
                    {{"route", route_label(req.path)}, {"code", std::to_string(res.status)}})
          .inc();
    });
  }

  install_cors();
  server_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) { handle_models(req, res); });
  server_->Get(R"(/v1/models/(.+))",
              [this](const httplib::Request& req, httplib::Response& res) { handle_models(req, res); });
  server_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(OpenAiEndpoint::kCompletions, req, res);
  });
  server_->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(OpenAiEndpoint::kChatCompletions, req, res);
  });
  server_->Get("/health", [this](const httplib::Request&, httplib::Response& res) { handle_health(res); });
  register_web_ui(*server_);
  server_->Get("/v1/baton/sessions",
               [this](const httplib::Request& req, httplib::Response& res) { handle_sessions(req, res); });
  server_->Delete(R"(/v1/baton/sessions/([A-Za-z0-9._-]+))",
                  [this](const httplib::Request& req, httplib::Response& res) { handle_delete_session(req, res); });

  const auto& [host, port] = *host_port;
  BATON_RETURN_IF_ERROR(listener_->start(host, port, options_.listen, "the HTTP server"));
  // Debug only: baton-edge announces its listeners once all of them are bound.
  BATON_DEBUG("OpenAI-compatible HTTP API on %s:%d for model '%s' (chat template: %s), relaying to %s",
             host.c_str(), listener_->port(), model_name_.c_str(), chat_template_family_name(chat_format_.family),
             options_.grpc_target.c_str());
  return absl::OkStatus();
}

absl::Status HttpFrontEnd::Impl::make_server() {
  if (options_.tls_cert_path.empty() != options_.tls_key_path.empty()) {
    return absl::InvalidArgumentError("HTTPS needs both a certificate (--tls-cert) and its key (--tls-key)");
  }
  if (options_.tls_cert_path.empty()) {
    listener_ = std::make_unique<HttpListener>(std::make_unique<httplib::Server>(), options_.threads);
    server_ = &listener_->server();
    return absl::OkStatus();
  }
  // Read first: SSLServer reports a bad file only as is_valid() == false.
  BATON_RETURN_IF_ERROR(read_pem_file(options_.tls_cert_path, "TLS certificate").status());
  BATON_RETURN_IF_ERROR(read_pem_file(options_.tls_key_path, "TLS key").status());
  auto server = std::make_unique<httplib::SSLServer>(options_.tls_cert_path.c_str(), options_.tls_key_path.c_str());
  if (!server->is_valid()) {
    return absl::InvalidArgumentError(absl::StrFormat("HTTPS: the certificate %s and key %s do not load together",
                                                      options_.tls_cert_path, options_.tls_key_path));
  }
  listener_ = std::make_unique<HttpListener>(std::move(server), options_.threads);
  server_ = &listener_->server();
  return absl::OkStatus();
}

void HttpFrontEnd::Impl::stop() {
  {
    std::lock_guard<std::mutex> lock(calls_mu_);
    if (stopping_) return;
    stopping_ = true;
    for (grpc::ClientContext* context : calls_) context->TryCancel();
  }
  if (listener_ != nullptr) listener_->stop();
}

bool HttpFrontEnd::Impl::authorized(const httplib::Request& req, httplib::Response& res,
                                    std::string* authorization) const {
  authorization->clear();
  if (options_.api_keys == nullptr) return true;
  const std::string header = req.get_header_value("Authorization");
  const std::optional<std::string_view> token = bearer_token(header);
  if (token.has_value() && options_.api_keys->match(*token).has_value()) {
    *authorization = header;
    return true;
  }
  send_error(res, absl::UnauthenticatedError(header.empty() ? "missing API key: send 'Authorization: Bearer KEY'"
                                                            : "invalid API key"));
  return false;
}

void HttpFrontEnd::Impl::handle_models(const httplib::Request& req, httplib::Response& res) const {
  std::string authorization;
  if (!authorized(req, res, &authorization)) return;
  if (req.matches.size() > 1) {
    const std::string id = req.matches[1].str();
    const std::vector<std::string>& aliases = options_.model_aliases;
    if (id != model_name_ && std::find(aliases.begin(), aliases.end(), id) == aliases.end()) {
      send_error(res, absl::NotFoundError(absl::StrFormat(
                          "model '%s' is not listed here; this agent serves '%s' (requests may name any model)",
                          id, model_name_)));
      return;
    }
    res.set_content(openai_model_json(id, created_), kJson);
    return;
  }
  res.set_content(openai_models_json(model_name_, created_, options_.model_aliases), kJson);
}

grpc::Status HttpFrontEnd::Impl::health(v1::EdgeHealthResponse* response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kUnaryTimeout);
  return stub_->Health(&context, v1::HealthRequest(), response);
}

void HttpFrontEnd::Impl::handle_health(httplib::Response& res) {
  v1::EdgeHealthResponse health_response;
  const grpc::Status status = health(&health_response);
  if (!status.ok()) {
    res.status = 503;
    res.set_content(openai_error_json(absl::StrCat("the edge agent is unreachable: ", status.error_message()),
                                      "service_unavailable"),
                    kJson);
    return;
  }
  const bool ready = health_response.state() == v1::SERVING_STATE_READY;
  res.status = ready ? 200 : 503;
  if (!ready && health_response.retry_after_ms() > 0) {
    res.set_header("Retry-After", std::to_string((health_response.retry_after_ms() + 999) / 1000));
  }
  res.set_content(absl::StrFormat(R"({"status":"%s"})", state_name(health_response.state())), kJson);
}

grpc::Status HttpFrontEnd::Impl::list_sessions(const std::string& authorization,
                                               v1::ListSessionsResponse* response) {
  grpc::ClientContext context;
  prepare_unary(context, authorization);
  return stub_->ListSessions(&context, v1::ListSessionsRequest(), response);
}

void HttpFrontEnd::Impl::handle_sessions(const httplib::Request& req, httplib::Response& res) {
  std::string authorization;
  if (!authorized(req, res, &authorization)) return;
  v1::ListSessionsResponse response;
  const grpc::Status status = list_sessions(authorization, &response);
  if (!status.ok()) return send_error(res, from_grpc_status(status));
  res.set_content(sessions_json(response), kJson);
}

void HttpFrontEnd::Impl::handle_delete_session(const httplib::Request& req, httplib::Response& res) {
  std::string authorization;
  if (!authorized(req, res, &authorization)) return;
  grpc::ClientContext context;
  prepare_unary(context, authorization);
  v1::DeleteSessionRequest request;
  request.set_session_id(req.matches[1].str());
  v1::DeleteSessionResponse response;
  const grpc::Status status = stub_->DeleteSession(&context, request, &response);
  if (!status.ok()) return send_error(res, from_grpc_status(status));
  res.set_content(deleted_session_json(request.session_id(), response), kJson);
}

absl::StatusOr<bool> HttpFrontEnd::Impl::session_exists(const std::string& session_id,
                                                        const std::string& authorization) {
  v1::ListSessionsResponse response;
  const grpc::Status status = list_sessions(authorization, &response);
  if (!status.ok()) return from_grpc_status(status);
  for (const v1::SessionInfo& info : response.sessions()) {
    if (info.session_id() == session_id) return true;
  }
  return false;
}

absl::StatusOr<v1::GenerateRequest> HttpFrontEnd::Impl::build_request(const OpenAiRequest& request,
                                                                      const std::string& authorization) {
  BATON_ASSIGN_OR_RETURN(v1::GenerateRequest out, to_generate_request(request));
  if (request.endpoint != OpenAiEndpoint::kChatCompletions) return out;
  bool continuing = false;
  if (!request.session_id.empty()) {
    BATON_ASSIGN_OR_RETURN(continuing, session_exists(request.session_id, authorization));
  }
  const std::vector<ChatMessage> messages = new_chat_messages(request.messages, continuing);
  if (messages.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "session %s already holds this conversation: no messages after the last assistant message",
        request.session_id));
  }
  ChatRenderOptions render_options = chat_format_.options;
  render_options.continuation = continuing;
  const std::vector<ChatSegment> segments = render_chat(chat_format_.family, messages, render_options);
  if (tokenizer_ != nullptr) {
    // BOS starts a conversation; a pack's tokens carry their own start.
    const bool add_bos = !continuing && request.pack_id.empty();
    for (const int32_t id : tokenize_chat(*tokenizer_, segments, add_bos)) {
      out.mutable_tokens()->add_ids(static_cast<uint32_t>(id));
    }
  } else {
    out.set_text(chat_text(segments));
  }
  // The default layout's turn marker is text in most vocabularies: stop there
  // too, not only at EOS.
  if (chat_format_.family == ChatTemplateFamily::kDefault && out.stop_size() < 16) out.add_stop("<|user|>");
  return out;
}

void HttpFrontEnd::Impl::handle_generate(OpenAiEndpoint endpoint, const httplib::Request& req,
                                         httplib::Response& res) {
  std::string authorization;
  if (!authorized(req, res, &authorization)) return;
  absl::StatusOr<OpenAiRequest> parsed = parse_openai_request(endpoint, req.body);
  if (!parsed.ok()) return send_error(res, parsed.status());
  // Any model name maps to the served model (clients send "gpt-4o-mini").
  absl::StatusOr<v1::GenerateRequest> request = build_request(*parsed, authorization);
  if (!request.ok()) return send_error(res, request.status());

  auto call = std::make_unique<GenerateCall>(*this, *request, authorization);
  OpenAiAnswerInfo info{endpoint, new_openai_id(endpoint), unix_seconds(), model_name_};
  v1::GenerateResponse message;
  std::optional<OpenAiLogprobs> logprobs;
  if (parsed->logprobs.has_value()) logprobs = OpenAiLogprobs{{}, token_piece_fn(), 0};
  if (!parsed->stream) {
    std::string text;
    while (call->next(&message)) {
      if (message.has_text()) text += message.text().text();
      if (message.has_text() && logprobs.has_value()) append_logprobs(message.text(), *logprobs);
    }
    if (!call->status().ok()) return send_error(res, call->http_error());
    res.set_content(openai_answer_json(info, text, *call->stats(), logprobs ? &*logprobs : nullptr), kJson);
    return;
  }
  // Headers go out with the first text, so an error before it (bad value,
  // warming up, too long) still gets its own status code.
  std::string first_text;
  bool ended = true;
  while (call->next(&message)) {
    if (message.has_text() && logprobs.has_value()) append_logprobs(message.text(), *logprobs);
    if (message.has_text() && !message.text().text().empty()) {
      first_text = message.text().text();
      ended = false;
      break;
    }
  }
  if (ended && !call->status().ok()) return send_error(res, call->http_error());
  auto stream = std::make_shared<SseStream>(std::move(call), info, parsed->include_usage, std::move(first_text), ended,
                                            std::move(logprobs));
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream", [stream](size_t /*offset*/, httplib::DataSink& sink) { return stream->pump(sink); },
      [stream](bool success) {
        if (!success) stream->cancel();
      });
}

std::function<std::string(uint32_t)> HttpFrontEnd::Impl::token_piece_fn() const {
  const Tokenizer* tokenizer = tokenizer_.get();
  return [tokenizer](uint32_t id) {
    const auto token = static_cast<int32_t>(id);
    if (tokenizer == nullptr || !tokenizer->is_valid_token(token)) return absl::StrCat("<token ", id, ">");
    return tokenizer->token_piece(token);
  };
}

std::string HttpFrontEnd::Impl::allowed_origin(const httplib::Request& req) const {
  const std::string origin = req.get_header_value("Origin");
  if (origin.empty()) return "";
  for (const std::string& allowed : options_.cors_origins) {
    if (allowed == "*" || allowed == origin) return origin;
  }
  return "";
}

void HttpFrontEnd::Impl::handle_preflight(const httplib::Request& req, httplib::Response& res) const {
  const std::string origin = allowed_origin(req);
  if (origin.empty()) {
    res.status = 403;
    res.set_content(openai_error_json(absl::StrFormat("origin '%s' is not allowed (baton-edge --cors-origin)",
                                                      req.get_header_value("Origin")),
                                      "permission_error"),
                    kJson);
    return;
  }
  res.status = 204;
  res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  // The browser asks for the headers the page sets (Authorization,
  // Content-Type, the openai client's X-Stainless-*): the origin is trusted.
  const std::string asked = req.get_header_value("Access-Control-Request-Headers");
  res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
  res.set_header("Access-Control-Max-Age", "600");
}

void HttpFrontEnd::Impl::add_cors_headers(const httplib::Request& req, httplib::Response& res) const {
  const std::string origin = allowed_origin(req);
  if (origin.empty()) return;
  res.set_header("Access-Control-Allow-Origin", origin);
  res.set_header("Vary", "Origin");
  res.set_header("Access-Control-Expose-Headers", "Retry-After");
}

void HttpFrontEnd::Impl::install_cors() {
  if (options_.cors_origins.empty()) return;
  // Preflights carry no API key (browsers never send one): answered before
  // routing and authorization.
  server_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.method != "OPTIONS") return httplib::Server::HandlerResponse::Unhandled;
    handle_preflight(req, res);  // the post-routing handler adds the CORS headers
    return httplib::Server::HandlerResponse::Handled;
  });
  // Every answer, errors and event streams included, before its headers go out.
  server_->set_post_routing_handler(
      [this](const httplib::Request& req, httplib::Response& res) { add_cors_headers(req, res); });
}

HttpFrontEnd::HttpFrontEnd(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpFrontEnd::~HttpFrontEnd() { Stop(); }

absl::StatusOr<std::unique_ptr<HttpFrontEnd>> HttpFrontEnd::Start(const HttpFrontEndOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  BATON_RETURN_IF_ERROR(impl->start());
  return std::unique_ptr<HttpFrontEnd>(new HttpFrontEnd(std::move(impl)));
}

int HttpFrontEnd::port() const { return impl_->port(); }

const std::string& HttpFrontEnd::model_name() const { return impl_->model_name(); }

void HttpFrontEnd::Stop() {
  if (impl_ != nullptr) impl_->stop();
}

}  // namespace baton
