// baton chat: an interactive multi-turn chat in the terminal.
//
// With the edge agent (default; --edge ADDR): each message goes as
// GenerateRequest.chat to one session (a generated id, printed; --session to
// resume one), so the agent applies its model's chat template, keeps the
// conversation's KV and prefills only the new turn. With --model FILE: the
// CPU engine in this process, the same template (chat_template.h), the
// conversation's KV kept in memory for the chat's lifetime.
//
// Lines from stdin: a message, or a command (chat_session.h). When stdin is
// not a terminal no prompt is printed and each line is one message, so a
// chat can be scripted through a pipe. Ctrl-C stops the answer being written
// (the edge call is cancelled); a second Ctrl-C ends the program.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "chat_session.h"
#include "cli_defaults.h"
#include "commands.h"
#include "common/engine/engine.h"
#include "common/engine/sampler.h"
#include "common/kv_codec/kv_geometry.h"
#include "common/model/model.h"
#include "common/tokenizer/streaming_decoder.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/check.h"
#include "common/util/flags.h"
#include "edge_client.h"
#include "edge_decode/http/chat_template.h"
#include "edge_decode/generate/stop_matcher.h"
#include "generation_flags.h"
#include "interrupt.h"
#include "local_turn.h"
#include "turn_stats.h"

namespace baton::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Local chats hold their KV in the edge agent's store for its default codec
// (local_turn.h: int4, QuantizedKvCache), at most this many tokens (or the
// model's trained context, when smaller).
constexpr int64_t kMaxLocalContextTokens = 4096;

