// baton bench prefill | perplexity: the CPU engine's local prefill speed (and
// its fraction of the CPU peak measured in the same run), and
// held-out perplexity of a model.
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench_harness.h"
#include "bench_prefill.h"
#include "bench_report.h"
#include "common/engine/perplexity.h"
#include "common/kv_codec/kv_kernels.h"
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

// --tokens: comma-separated prompt sizes, each in [1, kMaxPrefillTokens].
constexpr int64_t kMaxPrefillTokens = int64_t{1} << 20;

absl::StatusOr<std::vector<int64_t>> parse_token_sizes(const std::string& list) {
  std::vector<int64_t> sizes;
  for (const std::string& item : std::vector<std::string>(absl::StrSplit(list, ',', absl::SkipEmpty()))) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(item, &value) || value < 1 || value > kMaxPrefillTokens) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--tokens: '%s' is not a prompt size in [1, %d]", item, kMaxPrefillTokens));
    }
    sizes.push_back(value);
  }
  if (sizes.empty()) return absl::InvalidArgumentError("--tokens lists no size");
  return sizes;
}

// One prompt of `tokens` synthetic tokens into a fresh store of the run's
// codec, timed as one prefill call.
absl::StatusOr<PrefillCell> measure_prefill_cell(Engine& engine, const Model& model, const std::string& kv_name,
                                                 int64_t tokens, std::string* store_name) {
  const ModelSpec& s = model.spec();
  const auto prompt = synthetic_tokens(tokens, s.n_vocab, 1);
  double kv_bytes_per_token = 0;
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> kv,
                         bench_kv_cache(engine, kv_name, tokens, store_name, &kv_bytes_per_token));
  std::vector<float> logits;
  const auto start = Clock::now();
  BATON_RETURN_IF_ERROR(engine.prefill(prompt, *kv, &logits));
  PrefillCell cell;
  cell.tokens = tokens;
  cell.seconds = seconds_between(start, Clock::now());
  // Every layer matrix per token; the output projection for the last token.
  cell.matmul_ops = 2.0 * static_cast<double>(layer_matrix_elements(model)) * static_cast<double>(tokens) +
                    2.0 * s.n_vocab * s.n_embd;
  cell.attention_flops = attention_flops(engine.kv_geometry(), 0, tokens);
  return cell;
}

}  // namespace

