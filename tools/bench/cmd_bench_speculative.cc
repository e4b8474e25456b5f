// baton bench decode --speculative: tokens/s of greedy replies decoded with
// plain decode steps and with prompt-lookup speculative decoding
// (common/engine/speculative.h), the two ways interleaved reply by reply in
// one run, on two tasks made from a held-out text:
//   quote  a passage, then the first words of one of its lines: the reply
//          can quote the passage (what summaries, code edits and answers
//          about a document do);
//   free   two lines of text and a free continuation.
// Each reply is decoded both ways from the same prompt over the edge's KV
// store, and the two replies must agree token for token.
#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench_decode.h"
#include "bench_harness.h"
#include "common/engine/draft_model.h"
#include "common/engine/sampler.h"
#include "common/engine/speculative.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/check.h"
#include "common/util/cpu_features.h"
#include "report.h"

namespace baton::cli {

namespace {

// Reply tokens over the summed seconds one way (`seconds` picks which).
double tokens_per_second(const std::vector<SpeculativeReply>& replies, double SpeculativeReply::*seconds) {
  double tokens = 0, total = 0;
  for (const SpeculativeReply& r : replies) {
    tokens += static_cast<double>(r.tokens);
    total += r.*seconds;
  }
  return total > 0 ? tokens / total : 0;
}

}  // namespace

double SpeculativeTask::plain_tok_per_s() const { return tokens_per_second(replies, &SpeculativeReply::plain_seconds); }

double SpeculativeTask::speculative_tok_per_s() const {
  return tokens_per_second(replies, &SpeculativeReply::speculative_seconds);
}

double SpeculativeTask::ratio() const {
  const double plain = plain_tok_per_s();
  return plain > 0 ? speculative_tok_per_s() / plain : 0;
}

double SpeculativeTask::acceptance() const {
  uint64_t drafted = 0, accepted = 0;
  for (const SpeculativeReply& r : replies) {
    drafted += r.drafted;
    accepted += r.accepted;
  }
  return drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0;
}

double SpeculativeTask::tokens_per_pass() const {
  uint64_t tokens = 0, passes = 0;
  for (const SpeculativeReply& r : replies) {
    tokens += static_cast<uint64_t>(r.tokens);
    passes += r.verifies + r.plain_steps;
  }
  return passes > 0 ? static_cast<double>(tokens) / static_cast<double>(passes) : 0;
}

int SpeculativeTask::identical() const {
  return static_cast<int>(std::count_if(replies.begin(), replies.end(),
                                        [](const SpeculativeReply& r) { return r.identical; }));
}

Json speculative_json(const SpeculativeRun& run) {
  Json tasks = Json::array();
  for (const SpeculativeTask& t : run.tasks) {
    int64_t prompt_tokens = 0, tokens = 0;
    uint64_t drafted = 0, accepted = 0;
    for (const SpeculativeReply& r : t.replies) {
      prompt_tokens += r.prompt_tokens;
      tokens += r.tokens;
      drafted += r.drafted;
      accepted += r.accepted;
    }
    tasks.push_back({{"task", t.name},
                     {"replies", t.replies.size()},
                     {"prompt_tokens", prompt_tokens},
                     {"reply_tokens", tokens},
                     {"plain_tok_per_s", fixed(t.plain_tok_per_s(), 3)},
                     {"speculative_tok_per_s", fixed(t.speculative_tok_per_s(), 3)},
                     {"ratio", fixed(t.ratio(), 4)},
                     {"drafted", drafted},
                     {"accepted", accepted},
                     {"acceptance", fixed(t.acceptance(), 4)},
                     {"tokens_per_pass", fixed(t.tokens_per_pass(), 3)},
                     {"identical", t.identical()}});
  }
  Json costs = Json::array();
  const double step = run.verify_costs.empty() ? 0 : run.verify_costs.front().seconds;
  for (const SpeculativeRun::VerifyCost& v : run.verify_costs) {
    costs.push_back({{"rows", v.rows},
                     {"ms", fixed(v.seconds * 1e3, 3)},
                     {"cost_in_steps", fixed(step > 0 ? v.seconds / step : 0, 4)},
                     {"batched_ms", fixed(v.batched_seconds * 1e3, 3)},
                     {"batched_cost_in_steps", fixed(step > 0 ? v.batched_seconds / step : 0, 4)}});
  }
  return {{"model", run.model},     {"threads", run.threads},         {"kernels", run.kernels},
          {"store", run.store},     {"max_draft", run.max_draft},     {"draft", run.draft},
          {"tasks", std::move(tasks)},
          {"verify_costs", std::move(costs)}};
}

void print_speculative_table(const SpeculativeRun& run) {
  print_line("speculative decode: %s, %d threads, %s kernels, KV store %s, drafts of up to %d tokens (%s)\n",
             run.model, run.threads, run.kernels, run.store, run.max_draft,
             run.draft.empty() ? "prompt lookup" : "draft model " + run.draft);
  print_line("  %-6s %7s %10s %11s %11s %7s %15s %11s %9s\n", "task", "replies", "tokens", "plain tok/s",
             "spec tok/s", "ratio", "taken/drafted", "tok/pass", "identical");
  for (const SpeculativeTask& t : run.tasks) {
    int64_t tokens = 0;
    uint64_t drafted = 0, accepted = 0;
    for (const SpeculativeReply& r : t.replies) {
      tokens += r.tokens;
      drafted += r.drafted;
      accepted += r.accepted;
    }
    print_line("  %-6s %7d %10d %11.2f %11.2f %6.2fx %15s %11.2f %6d/%-2d\n", t.name, t.replies.size(), tokens,
               t.plain_tok_per_s(), t.speculative_tok_per_s(), t.ratio(),
               absl::StrFormat("%u/%u (%.0f%%)", accepted, drafted, 100 * t.acceptance()), t.tokens_per_pass(),
               t.identical(), t.replies.size());
  }
  if (!run.verify_costs.empty()) {
    const double step = run.verify_costs.front().seconds;
    print_line("  verification cost: %-8s %10s %14s %22s %12s %14s %16s\n", "rows", "ms", "cost in steps",
               "x if every draft taken", "batched ms", "cost in steps", "x of one session");
    for (const SpeculativeRun::VerifyCost& v : run.verify_costs) {
      const double cost = step > 0 ? v.seconds / step : 0;
      const double batched = step > 0 ? v.batched_seconds / step : 0;
      print_line("                     %-8d %10.3f %14.3f %21.2fx %12.3f %14.3f %15.2fx\n", v.rows, v.seconds * 1e3,
                 cost, cost > 0 ? static_cast<double>(v.rows) / cost : 0, v.batched_seconds * 1e3, batched,
                 batched > 0 ? static_cast<double>(v.rows) / batched : 0);
    }
    print_line("  (rows: one decode_rows call of that many rows of one session, as a verification runs them; batched: "
               "one row for each of that many sessions, as a batched step of baton-edge --max-batch runs them; "
               "medians of 5 calls each, interleaved)\n");
  }
  print_line("  (greedy; each reply decoded both ways from the same prompt, alternating which goes first; tok/s = "
             "reply tokens / decode time summed over the task's replies; tok/pass = reply tokens per forward pass "
             "of the speculative run; identical = replies equal token for token)\n");
}

namespace {

struct Decoded {
  std::vector<int32_t> tokens;
  double seconds = 0;
  DecodeStepperStats stats;
};

// `count` greedy tokens after `prompt` (prefilled untimed): plain decode
// steps (max_draft < 0) or a DecodeStepper drafting up to max_draft.
// draft_engine (optional): a draft model's, drafting where prompt lookup finds nothing.
absl::StatusOr<Decoded> decode_reply(Engine& engine, const std::string& kv_name, const std::vector<int32_t>& prompt,
                                     int64_t count, int max_draft, std::string* store, Engine* draft_engine) {
  double bytes_per_token = 0;
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> kv,
                         bench_kv_cache(engine, kv_name, static_cast<int64_t>(prompt.size()) + count + 1, store,
                                        &bytes_per_token));
  std::vector<float> last;
  BATON_RETURN_IF_ERROR(engine.prefill(std::span(prompt).first(prompt.size() - 1), *kv, &last));
  Sampler sampler(SamplingParams{});  // greedy
  Decoded out;
  std::vector<int32_t> history = prompt;
  const auto start = Clock::now();
  if (max_draft < 0) {
    std::vector<float> logits;
    BATON_RETURN_IF_ERROR(engine.decode_step(prompt.back(), *kv, &logits));
    for (int64_t i = 0; i < count; ++i) {
      const int32_t t = sampler.sample(logits);
      out.tokens.push_back(t);
      if (i + 1 < count) BATON_RETURN_IF_ERROR(engine.decode_step(t, *kv, &logits));
    }
  } else {
    DecodeStepper stepper(engine, *kv, max_draft);
    std::optional<ModelDrafter> drafter;
    if (draft_engine != nullptr) {
      drafter.emplace(*draft_engine, static_cast<int64_t>(prompt.size()) + count + max_draft);
      stepper.set_drafter(&*drafter);
    }
    BATON_RETURN_IF_ERROR(stepper.start(std::span(prompt).last(1), history, count));
    for (int64_t i = 0; i < count; ++i) {
      const int32_t t = sampler.sample(stepper.logits());
      out.tokens.push_back(t);
      history.push_back(t);
      if (i + 1 == count) break;
      BATON_RETURN_IF_ERROR(stepper.advance(t, history, count - i - 1));
    }
    stepper.finish();
    out.stats = stepper.stats();
  }
  out.seconds = seconds_between(start, Clock::now());
  return out;
}

// Median seconds of one pass of `rows` rows after `prompt` (rolled back
// after each call) through EngineDecodeRunner, as DecodeStepper runs them:
// 1 row = decode_step.
// Median seconds of one decode_rows call of `rows` rows after `prompt`:
// rows of one session (a verification) and one row for each of `rows`
// sessions holding the prompt (a batched step), the two interleaved.
absl::Status time_rows(Engine& engine, const std::string& kv_name, const std::vector<int32_t>& prompt, int64_t rows,
                       int reps, SpeculativeRun::VerifyCost* cost) {
  std::string store;
  double bytes_per_token = 0;
  std::vector<std::unique_ptr<KvCache>> caches;  // [0]: the verification's; all: the batched step's
  std::vector<float> last;
  for (int64_t i = 0; i < rows; ++i) {
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> kv,
                           bench_kv_cache(engine, kv_name, static_cast<int64_t>(prompt.size()) + rows, &store,
                                          &bytes_per_token));
    BATON_RETURN_IF_ERROR(engine.prefill(prompt, *kv, &last));
    caches.push_back(std::move(kv));
  }
  const int64_t base = caches[0]->size();
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < rows; ++i) tokens.push_back(prompt[static_cast<size_t>(i) % prompt.size()]);
  std::vector<Engine::DecodeRow> batched;
  for (int64_t i = 0; i < rows; ++i) batched.push_back({tokens[static_cast<size_t>(i)], caches[static_cast<size_t>(i)].get()});
  EngineDecodeRunner runner(engine);  // 1 row: decode_step; more: decode_rows
  std::vector<float> logits(static_cast<size_t>(rows * engine.model().spec().n_vocab));
  std::vector<double> verify, step;
  for (int rep = 0; rep < reps + 1; ++rep) {
    auto start = Clock::now();
    BATON_RETURN_IF_ERROR(runner.decode(tokens, *caches[0], &logits));
    if (rep > 0) verify.push_back(seconds_between(start, Clock::now()));  // the first warms up
    caches[0]->set_size(base);
    start = Clock::now();
    BATON_RETURN_IF_ERROR(engine.decode_rows(batched, logits.data()));
    if (rep > 0) step.push_back(seconds_between(start, Clock::now()));
    for (auto& kv : caches) kv->set_size(base);
  }
  cost->rows = rows;
  cost->seconds = median(verify);
  cost->batched_seconds = median(step);
  return absl::OkStatus();
}

