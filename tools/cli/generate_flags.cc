#include "generate_flags.h"

#include "absl/strings/str_cat.h"
#include "cli_defaults.h"
#include "common/util/flags.h"
#include "edge_client_rpc.h"

namespace baton::cli {
namespace {

constexpr const char* kEdgeOnly[] = {"edge",         "session",          "pack",        "policy",
                                     "split-position",   "stop",        "no-progress",
                                     "timeout",      "ca",               "api-key-file", "context-overflow",
                                     "keep-tokens",  "early-tokens",     "speculative"};
constexpr const char* kLocalOnly[] = {"model", "prompt-len", "threads", "ignore-eos"};

}  // namespace

bool generate_runs_locally(const Args& args) {
  for (const std::string& arg : args) {
    if (arg == "--") break;
    if (arg == "--model" || arg.rfind("--model=", 0) == 0) return true;
  }
  return false;
}

std::unique_ptr<FlagSet> generate_flag_set(GenerateFlags* out) {
  auto flag_set = std::make_unique<FlagSet>(
      "baton generate", "[--model FILE | --edge ADDR] [-p TEXT | --prompt-file F | --prompt-tokens IDS] [flags]",
      absl::StrCat(
          "Generates text from a prompt, prints it as it is produced, then the stats (--edge: on stderr; --model: "
          "on stdout; --json: text and stats as one JSON object on stdout). Two modes, "
          "chosen explicitly:\n"
          "  --model FILE  the CPU engine in this process on a local GGUF model (without a prompt: a synthetic "
          "one of --prompt-len tokens, for speed runs);\n"
          "  otherwise     the edge agent (baton-edge) at --edge ADDR (default $",
          kEdgeAddressEnv, ", else ", kDefaultEdgeAddress,
          "), which prefills locally or on the cloud and decodes; it retries while the agent's model is warming "
          "up, within --timeout. Ctrl-C stops the answer: the line ends, the stats of what was shown follow "
          "(exit code 130) and the agent keeps the answer so far in the session (a second Ctrl-C ends at once).\n"
          "The sampling flags mean the same in both modes and have the same defaults. For a conversation, see "
          "'baton chat'."));
  FlagSet& flags = *flag_set;
  add_edge_address_flag(flags, &out->edge);
  flags.add_string("model", &out->model, "run the CPU engine here on this GGUF model instead of the edge agent",
                   "FILE");
  add_prompt_flags(flags, &out->prompt,
                   {"prompt text (also -p)", "read the prompt text from a file",
                    "prompt as comma-separated token ids"});
  flags.add_bool("json", &out->json, "print the text and the stats as one JSON object to stdout");
  flags.add_string("codec", &out->codec_name,
                   "KV codec: f16, int8, int4 or a full name such as int4-pc-kg128-g32-z3; auto: the agent picks "
                   "per request. --edge: unset = the agent's --codec. --model: the KV goes into the store the agent "
                   "keeps that codec in (unset: int4, the agent's default without a cloud; auto = int4; no tc-*)",
                   "NAME");

  flags.add_section("sampling (both modes, same defaults)");
  add_generation_flags(flags, &out->generation);

  flags.add_section("edge agent only (without --model)");
  flags.add_string("session", &out->session_id, "session id: continue it or create it (kept afterwards)", "ID");
  flags.add_string("pack", &out->pack_id, "prefix pack that starts a new session", "ID");
  flags.add_string("policy", &out->policy_name,
                   "where to prefill: auto, local or cloud; unset: the agent's --policy (auto unless changed)", "NAME");
  flags.add_int64("split-position", &out->split_position,
                  "force the split: the edge prefills [have, A) while the cloud streams [A, n-1) (A = have: cloud, "
                  "n-1: local; tests and benchmarks)");
  add_edge_turn_flags(flags, &out->turn);
  flags.add_string("stop", &out->stop_help, "stop when the text ends with S (repeatable)", "S");
  flags.add_bool("no-progress", &out->no_progress, "no progress line, even on a terminal");
  flags.add_duration("timeout", &out->timeout, "deadline of the whole request, warm-up retries included");
  add_edge_channel_flags(flags, &out->security);

  flags.add_section("CPU engine only (--model)");
  flags.add_int64("prompt-len", &out->prompt_len, "synthetic prompt of this many random tokens when no prompt is given");
  flags.add_int64("threads", &out->threads, "worker threads");
  flags.add_bool("ignore-eos", &out->ignore_eos, "keep generating past end-of-sequence tokens");
  return flag_set;
}

std::optional<std::string> other_mode_flag(const FlagSet& flags, bool local) {
  if (local) {
    for (const char* name : kEdgeOnly) {
      if (flags.is_set(name)) {
        return absl::StrCat("--", name, " is for the edge agent; --model FILE runs the CPU engine here");
      }
    }
  } else {
    for (const char* name : kLocalOnly) {
      if (flags.is_set(name)) return absl::StrCat("--", name, " needs --model FILE (the CPU engine here)");
    }
  }
  return std::nullopt;
}

}  // namespace baton::cli
