// baton generate --edge ADDR: sends a session to the edge agent (Edge.Generate)
// and streams the text to stdout as it is decoded. On a terminal a progress
// line on stderr shows the prefill (KV layers, bytes and rate while the KV
// arrives from the cloud; tokens during local prefill); the stats table goes
// to stderr at the end. --json prints one JSON object (text and stats) to
// stdout instead, for programs.
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "commands.h"
#include "common/rpc/proto_json.h"
#include "common/util/check.h"
#include "common/util/flags.h"
#include "edge_client.h"
#include "edge_client_format.h"
#include "generate_flags.h"
#include "interrupt.h"
#include "json_line.h"
#include "kv_codec_list.h"
#include "edge_decode/generate/context_overflow.h"
#include "edge_decode/plan/split_policy.h"
#include "progress_line.h"
#include "report.h"
#include "turn_stats.h"

namespace baton::cli {
namespace {

// Exit code after Ctrl-C stopped the answer: 128 + SIGINT, as shells expect.
constexpr int kInterruptedExitCode = 130;

// Takes every "--NAME VALUE" / "--NAME=VALUE" out of `args` (FlagSet keeps
// only the last value of a repeated flag).
absl::StatusOr<std::vector<std::string>> take_repeated_flag(Args& args, const std::string& name) {
  std::vector<std::string> values;
  const std::string flag = "--" + name;
  Args rest;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") {
      rest.insert(rest.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    if (args[i] == flag) {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(flag + " needs a value");
      values.push_back(args[++i]);
    } else if (args[i].rfind(flag + "=", 0) == 0) {
      values.push_back(args[i].substr(flag.size() + 1));
    } else {
      rest.push_back(args[i]);
    }
  }
  args = std::move(rest);
  return values;
}

// What the client saw of a call that Ctrl-C ended: the agent's Stats never
// came, so the times are this client's (request sent -> first text piece ->
// last one) and the context is the plan's conversation plus the tokens shown.
struct SeenTurn {
  RpcClock::time_point sent = RpcClock::now();
  std::optional<RpcClock::time_point> first_text, last_text;
  uint32_t generated_tokens = 0;
  std::optional<v1::Plan> plan;
  std::string context_warning;

