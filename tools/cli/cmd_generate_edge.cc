// baton generate --edge ADDR: sends a session to the edge agent (Edge.Generate)
// and streams the text to stdout as it is decoded. On a terminal a progress
// line on stderr shows the prefill (KV layers, bytes and rate while the KV
// arrives from the cloud; tokens during local prefill); the stats table goes
// to stderr at the end. --json prints one JSON object (text and stats) to
// stdout instead, for programs.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "commands.h"
#include "common/kv/kv_codec_config.h"
#include "common/kv/kv_codec_params.h"
#include "common/rpc/proto_json.h"
#include "common/util/flags.h"
#include "edge_client.h"
#include "edge_client_format.h"
#include "interrupt.h"
#include "generate_flags.h"
#include "edge_decode/split_policy.h"
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
int report_interrupted(const std::string& address, const std::string& session_id, const SeenTurn& seen, bool json,
                       const std::string& text, const std::string& token_ids_json) {
  const v1::Stats stats = seen.interrupted_stats(session_id);
  if (json) {
    std::printf("{\"text\": \"%s\", \"token_ids\": [%s], \"interrupted\": true, \"stats\": %s}\n",
                json_escape(text).c_str(), token_ids_json.c_str(), proto_to_json(stats).c_str());
  } else {
    if (seen.generated_tokens == 0) {
      std::fprintf(stderr, "baton generate: interrupted before the first token; the session is unchanged\n");
    }
    print_turn_stats(address, stats, stderr, /*interrupted=*/true);
  }
  return kInterruptedExitCode;
}

}  // namespace

