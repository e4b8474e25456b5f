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
#include "common/util/flags.h"
#include "edge_client.h"
#include "edge_client_format.h"
#include "interrupt.h"
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

absl::StatusOr<v1::SplitPolicy> parse_policy(const std::string& name) {
  if (name == "auto") return v1::SPLIT_POLICY_AUTO;
  if (name == "local") return v1::SPLIT_POLICY_LOCAL;
  if (name == "cloud") return v1::SPLIT_POLICY_CLOUD;
  return absl::InvalidArgumentError("--policy: '" + name + "' is not one of auto, local, cloud");
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
                json_escape(text).c_str(), token_ids_json.c_str(), proto_json(stats).c_str());
  } else {
    if (seen.generated_tokens == 0) {
      std::fprintf(stderr, "baton generate: interrupted before the first token; the session is unchanged\n");
    }
    print_turn_stats(address, stats, stderr, /*interrupted=*/true);
  }
  return kInterruptedExitCode;
}

}  // namespace

int generate_on_edge(const Args& args_in) {
  std::string edge, prompt_text, prompt_file, prompt_tokens_text, session_id, pack_id, policy_name = "auto";
  std::string codec_name;
  int64_t max_tokens = 0, top_k = 0, seed = 0, repetition_last_n = 0;
  double temperature = 0.8, top_p = 0.0, min_p = 0.0, repeat_penalty = 0.0;
  bool json = false, no_progress = false;
  std::chrono::milliseconds timeout{300'000};
  FlagSet flags("baton generate",
                "--edge ADDR [-p TEXT | --prompt-file F | --prompt-tokens IDS] [flags]",
                "Sends the prompt to the edge agent (baton-edge), which prefills it locally or on the cloud "
                "and decodes; the text is printed as it arrives, the stats at the end (stderr). "
                "Retries while the agent's model is warming up, within --timeout. Ctrl-C stops the answer: the "
                "line ends, the stats of what was shown follow (exit code 130) and the agent keeps the answer "
                "so far in the session (a second Ctrl-C ends at once). Without --edge, "
                "'baton generate --model FILE' runs the CPU engine in this process.");
  flags.add_string("edge", &edge, "edge agent address", "ADDR");
  ChannelSecurityOptions security;
  add_edge_channel_flags(flags, &security);
  flags.add_string("prompt", &prompt_text, "prompt text (also -p)", "TEXT");
  flags.add_string("prompt-file", &prompt_file, "read the prompt text from a file", "FILE");
  flags.add_string("prompt-tokens", &prompt_tokens_text, "prompt as comma-separated token ids", "IDS");
  flags.add_string("session", &session_id, "session id: continue it or create it (kept afterwards)", "ID");
  flags.add_string("pack", &pack_id, "prefix pack that starts a new session", "ID");
  flags.add_string("policy", &policy_name, "where to prefill: auto, local or cloud", "NAME");
  flags.add_int64("max-tokens", &max_tokens, "tokens to generate; 0: the agent's default");
  flags.add_double("temperature", &temperature, "0 = greedy; unset: the agent's default");
  flags.add_double("top-p", &top_p, "nucleus mass (0 or 1 = off)");
  flags.add_int64("top-k", &top_k, "top-k cut (0 = off)");
  flags.add_double("min-p", &min_p, "min-p cut (0 = off)");
  flags.add_double("repeat-penalty", &repeat_penalty, "repetition penalty (0 or 1 = off)");
  flags.add_int64("repeat-last-n", &repetition_last_n, "tokens the penalty looks back over; 0: 64");
  flags.add_int64("seed", &seed, "sampling seed; unset: random");
  flags.add_string("codec", &codec_name,
                   "KV codec (f16, int8, int4 or a full name such as int4-pc-kg128-g32-z3); unset: agent default",
                   "NAME");
  // Listed for --help; the values are collected before parsing (repeatable).
  std::string stop_help;
  flags.add_string("stop", &stop_help, "stop when the text ends with S (repeatable)", "S");
  flags.add_bool("json", &json, "print one JSON object (text and stats) to stdout");
  flags.add_bool("no-progress", &no_progress, "no progress line even on a terminal");
  flags.add_duration("timeout", &timeout, "deadline of the whole request, retries included");
  flags.require("edge");
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
  if (!flags.positional().empty()) return usage_error("unexpected argument '" + flags.positional().front() + "'");

  v1::GenerateRequest request;
  const int prompt_sources = !prompt_text.empty() + !prompt_file.empty() + !prompt_tokens_text.empty();
  if (prompt_sources != 1) return usage_error("give exactly one of -p TEXT, --prompt-file F, --prompt-tokens IDS");
  if (!prompt_file.empty()) {
    std::ifstream in(prompt_file, std::ios::binary);
    if (!in) return fail("cannot read --prompt-file " + prompt_file);
    std::stringstream buffer;
    buffer << in.rdbuf();
    prompt_text = buffer.str();
    if (prompt_text.empty()) return fail("--prompt-file " + prompt_file + " is empty");
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
  absl::StatusOr<v1::SplitPolicy> policy = parse_policy(policy_name);
  if (!policy.ok()) return usage_error(std::string(policy.status().message()));
  request.set_policy(*policy);
  request.set_session_id(session_id);
  request.set_pack_id(pack_id);
  if (max_tokens < 0) return usage_error(absl::StrFormat("--max-tokens: %d is negative", max_tokens));
  request.set_max_tokens(static_cast<uint32_t>(max_tokens));
  v1::SamplingParams* sampling = request.mutable_sampling();
  if (flags.is_set("temperature")) {
    if (temperature < 0) return usage_error(absl::StrFormat("--temperature: %g is negative", temperature));
    sampling->set_temperature(static_cast<float>(temperature));
  }
  if (top_k < 0 || repetition_last_n < 0) return usage_error("--top-k and --repeat-last-n must be >= 0");
  if (top_p < 0 || top_p > 1) return usage_error(absl::StrFormat("--top-p: %g is outside [0, 1]", top_p));
  sampling->set_top_k(static_cast<uint32_t>(top_k));
  sampling->set_top_p(static_cast<float>(top_p));
  sampling->set_min_p(static_cast<float>(min_p));
  sampling->set_repetition_penalty(static_cast<float>(repeat_penalty));
  sampling->set_repetition_last_n(static_cast<uint32_t>(repetition_last_n));
  if (flags.is_set("seed")) sampling->set_seed(static_cast<uint64_t>(seed));
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
  }, &interrupt);
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
                json_escape(text).c_str(), token_ids_json.c_str(), client.retries(), proto_json(*stats).c_str());
  } else {
    print_turn_stats(target->address, *stats);
  }
  return 0;
}

}  // namespace baton::cli