  void saw_text(const v1::TextPiece& piece) {
    if (piece.token_ids_size() == 0) return;
    const RpcClock::time_point now = RpcClock::now();
    if (!first_text) first_text = now;
    last_text = now;
    generated_tokens += static_cast<uint32_t>(piece.token_ids_size());
  }
  v1::Stats interrupted_stats(const std::string& session_id) const {
    auto ms = [](RpcClock::time_point a, RpcClock::time_point b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    v1::Stats stats;
    if (first_text) stats.set_ttft_ms(ms(sent, *first_text));
    if (generated_tokens > 1 && *last_text > *first_text) {
      stats.set_decode_tokens_per_s((generated_tokens - 1) / (ms(*first_text, *last_text) / 1000.0));
    }
    stats.set_generated_tokens(generated_tokens);
    if (plan) {
      *stats.mutable_plan() = *plan;
      // The plan covers positions [0, n-1) plus the last prompt token.
      stats.set_context_tokens(plan->reused_tokens() + plan->prefill_tokens() + 1 + generated_tokens);
    }
    stats.set_context_warning(context_warning);
    stats.set_total_ms(ms(sent, RpcClock::now()));
    stats.set_session_id(session_id);
    return stats;
  }
};

// Ctrl-C ended the call before its Stats: the stats of what was shown
// (stderr, or --json on stdout with "interrupted": true); exit code 130
// (128 + SIGINT), as shells expect of a command stopped by Ctrl-C.
absl::Status report_interrupted(const std::string& address, const std::string& session_id, const SeenTurn& seen,
                                bool json, const std::string& text, const Json& token_ids) {
  const v1::Stats stats = seen.interrupted_stats(session_id);
  if (json) {
    const Json head = {{"text", text}, {"token_ids", token_ids}, {"interrupted", true}};
    std::printf("%s\n", json_line_with(head, "stats", proto_to_json(stats)).c_str());
  } else {
    if (seen.generated_tokens == 0) {
      std::fprintf(stderr, "baton generate: interrupted before the first token; the session is unchanged\n");
    }
    print_turn_stats(address, stats, stderr, /*interrupted=*/true);
  }
  return exit_status(kInterruptedExitCode);
}

// The request of `baton generate --edge` from its command line; usage errors
// name the command. `stops` are the --stop values taken out before parsing.
absl::Status fill_request(const GenerateFlags& f, const FlagSet& flags, const std::vector<std::string>& stops,
                          v1::GenerateRequest* request) {
  if (std::optional<std::string> wrong = other_mode_flag(flags, /*local=*/false)) {
    return usage_error("generate", *wrong);
  }
  if (!flags.positional().empty()) {
    return usage_error("generate", "unexpected argument '" + flags.positional().front() + "'");
  }
  if (absl::Status st = check_generation_flags(f.generation); !st.ok()) {
    return usage_error("generate", std::string(st.message()));
  }
  BATON_ASSIGN_OR_RETURN(PromptInput prompt, read_prompt(f.prompt, "generate", /*required=*/true));
  if (!prompt.tokens.empty()) {
    for (int32_t id : prompt.tokens) request->mutable_tokens()->add_ids(static_cast<uint32_t>(id));
  } else {
    request->set_text(prompt.text);
  }
  absl::StatusOr<v1::SplitPolicy> policy = parse_split_policy(f.policy_name);
  if (!policy.ok()) return usage_error("generate", std::string(policy.status().message()));
  request->set_policy(*policy);
  request->set_session_id(f.session_id);
  request->set_pack_id(f.pack_id);
  if (flags.is_set("split-position")) {
    if (f.split_position < 0 || f.split_position > UINT32_MAX) {
      return usage_error("generate", absl::StrFormat("--split-position %d is not a position", f.split_position));
    }
    request->set_split_position(static_cast<uint32_t>(f.split_position));
  }
  if (absl::Status turn = fill_edge_turn(f.turn, flags, request); !turn.ok()) {
    return usage_error("generate", std::string(turn.message()));
  }
  fill_edge_request(f.generation, flags, request);
  for (const std::string& stop : stops) request->add_stop(stop);
  if (!f.codec_name.empty()) {
    if (absl::Status st = set_requested_codec(f.codec_name, request->mutable_codec()); !st.ok()) {
      return usage_error("generate", "--codec: " + std::string(st.message()));
    }
  }
  // Progress events always: their Plan gives the stats of an interrupted
  // call (the line itself is drawn only on a terminal).
  request->set_progress(true);
  return absl::OkStatus();
}

// One Generate as the terminal shows it: the text on stdout as it comes (kept
// for --json), the progress line until the first text, warnings on stderr.
class EdgeTurn {
 public:
  EdgeTurn(bool json, bool progress) : json_(json), progress_line_(stderr, progress) {}

  void on_event(const v1::GenerateResponse& event) {
    switch (event.event_case()) {
      case v1::GenerateResponse::kText: on_text(event.text()); break;
      case v1::GenerateResponse::kProgress: on_progress(event.progress()); break;
      case v1::GenerateResponse::kWarning:
        progress_line_.clear();
        seen_.context_warning = event.warning();
        std::fprintf(stderr, "baton generate: warning: %s\n", event.warning().c_str());
        break;
      case v1::GenerateResponse::kPlan:
        seen_.plan = event.plan();
        if (!text_started_) {
          progress_line_.update(absl::StrFormat("[plan] prefill %s: %s", prefill_place_name(event.plan().place()),
                                                event.plan().reason()),
                                true);
        }
        break;
      case v1::GenerateResponse::kStats: stats_ = event.stats(); break;
      default: break;
    }
  }

