// The flags of `baton generate` in both of its modes, registered by one
// function so that `baton generate --help` shows both modes in one text:
//   --model FILE   the CPU engine in this process (cmd_generate.cc);
//   otherwise      the edge agent at --edge ADDR (cmd_generate_edge.cc),
//                  default $BATON_EDGE, else 127.0.0.1:7071.
// The choice is explicit (--model), never guessed from what is reachable.
// A flag of the other mode is a usage error, not silently ignored.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "commands.h"
#include "common/rpc/channel_options.h"
#include "generation_flags.h"
#include "prompt_flags.h"

namespace baton::cli {

struct GenerateFlags {
  std::string edge;   // filled with the default address by register_generate_flags
  std::string model;
  PromptFlags prompt;
  GenerationFlags generation;
  bool json = false;
  std::string codec_name;  // both modes (--model: the local KV store's codec, local_turn.h)
  // --edge only
  std::string session_id, pack_id, policy_name;
  int64_t split_position = 0;  // --split-position: GenerateRequest.split_position when set
  EdgeTurnFlags turn;            // --context-overflow, --keep-tokens, --early-tokens
  std::string stop_help;  // --stop is repeatable: collected before parsing; listed for --help
  bool no_progress = false;
  std::chrono::milliseconds timeout{300'000};
  ChannelSecurityOptions security;
  // --model only
  int64_t prompt_len = 256;
  int64_t threads = 2;
  bool ignore_eos = false;
};

// True when `args` choose the local mode (--model before any "--").
bool generate_runs_locally(const Args& args);
// The FlagSet of `baton generate` (program name, synopsis, both modes'
// description) with every flag of both modes bound to `*out`.
std::unique_ptr<FlagSet> generate_flag_set(GenerateFlags* out);
// A usage error for the first flag that is set but belongs to the other
// mode; nullopt when there is none.
std::optional<std::string> other_mode_flag(const FlagSet& flags, bool local);

}  // namespace baton::cli
