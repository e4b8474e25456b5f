// baton generate: runs the CPU engine on a local model and streams the
// generated text with the stats at the end. Prompts are text (tokenized with
// the model's own tokenizer), token ids, or synthetic tokens for speed runs.
// With --edge ADDR the command is a client of the edge agent instead
// (cmd_generate_edge.cc).
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
#include "report.h"

namespace baton::cli {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

int generate_command(const Args& args) {
  for (const std::string& arg : args) {
    if (arg == "--") break;
    if (arg == "--edge" || arg.rfind("--edge=", 0) == 0) return generate_on_edge(args);
  }
  std::string model_path, prompt_text, prompt_file, prompt_tokens_text;
  int64_t prompt_len = 256, max_tokens = 32, threads = 2, seed = 0, top_k = 40;
  double temperature = 0.0, top_p = 1.0, min_p = 0.0, repeat_penalty = 1.0;
  bool json = false;
  bool ignore_eos = false;
  FlagSet flags("baton generate",
                "--model FILE [-p TEXT | --prompt-file F | --prompt-tokens IDS | --prompt-len N] [flags]",
                "Generates text from a prompt with the CPU engine on a local model, printing it as "
                "it is produced, then the stats. Without a prompt, a synthetic prompt of "
                "--prompt-len random tokens is used (speed runs). "
                "'baton generate --edge ADDR ...' sends the prompt to an edge agent instead "
                "(see 'baton generate --edge ADDR --help').");
  flags.add_string("model", &model_path, "GGUF model file", "FILE");
  flags.add_string("prompt", &prompt_text, "prompt text (also -p)", "TEXT");
  flags.add_string("prompt-file", &prompt_file, "read the prompt text from a file", "FILE");
  flags.add_string("prompt-tokens", &prompt_tokens_text, "prompt as comma-separated token ids", "IDS");
  flags.add_int64("prompt-len", &prompt_len, "synthetic prompt length when no prompt is given");
  flags.add_bool("ignore-eos", &ignore_eos, "keep generating past end-of-sequence tokens");
  flags.add_int64("max-tokens", &max_tokens, "tokens to generate");
  flags.add_int64("threads", &threads, "worker threads");
  flags.add_double("temperature", &temperature, "0 = greedy");
  flags.add_int64("top-k", &top_k, "top-k cut (0 = off)");
  flags.add_double("top-p", &top_p, "nucleus cut (1 = off)");
  flags.add_double("min-p", &min_p, "min-p cut (0 = off)");
  flags.add_double("repeat-penalty", &repeat_penalty, "repetition penalty (1 = off)");
  flags.add_int64("seed", &seed, "sampling seed");
  flags.add_bool("json", &json, "print the stats as one JSON object");
  flags.require("model");
  Args expanded = args;
  for (std::string& arg : expanded) {
    if (arg == "-p") arg = "--prompt";
  }
  if (auto code = parse_flags(flags, expanded)) return *code;

  auto model = Model::Load(model_path);
  if (!model.ok()) return fail(std::string(model.status().message()));
  const ModelSpec& s = (*model)->spec();
  auto tokenizer = Tokenizer::FromGguf((*model)->file());
  if (!tokenizer.ok()) return fail("the model's tokenizer: " + std::string(tokenizer.status().message()));
  if (!prompt_file.empty()) {
    std::ifstream in(prompt_file, std::ios::binary);
    if (!in) return fail("cannot read --prompt-file " + prompt_file);
    std::stringstream buffer;
    buffer << in.rdbuf();
    prompt_text = buffer.str();
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
    Rng rng(static_cast<uint64_t>(seed) + 1);
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
  Sampler sampler(SamplingParams{static_cast<float>(temperature), static_cast<int>(top_k),
                                 static_cast<float>(top_p), static_cast<float>(min_p),
                                 static_cast<float>(repeat_penalty), 64, static_cast<uint64_t>(seed)});
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
  Report r(absl::StrFormat("stats (%s, local CPU engine, %d threads)", s.name, threads));
  r.add_int("prompt_tokens", "prompt tokens", static_cast<long long>(prompt.size()));
  r.add_int("generated_tokens", "generated tokens", generated);
  r.add("ttft_ms", "time to first token", secs(start, first_token_time) * 1e3, "ms", 1);
  r.add("prefill_tok_per_s", "prefill", prompt.size() / secs(start, prefill_done), "tok/s");
  r.add("decode_tok_per_s", "decode (mean)", generated > 1 ? (generated - 1) / secs(first_token_time, end) : 0.0,
        "tok/s");
  r.print(json);
  return 0;
}

}  // namespace baton::cli
