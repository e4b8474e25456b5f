// libFuzzer target: arbitrary bytes -> the edge agent's request handling:
// Edge.Generate (generate_turn's validation, sessions, packs, sampling,
// codecs; policy LOCAL, no cloud), the session and pack RPCs, and the
// OpenAI-compatible HTTP front end (openai_api parse -> chat template ->
// the same Generate). A real EdgeServer and HttpFrontEnd run on 127.0.0.1:0
// in this process over a tiny synthetic Q4_0 model with one prefix pack on
// disk; calls go through a stub / an HTTP client with short deadlines.
//
// Input: one options byte, then records [tag: 1 byte][length: 2 bytes LE]
// [payload: length bytes]:
//   tag % 6 == 0  v1::GenerateRequest (ParseFromArray)  -> Generate
//   tag % 6 == 1  v1::DeleteSessionRequest              -> DeleteSession
//   tag % 6 == 2  (payload ignored)                     -> ListSessions + ListPacks
//   tag % 6 == 3  JSON body                             -> POST /v1/completions
//   tag % 6 == 4  JSON body                             -> POST /v1/chat/completions
//   tag % 6 == 5  v1::PullPackRequest                   -> PullPack (no cloud: refused)
// Options byte: its value modulo baton::kChatTemplateFamilyCount picks the
// chat template family the pure chat functions render with (the front end
// uses the model's own).
// The caller of a record is (tag / 6) % 4: 0 Alice's key, 1 Bob's key (the
// agent runs with both, --api-key-file), 2 a wrong key, 3 no key.
//
// The harness keeps each input cheap and self-contained: Generate gets
// policy LOCAL, max_tokens capped at kMaxTokens, prompts cut to
// kMaxPromptTokens tokens / kMaxPromptBytes bytes; HTTP bodies whose
// max_tokens passes kMaxTokens are checked by the pure functions only; every
// session is deleted at the end of an input.
//
// Invariants (abort on violation): no call without a valid key succeeds
// (gRPC UNAUTHENTICATED, HTTP 401 invalid_api_key) nor changes any session;
// a key lists only sessions it named itself, and no call of one key changes
// what the other key sees; no crash, UB or leak; every refusal is a
// non-OK status with a non-empty message and a code the rpc documents; a
// refused Generate or DeleteSession leaves the session store (ids and token
// counts) unchanged; an accepted Generate ends with exactly one Stats;
// parse_openai_request / to_generate_request either refuse with
// INVALID_ARGUMENT and a message or give a request with a prompt; every HTTP
// answer is JSON (or SSE ending in [DONE]), errors {"error": {"message": ...}}
// with a non-empty message.
//
//   tests/fuzz/build.sh services && tests/fuzz/run.sh edge_request 600
//   BATON_FUZZ_WRITE_SEEDS=DIR build-fuzz/edge_request_fuzz   (writes the seed corpus, exits)
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/stubs/logging.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "common/engine/engine.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/kv_stream/kv_pack_file.h"
#include "common/kv_stream/kv_stream_writer.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "common/model/model_quantize.h"
#include "common/model/model_synth.h"
#include "common/model/synth_shapes.h"
#include "common/rpc/api_keys.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/log.h"
#include "edge_decode/http/chat_template.h"
#include "edge_decode/edge_server.h"
#include "edge_decode/edge_service.h"
#include "edge_decode/http/http_front_end.h"
#include "edge_decode/http/openai_api.h"
#include "proto/baton.grpc.pb.h"
#include "tests/fuzz/service_fuzz_common.h"