absl::Status bench_prefill(const Args& args) {
  ModelBenchFlags c;
  std::string tokens_list = "512";
  int64_t batch = 0;
  bool local = true;
  std::string kv_name = "f16";
  std::string float_matmul = "exact";
  FlagSet flags("baton bench prefill",
                "--model FILE --local [--tokens 512,2048,8192] [--kv CODEC] [--float-matmul exact|bf16] [--threads N] "
                "[--json]",
                "Local prefill speed of the CPU engine (the edge's own prefill on its Q4_0 model: batched "
                "Q4_0 matmuls over micro-batches of --batch tokens): one prompt of N synthetic tokens per --tokens "
                "size into the KV store a codec implies (\"f32\": the engine's F32 cache), each held against the "
                "CPU's peak measured in the same run on the same threads just before and just after that size, the "
                "larger held (in-register vpdpbusd / vdpbf16ps / "
                "vfmadd loops): int8 ops of the matmuls for quantized weights, the BF16 peak for BF16 weights, the "
                "F32 FMA peak for F16/BF16/F32 weights (the BF16 peak with --float-matmul bf16). Attention (QK^T and PV, sliding windows respected) is counted "
                "apart and in the all-ops fraction. One table, or with --json one JSON object, per size.");
  add_model_bench_flags(flags, c);
  flags.add_bool("local", &local, "prefill here on the CPU engine (the only mode; the cloud has its own bench)");
  flags.add_string("tokens", &tokens_list, "prompt sizes, comma-separated: one cell each", "N,N,...");
  flags.add_int64("batch", &batch,
                  "micro-batch tokens per forward; 0: what the runtime runs the model's weights with (F16 / BF16 / "
                  "F32: 256, the cloud's CPU prefill backend, which prefills the source weights; quantized: 64, the "
                  "edge engine's)");
  flags.add_string("kv", &kv_name, "KV codec of the store the prompt goes into (f32, f16, int8-g32-z3, ...)", "CODEC");
  flags.add_string("float-matmul", &float_matmul,
                   "F16/BF16/F32 weights: exact (f32 products, the golden path) or bf16 (vdpbf16ps, as "
                   "baton-prefill --cpu-matmul bf16)",
                   "MODE");
  std::string weights = "packed";
  flags.add_string("weights", &weights,
                   "packed: Q4_0 (on AVX2 also Q8_0, Q4_K, Q5_K, Q6_K) weights repacked at load into 16-row strips (what "
                   "the engine runs); gguf: the "
                   "kernels over the GGUF rows as stored (for comparison)",
                   "packed|gguf");
  BATON_ASSIGN_OR_RETURN(const bool run, parse_bench_flags(flags, args));
  if (!run) return absl::OkStatus();
  if (!local) return absl::InvalidArgumentError("only --local prefill is measured here");
  if (weights != "packed" && weights != "gguf") {
    return absl::InvalidArgumentError("--weights: '" + weights + "' is neither packed nor gguf");
  }
  BATON_ASSIGN_OR_RETURN(const std::vector<int64_t> sizes, parse_token_sizes(tokens_list));
  if (batch < 0 || c.threads < 1) return absl::InvalidArgumentError("--batch must be >= 0 and --threads >= 1");
  if (float_matmul != "exact" && float_matmul != "bf16") {
    return absl::InvalidArgumentError("--float-matmul must be exact or bf16, not '" + float_matmul + "'");
  }
  const FloatMatmul mode = float_matmul == "bf16" ? FloatMatmul::kBf16 : FloatMatmul::kExact;
  BATON_ASSIGN_OR_RETURN(LoadedModel m, load_model(c.model, c.threads, batch, mode, /*pack_weights=*/weights == "packed"));
  Engine& engine = *m.engine;
  // Warm-up: page the weights in.
  {
    auto warm = engine.new_f32_kv_cache(8);
    std::vector<float> logits;
    const auto prompt = synthetic_tokens(4, m.spec().n_vocab, 1);
    BATON_RETURN_IF_ERROR(engine.prefill(prompt, *warm, &logits));
  }
  PrefillRun result;
  result.model = m.spec().name;
  result.batch = engine.max_batch_tokens();
  result.threads = c.threads;
  result.kernels = simd_level_name(active_simd_level());
  if (m.model->packed_bytes() > 0) result.kernels += "+packed";  // Q4_0 weights packed at load
  const GgmlType weight_type = dominant_weight_type(*m.model);
  // The peak before each cell is the one measured after the previous cell.
  result.peak_after = measure_cpu_peak(engine.pool());
  for (int64_t tokens : sizes) {
    result.peak_before = result.peak_after;
    BATON_ASSIGN_OR_RETURN(PrefillCell cell, measure_prefill_cell(engine, *m.model, kv_name, tokens, &result.kv_store));
    const bool int8_store = result.kv_store.rfind("int8", 0) == 0;
    result.attention_products = int8_store && active_simd_level() == SimdLevel::kAvx512 &&
                                        kv_kernels_impl::q8_amx_active()
                                    ? "amx tiles (tdpbssd, tdpbusd)"
                                    : "vector";
    result.peak_after = measure_cpu_peak(engine.pool());
    result.peak = larger_peaks(result.peak_before, result.peak_after);
    result.matmul_peak = matmul_peak_for(weight_type, result.peak, mode);
    result.cells.push_back(cell);
    prefill_cell_report(result, cell).print(c.json);
  }
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
