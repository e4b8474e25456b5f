// baton generate: runs the CPU engine on a local model and streams the
// generated text with the stats at the end. Prompts are text (tokenized with
// the model's own tokenizer), token ids, or synthetic tokens for speed runs.
// Without --model the command is a client of the edge agent instead
// (cmd_generate_edge.cc); generate_flags.h has the flags of both modes.
#include <chrono>
#include <fstream>
#include <sstream>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "commands.h"
#include "common/engine/context_limit.h"
#include "common/engine/engine.h"
#include "common/engine/sampler.h"
#include "common/model/model.h"
#include "common/tokenizer/streaming_decoder.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/flags.h"
#include "generate_flags.h"
#include "report.h"

namespace baton::cli {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

static int generate_command_exit_code(const Args& args) {
  GenerateFlags f;
  std::unique_ptr<FlagSet> flag_set = generate_flag_set(&f);
  FlagSet& flags = *flag_set;
  const std::string& model_path = f.model;
  std::string& prompt_text = f.prompt_text;
  const std::string& prompt_tokens_text = f.prompt_tokens;
  const int64_t& prompt_len = f.prompt_len;
  int64_t& max_tokens = f.generation.max_tokens;  // clamped below to the context room
  const int64_t& threads = f.threads;
  const bool& ignore_eos = f.ignore_eos;
  const bool& json = f.json;
  Args expanded = args;
  for (std::string& arg : expanded) {
    if (arg == "-p") arg = "--prompt";
  }
  if (auto code = parse_flags(flags, expanded)) return *code;
  auto usage_error = [](const std::string& message) {
    std::fprintf(stderr, "baton generate: %s\n(see --help)\n", message.c_str());
    return 2;
  };
  if (std::optional<std::string> wrong = other_mode_flag(flags, /*local=*/true)) return usage_error(*wrong);
  if (!flags.positional().empty()) return usage_error("unexpected argument '" + flags.positional().front() + "'");
  if (!prompt_text.empty() + !f.prompt_file.empty() + !prompt_tokens_text.empty() > 1) {
    return usage_error("give at most one of -p TEXT, --prompt-file F, --prompt-tokens IDS");
  }
  if (absl::Status st = check_generation_flags(f.generation); !st.ok()) return usage_error(std::string(st.message()));
  const SamplingParams sampling = local_sampling(f.generation, flags);

  auto model = Model::Load(model_path);
  if (!model.ok()) return fail(std::string(model.status().message()));
  const ModelSpec& s = (*model)->spec();
  auto tokenizer = Tokenizer::FromGguf((*model)->file());
  if (!tokenizer.ok()) return fail("the model's tokenizer: " + std::string(tokenizer.status().message()));
  if (!f.prompt_file.empty()) {
    absl::StatusOr<std::string> text = read_prompt_file(f.prompt_file);
    if (!text.ok()) return fail(std::string(text.status().message()));
    prompt_text = *text;
  }

  std::vector<int32_t> prompt;
  if (!prompt_text.empty()) {
    prompt = (*tokenizer)->encode(prompt_text);
  } else if (!prompt_tokens_text.empty()) {
    for (absl::string_view part : absl::StrSplit(prompt_tokens_text, ',')) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(part, &id)) return fail(absl::StrFormat("--prompt-tokens: '%s' is not a token id", part));
      prompt.push_back(id);
    }
  } else {
    // Synthetic prompts stay the same run to run (speed comparisons): --seed, else 0.
    Rng rng(static_cast<uint64_t>(f.generation.seed) + 1);
    // Ids past the specials and byte tokens of a llama vocabulary.
    const int first = s.n_vocab > 512 ? 259 : 0;
    for (int64_t i = 0; i < prompt_len; ++i) {
      prompt.push_back(first + static_cast<int32_t>(rng.next() % static_cast<uint64_t>(s.n_vocab - first)));
    }
  }
  if (prompt.empty()) return fail("the prompt is empty");
  // The same limit as the edge agent (common/engine/context_limit.h): a
  // prompt past the trained context is refused; max_tokens is clamped to the
  // room left, with a warning before the first token.
  ContextLimit limit;
  limit.trained_tokens = s.n_ctx_train;
  const int64_t prompt_count = static_cast<int64_t>(prompt.size());
  if (absl::Status fits = check_context_fits(limit, 0, prompt_count); !fits.ok()) {
    return fail(std::string(fits.message()));
  }
  if (const std::string warning = context_overflow_warning(limit, prompt_count, max_tokens); !warning.empty()) {
    std::fprintf(stderr, "baton generate: warning: %s\n", warning.c_str());
    max_tokens = generation_room(limit, prompt_count, max_tokens);
  }

  Engine engine(**model, EngineOptions{static_cast<int>(threads), 64});
  auto kv = engine.new_f32_kv_cache(static_cast<int64_t>(prompt.size()) + max_tokens);
  Sampler sampler(sampling);
  for (int32_t t : prompt) sampler.accept(t);

  std::vector<float> logits;
  const auto start = Clock::now();
  if (auto st = engine.prefill(prompt, *kv, &logits); !st.ok()) return fail(std::string(st.message()));
  const auto prefill_done = Clock::now();
  int64_t generated = 0;
  Clock::time_point first_token_time = prefill_done;
  StreamingDecoder detokenizer(**tokenizer);
  while (generated < max_tokens) {
    const int32_t token = sampler.sample(logits);
    sampler.accept(token);
    if (generated == 0) first_token_time = Clock::now();
    ++generated;
    if (!ignore_eos && (*tokenizer)->is_eog(token)) break;
    std::fputs(detokenizer.push(token).c_str(), stdout);
    std::fflush(stdout);
    if (generated == max_tokens) break;
    if (auto st = engine.decode_step(token, *kv, &logits); !st.ok()) return fail(std::string(st.message()));
  }
  const auto end = Clock::now();
  std::fputs(detokenizer.flush().c_str(), stdout);
  std::fputs("\n", stdout);
  auto secs = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  LocalTurnFigures figures;
  figures.prompt_tokens = static_cast<int64_t>(prompt.size());
  figures.generated_tokens = generated;
  figures.ttft_ms = secs(start, first_token_time) * 1e3;
  figures.prefill_s = secs(start, prefill_done);
  figures.decode_s = secs(first_token_time, end);
  Report r = local_stats_report(s.name, threads, figures);
  r.print(json);
  return 0;
}

// Transitional adapter: the body still returns an exit code and has printed
// its messages.
absl::Status generate_command(const Args& args) {
  if (!generate_runs_locally(args)) return generate_on_edge(args);
  const int code = generate_command_exit_code(args);
  return code == 0 ? absl::OkStatus() : exit_status(code);
}

}  // namespace baton::cli
