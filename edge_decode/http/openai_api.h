// The OpenAI-compatible API of baton-edge, as pure functions: JSON request
// bodies -> OpenAiRequest -> v1::GenerateRequest, and GenerateResponse
// figures -> OpenAI JSON answers, SSE chunks and error bodies. The HTTP
// front end (http_front_end.h) does the I/O and relays to the agent's own
// Edge.Generate, so both front ends share one code path.
//
// Request fields (POST /v1/completions, POST /v1/chat/completions):
//   model        string; empty or absent: the served model
//   prompt       completions: a string, a list of one string, or a list of token ids
//   messages     chat: [{role, content}]; content a string or a list of
//                {"type": "text", "text": ...} parts; role "developer" = "system"
//   max_tokens   (or max_completion_tokens) tokens to generate; absent: agent default
//   temperature, top_p, seed, stop (a string or a list of at most 16, each
//                at most 1024 bytes: stop_matcher.h),
//   stream, stream_options.include_usage, n (1 only)
//   frequency_penalty, presence_penalty  in [-2, 2], over the generated tokens
//   logprobs     chat: true/false, with top_logprobs 0..20 alternatives;
//                completions: the number of alternatives, 0..20
//   baton        Baton's own options, all optional:
//                {"policy": "auto|local|cloud", "pack": ID, "session": ID,
//                 "codec": "f16|int8|int4|<full codec name>", "top_k": N,
//                 "min_p": X, "repetition_penalty": X,
//                 "context_overflow": "refuse|truncate|shift", "keep_tokens": N,
//                 "early_tokens": N (0..64), "speculative": N (0..16)}
// Fields Baton cannot honour (tools, tool_choice, functions, function_call,
// response_format other than {"type": "text"}, logit_bias with entries,
// audio, modalities beyond ["text"], prediction, reasoning_effort,
// web_search_options, echo, suffix, best_of > 1, n > 1) are INVALID_ARGUMENT
// naming the field (unsupported_field_error), never silently dropped.
// Harmless fields clients send by default (user, store, metadata,
// service_tier, parallel_tool_calls, empty tools, tool_choice "none", ...)
// and unknown fields are accepted and ignored, as llama-server and vLLM do.
//
// The `model` field may name anything: this agent serves one model, and every
// answer's `model` is that model's id (see HttpFrontEndOptions.model_aliases).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "edge_decode/http/chat_template.h"
#include "proto/baton.pb.h"

namespace baton {

enum class OpenAiEndpoint { kCompletions, kChatCompletions };

struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  std::string model;                    // empty: the served model
  // Completions: the prompt as text, or as token ids when given as integers.
  std::string prompt;
  std::vector<uint32_t> prompt_tokens;
  std::vector<ChatMessage> messages;    // chat
  uint32_t max_tokens = 0;              // 0: the agent's default
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  float frequency_penalty = 0.0f;       // [-2, 2]; 0: off
  float presence_penalty = 0.0f;        // [-2, 2]; 0: off
  // Set: report the log-probability of each generated token plus this many
  // alternatives (chat: logprobs true + top_logprobs; completions: logprobs N).
  std::optional<uint32_t> logprobs;
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  // vLLM's "cache_salt": partitions the cloud's prefix cache (at most
  // kMaxCacheSaltBytes bytes); empty: none.
  std::string cache_salt;
  // "baton" extension.
  v1::SplitPolicy policy = v1::SPLIT_POLICY_UNSPECIFIED;
  std::string pack_id;
  std::string session_id;
  std::string codec;                    // codec name; empty: the agent's default
  std::optional<uint32_t> top_k;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  v1::ContextOverflow context_overflow = v1::CONTEXT_OVERFLOW_UNSPECIFIED;
  std::optional<uint32_t> keep_tokens;
  std::optional<uint32_t> early_tokens;  // "baton": {"early_tokens": N}
  std::optional<uint32_t> speculative;   // "baton": {"speculative": N}
};

// INVALID_ARGUMENT for a request field Baton does not implement: the message
// names `field` and says `why`; the HTTP answer carries param = field and
// code = "unsupported_parameter" (http_error_from_status).
absl::Status unsupported_field_error(std::string_view field, std::string_view why);

// Parses and type-checks a request body. INVALID_ARGUMENT naming the field
// for malformed JSON, a field of the wrong type, n != 1, an empty prompt or
// message list, or an unknown policy. Value ranges the agent checks
// (temperature, top_p, codec fit) are left to it.
absl::StatusOr<OpenAiRequest> parse_openai_request(OpenAiEndpoint endpoint, std::string_view body);