namespace {

using baton::fuzz::check_refusal;
using baton::fuzz::die_unless_ok;
using baton::fuzz::record;
using baton::fuzz::require;
using baton::fuzz::seed_prompt;
using baton::fuzz::trace;
using baton::fuzz::write_seed;

constexpr uint32_t kMaxTokens = 4;          // generated tokens per turn
constexpr int kMaxPromptTokens = 64;        // token-id prompts are cut here
constexpr size_t kMaxPromptBytes = 256;     // text prompts are cut here
constexpr size_t kMaxBodyBytes = 2048;      // longer HTTP bodies go to the pure functions only
constexpr int kMaxCalls = 8;                // RPCs / HTTP requests per input
constexpr int kDeadlineSeconds = 20;        // per call; a hang shows as DEADLINE_EXCEEDED -> abort
constexpr char kPackId[] = "sys";           // the pack on disk
constexpr int kPackTokens = 8;

struct Harness {
  std::string dir;
  std::string model_path;
  std::unique_ptr<baton::Model> model;  // the served file, for the pure chat functions
  std::unique_ptr<baton::Tokenizer> tokenizer;
  baton::ChatFormat chat_format;
  std::unique_ptr<baton::EdgeService> service;
  std::unique_ptr<baton::EdgeServer> server;
  std::unique_ptr<baton::HttpFrontEnd> http;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<baton::v1::Edge::Stub> stub;
  std::unique_ptr<httplib::Client> client;
};

Harness* harness = nullptr;

// Who makes a call (the record's tag / 6 % 4).
enum Caller { kAlice = 0, kBob = 1, kWrongKey = 2, kNoKey = 3 };
constexpr const char* kCallerKeys[] = {"fuzz-alice-key-0123456789", "fuzz-bob-key-0123456789ab",
                                       "fuzz-wrong-key-0123456789", ""};
Caller g_caller = kAlice;
bool authorized() { return g_caller == kAlice || g_caller == kBob; }
// Session ids each key named in this input's requests: all it may ever list.
std::set<std::string> g_named[2];

void add_key(grpc::ClientContext& context, Caller who) {
  if (kCallerKeys[who][0] != '\0') context.AddMetadata("authorization", std::string("Bearer ") + kCallerKeys[who]);
}

std::chrono::system_clock::time_point deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(kDeadlineSeconds);
}

// Session id -> token count, as `who` (Alice or Bob; default: the caller) sees them.
std::map<std::string, uint32_t> sessions(Caller who = g_caller) {
  require(who == kAlice || who == kBob, "sessions() of a key holder");
  grpc::ClientContext context;
  context.set_deadline(deadline());
  add_key(context, who);
  baton::v1::ListSessionsResponse response;
  const grpc::Status status = harness->stub->ListSessions(&context, baton::v1::ListSessionsRequest(), &response);
  require(status.ok(), "ListSessions: " + status.error_message());
  std::map<std::string, uint32_t> out;
  for (const baton::v1::SessionInfo& info : response.sessions()) {
    require(!info.busy(), "no session is busy between calls");
    out[info.session_id()] = info.token_count();
    require(g_named[who].count(info.session_id()) == 1,
            "a key lists a session it never named: " + info.session_id());
  }
  return out;
}

// What both keys see.
using Views = std::pair<std::map<std::string, uint32_t>, std::map<std::string, uint32_t>>;
Views views() { return {sessions(kAlice), sessions(kBob)}; }

// The other key's view, before a call of an authorized caller.
std::map<std::string, uint32_t> other_view() { return sessions(g_caller == kAlice ? kBob : kAlice); }

// A call without a valid key: refused UNAUTHENTICATED with a message, nothing changed.
void require_unauthenticated(const grpc::Status& status, const char* rpc, const Views& before) {
  trace(rpc, status);
  require(status.error_code() == grpc::StatusCode::UNAUTHENTICATED && !status.error_message().empty(),
          absl::StrFormat("%s without a valid key: code %d: %s", rpc, static_cast<int>(status.error_code()),
                          status.error_message()));
  require(views() == before, absl::StrFormat("%s without a valid key changed a session", rpc));
}

void list_packs() {
  grpc::ClientContext context;
  context.set_deadline(deadline());
  add_key(context, g_caller);
  baton::v1::ListPacksResponse response;
  const grpc::Status status = harness->stub->ListPacks(&context, baton::v1::ListPacksRequest(), &response);
  if (!authorized()) return require_unauthenticated(status, "ListPacks", views());
  require(status.ok() && response.packs_size() == 1 && response.packs(0).pack_id() == kPackId,
          "ListPacks lists the one pack");
}

// --- seeds -------------------------------------------------------------------

