// HttpFrontEnd: baton-edge's OpenAI-compatible HTTP API (--http ADDR), over
// plain HTTP or HTTPS (tls_cert_path / tls_key_path). Prometheus GET /metrics
// is not served here but on its own address (--metrics, metrics_http.h).
//
// One code path, two front ends: the HTTP front end is a thin translator
// (openai_api.h) that relays every request to the agent's own gRPC service
// (Edge.Generate, Edge.Health, Edge.ListSessions) over a loopback channel to
// --listen, so sessions, split policy, memory limits and admission are the
// gRPC path's, and errors are its gRPC status mapped to HTTP. With API keys
// the front end checks the caller's key first (401 at once) and relays it
// with every call, so the agent's session ownership holds over HTTP too.
//
// Routes:
//   GET  /v1/models, /v1/models/{id}
//   POST /v1/completions, /v1/chat/completions   (stream false: one JSON;
//        stream true: server-sent events "data: {...}\n\n", the last with
//        finish_reason and Baton's figures under "baton", then "data: [DONE]\n\n")
//   GET  /health    200 {"status": "ok"} when READY; 503 with Retry-After otherwise
//   GET  /, /app.js, /app.css   the chat page (web_ui.h; no API key needed)
//   GET  /v1/baton/sessions, DELETE /v1/baton/sessions/{id}   the caller's
//        sessions (relayed ListSessions / DeleteSession, so only the key's own)
//   OPTIONS *       CORS preflight (cors_origins)
// A request's "model" may name anything: the agent serves one model, and
// answers name it by its id. /v1/models lists the id and model_aliases.
// Errors use OpenAI's shape {"error": {"message", "type", "param", "code"}}:
// 400 bad JSON / bad field / unsupported field (param names it), 401 missing
// or wrong API key (type invalid_request_error, code invalid_api_key, as
// OpenAI), 404 unknown route or GET /v1/models/{id} of an id not listed, 413 body over max_body_bytes or prompt over the device's
// context, 429 queue full, 503 (+ Retry-After) while the agent loads or warms
// up, 500 otherwise.
//
// Threads: httplib's pool of `threads` workers; a request holds one worker
// for its whole Generate, which is a blocking gRPC reader on that worker (the
// worker is held anyway; a stream writes each piece as the gRPC stream
// delivers it). Every Generate has a deadline (generate_timeout); a streaming
// client that goes away cancels its Generate at the next piece; Stop()
// cancels the running ones. /health needs no API key.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/rpc/api_keys.h"
#include "common/util/metrics.h"

namespace baton {

struct HttpFrontEndOptions {
  // host:port; port 0 picks a free port (see port()). "PORT" or ":PORT" alone
  // listens on loopback (127.0.0.1).
  std::string listen = "127.0.0.1:0";
  std::string grpc_target;             // the agent's gRPC address (its --listen), e.g. "127.0.0.1:50061"
  // The model file the agent serves: its tokenizer and chat template build
  // chat prompts. Empty: chat prompts are sent as text in the default layout.
  std::string model_path;
  // The id /v1/models lists and requests may name; empty: the model's GGUF
  // general.name ("baton-tiny-kjv", as Health shows it), else the file's
  // stem, or "baton" without a model file.
  std::string model_name;
  // More ids /v1/models lists for the same model (--model-alias), for clients
  // that only offer the names they know. Requests may name any model anyway.
  std::vector<std::string> model_aliases;
  // Browser origins ("https://app.example.com", scheme://host[:port]) allowed
  // to call the API from a web page (--cors-origin): preflight OPTIONS are
  // answered and responses carry Access-Control-Allow-Origin for them only.
  // "*" allows every origin, and needs api_keys (else any page the user
  // opens could drive the agent). Empty: no CORS headers (same origin only).
  std::vector<std::string> cors_origins;
  // Counts HTTP requests by route and code (and relayed Generates, below);
  // served by the agent's --metrics listener. nullptr: no counting.
  MetricsRegistry* metrics = nullptr;
  // Record each relayed Generate in EdgeMetrics (outcome, TTFT, decode tok/s,
  // KV bytes, fallbacks). Turn off when EdgeService records every Generate.
  bool record_generate_metrics = true;
  // Larger request bodies get 413. The relay channel's message cap is twice
  // this (a prompt's token ids may take more bytes than its text), and the
  // agent's gRPC receive cap (EdgeServerOptions) must be at least that.
  size_t max_body_bytes = size_t{8} << 20;
  // Set: "Authorization: Bearer KEY" with one of these keys is required on
  // every route but /health (else 401), and is relayed to the agent.
  std::shared_ptr<const ApiKeySet> api_keys;
  // Both set: HTTPS with this PEM certificate chain and key.
  std::string tls_cert_path;
  std::string tls_key_path;
  int threads = 8;                      // HTTP worker threads = concurrent requests
  std::chrono::milliseconds generate_timeout{std::chrono::minutes(10)};  // deadline of each Generate
};

// One --cors-origin value: "scheme://host[:port]" (http or https, no path) or
// "*" (only with API keys). INVALID_ARGUMENT naming the value otherwise.
absl::Status check_cors_origin(const std::string& origin, bool has_api_keys);

class HttpFrontEnd {
 public:
  // Loads the tokenizer (model_path), binds `listen` and starts serving.
  // INVALID_ARGUMENT for a malformed address or empty grpc_target;
  // UNAVAILABLE when the address cannot be bound; the model file's errors.
  static absl::StatusOr<std::unique_ptr<HttpFrontEnd>> Start(const HttpFrontEndOptions& options);
  ~HttpFrontEnd();  // Stop()
  HttpFrontEnd(const HttpFrontEnd&) = delete;
  HttpFrontEnd& operator=(const HttpFrontEnd&) = delete;

  int port() const;
  const std::string& model_name() const;
  // Cancels running Generate calls, stops accepting, joins the workers.
  void Stop();

  class Impl;

 private:
  explicit HttpFrontEnd(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton
