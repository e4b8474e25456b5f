// baton bench decode | prefill: CPU engine speed, with the machine's memory
// read bandwidth measured in the same run so ratios hold on a noisy machine.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench_commands.h"
#include "common/cpu/vec.h"
#include "common/engine/engine.h"
#include "common/engine/perplexity.h"
#include "common/tokenizer/tokenizer.h"
#include "common/engine/sampler.h"
#include "common/kv/kv_codec_config.h"
#include "common/kv/quantized_kv_cache.h"
#include "common/model/model.h"
#include "common/util/check.h"
#include "common/util/cpu_features.h"
#include "common/util/flags.h"
#include "kv_codec_list.h"
#include "report.h"

namespace baton::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Read bandwidth in bytes/s: the pool's threads each stream their share of
// `buffer` (1 GiB, larger than the last-level cache's share a run can hold
// warm) `passes` times; best pass. The same code path as a dot product, so a
// decode step that streams its weights at this rate is memory-bound.
double measure_read_bandwidth(ThreadPool& pool, const std::vector<float>& buffer, int passes) {
  const int64_t n = static_cast<int64_t>(buffer.size());
  double best = 0.0;
  std::vector<float> sums(pool.size() * 16, 0.0f);
  for (int pass = 0; pass < passes; ++pass) {
    const auto start = Clock::now();
    pool.parallel_for(pool.size(), [&](int64_t begin, int64_t end) {
      for (int64_t part = begin; part < end; ++part) {
        const int64_t chunk = n / pool.size();
        const float* p = buffer.data() + part * chunk;
        sums[part * 16] = dot_f32(p, p, chunk);  // one stream: both operands alias
      }
    });
    const double seconds = seconds_between(start, Clock::now());
    best = std::max(best, static_cast<double>(n) * sizeof(float) / seconds);
  }
  if (sums[0] < 0) std::puts("");  // keep the sums alive
  return best;
}

// Bytes of weights read to decode one token: every layer matrix plus the
// output projection (the embedding row read is negligible).
uint64_t weight_bytes_per_token(const Model& model) {
  uint64_t total = 0;
  auto bytes = [](const WeightMatrix& w) { return static_cast<uint64_t>(ggml_row_bytes(w.type, w.cols) * w.rows); };
  for (int i = 0; i < model.spec().n_layer; ++i) {
    const LayerWeights& l = model.layer(i);
    for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) total += bytes(*w);
  }
  return total + bytes(model.output());
}

int64_t layer_matrix_elements(const Model& model) {
  int64_t total = 0;
  for (int i = 0; i < model.spec().n_layer; ++i) {
    const LayerWeights& l = model.layer(i);
    for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) total += w->rows * w->cols;
  }
  return total;
}

struct CommonFlags {
  std::string model;
  int64_t threads = 2;
  bool json = false;
};

void add_common(FlagSet& flags, CommonFlags& c) {
  flags.add_string("model", &c.model, "GGUF model file", "FILE");
  flags.add_int64("threads", &c.threads, "worker threads");
  flags.add_bool("json", &c.json, "print one JSON object instead of the table");
  flags.require("model");
}

// Deterministic pseudo-random prompt tokens (no tokenizer needed).
std::vector<int32_t> synthetic_tokens(int64_t n, int n_vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> tokens(n);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(n_vocab));
  return tokens;
}