void write_seeds(const std::string& dir) {
  namespace v1 = baton::v1;
  std::filesystem::create_directories(dir);
  auto generate = [](const std::vector<int32_t>& tokens, const std::string& session) {
    v1::GenerateRequest request;
    for (int32_t id : tokens) request.mutable_tokens()->add_ids(static_cast<uint32_t>(id));
    request.set_session_id(session);
    request.set_policy(v1::SPLIT_POLICY_LOCAL);
    request.set_max_tokens(3);
    request.mutable_sampling()->set_temperature(0.0f);
    return request;
  };
  write_seed(dir, "generate_tokens", std::string(1, '\0') + record(0, generate(seed_prompt(10, 1), "").SerializeAsString()));
  {  // Two turns of a session, then list, delete it, delete it again.
    v1::GenerateRequest first = generate(seed_prompt(12, 2), "s1");
    first.mutable_codec()->set_codec(v1::KV_CODEC_INT8);
    first.set_progress(true);
    v1::GenerateRequest second = generate(seed_prompt(5, 3), "s1");
    second.mutable_codec()->set_codec(v1::KV_CODEC_INT8);
    second.add_stop("a");
    v1::DeleteSessionRequest del;
    del.set_session_id("s1");
    write_seed(dir, "session_turns", std::string(1, '\0') + record(0, first.SerializeAsString()) +
                                         record(0, second.SerializeAsString()) + record(2, "") +
                                         record(1, del.SerializeAsString()) + record(1, del.SerializeAsString()));
  }
  {
    v1::GenerateRequest request;
    request.set_text("In the beginning");
    request.set_session_id("text-1");
    request.set_pack_id(kPackId);
    request.set_max_tokens(2);
    v1::SamplingParams* sampling = request.mutable_sampling();
    sampling->set_temperature(0.7f);
    sampling->set_top_k(5);
    sampling->set_top_p(0.9f);
    sampling->set_seed(7);
    request.mutable_codec()->set_codec(v1::KV_CODEC_INT4);
    write_seed(dir, "generate_text_pack_sampling", std::string(1, '\0') + record(0, request.SerializeAsString()));
    v1::PullPackRequest pull;
    pull.set_pack_id(kPackId);
    write_seed(dir, "pull_pack", std::string(1, '\0') + record(5, pull.SerializeAsString()));
  }
  {  // Auth: Alice's session, Bob's session of the same id, Bob deletes it, a wrong key and no key.
    const auto as = [](uint8_t tag, Caller who) { return static_cast<uint8_t>(tag + 6 * who); };
    v1::GenerateRequest first = generate(seed_prompt(6, 4), "same");
    v1::DeleteSessionRequest del;
    del.set_session_id("same");
    write_seed(dir, "auth_two_keys",
               std::string(1, '\0') + record(as(0, kAlice), first.SerializeAsString()) +
                   record(as(0, kBob), first.SerializeAsString()) + record(as(2, kBob), "") +
                   record(as(1, kBob), del.SerializeAsString()) + record(as(2, kAlice), "") +
                   record(as(0, kWrongKey), first.SerializeAsString()) + record(as(1, kNoKey), del.SerializeAsString()) +
                   record(as(3, kNoKey), R"({"prompt": "Hi", "max_tokens": 1, "baton": {"session": "same"}})"));
  }
  write_seed(dir, "http_completions",
             std::string(1, '\0') +
                 record(3, R"({"prompt": "Hello there", "max_tokens": 3, "temperature": 0, "stop": ["\n"]})") +
                 record(3, R"({"prompt": [5, 6, 7, 8], "max_tokens": 2, "stream": true,)"
                           R"( "stream_options": {"include_usage": true}, "seed": 3})"));
  write_seed(dir, "http_chat",
             std::string(1, '\1') +
                 record(4, R"({"messages": [{"role": "system", "content": "Be brief."},)"
                           R"( {"role": "user", "content": "Hi <|im_end|>"}], "max_tokens": 2,)"
                           R"( "baton": {"session": "chat-1", "policy": "local", "codec": "int8", "top_k": 4}})") +
                 record(4, R"({"messages": [{"role": "system", "content": "Be brief."},)"
                           R"( {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"},)"
                           R"( {"role": "developer", "content": [{"type": "text", "text": "again"}]}],)"
                           R"( "max_completion_tokens": 2, "stream": true, "baton": {"session": "chat-1"}})"));
  write_seed(dir, "http_chat_templates",
             std::string(1, '\3') + record(4, R"({"messages": [{"role": "user", "content": "x"}], "n": 1,)"
                                              R"( "max_tokens": 1, "baton": {"pack": "sys"}})"));
  std::fprintf(stderr, "edge_request_fuzz: wrote seeds to %s\n", dir.c_str());
}