// The tasks' prompts from the text's non-empty lines; prompt i starts
// at line i * stride. Quote: lines until `prompt_tokens`, then the first
// four words of one of them; free: two lines.
std::vector<std::vector<int32_t>> task_prompts(const std::string& task, const std::vector<std::string>& lines,
                                               const Tokenizer& tokenizer, int64_t prompts, int64_t prompt_tokens,
                                               int64_t max_prompt) {
  std::vector<std::vector<int32_t>> out;
  const size_t stride = std::max<size_t>(1, lines.size() / static_cast<size_t>(prompts + 1));
  Rng rng(17);
  for (int64_t i = 0; i < prompts; ++i) {
    const size_t first = static_cast<size_t>(i) * stride;
    std::string text;
    std::vector<int32_t> tokens;
    size_t end = first;
    if (task == "free") {
      for (; end < first + 2 && end < lines.size(); ++end) text += lines[end] + "\n";
      tokens = tokenizer.encode(text);
    } else {
      while (end < lines.size()) {
        const std::string longer = text + lines[end] + "\n";
        if (static_cast<int64_t>(tokenizer.encode(longer).size()) > prompt_tokens && end > first) break;
        text = longer;
        ++end;
      }
      const size_t quoted = first + static_cast<size_t>(rng.next() % std::max<size_t>(1, end - first));
      const std::vector<std::string> words = absl::StrSplit(lines[quoted], ' ', absl::SkipEmpty());
      for (size_t w = 0; w < std::min<size_t>(4, words.size()); ++w) text += (w ? " " : "") + words[w];
      tokens = tokenizer.encode(text);
    }
    if (tokens.size() >= 2 && static_cast<int64_t>(tokens.size()) <= max_prompt) out.push_back(std::move(tokens));
  }
  return out;
}

}  // namespace

