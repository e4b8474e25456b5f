// baton generate: runs the CPU engine on a local model and streams the
// generated text with the stats at the end; the KV lives in the edge agent's
// quantized store (local_turn.h), so the answer is the agent's. Prompts are text (tokenized with
// the model's own tokenizer), token ids, or synthetic tokens for speed runs.
// Without --model the command is a client of the edge agent instead
// (cmd_generate_edge.cc); generate_flags.h has the flags of both modes.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "commands.h"
#include "common/engine/context_limit.h"
#include "common/engine/engine.h"
#include "common/engine/sampler.h"
#include "common/model/model.h"
#include "common/tokenizer/streaming_decoder.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/check.h"
#include "common/util/flags.h"
#include "generate_flags.h"
#include "local_turn.h"
#include "prompt_flags.h"
#include "report.h"

namespace baton::cli {
namespace {

// The prompt's tokens: the text through the model's tokenizer, the ids as
// given, or (no prompt) --prompt-len synthetic tokens.
std::vector<int32_t> prompt_tokens(const PromptInput& input, const GenerateFlags& f, const ModelSpec& s,
                                   const Tokenizer& tokenizer) {
  if (!input.text.empty()) return tokenizer.encode(input.text);
  if (!input.tokens.empty()) return input.tokens;
  // Synthetic prompts stay the same run to run (speed comparisons): --seed, else 0.
  std::vector<int32_t> prompt;
  Rng rng(static_cast<uint64_t>(f.generation.seed) + 1);
  // Ids past the specials and byte tokens of a llama vocabulary.
  const int first = s.n_vocab > 512 ? 259 : 0;
  for (int64_t i = 0; i < f.prompt_len; ++i) {
    prompt.push_back(first + static_cast<int32_t>(rng.next() % static_cast<uint64_t>(s.n_vocab - first)));
  }
  return prompt;
}

// The same limit as the edge agent (common/engine/context_limit.h): a prompt
// past the trained context is refused; max_tokens is clamped to the room
// left, with a warning before the first token.
absl::Status fit_context(const ModelSpec& s, int64_t prompt_count, int64_t* max_tokens) {
  ContextLimit limit;
  limit.trained_tokens = s.n_ctx_train;
  BATON_RETURN_IF_ERROR(check_context_fits(limit, 0, prompt_count));
  if (const std::string warning = context_overflow_warning(limit, prompt_count, *max_tokens); !warning.empty()) {
    std::fprintf(stderr, "baton generate: warning: %s\n", warning.c_str());
    *max_tokens = generation_room(limit, prompt_count, *max_tokens);
  }
  return absl::OkStatus();
}

// Prefills `prompt` into the edge agent's KV store for --codec
// (local_turn.h), then samples and prints up to `max_tokens` tokens as they
// come; returns the figures of the turn.
absl::StatusOr<LocalTurnFigures> run_turn(const Model& model, const Tokenizer& tokenizer, const GenerateFlags& f,
                                          const SamplingParams& sampling, const std::vector<int32_t>& prompt,
                                          int64_t max_tokens) {
  Engine engine(model, EngineOptions{static_cast<int>(f.threads), 64});
  const KvGeometry geometry = engine.kv_geometry();
  absl::StatusOr<KvCodecConfig> wire = local_kv_codec(f.codec_name, geometry);
  if (!wire.ok()) return usage_error("generate", std::string(wire.status().message()));
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<QuantizedKvCache> kv,
                         new_local_kv_store(*wire, geometry, static_cast<int64_t>(prompt.size()) + max_tokens));
  Sampler sampler(sampling);
  StreamingDecoder detokenizer(tokenizer);
  const TokenSink print = [&](int32_t token) {
    if (!f.ignore_eos && tokenizer.is_eog(token)) return false;
    std::fputs(detokenizer.push(token).c_str(), stdout);
    std::fflush(stdout);
    return true;
  };
  BATON_ASSIGN_OR_RETURN(LocalTurn turn, run_local_turn(engine, *kv, sampler, prompt, max_tokens, print));
  std::fputs(detokenizer.flush().c_str(), stdout);
  std::fputs("\n", stdout);
  return turn.figures;
}

absl::Status generate_locally(const Args& args) {
  GenerateFlags f;
  std::unique_ptr<FlagSet> flags = generate_flag_set(&f);
  if (std::optional<absl::Status> done = parse_flags(*flags, with_prompt_short_flag(args))) return *done;
  if (std::optional<std::string> wrong = other_mode_flag(*flags, /*local=*/true)) {
    return usage_error("generate", *wrong);
  }
  if (!flags->positional().empty()) {
    return usage_error("generate", "unexpected argument '" + flags->positional().front() + "'");
  }
  BATON_ASSIGN_OR_RETURN(PromptInput input, read_prompt(f.prompt, "generate", /*required=*/false));
  if (absl::Status st = check_generation_flags(f.generation); !st.ok()) {
    return usage_error("generate", std::string(st.message()));
  }
  const SamplingParams sampling = local_sampling(f.generation, *flags);

  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(f.model));
  const ModelSpec& s = model->spec();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf(model->file());
  if (!tokenizer.ok()) return with_prefix("the model's tokenizer", tokenizer.status());
  const std::vector<int32_t> prompt = prompt_tokens(input, f, s, **tokenizer);
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  int64_t max_tokens = f.generation.max_tokens;
  BATON_RETURN_IF_ERROR(fit_context(s, static_cast<int64_t>(prompt.size()), &max_tokens));
  BATON_ASSIGN_OR_RETURN(LocalTurnFigures figures, run_turn(*model, **tokenizer, f, sampling, prompt, max_tokens));
  local_stats_report(s.name, f.threads, figures).print(f.json);
  return absl::OkStatus();
}

}  // namespace

absl::Status generate_command(const Args& args) {
  return generate_runs_locally(args) ? generate_locally(args) : generate_on_edge(args);
}

}  // namespace baton::cli