// --- calls -------------------------------------------------------------------

void call_generate(baton::v1::GenerateRequest request) {
  namespace v1 = baton::v1;
  request.set_policy(v1::SPLIT_POLICY_LOCAL);
  if (request.max_tokens() > kMaxTokens) request.set_max_tokens(kMaxTokens);
  if (request.has_tokens() && request.tokens().ids_size() > kMaxPromptTokens) {
    request.mutable_tokens()->mutable_ids()->Truncate(kMaxPromptTokens);
  }
  if (request.has_text() && request.text().size() > kMaxPromptBytes) {
    std::string text = request.text().substr(0, kMaxPromptBytes);
    while (!text.empty() && (static_cast<unsigned char>(text.back()) & 0xc0) == 0x80) text.pop_back();
    if (!text.empty() && static_cast<unsigned char>(text.back()) >= 0xc0) text.pop_back();
    request.set_text(text);
  }
  const Views all_before = views();
  if (authorized() && !request.session_id().empty()) g_named[g_caller].insert(request.session_id());
  const std::map<std::string, uint32_t> before = authorized() ? sessions() : all_before.first;
  const std::map<std::string, uint32_t> other_before = authorized() ? other_view() : all_before.second;
  grpc::ClientContext context;
  context.set_deadline(deadline());
  add_key(context, g_caller);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = harness->stub->Generate(&context, request);
  v1::GenerateResponse response;
  int stats = 0;
  uint32_t generated = 0;
  while (reader->Read(&response)) {
    require(stats == 0, "nothing follows Stats");
    if (response.has_stats()) ++stats;
    if (response.has_text()) generated += static_cast<uint32_t>(response.text().token_ids_size());
  }
  const grpc::Status status = reader->Finish();
  if (!authorized()) return require_unauthenticated(status, "Generate", all_before);
  trace("Generate", status);
  require(other_view() == other_before, "a Generate of one key changed the other key's sessions");
  if (status.ok()) {
    require(stats == 1, "an accepted Generate ends with one Stats");
    require(generated <= std::max(kMaxTokens, request.max_tokens()), "no more tokens than max_tokens");
    if (request.session_id().empty()) require(sessions() == before, "a one-shot Generate keeps no session");
    return;
  }
  check_refusal(status, "Generate",
                {grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::NOT_FOUND,
                 grpc::StatusCode::RESOURCE_EXHAUSTED, grpc::StatusCode::FAILED_PRECONDITION});
  require(sessions() == before, "a refused Generate leaves the session store unchanged: " + status.error_message());
}

void call_delete_session(const baton::v1::DeleteSessionRequest& request) {
  const Views all_before = views();
  const std::map<std::string, uint32_t> before = authorized() ? sessions() : all_before.first;
  const std::map<std::string, uint32_t> other_before = authorized() ? other_view() : all_before.second;
  grpc::ClientContext context;
  context.set_deadline(deadline());
  add_key(context, g_caller);
  baton::v1::DeleteSessionResponse response;
  const grpc::Status status = harness->stub->DeleteSession(&context, request, &response);
  if (!authorized()) return require_unauthenticated(status, "DeleteSession", all_before);
  trace("DeleteSession", status);
  require(other_view() == other_before, "a DeleteSession of one key changed the other key's sessions");
  std::map<std::string, uint32_t> after = sessions();
  if (status.ok()) {
    require(before.count(request.session_id()) == 1, "DeleteSession deleted a session that existed");
    std::map<std::string, uint32_t> expected = before;
    expected.erase(request.session_id());
    require(after == expected, "DeleteSession removes that session only");
    return;
  }
  check_refusal(status, "DeleteSession",
                {grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::NOT_FOUND,
                 grpc::StatusCode::FAILED_PRECONDITION});
  require(after == before, "a refused DeleteSession leaves the session store unchanged");
}

