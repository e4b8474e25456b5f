// The generation flags that `baton generate` and `baton chat` share in both
// modes (--model: the CPU engine here; --edge: the edge agent), so that one
// command line means the same sampling either way and --help states the
// defaults once. The defaults are the edge agent's: 256 tokens, temperature
// 0.8, no top-k / top-p / min-p cut, no repetition penalty, a random seed.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/engine/sampler.h"
#include "proto/baton.pb.h"
#include "report.h"

namespace baton {
class FlagSet;
}

namespace baton::cli {

struct GenerationFlags {
  int64_t max_tokens = 256;      // baton-edge's --max-tokens default
  double temperature = 0.8;      // baton-edge's default temperature
  int64_t top_k = 0;             // 0: off
  double top_p = 1.0;            // 1 (or 0): off
  double min_p = 0.0;            // 0: off
  double repeat_penalty = 1.0;   // 1 (or 0): off
  int64_t repeat_last_n = 64;
  int64_t seed = 0;              // used only when --seed is given; else random
};

// Registers --max-tokens, --temperature, --top-k, --top-p, --min-p,
// --repeat-penalty, --repeat-last-n and --seed, bound to `*out`.
void add_generation_flags(FlagSet& flags, GenerationFlags* out);
// Range checks; InvalidArgument naming the flag and the value.
absl::Status check_generation_flags(const GenerationFlags& generation);

// Sampler parameters for the CPU engine here: the seed of --seed, else a
// random one.
SamplingParams local_sampling(const GenerationFlags& generation, const FlagSet& flags);
// Fills max_tokens (left 0 = the agent's --max-tokens when --max-tokens is
// not given) and the sampling parameters of an edge request.
void fill_edge_request(const GenerationFlags& generation, const FlagSet& flags, v1::GenerateRequest* request);

// The stats of a generation with the CPU engine here (generate and chat with
// --model): `prefill_s` from the start to the prompt's logits, `decode_s`
// from the first token to the last; context_tokens < 0: not shown.
struct LocalTurnFigures {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double ttft_ms = 0;
  double prefill_s = 0;
  double decode_s = 0;
  int64_t context_tokens = -1;
};
Report local_stats_report(const std::string& model_name, int64_t threads, const LocalTurnFigures& figures);

// --policy NAME of generate and chat: auto, local, cloud; empty: unset (the
// agent's --policy).
absl::StatusOr<v1::SplitPolicy> parse_split_policy(const std::string& name);

// The edge agent's per-request turn settings that generate and chat share
// (--edge only): unset flags leave the agent's own settings.
struct EdgeTurnFlags {
  std::string context_overflow;  // --context-overflow refuse|truncate|shift; empty: the agent's
  int64_t keep_tokens = 0;       // --keep-tokens: GenerateRequest.keep_tokens when given
  int64_t early_tokens = 0;      // --early-tokens: GenerateRequest.early_tokens when given
  int64_t speculative = 0;       // --speculative: GenerateRequest.speculative when given
};
// Registers --context-overflow, --keep-tokens, --early-tokens and --speculative.
void add_edge_turn_flags(FlagSet& flags, EdgeTurnFlags* out);
// Range checks (InvalidArgument naming the flag), then the request's fields
// of the flags given.
absl::Status fill_edge_turn(const EdgeTurnFlags& turn, const FlagSet& flags, v1::GenerateRequest* request);

}  // namespace baton::cli
