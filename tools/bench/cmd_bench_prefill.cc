// baton bench prefill | perplexity: the CPU engine's local prefill speed, and
// held-out perplexity of a model.
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench_harness.h"
#include "bench_report.h"
#include "common/engine/perplexity.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/check.h"
#include "common/util/cpu_features.h"

namespace baton::cli {
namespace {

// Token ids of a text file (lines tokenized one by one, no BOS) or of an ids
// file (space-separated, any number per line).
absl::StatusOr<std::vector<int32_t>> read_perplexity_tokens(const std::string& text_file,
                                                            const std::string& ids_file,
                                                            const Tokenizer& tokenizer) {
  std::ifstream in(text_file.empty() ? ids_file : text_file);
  if (!in) return absl::NotFoundError("cannot read " + (text_file.empty() ? ids_file : text_file));
  std::vector<int32_t> tokens;
  EncodeOptions no_bos;
  no_bos.add_bos = false;
  for (std::string line; std::getline(in, line);) {
    if (!text_file.empty()) {
      const auto ids = tokenizer.encode(line, no_bos);
      tokens.insert(tokens.end(), ids.begin(), ids.end());
    } else {
      std::istringstream words(line);
      for (int32_t id; words >> id;) tokens.push_back(id);
    }
  }
  return tokens;
}

}  // namespace

absl::Status bench_prefill(const Args& args) {
  ModelBenchFlags c;
  int64_t tokens = 512, batch = 64;
  bool local = true;
  std::string kv_name = "f16";
  FlagSet flags("baton bench prefill", "--model FILE --local [--tokens N] [--kv CODEC] [--threads N] [--json]",
                "Local prefill speed of the CPU engine (the edge's own prefill on its Q4_0 model: batched "
                "Q4_0 matmuls over micro-batches of --batch tokens): a prompt of N synthetic tokens into the KV "
                "store a codec implies (\"f32\": the engine's F32 cache).");
  add_model_bench_flags(flags, c);
  flags.add_bool("local", &local, "prefill here on the CPU engine (the only mode; the cloud has its own bench)");
  flags.add_int64("tokens", &tokens, "prompt tokens");
  flags.add_int64("batch", &batch, "micro-batch tokens per forward");
  flags.add_string("kv", &kv_name, "KV codec of the store the prompt goes into (f32, f16, int8-g32-z3, ...)", "CODEC");
  BATON_ASSIGN_OR_RETURN(const bool run, parse_bench_flags(flags, args));
  if (!run) return absl::OkStatus();
  if (!local) return absl::InvalidArgumentError("only --local prefill is measured here");
  if (tokens < 1 || batch < 1 || c.threads < 1) {
    return absl::InvalidArgumentError("--tokens, --batch and --threads must be >= 1");
  }
  BATON_ASSIGN_OR_RETURN(LoadedModel m, load_model(c.model, c.threads, batch));
  Engine& engine = *m.engine;
  const ModelSpec& s = m.spec();
  auto prompt = synthetic_tokens(tokens, s.n_vocab, 1);
  // Warm-up: page the weights in.
  {
    auto warm = engine.new_f32_kv_cache(8);
    std::vector<float> logits;
    (void)engine.prefill(std::span<const int32_t>(prompt.data(), 4), *warm, &logits);
  }
  std::string store_name;
  double kv_bytes_per_token = 0;
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> kv,
                         bench_kv_cache(engine, kv_name, tokens, &store_name, &kv_bytes_per_token));
  std::vector<float> logits;
  const auto start = Clock::now();
  BATON_RETURN_IF_ERROR(engine.prefill(prompt, *kv, &logits));
  const double seconds = seconds_between(start, Clock::now());
  // Matmul work: every layer matrix per token, the output projection once.
  const double layer_weight_elements = static_cast<double>(layer_matrix_elements(*m.model));
  const double matmul_flops = 2.0 * layer_weight_elements * tokens + 2.0 * s.n_vocab * s.n_embd;
  BenchReport r(absl::StrFormat("prefill (local): %s, %d tokens, batches of %d, %d threads, %s kernels, KV %s",
                                s.name, tokens, batch, c.threads, simd_level_name(active_simd_level()), store_name));
  r.add("prefill_tok_per_s", "prefill", tokens / seconds, "tok/s");
  r.add("prefill_seconds", "time", seconds, "s", 3);
  r.add("matmul_gflop_per_s", "matmul GFLOP/s", matmul_flops / seconds / 1e9, "GFLOP/s");
  r.add_int("tokens", "tokens", tokens);
  r.add_int("batch", "batch", batch);
  r.add_int("threads", "threads", c.threads);
  r.add_text("kv_store", "KV store", store_name);
  r.print(c.json);
  return absl::OkStatus();
}

absl::Status bench_perplexity(const Args& args) {
  ModelBenchFlags c;
  std::string text_file, ids_file;
  int64_t chunk = 256;
  FlagSet flags("baton bench perplexity", "--model FILE (--text-file F | --ids-file F) [--chunk N] [--json]",
                "Held-out perplexity: the text's lines are tokenized one by one (no BOS) and "
                "concatenated, cut into chunks of --chunk tokens, each evaluated from an empty "
                "context as [BOS] + chunk[:-1] with every chunk token scored (the bundled "
                "model's recipe).");
  add_model_bench_flags(flags, c);
  flags.add_string("text-file", &text_file, "text, one passage per line", "FILE");
  flags.add_string("ids-file", &ids_file, "token ids, space-separated, any number per line", "FILE");
  flags.add_int64("chunk", &chunk, "tokens per chunk");
  BATON_ASSIGN_OR_RETURN(const bool run, parse_bench_flags(flags, args));
  if (!run) return absl::OkStatus();
  if (text_file.empty() == ids_file.empty()) {
    return exit_status(2, "baton bench perplexity: give one of --text-file and --ids-file\n");
  }
  BATON_ASSIGN_OR_RETURN(LoadedModel m, load_model(c.model, c.threads));
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::FromGguf(m.model->file()));
  BATON_ASSIGN_OR_RETURN(const std::vector<int32_t> tokens, read_perplexity_tokens(text_file, ids_file, *tokenizer));
  const auto start = Clock::now();
  BATON_ASSIGN_OR_RETURN(const PerplexityResult result,
                         evaluate_perplexity(*m.engine, tokens, chunk, nullptr, tokenizer->bos_id()));
  const double seconds = seconds_between(start, Clock::now());
  BenchReport r(absl::StrFormat("perplexity: %s, %d chunks of <= %d tokens", m.spec().name, result.chunks, chunk));
  r.add("perplexity", "perplexity", result.perplexity, "", 3);
  r.add("mean_nll", "mean NLL", result.mean_nll, "nats/token", 4);
  r.add_int("scored_tokens", "scored tokens", result.scored_tokens);
  r.add("eval_tok_per_s", "evaluation speed", result.scored_tokens / seconds, "tok/s", 1);
  r.print(c.json);
  return absl::OkStatus();
}

}  // namespace baton::cli