static int generate_on_edge_exit_code(const Args& args_in) {
  GenerateFlags f;
  std::unique_ptr<FlagSet> flag_set = generate_flag_set(&f);
  FlagSet& flags = *flag_set;
  const std::string& edge = f.edge;
  std::string& prompt_text = f.prompt_text;
  const std::string& prompt_file = f.prompt_file;
  const std::string& prompt_tokens_text = f.prompt_tokens;
  const std::string& session_id = f.session_id;
  const std::string& pack_id = f.pack_id;
  const std::string& policy_name = f.policy_name;
  const std::string& codec_name = f.codec_name;
  const bool& json = f.json;
  const bool& no_progress = f.no_progress;
  const std::chrono::milliseconds& timeout = f.timeout;
  const ChannelSecurityOptions& security = f.security;
  Args args = args_in;
  for (std::string& arg : args) {
    if (arg == "-p") arg = "--prompt";
  }
  absl::StatusOr<std::vector<std::string>> stops = take_repeated_flag(args, "stop");
  if (!stops.ok()) {
    std::fprintf(stderr, "%s\n(see --help)\n", std::string(stops.status().message()).c_str());
    return 2;
  }
  if (auto code = parse_flags(flags, args)) return *code;
  auto usage_error = [](const std::string& message) {
    std::fprintf(stderr, "baton generate: %s\n(see --help)\n", message.c_str());
    return 2;
  };
  if (std::optional<std::string> wrong = other_mode_flag(flags, /*local=*/false)) return usage_error(*wrong);
  if (!flags.positional().empty()) return usage_error("unexpected argument '" + flags.positional().front() + "'");
  if (absl::Status st = check_generation_flags(f.generation); !st.ok()) return usage_error(std::string(st.message()));

  v1::GenerateRequest request;
  const int prompt_sources = !prompt_text.empty() + !prompt_file.empty() + !prompt_tokens_text.empty();
  if (prompt_sources != 1) return usage_error("give exactly one of -p TEXT, --prompt-file F, --prompt-tokens IDS");
  if (!prompt_file.empty()) {
    absl::StatusOr<std::string> text = read_prompt_file(prompt_file);
    if (!text.ok()) return fail(std::string(text.status().message()));
    prompt_text = *text;
  }
  if (!prompt_tokens_text.empty()) {
    for (absl::string_view part : absl::StrSplit(prompt_tokens_text, ',')) {
      uint32_t id = 0;
      if (!absl::SimpleAtoi(part, &id)) {
        return usage_error(absl::StrFormat("--prompt-tokens: '%s' is not a token id", part));
      }
      request.mutable_tokens()->add_ids(id);
    }
  } else {
    request.set_text(prompt_text);
  }
  absl::StatusOr<v1::SplitPolicy> policy = parse_split_policy(policy_name);
  if (!policy.ok()) return usage_error(std::string(policy.status().message()));
  request.set_policy(*policy);
  request.set_session_id(session_id);
  request.set_pack_id(pack_id);
  fill_edge_request(f.generation, flags, &request);
  for (const std::string& stop : *stops) request.add_stop(stop);
  if (!codec_name.empty()) {
    // A bare width asks for the agent's default variant of it.
    if (codec_name == "f16" || codec_name == "int8" || codec_name == "int4") {
      request.mutable_codec()->set_codec(codec_name == "f16"    ? v1::KV_CODEC_F16
                                         : codec_name == "int8" ? v1::KV_CODEC_INT8
                                                                : v1::KV_CODEC_INT4);
    } else {
      absl::StatusOr<KvCodecConfig> config = parse_kv_codec_config(codec_name);
      if (!config.ok()) return usage_error("--codec: " + std::string(config.status().message()));
      absl::StatusOr<v1::CodecParams> params = kv_codec_params(*config);
      if (!params.ok()) return usage_error("--codec: " + std::string(params.status().message()));
      *request.mutable_codec() = *params;
    }
  }
  absl::StatusOr<RpcTarget> target = make_rpc_target("edge", edge, "edge agent", timeout, security);
  if (!target.ok()) return usage_error(std::string(target.status().message()));

  ProgressLine progress_line(stderr, !no_progress);
  // Progress events always: their Plan gives the stats of an interrupted
  // call (the line itself is drawn only on a terminal).
  request.set_progress(true);
  EdgeClient client(*target);
  // Ctrl-C stops the answer (the agent keeps it in the session); a second
  // Ctrl-C ends the process at once.
  InterruptWatch interrupt;
  interrupt.on_interrupt([&client] { client.cancel_generate(); });
  SeenTurn seen;
  std::string text;                 // everything generated (for --json)
  std::string token_ids_json;       // "1, 2, 3": the generated token ids (for --json)
  std::optional<v1::Stats> stats;
  bool text_started = false;
  std::optional<RpcClock::time_point> kv_first_seen;  // first RECEIVING_KV event (rate)
  grpc::Status status = client.generate(request, [&](const v1::GenerateResponse& event) {
    switch (event.event_case()) {
      case v1::GenerateResponse::kText:
        if (!text_started) progress_line.clear();
        text_started = true;
        seen.saw_text(event.text());
        text += event.text().text();
        for (uint32_t id : event.text().token_ids()) {
          token_ids_json += (token_ids_json.empty() ? "" : ", ") + std::to_string(id);
        }
        if (!json) {
          std::fputs(event.text().text().c_str(), stdout);
          std::fflush(stdout);
        }
        break;
      case v1::GenerateResponse::kProgress: {
        if (text_started) break;
        const v1::Progress& p = event.progress();
        double rate = 0;
        if (p.kv_bytes_received() > 0) {
          if (!kv_first_seen) kv_first_seen = RpcClock::now();
          const double seconds = std::chrono::duration<double>(RpcClock::now() - *kv_first_seen).count();
          if (seconds > 0.05) rate = static_cast<double>(p.kv_bytes_received()) / seconds;
        }
        progress_line.update(format_progress(p, rate));
        break;
      }
      case v1::GenerateResponse::kWarning:
        progress_line.clear();
        seen.context_warning = event.warning();
        std::fprintf(stderr, "baton generate: warning: %s\n", event.warning().c_str());
        break;
      case v1::GenerateResponse::kPlan:
        seen.plan = event.plan();
        if (!text_started) {
          progress_line.update(absl::StrFormat("[plan] prefill %s: %s", prefill_place_name(event.plan().place()),
                                               event.plan().reason()),
                               true);
        }
        break;
      case v1::GenerateResponse::kStats:
        stats = event.stats();
        break;
      default:
        break;
    }
  });
  progress_line.clear();
  if (!json && text_started) std::fputs("\n", stdout);  // ends the line, Ctrl-C or not
  std::fflush(stdout);  // the text before the stats table on stderr
  // A turn that completed before the cancel took effect reports as usual.
  if (interrupt.interrupted() && !stats) {
    return report_interrupted(target->address, session_id, seen, json, text, token_ids_json);
  }
  if (!status.ok()) return fail(client.describe("Generate", status));
  if (!stats) return fail("the edge agent ended Generate without stats");
  if (json) {
    std::printf("{\"text\": \"%s\", \"token_ids\": [%s], \"retries\": %d, \"stats\": %s}\n",
                json_escape(text).c_str(), token_ids_json.c_str(), client.retries(), proto_to_json(*stats).c_str());
  } else {
    print_turn_stats(target->address, *stats);
  }
  return 0;
}

// Transitional adapter: the body still returns an exit code and has printed
// its messages.
absl::Status generate_on_edge(const Args& args) {
  const int code = generate_on_edge_exit_code(args);
  return code == 0 ? absl::OkStatus() : exit_status(code);
}

}  // namespace baton::cli