double median(std::vector<double> values) {
  BATON_CHECK(!values.empty());
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

// One (context, KV) cell of the decode table.
struct DecodeCell {
  int64_t context = 0;
  std::string kv;                // "f32" or a wire codec name
  std::string store;             // the edge store's config ("f32" for the F32 cache)
  double tok_per_s = 0;            // 1 / median step time
  double mean_tok_per_s = 0;       // timed tokens / their total time
  double kv_bytes_per_token = 0;  // KV read per decoded token at the mean context
  double achieved_bytes_per_s = 0;
  double bandwidth_bytes_per_s = 0;  // median of the passes interleaved with the steps
  std::string error;
};

// A KV cache of `capacity` tokens for `kv` ("f32" or a codec name) and its
// bytes per cached token (all layers, K and V, codes plus scales).
absl::StatusOr<std::unique_ptr<KvCache>> decode_cache(const Engine& engine, const std::string& kv,
                                                      int64_t capacity, std::string* store_name,
                                                      double* bytes_per_token) {
  const KvGeometry g = engine.kv_geometry();
  if (kv == "f32") {
    *store_name = "f32";
    *bytes_per_token = 2.0 * g.kv_dim() * g.n_layer * sizeof(float);
    return engine.new_f32_kv_cache(capacity);
  }
  BATON_ASSIGN_OR_RETURN(KvCodecConfig wire, parse_kv_codec_config(kv));
  const KvCodecConfig store = QuantizedKvCache::store_config_for(wire);
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<QuantizedKvCache> cache, QuantizedKvCache::Create(g, capacity, store));
  *store_name = store.to_string();
  *bytes_per_token = static_cast<double>(cache->bytes_per_token());
  return std::unique_ptr<KvCache>(std::move(cache));
}

// Fills positions [0, context) of every layer with seeded random K/V (the
// attention cost of a real context without a long prefill).
absl::Status fill_synthetic(KvCache& kv, int64_t context, uint64_t seed) {
  const KvGeometry& g = kv.geometry();
  Rng rng(seed);
  std::vector<float> k(static_cast<size_t>(context * g.kv_dim())), v(k.size());  // [context, kv_dim]
  for (int l = 0; l < g.n_layer; ++l) {
    for (auto& x : k) x = static_cast<float>(rng.uniform() * 2 - 1);
    for (auto& x : v) x = static_cast<float>(rng.uniform() * 2 - 1);
    BATON_RETURN_IF_ERROR(kv.store(l, 0, context, k.data(), v.data()));
  }
  kv.set_size(context);
  return absl::OkStatus();
}

