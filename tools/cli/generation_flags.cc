#include "generation_flags.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/engine/sampling_proto.h"
#include "common/engine/speculative.h"
#include "common/util/flags.h"
#include "edge_decode/generate/context_overflow.h"

namespace baton::cli {

void add_generation_flags(FlagSet& flags, GenerationFlags* out) {
  flags.add_int64("max-tokens", &out->max_tokens,
                  "tokens to generate; with --edge, unset = the agent's --max-tokens (256 unless changed)");
  flags.add_double("temperature", &out->temperature, "sampling temperature; 0 = greedy (deterministic)");
  flags.add_int64("top-k", &out->top_k, "keep the k most likely tokens; 0 = off");
  flags.add_double("top-p", &out->top_p, "nucleus mass in (0, 1]; 1 = off");
  flags.add_double("min-p", &out->min_p, "drop tokens below min-p x the most likely one's p; 0 = off");
  flags.add_double("repeat-penalty", &out->repeat_penalty, "repetition penalty (llama.cpp rule); 1 = off");
  flags.add_int64("repeat-last-n", &out->repeat_last_n, "tokens the repetition penalty looks back over");
  flags.add_int64("seed", &out->seed, "sampling seed (same seed, prompt and flags = same text)");
  flags.set_default_text("seed", "random");
}

absl::Status check_generation_flags(const GenerationFlags& g) {
  if (g.max_tokens < 1) return absl::InvalidArgumentError(absl::StrFormat("--max-tokens: %d is below 1", g.max_tokens));
  if (!(g.temperature >= 0)) {
    return absl::InvalidArgumentError(absl::StrFormat("--temperature: %g is negative", g.temperature));
  }
  if (g.top_k < 0) return absl::InvalidArgumentError(absl::StrFormat("--top-k: %d is negative", g.top_k));
  if (!(g.top_p >= 0 && g.top_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrFormat("--top-p: %g is outside [0, 1]", g.top_p));
  }
  if (!(g.min_p >= 0 && g.min_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrFormat("--min-p: %g is outside [0, 1]", g.min_p));
  }
  if (!(g.repeat_penalty >= 0)) {
    return absl::InvalidArgumentError(absl::StrFormat("--repeat-penalty: %g is negative", g.repeat_penalty));
  }
  if (g.repeat_last_n < 0 || g.repeat_last_n > 65536) {
    return absl::InvalidArgumentError(absl::StrFormat("--repeat-last-n: %d is outside [0, 65536]", g.repeat_last_n));
  }
  return absl::OkStatus();
}

SamplingParams local_sampling(const GenerationFlags& g, const FlagSet& flags) {
  SamplingParams params;
  params.temperature = static_cast<float>(g.temperature);
  params.top_k = static_cast<int>(g.top_k);
  params.top_p = g.top_p == 0 ? 1.0f : static_cast<float>(g.top_p);
  params.min_p = static_cast<float>(g.min_p);
  params.repeat_penalty = g.repeat_penalty == 0 ? 1.0f : static_cast<float>(g.repeat_penalty);
  params.repeat_last_n = g.repeat_last_n == 0 ? 64 : static_cast<int>(g.repeat_last_n);
  params.seed = flags.is_set("seed") ? static_cast<uint64_t>(g.seed) : std::random_device{}();
  return params;
}

void fill_edge_request(const GenerationFlags& g, const FlagSet& flags, v1::GenerateRequest* request) {
  request->set_max_tokens(flags.is_set("max-tokens") ? static_cast<uint32_t>(g.max_tokens) : 0);
  v1::SamplingParams* sampling = request->mutable_sampling();
  sampling->set_temperature(static_cast<float>(g.temperature));
  sampling->set_top_k(static_cast<uint32_t>(g.top_k));
  sampling->set_top_p(static_cast<float>(g.top_p));
  sampling->set_min_p(static_cast<float>(g.min_p));
  sampling->set_repetition_penalty(static_cast<float>(g.repeat_penalty));
  sampling->set_repetition_last_n(static_cast<uint32_t>(g.repeat_last_n));
  if (flags.is_set("seed")) sampling->set_seed(static_cast<uint64_t>(g.seed));
}

Report local_stats_report(const std::string& model_name, int64_t threads, const LocalTurnFigures& f) {
  Report r(absl::StrFormat("stats (%s, local CPU engine, %d threads)", model_name, threads));
  r.add_int("prompt_tokens", "prompt tokens", f.prompt_tokens);
  r.add_int("generated_tokens", "generated tokens", f.generated_tokens);
  r.add("ttft_ms", "time to first token", f.ttft_ms, "ms", 1);
  r.add("prefill_tok_per_s", "prefill", f.prefill_s > 0 ? f.prompt_tokens / f.prefill_s : 0.0, "tok/s");
  r.add("decode_tok_per_s", "decode (mean)",
        f.generated_tokens > 1 && f.decode_s > 0 ? (f.generated_tokens - 1) / f.decode_s : 0.0, "tok/s");
  if (f.context_tokens >= 0) r.add_int("context_tokens", "context tokens", f.context_tokens);
  return r;
}

absl::StatusOr<v1::SplitPolicy> parse_split_policy(const std::string& name) {
  if (name.empty()) return v1::SPLIT_POLICY_UNSPECIFIED;  // the agent's --policy
  if (name == "auto") return v1::SPLIT_POLICY_AUTO;
  if (name == "local") return v1::SPLIT_POLICY_LOCAL;
  if (name == "cloud") return v1::SPLIT_POLICY_CLOUD;
  return absl::InvalidArgumentError("--policy: '" + name + "' is not one of auto, local, cloud");
}

void add_edge_turn_flags(FlagSet& flags, EdgeTurnFlags* out) {
  flags.add_string("context-overflow", &out->context_overflow,
                   "a session whose conversation outgrows the agent's context limit: truncate (drop the oldest "
                   "whole turns, keep the pack and the first --keep-tokens), shift (drop them, move the kept cells "
                   "without recompute) or refuse; unset: the agent's --context-overflow",
                   "MODE");
  flags.add_int64("keep-tokens", &out->keep_tokens,
                  "with truncate and shift: tokens at the start of the conversation never dropped; unset: the "
                  "agent's --keep-tokens");
  flags.add_int64("early-tokens", &out->early_tokens,
                  "reply tokens the cloud samples and sends ahead of the KV when the turn prefills through the "
                  "cloud (0..64; they come from the cloud's weights); unset: the agent's --early-tokens");
  flags.add_int64("speculative", &out->speculative,
                  "speculative decoding: the most tokens drafted per step by prompt lookup and verified in one "
                  "pass (0..16, 0: off; the reply is plain decoding's); unset: the agent's --speculative");
}

absl::Status fill_edge_turn(const EdgeTurnFlags& turn, const FlagSet& flags, v1::GenerateRequest* request) {
  if (!turn.context_overflow.empty()) {
    absl::StatusOr<ContextOverflowMode> mode = parse_context_overflow(turn.context_overflow);
    if (!mode.ok()) return absl::InvalidArgumentError(absl::StrCat("--context-overflow: ", mode.status().message()));
    request->set_context_overflow(context_overflow_to_proto(*mode));
  }
  if (flags.is_set("keep-tokens")) {
    if (turn.keep_tokens < 0 || turn.keep_tokens > kMaxKeepTokens) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--keep-tokens %d is outside [0, %u]", turn.keep_tokens, kMaxKeepTokens));
    }
    request->set_keep_tokens(static_cast<uint32_t>(turn.keep_tokens));
  }
  if (flags.is_set("early-tokens")) {
    if (turn.early_tokens < 0 || turn.early_tokens > kMaxEarlyTokens) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--early-tokens %d is outside [0, %u]", turn.early_tokens, kMaxEarlyTokens));
    }
    request->set_early_tokens(static_cast<uint32_t>(turn.early_tokens));
  }
  if (flags.is_set("speculative")) {
    if (turn.speculative < 0 || turn.speculative > kMaxSpeculativeTokens) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--speculative %d is outside [0, %u]", turn.speculative, kMaxSpeculativeTokens));
    }
    request->set_speculative(static_cast<uint32_t>(turn.speculative));
  }
  return absl::OkStatus();
}

}  // namespace baton::cli