void call_pull_pack(const baton::v1::PullPackRequest& request) {
  const Views before = views();
  grpc::ClientContext context;
  context.set_deadline(deadline());
  add_key(context, g_caller);
  std::unique_ptr<grpc::ClientReader<baton::v1::PullPackResponse>> reader =
      harness->stub->PullPack(&context, request);
  baton::v1::PullPackResponse response;
  while (reader->Read(&response)) {
  }
  const grpc::Status status = reader->Finish();
  if (!authorized()) return require_unauthenticated(status, "PullPack", before);
  trace("PullPack", status);
  require(!status.ok(), "PullPack without a cloud is refused");
  check_refusal(status, "PullPack", {grpc::StatusCode::FAILED_PRECONDITION});
}

// What the pure front-end functions made of a body.
struct OpenAiVerdict {
  bool accepted = false;      // parsed and converted
  bool cheap = false;         // accepted with small max_tokens and prompt: may be sent
  bool stream = false;
};

// The pure front-end functions on `body`.
OpenAiVerdict check_openai_functions(baton::OpenAiEndpoint endpoint, const std::string& body, int family) {
  OpenAiVerdict verdict;
  absl::StatusOr<baton::OpenAiRequest> parsed = baton::parse_openai_request(endpoint, body);
  if (!parsed.ok()) {
    require(absl::IsInvalidArgument(parsed.status()) && !parsed.status().message().empty(),
            "parse_openai_request refuses with INVALID_ARGUMENT and a message: " + parsed.status().ToString());
    return verdict;
  }
  if (endpoint == baton::OpenAiEndpoint::kCompletions) {
    require(!parsed->prompt.empty() || !parsed->prompt_tokens.empty(), "a parsed completion has a prompt");
  } else {
    require(!parsed->messages.empty(), "a parsed chat has messages");
  }
  absl::StatusOr<baton::v1::GenerateRequest> request = baton::to_generate_request(*parsed);
  if (!request.ok()) {
    require(absl::IsInvalidArgument(request.status()) && !request.status().message().empty(),
            "to_generate_request refuses with INVALID_ARGUMENT and a message: " + request.status().ToString());
    return verdict;
  }
  if (endpoint == baton::OpenAiEndpoint::kCompletions) {
    require(request->has_text() || request->has_tokens(), "a completion request has a prompt");
  } else {
    for (bool session_exists : {false, true}) {
      const std::vector<baton::ChatMessage> messages = baton::new_chat_messages(parsed->messages, session_exists);
      require(messages.size() <= parsed->messages.size(), "new_chat_messages returns a suffix");
      if (messages.empty()) continue;
      baton::ChatRenderOptions options = harness->chat_format.options;
      options.continuation = session_exists;
      const auto segments = baton::render_chat(static_cast<baton::ChatTemplateFamily>(family), messages, options);
      require(!baton::chat_text(segments).empty(), "a rendered chat is not empty");
      const std::vector<int32_t> tokens = baton::tokenize_chat(*harness->tokenizer, segments, !session_exists);
      require(!tokens.empty(), "a rendered chat has tokens");
      for (int32_t id : tokens) {
        require(id >= 0 && id < harness->model->spec().n_vocab, "chat token ids are in the vocabulary");
      }
    }
  }
  verdict.accepted = true;
  verdict.stream = parsed->stream;
  // A long decode or prompt is not sent (the per-input cost cap).
  verdict.cheap = parsed->max_tokens <= kMaxTokens && parsed->prompt.size() <= kMaxPromptBytes &&
                  parsed->prompt_tokens.size() <= kMaxPromptTokens;
  return verdict;
}