int decode(const Args& args) {
  CommonFlags c;
  // "G": the group size min(32, head_dim) (kv_codec_list.h): g32 for the
  // llama-3.2 shapes.
  std::string contexts = "512,4096", kv_list = "f16,int8-gG-z3,int4-pc-kg128-gG-z3";
  int64_t tokens = 16;
  bool fill_by_prefill = false;
  FlagSet flags("baton bench decode",
                "--model FILE [--context 512,4096] [--kv f16,int8-g32-z3,...] [--threads 2] [--json]",
                "Decode speed of the CPU engine, one row per (context, KV codec): tokens/s, the weight and KV "
                "bytes read per token, the achieved read rate, and the machine's memory read bandwidth measured "
                "right after each row in the same run, with the ratio of the two. KV codecs are wire codec names "
                "(common/kv/kv_codec_config.h): the edge store QuantizedKvCache::store_config_for(codec) holds "
                "the context and attention reads it directly; \"f32\" is the engine's F32 cache. The context is "
                "filled with synthetic K/V unless --prefill is given (same attention cost, no long prefill).");
  add_common(flags, c);
  flags.add_string("context", &contexts, "comma-separated contexts: tokens already in the KV cache", "LIST");
  flags.add_string("kv", &kv_list,
                   "comma-separated KV codecs (f32 for the F32 cache); G stands for min(32, head_dim)", "LIST");
  flags.add_int64("tokens", &tokens, "tokens to decode and time per row");
  flags.add_bool("prefill", &fill_by_prefill, "fill the context by a real prefill");
  if (auto code = bench_parse_flags(flags, args)) return *code;
  if (tokens < 1 || c.threads < 1) return bench_fail("--tokens and --threads must be >= 1");

  std::vector<int64_t> context_values;
  for (const std::string& item : std::vector<std::string>(absl::StrSplit(contexts, ',', absl::SkipEmpty()))) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(item, &value) || value < 0) return bench_fail("--context: bad value '" + item + "'");
    context_values.push_back(value);
  }
  auto model = Model::Load(c.model);
  if (!model.ok()) return bench_fail(std::string(model.status().message()));
  const std::vector<std::string> kv_names =
      absl::StrSplit(expand_codec_list(kv_list, (*model)->spec().head_dim), ',', absl::SkipEmpty());
  if (context_values.empty() || kv_names.empty()) return bench_fail("--context and --kv need at least one value");
  Engine engine(**model, EngineOptions{static_cast<int>(c.threads), 64});
  const ModelSpec& s = (*model)->spec();
  const double weight_bytes = static_cast<double>(weight_bytes_per_token(**model));
  const std::vector<float> bandwidth_buffer(size_t{1} << 28, 1.0f);  // 1 GiB

  std::vector<DecodeCell> cells;
  std::vector<float> logits;
  for (int64_t context : context_values) {
    for (const std::string& kv_name : kv_names) {
      DecodeCell cell;
      cell.context = context;
      cell.kv = kv_name;
      double kv_bytes_per_cached_token = 0;
      auto kv = decode_cache(engine, kv_name, context + tokens + 1, &cell.store, &kv_bytes_per_cached_token);
      absl::Status st = kv.status();
      if (st.ok()) {
        st = fill_by_prefill ? engine.prefill(synthetic_tokens(context, s.n_vocab, 1), **kv, nullptr)
                             : fill_synthetic(**kv, context, 7);
      }
      int32_t token = 1;
      // One untimed step warms caches and page-ins.
      if (st.ok()) st = engine.decode_step(token, **kv, &logits);
      // Each timed step is followed by one bandwidth pass, so both figures
      // sample the same moments of a shared machine; medians of both.
      std::vector<double> step_seconds, bandwidths;
      for (int64_t i = 0; st.ok() && i < tokens; ++i) {
        token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        const auto start = Clock::now();
        st = engine.decode_step(token, **kv, &logits);
        step_seconds.push_back(seconds_between(start, Clock::now()));
        bandwidths.push_back(measure_read_bandwidth(engine.pool(), bandwidth_buffer, 1));
      }
      if (!st.ok()) {
        cell.error = std::string(st.message());
        cells.push_back(cell);
        continue;
      }
      double total_seconds = 0;
      for (double x : step_seconds) total_seconds += x;
      cell.tok_per_s = 1.0 / median(step_seconds);
      cell.mean_tok_per_s = tokens / total_seconds;
      // Step i attends over context + 2 + i tokens (the warm-up step's
      // included); a sliding-window layer (gemma3) reads its window of them.
      const double attended_tokens = context + 2 + (tokens - 1) / 2.0;
      const KvGeometry geometry = engine.kv_geometry();
      double layer_tokens = 0;
      for (int l = 0; l < geometry.n_layer; ++l) {
        layer_tokens += geometry.window(l) > 0 ? std::min<double>(attended_tokens, geometry.window(l)) : attended_tokens;
      }
      cell.kv_bytes_per_token = layer_tokens / geometry.n_layer * kv_bytes_per_cached_token;
      cell.achieved_bytes_per_s = (weight_bytes + cell.kv_bytes_per_token) * cell.tok_per_s;
      cell.bandwidth_bytes_per_s = median(bandwidths);
      cells.push_back(cell);
    }
  }

  const std::string kernels = simd_level_name(active_simd_level());
  if (c.json) {
    std::string out = absl::StrFormat(
        "{\"model\": \"%s\", \"threads\": %d, \"kernels\": \"%s\", \"tokens_per_row\": %d, "
        "\"weight_bytes_per_token\": %.0f, \"rows\": [",
        json_escape(s.name), c.threads, kernels, tokens, weight_bytes);
    for (size_t i = 0; i < cells.size(); ++i) {
      const DecodeCell& r = cells[i];
      if (i > 0) out += ", ";
      if (!r.error.empty()) {
        out += absl::StrFormat("{\"context\": %d, \"kv\": \"%s\", \"error\": \"%s\"}", r.context,
                               json_escape(r.kv), json_escape(r.error));
        continue;
      }
      out += absl::StrFormat(
          "{\"context\": %d, \"kv\": \"%s\", \"store\": \"%s\", \"decode_tok_per_s\": %.3f, \"mean_decode_tok_per_s\": %.3f, "
          "\"kv_bytes_per_token\": %.0f, \"weight_gb_per_s\": %.3f, \"achieved_gb_per_s\": %.3f, "
          "\"memory_read_gb_per_s\": %.3f, "
          "\"ratio_to_bandwidth\": %.4f}",
          r.context, json_escape(r.kv), json_escape(r.store), r.tok_per_s, r.mean_tok_per_s, r.kv_bytes_per_token,
          weight_bytes * r.tok_per_s / 1e9, r.achieved_bytes_per_s / 1e9, r.bandwidth_bytes_per_s / 1e9,
          r.achieved_bytes_per_s / r.bandwidth_bytes_per_s);
    }
    out += "]}\n";
    std::fputs(out.c_str(), stdout);
    return 0;
  }
  std::fputs(absl::StrFormat("decode: %s, %d threads, %s kernels, %d timed tokens per row; weights read per "
                             "token %.2f MB\n",
                             s.name, c.threads, kernels, tokens, weight_bytes / 1e6)
                 .c_str(),
             stdout);
  std::fputs(absl::StrFormat("  %7s  %-22s %-16s %8s %8s %10s %12s %12s %7s\n", "context", "kv codec", "store",
                             "tok/s", "mean", "KV MB/tok", "read GB/s", "memory GB/s", "ratio")
                 .c_str(),
             stdout);
  for (const DecodeCell& r : cells) {
    if (!r.error.empty()) {
      std::fputs(absl::StrFormat("  %7d  %-22s failed: %s\n", r.context, r.kv, r.error).c_str(), stdout);
      continue;
    }
    std::fputs(absl::StrFormat("  %7d  %-22s %-16s %8.2f %8.2f %10.2f %12.2f %12.2f %7.3f\n", r.context, r.kv,
                               r.store, r.tok_per_s, r.mean_tok_per_s, r.kv_bytes_per_token / 1e6, r.achieved_bytes_per_s / 1e9,
                               r.bandwidth_bytes_per_s / 1e9, r.achieved_bytes_per_s / r.bandwidth_bytes_per_s)
                   .c_str(),
               stdout);
  }
  std::fputs("  (tok/s = 1 / median step time, mean = tokens / total time; read = (weights + KV at the mean "
             "context) x tok/s; memory = median of full-pool 1 GiB read passes, one after each timed step; "
             "ratio = read / memory)\n",
             stdout);
  return 0;
}

