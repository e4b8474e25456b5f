// baton bench decode | prefill: CPU engine speed, with the machine's memory
// read bandwidth measured in the same run so ratios hold on a noisy machine.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/strings/str_format.h"
#include "commands.h"
#include "common/cpu/vec.h"
#include "common/engine/engine.h"
#include "common/engine/perplexity.h"
#include "common/tokenizer/tokenizer.h"
#include "common/engine/sampler.h"
#include "common/model/model.h"
#include "common/util/cpu_features.h"
#include "common/util/flags.h"
#include "report.h"

namespace baton::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Read bandwidth in bytes/s: `threads` threads each stream their share of a
// 1 GiB buffer (larger than any cache) several times; best of the passes.
double measure_read_bandwidth(ThreadPool& pool) {
  const int64_t n = int64_t{1} << 28;  // floats = 1 GiB
  std::vector<float> buffer(n, 1.0f);
  double best = 0.0;
  for (int pass = 0; pass < 4; ++pass) {
    const auto start = Clock::now();
    std::vector<float> sums(pool.size() * 16, 0.0f);
    pool.parallel_for(pool.size(), [&](int64_t begin, int64_t end) {
      for (int64_t part = begin; part < end; ++part) {
        const int64_t chunk = n / pool.size();
        const float* p = buffer.data() + part * chunk;
        sums[part * 16] = dot_f32(p, p, chunk);  // one stream: both operands alias
      }
    });
    const double seconds = seconds_between(start, Clock::now());
    best = std::max(best, static_cast<double>(n) * sizeof(float) / seconds);
    if (sums[0] < 0) std::puts("");  // keep the sums alive
  }
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

int decode(const Args& args) {
  CommonFlags c;
  int64_t context = 512, tokens = 32;
  bool fill_by_prefill = false;
  FlagSet flags("baton bench decode", "--model FILE [--context N] [--threads N] [--json]",
                "Decode speed of the CPU engine at a given context: tokens/s, the weight and KV "
                "bytes read per token, the achieved read rate, and the machine's read bandwidth "
                "measured in the same run. The context is filled with synthetic K/V unless "
                "--prefill is given (same attention cost, no long prefill).");
  add_common(flags, c);
  flags.add_int64("context", &context, "tokens already in the KV cache");
  flags.add_int64("tokens", &tokens, "tokens to decode and time");
  flags.add_bool("prefill", &fill_by_prefill, "fill the context by a real prefill");
  if (auto code = parse_flags(flags, args)) return *code;

  auto model = Model::Load(c.model);
  if (!model.ok()) return fail(std::string(model.status().message()));
  Engine engine(**model, EngineOptions{static_cast<int>(c.threads), 64});
  const ModelSpec& s = (*model)->spec();
  auto kv = engine.new_f32_kv_cache(context + tokens + 1);
  if (fill_by_prefill) {
    auto prompt = synthetic_tokens(context, s.n_vocab, 1);
    absl::Status st = engine.prefill(prompt, *kv, nullptr);
    if (!st.ok()) return fail(std::string(st.message()));
  } else {
    Rng rng(7);
    std::vector<float> k(s.kv_dim()), v(s.kv_dim());
    for (int64_t pos = 0; pos < context; ++pos) {
      for (auto& x : k) x = static_cast<float>(rng.uniform() * 2 - 1);
      for (auto& x : v) x = static_cast<float>(rng.uniform() * 2 - 1);
      for (int l = 0; l < s.n_layer; ++l) (void)kv->store(l, pos, 1, k.data(), v.data());
    }
    kv->set_size(context);
  }
  std::vector<float> logits;
  int32_t token = 1;
  // One untimed step warms caches and page-ins.
  if (auto st = engine.decode_step(token, *kv, &logits); !st.ok()) return fail(std::string(st.message()));
  const auto start = Clock::now();
  for (int64_t i = 0; i < tokens; ++i) {
    token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (auto st = engine.decode_step(token, *kv, &logits); !st.ok()) return fail(std::string(st.message()));
  }
  const double seconds = seconds_between(start, Clock::now());
  const double tok_per_s = tokens / seconds;
  const double weight_bytes = static_cast<double>(weight_bytes_per_token(**model));
  const double mean_ctx = context + 1 + tokens / 2.0;
  const double kv_bytes = mean_ctx * s.kv_elements_per_token() * sizeof(float);
  const double bandwidth = measure_read_bandwidth(engine.pool());

  Report r(absl::StrFormat("decode: %s, context %d, %d threads, %s kernels, f32 KV", s.name, context,
                           c.threads, simd_level_name(active_simd_level())));
  r.add("decode_tok_per_s", "decode", tok_per_s, "tok/s");
  r.add("weight_bytes_per_token", "weights read per token", weight_bytes / 1e6, "MB");
  r.add("kv_bytes_per_token", "KV read per token", kv_bytes / 1e6, "MB");
  r.add("weight_gb_per_s", "achieved weight read", weight_bytes * tok_per_s / 1e9, "GB/s");
  r.add("total_gb_per_s", "achieved weight+KV read", (weight_bytes + kv_bytes) * tok_per_s / 1e9, "GB/s");
  r.add("memory_read_gb_per_s", "memory read bandwidth", bandwidth / 1e9, "GB/s");
  r.add("ratio_to_bandwidth", "achieved / bandwidth", (weight_bytes + kv_bytes) * tok_per_s / bandwidth, "", 3);
  r.add_int("context", "context", context, "tokens");
  r.add_int("threads", "threads", c.threads);
  r.print(c.json);
  return 0;
}

int prefill(const Args& args) {
  CommonFlags c;
  int64_t tokens = 512, batch = 64;
  FlagSet flags("baton bench prefill", "--model FILE [--tokens N] [--threads N] [--json]",
                "Prefill speed of the CPU engine: a prompt of N synthetic tokens, micro-batched.");
  add_common(flags, c);
  flags.add_int64("tokens", &tokens, "prompt tokens");
  flags.add_int64("batch", &batch, "micro-batch tokens per forward");
  if (auto code = parse_flags(flags, args)) return *code;
  auto model = Model::Load(c.model);
  if (!model.ok()) return fail(std::string(model.status().message()));
  Engine engine(**model, EngineOptions{static_cast<int>(c.threads), static_cast<int>(batch)});
  const ModelSpec& s = (*model)->spec();
  auto prompt = synthetic_tokens(tokens, s.n_vocab, 1);
  // Warm-up: page the weights in.
  {
    auto warm = engine.new_f32_kv_cache(8);
    std::vector<float> logits;
    (void)engine.prefill(std::span<const int32_t>(prompt.data(), 4), *warm, &logits);
  }
  auto kv = engine.new_f32_kv_cache(tokens);
  std::vector<float> logits;
  const auto start = Clock::now();
  if (auto st = engine.prefill(prompt, *kv, &logits); !st.ok()) return fail(std::string(st.message()));
  const double seconds = seconds_between(start, Clock::now());
  // Matmul work: every layer matrix per token, the output projection once.
  const double layer_weight_elements =
      static_cast<double>(layer_matrix_elements(**model));
  const double matmul_flops = 2.0 * layer_weight_elements * tokens + 2.0 * s.n_vocab * s.n_embd;
  Report r(absl::StrFormat("prefill: %s, %d tokens, %d threads, %s kernels", s.name, tokens, c.threads,
                           simd_level_name(active_simd_level())));
  r.add("prefill_tok_per_s", "prefill", tokens / seconds, "tok/s");
  r.add("prefill_seconds", "time", seconds, "s", 3);
  r.add("matmul_gflop_per_s", "matmul GFLOP/s", matmul_flops / seconds / 1e9, "GFLOP/s");
  r.add_int("tokens", "tokens", tokens);
  r.add_int("threads", "threads", c.threads);
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
  if (auto code = parse_flags(flags, args)) return *code;
  if (text_file.empty() == ids_file.empty()) {
    std::fprintf(stderr, "baton bench perplexity: give one of --text-file and --ids-file\n");
    return 2;
  }
  auto model = Model::Load(c.model);
  if (!model.ok()) return fail(std::string(model.status().message()));
  auto tokenizer = Tokenizer::FromGguf((*model)->file());
  if (!tokenizer.ok()) return fail(std::string(tokenizer.status().message()));
  std::ifstream in(text_file.empty() ? ids_file : text_file);
  if (!in) return fail("cannot read " + (text_file.empty() ? ids_file : text_file));
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
  if (!result.ok()) return fail(std::string(result.status().message()));
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

int bench_command(const Args& args) {
  const char* usage =
      "usage: baton bench decode|prefill|kv-codec|kv-quality|perplexity ... [--json]\n"
      "  decode   decode tok/s and bytes/s read, beside the memory read bandwidth\n"
      "  prefill  local prefill tok/s\n"
      "  kv-codec KV bytes per token, encode/decode MB/s and error per codec variant\n"
      "  kv-quality  perplexity / KL / greedy agreement of each KV codec against F16 KV\n"
      "  perplexity  held-out perplexity of a model over a text or id file\n";
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(usage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const Args rest(args.begin() + 1, args.end());
  if (args[0] == "decode") return decode(rest);
  if (args[0] == "prefill") return prefill(rest);
  if (args[0] == "kv-codec") return bench_kv_codec(rest);
  if (args[0] == "kv-quality") return bench_kv_quality(rest);
  if (args[0] == "perplexity") return perplexity(rest);
  std::fprintf(stderr, "baton bench: unknown subcommand '%s'\n%s", args[0].c_str(), usage);
  return 2;
}

}  // namespace baton::cli