absl::Status bench_decode_speculative(const Args& args) {
  ModelBenchFlags c;
  int64_t max_draft = kDefaultSpeculativeTokens, tokens = 128, prompts = 4, prompt_tokens = 384;
  std::string text_file = "deploy/models/baton-tiny-kjv.heldout.txt";
  std::string task_list = "quote,free", kv_name = "int8-g32", draft_path;
  int64_t draft_threads = 1;
  FlagSet flags("baton bench decode --speculative",
                "--speculative N --model FILE [--draft F] [--draft-threads 1] [--task quote,free] [--tokens 128] "
                "[--prompts 4] [--text-file F] [--kv int8-g32] [--threads 2] [--json]",
                "Greedy replies decoded with plain decode steps and with prompt-lookup speculative decoding (drafts "
                "of up to N tokens verified in one pass over the weights), side by side in one run: tokens/s both "
                "ways and their ratio, the drafts taken, reply tokens per forward pass, and whether the replies "
                "agree token for token. Tasks from the text file's lines: quote (a passage of about "
                "--prompt-tokens tokens, then the first words of one of its lines: the reply can quote it) and "
                "free (two lines, then a free continuation).");
  add_model_bench_flags(flags, c);
  flags.add_int64("speculative", &max_draft, "the most draft tokens per step (1..16)");
  flags.add_string("task", &task_list, "comma-separated tasks: quote, free", "LIST");
  flags.add_int64("tokens", &tokens, "reply tokens per prompt");
  flags.add_int64("prompts", &prompts, "prompts per task");
  flags.add_int64("prompt-tokens", &prompt_tokens, "quote: the passage's length in tokens (about)");
  flags.add_string("text-file", &text_file, "text the prompts come from (default: the bundled model's held-out text)",
                   "F");
  flags.add_string("kv", &kv_name, "the KV store: a wire codec name (its edge store) or f32", "CODEC");
  flags.add_string("draft", &draft_path,
                   "a draft model (same tokenizer) drafts where prompt lookup finds nothing, as baton-edge --draft",
                   "F");
  flags.add_int64("draft-threads", &draft_threads, "threads of the draft model's engine (1..64)");
  BATON_ASSIGN_OR_RETURN(const bool run, parse_bench_flags(flags, args));
  if (!run) return absl::OkStatus();
  if (max_draft < 1 || max_draft > kMaxSpeculativeTokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--speculative %d is outside [1, %u]", max_draft, kMaxSpeculativeTokens));
  }
  if (tokens < 2 || prompts < 1 || prompt_tokens < 8) {
    return absl::InvalidArgumentError("--tokens must be >= 2, --prompts >= 1, --prompt-tokens >= 8");
  }
  std::ifstream in(text_file);
  if (!in) return absl::NotFoundError("cannot read --text-file " + text_file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  if (lines.size() < 4) return absl::InvalidArgumentError("--text-file needs at least 4 non-empty lines");

  if (draft_threads < 1 || draft_threads > kMaxDraftThreads) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--draft-threads %d is outside [1, %d]", draft_threads, kMaxDraftThreads));
  }
  BATON_ASSIGN_OR_RETURN(LoadedModel m, load_model(c.model, c.threads));
  LoadedModel draft;
  if (!draft_path.empty()) {
    BATON_ASSIGN_OR_RETURN(draft, load_model(draft_path, draft_threads));
    BATON_RETURN_IF_ERROR(check_draft_model(*m.model, *draft.model));
  }
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::FromGguf(m.model->file()));
  const int64_t max_prompt = m.spec().n_ctx_train > 0 ? m.spec().n_ctx_train - tokens - 1 : 1 << 20;
  SpeculativeRun result;
  result.model = m.spec().name;
  result.threads = c.threads;
  result.kernels = simd_level_name(active_simd_level());
  result.max_draft = max_draft;
  if (draft.model != nullptr) result.draft = draft.spec().name;
  for (const std::string& task : std::vector<std::string>(absl::StrSplit(task_list, ',', absl::SkipEmpty()))) {
    if (task != "quote" && task != "free") return absl::InvalidArgumentError("--task: unknown task '" + task + "'");
    SpeculativeTask row;
    row.name = task;
    const auto task_set = task_prompts(task, lines, *tokenizer, prompts, prompt_tokens, max_prompt);
    if (task_set.empty()) return absl::InvalidArgumentError("--task " + task + ": no prompt fits the model's context");
    for (size_t i = 0; i < task_set.size(); ++i) {
      const std::vector<int32_t>& prompt = task_set[i];
      // Alternate which way goes first, so neither always runs on warmer caches.
      absl::StatusOr<Decoded> plain, spec;
      for (int pass = 0; pass < 2; ++pass) {
        if ((pass == 0) == (i % 2 == 0)) {
          plain = decode_reply(*m.engine, kv_name, prompt, tokens, -1, &result.store, nullptr);
        } else {
          spec = decode_reply(*m.engine, kv_name, prompt, tokens, static_cast<int>(max_draft), &result.store,
                              draft.engine.get());
        }
      }
      BATON_RETURN_IF_ERROR(plain.status());
      BATON_RETURN_IF_ERROR(spec.status());
      SpeculativeReply r;
      r.prompt_tokens = static_cast<int64_t>(prompt.size());
      r.tokens = tokens;
      r.plain_seconds = plain->seconds;
      r.speculative_seconds = spec->seconds;
      r.verifies = spec->stats.verifies;
      r.plain_steps = spec->stats.plain_steps;
      r.drafted = spec->stats.drafted_tokens;
      r.accepted = spec->stats.accepted_tokens;
      r.identical = plain->tokens == spec->tokens;
      row.replies.push_back(r);
    }
    result.tasks.push_back(std::move(row));
    if (result.verify_costs.empty()) {
      for (int64_t rows = 1; rows <= max_draft + 1; rows *= 2) {
        SpeculativeRun::VerifyCost cost;
        BATON_RETURN_IF_ERROR(time_rows(*m.engine, kv_name, task_set[0], rows, 5, &cost));
        result.verify_costs.push_back(cost);
      }
    }
  }
  if (c.json) {
    print_json_line(speculative_json(result));
  } else {
    print_speculative_table(result);
  }
  int identical = 0, replies = 0;
  for (const SpeculativeTask& t : result.tasks) {
    identical += t.identical();
    replies += static_cast<int>(t.replies.size());
  }
  if (identical != replies) {
    return absl::InternalError(absl::StrFormat(
        "speculative decoding changed %d of %d greedy replies (they must agree token for token)", replies - identical,
        replies));
  }
  return absl::OkStatus();
}

}  // namespace baton::cli