int prefill(const Args& args) {
  CommonFlags c;
  int64_t tokens = 512, batch = 64;
  bool local = true;
  std::string kv_name = "f16";
  FlagSet flags("baton bench prefill", "--model FILE --local [--tokens N] [--kv CODEC] [--threads N] [--json]",
                "Local prefill speed of the CPU engine (the edge's own prefill on its Q4_0 model: batched "
                "Q4_0 matmuls over micro-batches of --batch tokens): a prompt of N synthetic tokens into the KV "
                "store a codec implies (\"f32\": the engine's F32 cache).");
  add_common(flags, c);
  flags.add_bool("local", &local, "prefill here on the CPU engine (the only mode; the cloud has its own bench)");
  flags.add_int64("tokens", &tokens, "prompt tokens");
  flags.add_int64("batch", &batch, "micro-batch tokens per forward");
  flags.add_string("kv", &kv_name, "KV codec of the store the prompt goes into (f32, f16, int8-g32-z3, ...)", "CODEC");
  if (auto code = bench_parse_flags(flags, args)) return *code;
  if (!local) return bench_fail("only --local prefill is measured here");
  if (tokens < 1 || batch < 1 || c.threads < 1) return bench_fail("--tokens, --batch and --threads must be >= 1");
  auto model = Model::Load(c.model);
  if (!model.ok()) return bench_fail(std::string(model.status().message()));
  Engine engine(**model, EngineOptions{static_cast<int>(c.threads), static_cast<int>(batch)});
  const ModelSpec& s = (*model)->spec();
  auto prompt = synthetic_tokens(tokens, s.n_vocab, 1);
  // Warm-up: page the weights in.
  {
    auto warm = engine.new_f32_kv_cache(8);
    std::vector<float> logits;
    (void)engine.prefill(std::span<const int32_t>(prompt.data(), 4), *warm, &logits);
  }
  std::string store_name;
  double kv_bytes_per_token = 0;
  auto kv = decode_cache(engine, kv_name, tokens, &store_name, &kv_bytes_per_token);
  if (!kv.ok()) return bench_fail(std::string(kv.status().message()));
  std::vector<float> logits;
  const auto start = Clock::now();
  if (auto st = engine.prefill(prompt, **kv, &logits); !st.ok()) return bench_fail(std::string(st.message()));
  const double seconds = seconds_between(start, Clock::now());
  // Matmul work: every layer matrix per token, the output projection once.
  const double layer_weight_elements = static_cast<double>(layer_matrix_elements(**model));
  const double matmul_flops = 2.0 * layer_weight_elements * tokens + 2.0 * s.n_vocab * s.n_embd;
  Report r(absl::StrFormat("prefill (local): %s, %d tokens, batches of %d, %d threads, %s kernels, KV %s", s.name,
                           tokens, batch, c.threads, simd_level_name(active_simd_level()), store_name));
  r.add("prefill_tok_per_s", "prefill", tokens / seconds, "tok/s");
  r.add("prefill_seconds", "time", seconds, "s", 3);
  r.add("matmul_gflop_per_s", "matmul GFLOP/s", matmul_flops / seconds / 1e9, "GFLOP/s");
  r.add_int("tokens", "tokens", tokens);
  r.add_int("batch", "batch", batch);
  r.add_int("threads", "threads", c.threads);
  r.add_text("kv_store", "KV store", store_name);
  r.print(c.json);
  return 0;
}