struct ChatFlags {
  std::string edge;
  std::string model;
  std::string session;
  std::string system;
  GenerationFlags generation;
  std::string policy_name;
  EdgeTurnFlags turn;  // --context-overflow, --keep-tokens, --early-tokens
  std::chrono::milliseconds timeout{300'000};
  ChannelSecurityOptions security;
  int64_t threads = 2;
};

std::unique_ptr<FlagSet> chat_flag_set(ChatFlags* out) {
  auto flag_set = std::make_unique<FlagSet>(
      "baton chat", "[--edge ADDR | --model FILE] [--session ID|NAME] [--system TEXT] [flags]",
      absl::StrCat("An interactive chat: type a message, the answer streams back; the conversation is kept "
                   "between turns and the model's chat template is applied. Two modes, chosen explicitly:\n"
                   "  --model FILE  the CPU engine in this process (the conversation lives as long as the "
                   "chat);\n"
                   "  otherwise     the edge agent at --edge ADDR (default $",
                   kEdgeAddressEnv, ", else ", kDefaultEdgeAddress,
                   "): the conversation is a session on the agent (a new id per chat, printed; --session "
                   "resumes one, by id or by a name given with /save).\n"
                   "Commands: /reset, /stats, /save NAME, /help, /quit; Ctrl-C stops an answer. When standard "
                   "input is not a terminal, each line is one message (scripts)."));
  FlagSet& flags = *flag_set;
  add_edge_address_flag(flags, &out->edge);
  flags.add_string("model", &out->model, "chat with the CPU engine here on this GGUF model instead", "FILE");
  flags.add_string("session", &out->session,
                   "resume this session: a name saved with /save, else a session id (edge agent only)", "ID");
  flags.add_string("system", &out->system, "system message that starts each new conversation", "TEXT");
  flags.add_section("sampling (both modes, the same defaults as 'baton generate')");
  add_generation_flags(flags, &out->generation);
  flags.add_section("edge agent only (without --model)");
  flags.add_string("policy", &out->policy_name,
                   "where to prefill: auto, local or cloud; unset: the agent's --policy (auto unless changed)", "NAME");
  add_edge_turn_flags(flags, &out->turn);
  flags.add_duration("timeout", &out->timeout, "deadline of one answer, warm-up retries included");
  add_edge_channel_flags(flags, &out->security);
  flags.add_section("CPU engine only (--model)");
  flags.add_int64("threads", &out->threads, "worker threads");
  return flag_set;
}

// What both modes do with one answer: the text goes to stdout as it comes.
void print_piece(const std::string& text) {
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

// A chat: reads lines, runs commands, sends messages to its backend.
class Chat {
 public:
  Chat(const ChatFlags& flags, const FlagSet& flag_set)
      : flags_(flags), flag_set_(flag_set), interactive_(isatty(STDIN_FILENO) == 1) {}
  virtual ~Chat() = default;

  // The read-eval loop; exit 1 when an answer failed (each failure was
  // printed as it happened).
  absl::Status run() {
    print_banner();
    std::string line;
    while (true) {
      if (interactive_) print_piece("> ");
      if (!std::getline(std::cin, line)) break;
      const ChatInput input = parse_chat_input(line);
      if (input.kind == ChatInputKind::kQuit) break;
      handle(input);
    }
    if (interactive_) print_piece("\n");
    return failed_ ? exit_status(1) : absl::OkStatus();
  }

 protected:
  // One answer to `message`, streamed with print_piece; false on failure
  // (said on stderr).
  virtual bool answer(const std::string& message, bool first_turn) = 0;
  virtual void print_stats() = 0;
  virtual void new_conversation() = 0;
  virtual void save(const std::string& name) = 0;
  virtual void print_banner() = 0;

  InterruptWatch& interrupts() { return interrupts_; }
  const ChatFlags& flags_;
  const FlagSet& flag_set_;  // which flags were given

 private:
  void handle(const ChatInput& input) {
    switch (input.kind) {
      case ChatInputKind::kMessage:
        interrupts_.reset();
        if (!answer(input.text, first_turn_)) failed_ = true;
        first_turn_ = false;
        break;
      case ChatInputKind::kReset:
        new_conversation();
        first_turn_ = true;
        break;
      case ChatInputKind::kStats: print_stats(); break;
      case ChatInputKind::kSave: save(input.text); break;
      case ChatInputKind::kHelp: std::fputs(chat_help_text(), stdout); break;
      case ChatInputKind::kError: std::fprintf(stderr, "%s\n", input.text.c_str()); break;
      case ChatInputKind::kEmpty:
      case ChatInputKind::kQuit: break;
    }
    std::fflush(stdout);
  }

  const bool interactive_;
  InterruptWatch interrupts_;
  bool first_turn_ = true;
  bool failed_ = false;
};

// --- the edge agent ---------------------------------------------------------

class EdgeChat : public Chat {
 public:
  EdgeChat(const ChatFlags& flags, const FlagSet& flag_set, RpcTarget target, v1::SplitPolicy policy,
           std::string session_id)
      : Chat(flags, flag_set), client_(std::move(target)), policy_(policy), session_id_(std::move(session_id)) {}

 protected:
  void print_banner() override {
    std::fprintf(stderr, "chat with the edge agent at %s, session %s (resume: baton chat --session %s); /help\n",
                 client_.target().address.c_str(), session_id_.c_str(), session_id_.c_str());
  }

  bool answer(const std::string& message, bool first_turn) override {
    v1::GenerateRequest request;
    if (first_turn && !flags_.system.empty()) add_message(request, "system", flags_.system);
    add_message(request, "user", message);
    request.set_session_id(session_id_);
    request.set_policy(policy_);
    fill_edge_request(flags_.generation, flag_set_, &request);
    (void)fill_edge_turn(flags_.turn, flag_set_, &request);  // checked in chat_on_edge
    interrupts().on_interrupt([this] { client_.cancel_generate(); });
    bool any_text = false;
    std::optional<v1::Stats> stats;
    const grpc::Status status = client_.generate(request, [&](const v1::GenerateResponse& event) {
      if (event.has_text() && !event.text().text().empty()) {
        any_text = true;
        print_piece(event.text().text());
      }
      // Before the answer: the conversation is near the context limit and
      // max_tokens was clamped (the same line generate prints).
      if (event.event_case() == v1::GenerateResponse::kWarning) {
        std::fprintf(stderr, "baton chat: warning: %s\n", event.warning().c_str());
      }
      if (event.has_stats()) stats = event.stats();
    });
    interrupts().on_interrupt(nullptr);
    if (any_text) print_piece("\n");
    if (stats) last_stats_ = stats;
    if (status.error_code() == grpc::StatusCode::CANCELLED && interrupts().interrupted()) {
      std::fprintf(stderr, "[stopped]\n");
      return true;
    }
    if (!status.ok()) {
      std::fprintf(stderr, "baton chat: %s\n", client_.describe("Generate", status).c_str());
      return false;
    }
    return true;
  }

  void print_stats() override {
    if (!last_stats_) {
      std::fprintf(stderr, "no answer yet in this chat\n");
      return;
    }
    print_turn_stats(client_.target().address, *last_stats_);
  }

  void new_conversation() override {
    const std::string old = session_id_;
    session_id_ = new_chat_session_id();
    last_stats_.reset();
    std::fprintf(stderr, "new session %s (%s stays on the agent: baton chat --session %s)\n", session_id_.c_str(),
                 old.c_str(), old.c_str());
  }

  void save(const std::string& name) override {
    const std::string path = chat_names_path();
    if (absl::Status status = save_chat_name(path, name, session_id_); !status.ok()) {
      std::fprintf(stderr, "baton chat: /save: %s\n", std::string(status.message()).c_str());
      return;
    }
    std::fprintf(stderr, "saved: 'baton chat --session %s' resumes session %s (names in %s)\n", name.c_str(),
                 session_id_.c_str(), path.c_str());
  }

 private:
  static void add_message(v1::GenerateRequest& request, const std::string& role, const std::string& content) {
    v1::ChatTurnMessage* m = request.mutable_chat()->add_messages();
    m->set_role(role);
    m->set_content(content);
  }

  EdgeClient client_;
  v1::SplitPolicy policy_;
  std::string session_id_;
  std::optional<v1::Stats> last_stats_;
};

// --- the CPU engine here -----------------------------------------------------

class LocalChat : public Chat {
 public:
  // `wire`: the codec whose agent store holds the conversation (a store of
  // it was made once already, so making one cannot fail).
  LocalChat(const ChatFlags& flags, const FlagSet& flag_set, std::unique_ptr<Model> model,
            std::unique_ptr<Tokenizer> tokenizer, const KvCodecConfig& wire)
      : Chat(flags, flag_set),
        wire_(wire),
        model_(std::move(model)),
        tokenizer_(std::move(tokenizer)),
        format_(chat_format_from_gguf(model_->file(), *tokenizer_)),
        engine_(*model_, EngineOptions{static_cast<int>(flags.threads), 64}),
        sampling_(local_sampling(flags.generation, flag_set)) {
    new_conversation_state();
  }

 protected:
  void print_banner() override {
    std::fprintf(stderr, "chat with %s on the CPU engine here (template %s, context %lld tokens); /help\n",
                 model_->spec().name.c_str(), chat_template_family_name(format_.family),
                 static_cast<long long>(kv_->capacity()));
  }

  bool answer(const std::string& message, bool first_turn) override {
    std::vector<ChatMessage> messages;
    if (first_turn && !flags_.system.empty()) messages.push_back({"system", flags_.system});
    messages.push_back({"user", message});
    ChatRenderOptions options = format_.options;
    options.continuation = kv_->size() > 0;
    const std::vector<int32_t> prompt =
        tokenize_chat(*tokenizer_, render_chat(format_.family, messages, options), kv_->size() == 0);
    const int64_t max_tokens = flags_.generation.max_tokens;
    if (kv_->size() + static_cast<int64_t>(prompt.size()) + max_tokens > kv_->capacity()) {
      std::fprintf(stderr,
                   "baton chat: the conversation (%lld tokens) + this message (%zu) + --max-tokens %lld do not fit "
                   "the context of %lld tokens; /reset starts a new one\n",
                   static_cast<long long>(kv_->size()), prompt.size(), static_cast<long long>(max_tokens),
                   static_cast<long long>(kv_->capacity()));
      return false;
    }
    for (int32_t t : prompt) sampler_->accept(t);
    figures_ = LocalTurnFigures{};
    figures_.prompt_tokens = static_cast<int64_t>(prompt.size());
    const auto start = Clock::now();
    std::vector<float> logits;
    if (absl::Status st = engine_.prefill(prompt, *kv_, &logits); !st.ok()) {
      std::fprintf(stderr, "baton chat: %s\n", std::string(st.message()).c_str());
      return false;
    }
    const auto prefill_done = Clock::now();
    figures_.prefill_s = std::chrono::duration<double>(prefill_done - start).count();
    absl::Status st = decode(max_tokens, &logits, start);
    figures_.context_tokens = kv_->size();
    if (!st.ok()) {
      std::fprintf(stderr, "baton chat: %s\n", std::string(st.message()).c_str());
      return false;
    }
    return true;
  }

  void print_stats() override {
    if (figures_.prompt_tokens == 0) {
      std::fprintf(stderr, "no answer yet in this chat\n");
      return;
    }
    local_stats_report(model_->spec().name, flags_.threads, figures_).print_table(stderr);
  }

  void new_conversation() override {
    new_conversation_state();
    std::fprintf(stderr, "new conversation\n");
  }

  void save(const std::string&) override {
    std::fprintf(stderr, "baton chat: /save keeps sessions on the edge agent; a --model chat lives in this process\n");
  }

 private:
  void new_conversation_state() {
    const int64_t trained = model_->spec().n_ctx_train > 0 ? model_->spec().n_ctx_train : kMaxLocalContextTokens;
    // chat_locally made a store of this codec before the chat started.
    absl::StatusOr<std::unique_ptr<QuantizedKvCache>> store =
        new_local_kv_store(wire_, engine_.kv_geometry(), std::min(trained, kMaxLocalContextTokens));
    BATON_CHECK(store.ok(), "the chat's KV store was checked at start");
    kv_ = std::move(*store);
    sampler_ = std::make_unique<Sampler>(sampling_);
    figures_ = LocalTurnFigures{};
  }

  // Samples up to max_tokens tokens after `logits`; every token shown is in
  // the KV afterwards (the next turn continues after it). Stops at EOS, at
  // the template's stop string, or at Ctrl-C.
  absl::Status decode(int64_t max_tokens, std::vector<float>* logits, Clock::time_point start) {
    StreamingDecoder detokenizer(*tokenizer_);
    std::vector<std::string> stops;
    if (format_.family == ChatTemplateFamily::kDefault) stops.push_back("<|user|>");
    StopMatcher stop_matcher(stops);
    Clock::time_point first_token_time = Clock::now();
    bool stopped = false;
    int64_t generated = 0;
    while (generated < max_tokens && !stopped && !interrupts().interrupted()) {
      const int32_t token = sampler_->sample(*logits);
      if (generated == 0) {
        first_token_time = Clock::now();
        figures_.ttft_ms = std::chrono::duration<double, std::milli>(first_token_time - start).count();
      }
      if (tokenizer_->is_eog(token)) break;
      sampler_->accept(token);
      ++generated;
      print_piece(stop_matcher.add(detokenizer.push(token), &stopped));
      BATON_RETURN_IF_ERROR(engine_.decode_step(token, *kv_, logits));
    }
    if (!stopped) print_piece(stop_matcher.add(detokenizer.flush(), &stopped));
    if (!stopped) print_piece(stop_matcher.flush());
    print_piece("\n");
    if (interrupts().interrupted()) std::fprintf(stderr, "[stopped]\n");
    figures_.generated_tokens = generated;
    figures_.decode_s = std::chrono::duration<double>(Clock::now() - first_token_time).count();
    return absl::OkStatus();
  }

  KvCodecConfig wire_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ChatFormat format_;
  Engine engine_;
  SamplingParams sampling_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<Sampler> sampler_;
  LocalTurnFigures figures_;
};

absl::Status chat_usage_error(const std::string& message) { return usage_error("chat", message); }

absl::Status chat_on_edge(const ChatFlags& f, const FlagSet& flags) {
  for (const char* name : {"threads"}) {
    if (flags.is_set(name)) {
      return chat_usage_error(absl::StrCat("--", name, " needs --model FILE (the CPU engine here)"));
    }
  }
  absl::StatusOr<v1::SplitPolicy> policy = parse_split_policy(f.policy_name);
  if (!policy.ok()) return chat_usage_error(std::string(policy.status().message()));
  v1::GenerateRequest checked;
  if (absl::Status turn = fill_edge_turn(f.turn, flags, &checked); !turn.ok()) {
    return chat_usage_error(std::string(turn.message()));
  }
  absl::StatusOr<RpcTarget> target = make_rpc_target("edge", f.edge, "edge agent", f.timeout, f.security);
  if (!target.ok()) return chat_usage_error(std::string(target.status().message()));
  std::string session_id = new_chat_session_id();
  if (!f.session.empty()) {
    absl::StatusOr<std::map<std::string, std::string>> names = load_chat_names(chat_names_path());
    if (!names.ok()) return names.status();
    session_id = resolve_chat_session(*names, f.session);
  }
  EdgeChat chat(f, flags, *target, *policy, session_id);
  return chat.run();
}

absl::Status chat_locally(const ChatFlags& f, const FlagSet& flags) {
  for (const char* name : {"edge", "session", "policy", "timeout", "ca", "api-key-file", "context-overflow",
                           "keep-tokens", "early-tokens", "speculative"}) {
    if (flags.is_set(name)) {
      return chat_usage_error(absl::StrCat("--", name, " is for the edge agent; --model FILE runs here"));
    }
  }
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(f.model);
  if (!model.ok()) return model.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf((*model)->file());
  if (!tokenizer.ok()) return with_prefix("the model's tokenizer", tokenizer.status());
  // The agent's default store (local_turn.h), checked here so a chat never
  // starts without one.
  const KvGeometry geometry = kv_geometry_for((*model)->spec());
  absl::StatusOr<KvCodecConfig> wire = local_kv_codec("", geometry);
  if (!wire.ok()) return wire.status();
  if (absl::StatusOr<std::unique_ptr<QuantizedKvCache>> probe = new_local_kv_store(*wire, geometry, 1); !probe.ok()) {
    return probe.status();
  }
  LocalChat chat(f, flags, std::move(*model), std::move(*tokenizer), *wire);
  return chat.run();
}

}  // namespace

absl::Status chat_command(const Args& args) {
  ChatFlags f;
  std::unique_ptr<FlagSet> flags = chat_flag_set(&f);
  if (std::optional<absl::Status> done = parse_flags(*flags, args)) return *done;
  if (!flags->positional().empty()) {
    return chat_usage_error("unexpected argument '" + flags->positional().front() + "'");
  }
  if (absl::Status st = check_generation_flags(f.generation); !st.ok()) {
    return chat_usage_error(std::string(st.message()));
  }
  return f.model.empty() ? chat_on_edge(f, *flags) : chat_locally(f, *flags);
}

}  // namespace baton::cli
