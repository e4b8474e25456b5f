// baton generate --edge ADDR: sends a session to the edge agent (Edge.Generate)
// and streams the text to stdout as it is decoded. On a terminal a progress
// line on stderr shows the prefill (KV layers, bytes and rate while the KV
// arrives from the cloud; tokens during local prefill); the stats table goes
// to stderr at the end. --json prints one JSON object (text and stats) to
// stdout instead, for programs.
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
#include "generate_flags.h"
#include "edge_decode/split_policy.h"
#include "progress_line.h"
#include "report.h"

namespace baton::cli {
namespace {

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
  if (name.empty()) return v1::SPLIT_POLICY_UNSPECIFIED;  // the agent's --policy
  if (name == "auto") return v1::SPLIT_POLICY_AUTO;
  if (name == "local") return v1::SPLIT_POLICY_LOCAL;
  if (name == "cloud") return v1::SPLIT_POLICY_CLOUD;
  return absl::InvalidArgumentError("--policy: '" + name + "' is not one of auto, local, cloud");
}

const char* finish_name(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_EOS: return "end of sequence";
    case v1::FINISH_REASON_STOP: return "stop string";
    case v1::FINISH_REASON_LENGTH: return "max tokens";
    case v1::FINISH_REASON_CONTEXT_FULL: return "context full";
    default: return "unknown";
  }
}

void print_stats_table(const std::string& address, const v1::Stats& stats) {
  Report r(absl::StrFormat("stats (edge %s)", address));
  r.add_text("place", "prefill place", std::string(prefill_place_name(stats.plan().place())));
  if (!stats.plan().reason().empty()) r.add_text("reason", "plan reason", stats.plan().reason());
  if (!stats.fallback_reason().empty()) r.add_text("fallback", "fallback reason", stats.fallback_reason());
  if (!stats.save_error().empty()) r.add_text("save_error", "session NOT saved", stats.save_error());
  r.add("ttft_ms", "time to first token", stats.ttft_ms(), "ms", 1);
  r.add("cloud_prefill_ms", "  cloud prefill", stats.cloud_prefill_ms(), "ms", 1);
  r.add("transfer_ms", "  KV transfer", stats.transfer_ms(), "ms", 1);
  r.add("ingest_ms", "  KV ingest", stats.ingest_ms(), "ms", 1);
  r.add("local_ms", "  local", stats.local_ms(), "ms", 1);
  if (stats.kv_raw_bytes() > 0) {
    r.add_text("kv_raw", "KV raw (f16)", format_bytes(stats.kv_raw_bytes()));
    r.add_text("kv_quantized", "KV quantized", format_bytes(stats.kv_quantized_bytes()));
    r.add_text("kv_wire", "KV on the wire", format_bytes(stats.kv_wire_bytes()));
  }
  r.add("decode_tok_per_s", "decode (mean)", stats.decode_tokens_per_s(), "tok/s", 1);
  r.add_int("prompt_tokens", "prompt tokens", stats.prompt_tokens());
  r.add_int("reused_tokens", "reused tokens", stats.plan().reused_tokens());
  r.add_int("generated_tokens", "generated tokens", stats.generated_tokens());
  r.add_int("context_tokens", "context tokens", stats.context_tokens());
  r.add_text("finish", "finish", std::string(finish_name(stats.finish_reason())));
  r.add("total_ms", "total", stats.total_ms(), "ms", 1);
  if (!stats.session_id().empty()) r.add_text("session", "session", stats.session_id());
  r.print_table(stderr);
}

}  // namespace

void print_edge_stats(const std::string& address, const v1::Stats& stats) { print_stats_table(address, stats); }

int generate_on_edge(const Args& args_in) {
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
  absl::StatusOr<v1::SplitPolicy> policy = parse_policy(policy_name);
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
  request.set_progress(progress_line.enabled());
  EdgeClient client(*target);
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
      case v1::GenerateResponse::kPlan:
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
  if (!json && text_started) std::fputs("\n", stdout);
  std::fflush(stdout);  // the text before the stats table on stderr
  if (!status.ok()) return fail(client.describe("Generate", status));
  if (!stats) return fail("the edge agent ended Generate without stats");
  if (json) {
    std::printf("{\"text\": \"%s\", \"token_ids\": [%s], \"retries\": %d, \"stats\": %s}\n",
                json_escape(text).c_str(), token_ids_json.c_str(), client.retries(), proto_json(*stats).c_str());
  } else {
    print_stats_table(target->address, *stats);
  }
  return 0;
}

}  // namespace baton::cli