int perplexity(const Args& args) {
  CommonFlags c;
  std::string text_file, ids_file;
  int64_t chunk = 256;
  FlagSet flags("baton bench perplexity", "--model FILE (--text-file F | --ids-file F) [--chunk N] [--json]",
                "Held-out perplexity: the text's lines are tokenized one by one (no BOS) and "
                "concatenated, cut into chunks of --chunk tokens, each evaluated from an empty "
                "context as [BOS] + chunk[:-1] with every chunk token scored (the bundled "
                "model's recipe).");
  add_common(flags, c);
  flags.add_string("text-file", &text_file, "text, one passage per line", "FILE");
  flags.add_string("ids-file", &ids_file, "token ids, space-separated, any number per line", "FILE");
  flags.add_int64("chunk", &chunk, "tokens per chunk");
  if (auto code = bench_parse_flags(flags, args)) return *code;
  if (text_file.empty() == ids_file.empty()) {
    std::fprintf(stderr, "baton bench perplexity: give one of --text-file and --ids-file\n");
    return 2;
  }
  auto model = Model::Load(c.model);
  if (!model.ok()) return bench_fail(std::string(model.status().message()));
  auto tokenizer = Tokenizer::FromGguf((*model)->file());
  if (!tokenizer.ok()) return bench_fail(std::string(tokenizer.status().message()));
  std::ifstream in(text_file.empty() ? ids_file : text_file);
  if (!in) return bench_fail("cannot read " + (text_file.empty() ? ids_file : text_file));
  std::vector<int32_t> tokens;
  EncodeOptions no_bos;
  no_bos.add_bos = false;
  for (std::string line; std::getline(in, line);) {
    if (!text_file.empty()) {
      const auto ids = (*tokenizer)->encode(line, no_bos);
      tokens.insert(tokens.end(), ids.begin(), ids.end());
    } else {
      std::istringstream words(line);
      for (int32_t id; words >> id;) tokens.push_back(id);
    }
  }
  Engine engine(**model, EngineOptions{static_cast<int>(c.threads), 64});
  const auto start = Clock::now();
  auto result = evaluate_perplexity(engine, tokens, chunk, nullptr, (*tokenizer)->bos_id());
  if (!result.ok()) return bench_fail(std::string(result.status().message()));
  const double seconds = seconds_between(start, Clock::now());
  Report r(absl::StrFormat("perplexity: %s, %d chunks of <= %d tokens", (*model)->spec().name, result->chunks, chunk));
  r.add("perplexity", "perplexity", result->perplexity, "", 3);
  r.add("mean_nll", "mean NLL", result->mean_nll, "nats/token", 4);
  r.add_int("scored_tokens", "scored tokens", result->scored_tokens);
  r.add("eval_tok_per_s", "evaluation speed", result->scored_tokens / seconds, "tok/s", 1);
  r.print(c.json);
  return 0;
}

}  // namespace