// The GenerateRequest for `request` with everything but a chat prompt filled
// (completions: text or tokens; chat: the caller sets tokens from
// tokenize_chat). INVALID_ARGUMENT for a codec name that does not parse.
absl::StatusOr<v1::GenerateRequest> to_generate_request(const OpenAiRequest& request);

// The messages to render for a chat turn. A new conversation renders all of
// them. When the agent already holds the session (`session_exists`), only the
// messages after the last assistant message are new (clients resend the whole
// history; the session holds it already).
std::vector<ChatMessage> new_chat_messages(const std::vector<ChatMessage>& messages, bool session_exists);

// "stop" | "length" (FINISH_REASON_LENGTH and CONTEXT_FULL) | "stop" for EOS.
const char* openai_finish_reason(v1::FinishReason reason);

// Identity of one answer, shared by all its chunks.
struct OpenAiAnswerInfo {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  std::string id;          // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;     // unix seconds
  std::string model;
};

// A fresh id for `endpoint` ("cmpl-" / "chatcmpl-" + 24 hex digits).
std::string new_openai_id(OpenAiEndpoint endpoint);

// The log-probabilities of some generated tokens (TextPiece.logprobs), for
// choices[].logprobs: chat {"content": [{token, logprob, bytes, top_logprobs}]},
// completions {tokens, token_logprobs, top_logprobs, text_offset}.
struct OpenAiLogprobs {
  std::vector<v1::TokenLogprob> tokens;
  // Token id -> the bytes it decodes to (Tokenizer::token_piece).
  std::function<std::string(uint32_t)> piece;
  // Completions: the answer's byte offset of the first token (a stream's
  // chunks continue where the previous one ended).
  size_t text_offset = 0;
};

// stream false: the whole answer, with usage and Baton's figures under "baton"
// (ttft_ms, decode_tokens_per_s, prefill place and reason, session, ...).
// `logprobs` set: choices[0].logprobs (else null).
std::string openai_answer_json(const OpenAiAnswerInfo& info, std::string_view text, const v1::Stats& stats,
                               const OpenAiLogprobs* logprobs = nullptr);

// stream true: one chunk's JSON (without the "data: " framing). `text` is the
// new text; `finish_reason` set on the last chunk (with empty text); `role`
// adds delta.role = "assistant" (the first chat chunk); `logprobs` set:
// choices[0].logprobs for the tokens of this chunk.
std::string openai_chunk_json(const OpenAiAnswerInfo& info, std::string_view text,
                              std::optional<v1::FinishReason> finish_reason, bool role = false,
                              const OpenAiLogprobs* logprobs = nullptr);
// The last chunk of a stream: finish_reason (as openai_chunk_json) and
// Baton's figures under "baton", so a client that does not ask for usage
// (the web page) still gets the turn's stats.
std::string openai_final_chunk_json(const OpenAiAnswerInfo& info, const v1::Stats& stats);
// The usage chunk sent before [DONE] when stream_options.include_usage: empty
// choices, usage and Baton's figures.
std::string openai_usage_chunk_json(const OpenAiAnswerInfo& info, const v1::Stats& stats);

// SSE framing: "data: " + json + "\n\n"; the stream ends with "data: [DONE]\n\n".
std::string sse_event(std::string_view json);
inline constexpr char kSseDone[] = "data: [DONE]\n\n";

// GET /v1/models: the served model, then each alias (same model).
std::string openai_models_json(std::string_view model, int64_t created, const std::vector<std::string>& aliases = {});
std::string openai_model_json(std::string_view model, int64_t created);

// An error as OpenAI sends it: {"error": {"message", "type", "param", "code"}}.
std::string openai_error_json(std::string_view message, std::string_view type, std::string_view code = {},
                              std::string_view param = {});

// An HTTP answer for a failed call.
struct HttpError {
  int http_status = 500;
  std::string body;              // openai_error_json
  int retry_after_s = 0;         // > 0: send a Retry-After header
};

// gRPC status of Edge.Generate -> HTTP: INVALID_ARGUMENT 400,
// UNAUTHENTICATED 401, PERMISSION_DENIED 403, NOT_FOUND 404,
// RESOURCE_EXHAUSTED 413 for a size error (no retry hint; the message names
// tokens) else 429, UNAVAILABLE 503, others 500. `retry_after_ms` (the
// baton-retry-after-ms trailer; 0 if none) becomes Retry-After in whole
// seconds, at least 1, on 429 and 503.
HttpError http_error_from_status(const absl::Status& status, uint32_t retry_after_ms);

}  // namespace baton