void check_http_answer(const httplib::Result& result, bool stream) {
  require(static_cast<bool>(result), "the HTTP front end answers");
  const int code = result->status;
  const std::string& body = result->body;
  if (code == 200 && stream) {
    require(body.size() >= sizeof(baton::kSseDone) - 1 &&
                body.compare(body.size() - (sizeof(baton::kSseDone) - 1), std::string::npos, baton::kSseDone) == 0,
            "an SSE answer ends with [DONE]");
    size_t at = 0;
    while (at < body.size()) {
      const size_t end = body.find("\n\n", at);
      require(end != std::string::npos && body.compare(at, 6, "data: ") == 0, "SSE events are 'data: ...\\n\\n'");
      const std::string data = body.substr(at + 6, end - at - 6);
      if (data != "[DONE]") {
        const nlohmann::json event = nlohmann::json::parse(data, nullptr, false);
        require(!event.is_discarded(), "an SSE event is JSON");
        if (event.contains("error")) {
          require(event["error"].is_object() && event["error"].value("message", "") != "",
                  "an SSE error has a message");
        }
      }
      at = end + 2;
    }
    return;
  }
  const nlohmann::json json = nlohmann::json::parse(body, nullptr, false);
  require(!json.is_discarded(), absl::StrFormat("HTTP %d answer is JSON: %s", code, body));
  if (code == 200) {
    require(json.contains("choices") && json["choices"].is_array(), "a 200 answer has choices");
    return;
  }
  require(code >= 400, absl::StrFormat("HTTP status %d is an error", code));
  require(json.contains("error") && json["error"].is_object() && json["error"].contains("message") &&
              json["error"]["message"].is_string() && !json["error"]["message"].get<std::string>().empty(),
          absl::StrFormat("HTTP %d error has a message: %s", code, body));
}

void call_http(baton::OpenAiEndpoint endpoint, const std::string& body, int family) {
  const OpenAiVerdict verdict = check_openai_functions(endpoint, body, family);
  if (body.size() > kMaxBodyBytes) return;
  // Bodies the functions accept are sent when they are cheap; a sample of
  // refused ones is sent too (the error path of the front end).
  if (verdict.accepted ? !verdict.cheap : (body.size() % 4) != 0) return;
  const Views all_before = views();
  if (authorized()) {  // the session the body names, as the front end reads it
    const nlohmann::json json = nlohmann::json::parse(body, nullptr, false);
    if (json.is_object() && json.contains("baton") && json["baton"].is_object() && json["baton"].contains("session") &&
        json["baton"]["session"].is_string()) {
      g_named[g_caller].insert(json["baton"]["session"].get<std::string>());
    }
  }
  const std::map<std::string, uint32_t> before = authorized() ? sessions() : all_before.first;
  const std::map<std::string, uint32_t> other_before = authorized() ? other_view() : all_before.second;
  const char* path = endpoint == baton::OpenAiEndpoint::kCompletions ? "/v1/completions" : "/v1/chat/completions";
  httplib::Headers headers;
  if (kCallerKeys[g_caller][0] != '\0') headers.emplace("Authorization", std::string("Bearer ") + kCallerKeys[g_caller]);
  httplib::Result result = harness->client->Post(path, headers, body, "application/json");
  static const bool verbose = std::getenv("EDGE_REQUEST_FUZZ_VERBOSE") != nullptr;
  if (verbose && result) std::fprintf(stderr, "edge_request_fuzz: POST %s -> %d %.300s\n", path, result->status, result->body.c_str());
  check_http_answer(result, verdict.stream);
  if (!authorized()) {
    require(result->status == 401 && result->body.find("invalid_api_key") != std::string::npos,
            absl::StrFormat("HTTP without a valid key: %d %s", result->status, result->body));
    require(views() == all_before, "an HTTP request without a valid key changed a session");
    return;
  }
  require(other_view() == other_before, "an HTTP request of one key changed the other key's sessions");
  if (result->status != 200) require(sessions() == before, "a refused HTTP request leaves the sessions unchanged");
}