namespace {

// Every bench, in the order `baton bench --help` lists them. The help text
// and the dispatch both come from this one table, so none can be missing.
struct Bench {
  const char* name;
  int (*run)(const Args& args);
  const char* what;
};
constexpr Bench kBenches[] = {
    {"decode", decode, "decode tok/s and bytes/s read, beside the memory read bandwidth"},
    {"prefill", prefill, "local prefill tok/s (--local: the edge's batched Q4_0 prefill)"},
    {"prefill-service", bench_prefill_service,
     "baton-prefill on loopback: time to first KV block vs total, tok/s, prefix-cache speedup"},
    {"prefill-cuda", bench_prefill_cuda,
     "the CUDA prefill backend: tok/s, TFLOP/s, fraction of the H200's BF16 peak (needs a GPU)"},
    {"split", bench_split, "when the split pays: TTFT local vs cloud + link per WAN profile, crossover, plot"},
    {"load", bench_load,
     "N clients x M sessions x T turns against one edge: errors by status, TTFT p50/p99, memory high-water, "
     "nothing lost"},
    {"kv-codec", bench_kv_codec, "KV bytes per token, encode/decode MB/s and error per codec variant"},
    {"kv-quality", bench_kv_quality, "perplexity / KL / greedy agreement of each KV codec against F16 KV"},
    {"kv-window", bench_kv_window,
     "KV bytes per token on the wire and in the edge store: sliding-window layers vs full attention"},
    {"perplexity", perplexity, "held-out perplexity of a model over a text or id file"},
    {"fidelity", bench_fidelity,
     "perplexity / KL vs the F16 model of the edge's Q4_0 alone and split with the cloud"},
};

std::string bench_usage() {
  std::string names, lines;
  for (const Bench& bench : kBenches) {
    names += (names.empty() ? "" : "|") + std::string(bench.name);
    lines += absl::StrFormat("  %-16s %s\n", bench.name, bench.what);
  }
  return absl::StrFormat("usage: baton bench %s ... [--json]\n%s"
                         "Run 'baton bench NAME --help' for the flags of one.\n",
                         names, lines);
}

}  // namespace

static int bench_exit_code(const Args& args) {
  const std::string usage = bench_usage();
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(usage.c_str(), args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const Args rest(args.begin() + 1, args.end());
  std::vector<std::string> names;
  for (const Bench& bench : kBenches) {
    if (args[0] == bench.name) return bench.run(rest);
    names.push_back(bench.name);
  }
  const std::optional<std::string> near = closest_name(args[0], names);
  std::fprintf(stderr, "baton bench: unknown bench '%s'%s\n%s", args[0].c_str(),
               near ? ("; did you mean '" + *near + "'?").c_str() : "", usage.c_str());
  return 2;
}

// The thinnest adapter: the benches still return exit codes (bench_legacy.h)
// and have printed their messages already.
absl::Status bench_command(const Args& args) {
  const int code = bench_exit_code(args);
  return code == 0 ? absl::OkStatus() : exit_status(code);
}

}  // namespace baton::cli