  // After the call: ends the text's line (Ctrl-C or not) and flushes it
  // before the stats table on stderr.
  void finish() {
    progress_line_.clear();
    if (!json_ && text_started_) std::fputs("\n", stdout);
    std::fflush(stdout);
  }

  // The outcome of the call that ended with `status`.
  absl::Status report(const EdgeClient& client, const grpc::Status& status, bool interrupted,
                      const std::string& session_id) const {
    const std::string& address = client.target().address;
    // A turn that completed before the cancel took effect reports as usual.
    if (interrupted && !stats_) return report_interrupted(address, session_id, seen_, json_, text_, token_ids_);
    if (!status.ok()) return absl::UnavailableError(client.describe("Generate", status));
    if (!stats_) return absl::DataLossError("the edge agent ended Generate without stats");
    if (json_) {
      const Json head = {{"text", text_}, {"token_ids", token_ids_}, {"retries", client.retries()}};
      std::printf("%s\n", json_line_with(head, "stats", proto_to_json(*stats_)).c_str());
    } else {
      print_turn_stats(address, *stats_);
    }
    return absl::OkStatus();
  }

 private:
  void on_text(const v1::TextPiece& piece) {
    if (!text_started_) progress_line_.clear();
    text_started_ = true;
    seen_.saw_text(piece);
    text_ += piece.text();
    for (uint32_t id : piece.token_ids()) token_ids_.push_back(id);
    if (!json_) {
      std::fputs(piece.text().c_str(), stdout);
      std::fflush(stdout);
    }
  }

  void on_progress(const v1::Progress& p) {
    if (text_started_) return;
    double rate = 0;
    if (p.kv_bytes_received() > 0) {
      if (!kv_first_seen_) kv_first_seen_ = RpcClock::now();
      const double seconds = std::chrono::duration<double>(RpcClock::now() - *kv_first_seen_).count();
      if (seconds > 0.05) rate = static_cast<double>(p.kv_bytes_received()) / seconds;
    }
    progress_line_.update(format_progress(p, rate));
  }

  const bool json_;
  ProgressLine progress_line_;
  SeenTurn seen_;
  std::string text_;            // everything generated (for --json)
  Json token_ids_ = Json::array();  // the generated token ids (for --json)
  std::optional<v1::Stats> stats_;
  bool text_started_ = false;
  std::optional<RpcClock::time_point> kv_first_seen_;  // first RECEIVING_KV event (rate)
};

}  // namespace

absl::Status generate_on_edge(const Args& args_in) {
  GenerateFlags f;
  std::unique_ptr<FlagSet> flags = generate_flag_set(&f);
  Args args = with_prompt_short_flag(args_in);
  absl::StatusOr<std::vector<std::string>> stops = take_repeated_flag(args, "stop");
  if (!stops.ok()) return exit_status(2, absl::StrCat(stops.status().message(), "\n(see --help)\n"));
  if (std::optional<absl::Status> done = parse_flags(*flags, args)) return *done;
  v1::GenerateRequest request;
  BATON_RETURN_IF_ERROR(fill_request(f, *flags, *stops, &request));
  absl::StatusOr<RpcTarget> target = make_rpc_target("edge", f.edge, "edge agent", f.timeout, f.security);
  if (!target.ok()) return usage_error("generate", std::string(target.status().message()));

  EdgeClient client(*target);
  // Ctrl-C stops the answer (the agent keeps it in the session); a second
  // Ctrl-C ends the process at once.
  InterruptWatch interrupt;
  interrupt.on_interrupt([&client] { client.cancel_generate(); });
  EdgeTurn turn(f.json, !f.no_progress);
  const grpc::Status status =
      client.generate(request, [&turn](const v1::GenerateResponse& event) { turn.on_event(event); });
  turn.finish();
  return turn.report(client, status, interrupt.interrupted(), f.session_id);
}

}  // namespace baton::cli