void delete_all_sessions(Caller who) {
  for (const auto& [id, tokens] : sessions(who)) {
    grpc::ClientContext context;
    context.set_deadline(deadline());
    add_key(context, who);
    baton::v1::DeleteSessionRequest request;
    request.set_session_id(id);
    baton::v1::DeleteSessionResponse response;
    const grpc::Status status = harness->stub->DeleteSession(&context, request, &response);
    require(status.ok(), "DeleteSession of a listed session: " + status.error_message());
  }
}

// The pack on disk: the engine's f16 KV of kPackTokens tokens.
void write_pack(const std::string& packs_dir) {
  const std::vector<int32_t> tokens = seed_prompt(kPackTokens, 6);
  baton::Engine engine(*harness->model, baton::EngineOptions{.n_threads = 1});
  const baton::KvGeometry geometry = engine.kv_geometry();
  baton::F32KvCache cache(geometry, kPackTokens);
  die_unless_ok(engine.prefill(tokens, cache, nullptr), "pack prefill");
  absl::StatusOr<baton::ModelFingerprint> fingerprint = baton::model_fingerprint(*harness->model);
  die_unless_ok(fingerprint.status(), "fingerprint");
  baton::KvStreamHeaderInfo info;
  info.model = *fingerprint;
  info.codec = baton::default_kv_codec_config(baton::KvCodecConfig::Bits::kF16, geometry);
  info.token_ids = tokens;
  info.prefix_digest = baton::prefix_digest(tokens);
  info.pack_id = kPackId;
  info.description = "fuzz system prompt";
  std::filesystem::create_directories(packs_dir);
  absl::StatusOr<std::unique_ptr<baton::KvPackFileWriter>> file =
      baton::KvPackFileWriter::create(packs_dir + "/" + kPackId + ".batonkv");
  die_unless_ok(file.status(), "pack file");
  baton::KvStreamWriter writer((*file)->sink());
  const baton::KvRope rope = baton::kv_rope_of(*harness->model);
  die_unless_ok(baton::write_kv_segment(cache, info, &rope, writer), "pack stream");
  die_unless_ok((*file)->commit(), "pack commit");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  baton::fuzz::g_target = "edge_request_fuzz";
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int, const std::string&) {});
  baton::set_log_level(baton::LogLevel::kError);
  harness = new Harness;
  if (const char* seeds = std::getenv("BATON_FUZZ_WRITE_SEEDS")) {
    write_seeds(seeds);
    std::exit(0);
  }
  char pattern[] = "/tmp/baton-edge-fuzz-XXXXXX";
  require(mkdtemp(pattern) != nullptr, "mkdtemp");
  harness->dir = pattern;
  const std::string source_path = harness->dir + "/tiny-f16.gguf";
  die_unless_ok(baton::synthesize_model(*baton::find_synth_shape("tiny"),
                                        baton::SynthOptions{baton::GgmlType::kF16, 1, 1}, source_path),
                "synthesize the tiny model");
  harness->model_path = harness->dir + "/tiny-q4_0.gguf";
  baton::QuantizeOptions quantize;
  quantize.type = baton::GgmlType::kQ4_0;
  quantize.n_threads = 1;
  die_unless_ok(baton::quantize_model(source_path, harness->model_path, quantize), "quantize");
  absl::StatusOr<std::unique_ptr<baton::Model>> model = baton::Model::Load(harness->model_path);
  die_unless_ok(model.status(), "load the model");
  harness->model = std::move(*model);
  absl::StatusOr<std::unique_ptr<baton::Tokenizer>> tokenizer = baton::Tokenizer::FromGguf(harness->model->file());
  die_unless_ok(tokenizer.status(), "tokenizer");
  harness->tokenizer = std::move(*tokenizer);
  harness->chat_format = baton::chat_format_from_gguf(harness->model->file(), *harness->tokenizer);
  write_pack(harness->dir + "/packs");

  baton::EdgeServiceOptions options;
  options.threads = 1;
  options.memory_budget_bytes = uint64_t{1} << 30;
  options.codec = "f16";
  options.policy = baton::PrefillPolicy::kLocal;
  options.max_tokens = static_cast<int>(kMaxTokens);
  options.packs_dir = harness->dir + "/packs";
  options.max_queued = 4;
  options.warmup_tokens = 4;
  absl::StatusOr<baton::ApiKeySet> keys = baton::ApiKeySet::FromKeys({kCallerKeys[kAlice], kCallerKeys[kBob]});
  die_unless_ok(keys.status(), "API keys");
  options.api_keys = std::make_shared<const baton::ApiKeySet>(std::move(*keys));
  harness->service = std::make_unique<baton::EdgeService>(options);
  absl::StatusOr<std::unique_ptr<baton::EdgeServer>> server = baton::EdgeServer::Start("127.0.0.1:0", *harness->service);
  die_unless_ok(server.status(), "start the edge server");
  harness->server = std::move(*server);
  die_unless_ok(harness->service->Load(harness->model_path), "load the edge service");
  const std::string grpc_target = "127.0.0.1:" + std::to_string(harness->server->port());
  harness->channel = grpc::CreateChannel(grpc_target, grpc::InsecureChannelCredentials());
  harness->stub = baton::v1::Edge::NewStub(harness->channel);

  baton::HttpFrontEndOptions http;
  http.listen = "127.0.0.1:0";
  http.grpc_target = grpc_target;
  http.model_path = harness->model_path;
  http.threads = 2;
  http.generate_timeout = std::chrono::seconds(kDeadlineSeconds);
  http.api_keys = options.api_keys;
  absl::StatusOr<std::unique_ptr<baton::HttpFrontEnd>> front = baton::HttpFrontEnd::Start(http);
  die_unless_ok(front.status(), "start the HTTP front end");
  harness->http = std::move(*front);
  harness->client = std::make_unique<httplib::Client>("127.0.0.1", harness->http->port());
  harness->client->set_read_timeout(kDeadlineSeconds, 0);
  harness->client->set_keep_alive(true);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace v1 = baton::v1;
  if (size == 0) return 0;
  const int family = data[0] % baton::kChatTemplateFamilyCount;
  size_t at = 1;
  int calls = 0;
  bool sent_without_prompt = false;
  g_named[kAlice].clear();
  g_named[kBob].clear();
  while (at < size && calls < kMaxCalls) {
    const uint8_t tag = data[at] % 6;
    g_caller = static_cast<Caller>((data[at] / 6) % 4);
    size_t length = at + 2 < size ? size_t{data[at + 1]} | (size_t{data[at + 2]} << 8) : 0;
    at = std::min(size, at + 3);
    length = std::min(length, size - at);
    const uint8_t* payload = data + at;
    at += length;
    ++calls;
    switch (tag) {
      case 0: {
        v1::GenerateRequest request;
        if (!request.ParseFromArray(payload, static_cast<int>(length))) break;
        // A request without a prompt is refused at once: one per input checks that.
        if (request.prompt_case() == v1::GenerateRequest::PROMPT_NOT_SET && sent_without_prompt) break;
        sent_without_prompt |= request.prompt_case() == v1::GenerateRequest::PROMPT_NOT_SET;
        call_generate(std::move(request));
        break;
      }
      case 1: {
        v1::DeleteSessionRequest request;
        if (request.ParseFromArray(payload, static_cast<int>(length))) call_delete_session(request);
        break;
      }
      case 2:
        if (authorized()) {
          sessions();
        } else {
          const Views before = views();
          grpc::ClientContext context;
          context.set_deadline(deadline());
          add_key(context, g_caller);
          v1::ListSessionsResponse response;
          require_unauthenticated(harness->stub->ListSessions(&context, v1::ListSessionsRequest(), &response),
                                  "ListSessions", before);
          require(response.sessions_size() == 0, "ListSessions without a valid key lists nothing");
        }
        list_packs();
        break;
      case 3:
      case 4:
        call_http(tag == 3 ? baton::OpenAiEndpoint::kCompletions : baton::OpenAiEndpoint::kChatCompletions,
                  std::string(reinterpret_cast<const char*>(payload), length), family);
        break;
      default: {
        v1::PullPackRequest request;
        if (request.ParseFromArray(payload, static_cast<int>(length))) call_pull_pack(request);
        break;
      }
    }
  }
  delete_all_sessions(kAlice);
  delete_all_sessions(kBob);
  return 0;
}
