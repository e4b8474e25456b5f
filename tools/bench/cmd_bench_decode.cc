// baton bench decode: CPU engine decode speed, with the machine's memory read
// bandwidth (the best pass of read_bandwidth.h's tuned reader) measured in
// the same run so ratios hold on a noisy machine.
#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench_decode.h"
#include "bench_harness.h"
#include "common/engine/sampler.h"
#include "common/util/check.h"
#include "common/util/cpu_features.h"
#include "kv_codec_list.h"
#include "read_bandwidth.h"
#include "roofline.h"

namespace baton::cli {
namespace {

// Bytes of weights each part of a step (StepPart) reads to decode one
// token: every layer matrix plus the output projection (the embedding row
// read is negligible); the rest read none.
void weight_bytes_per_part(const Model& model, double (&out)[kStepParts]) {
  auto bytes = [](const WeightMatrix& w) { return static_cast<double>(ggml_row_bytes(w.type, w.cols) * w.rows); };
  auto add = [&](StepPart part, double b) { out[static_cast<int>(part)] += b; };
  for (int i = 0; i < model.spec().n_layer; ++i) {
    const LayerWeights& l = model.layer(i);
    add(StepPart::kQkv, bytes(l.wq) + bytes(l.wk) + bytes(l.wv));
    add(StepPart::kWo, bytes(l.wo));
    add(StepPart::kGateUp, bytes(l.w_gate) + bytes(l.w_up));
    add(StepPart::kDown, bytes(l.w_down));
  }
  add(StepPart::kOutput, bytes(model.output()));
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

// Read passes before the rows (the rows add one per timed step); the best
// of all is the run's bandwidth.
constexpr int kRunBandwidthPasses = 5;

// What every cell of a run shares.
struct DecodeSetup {
  Engine* engine;
  int64_t tokens;         // timed steps per cell
  bool fill_by_prefill;   // else synthetic K/V
  double weight_bytes;    // per decoded token
  const ReadBuffer* bandwidth_buffer;  // read_bandwidth.h: the tuned multi-threaded reader
  const double* part_weight_bytes;     // [kStepParts]: DecodeRun::part_weight_bytes
};

// One read pass of the tuned reader: bytes/s and the index in
// kReadPrefetches of the prefetch that read fastest.
struct ReadPass {
  double bytes_per_s;
  int prefetch;
};

// The timed steps of one cell: seconds of each step, its parts' seconds,
// and the read pass measured after each (the bandwidth bench's tuned reader,
// checked against a plain STREAM-like read by `baton bench bandwidth`).
absl::Status time_steps(const DecodeSetup& s, KvCache& kv, std::vector<double>& step_seconds,
                        std::vector<ReadPass>& reads, std::vector<StepPartTimes>& step_parts) {
  std::vector<float> logits;
  int32_t token = 1;
  // One untimed step warms caches and page-ins.
  BATON_RETURN_IF_ERROR(s.engine->decode_step(token, kv, &logits));
  // Each timed step is followed by one bandwidth pass (the best pass of the
  // run is what ratios divide by), so a quiet moment of a shared machine
  // counts wherever it falls. (Steps count by their median: the ratio errs
  // low on a noisy machine, never high.)
  for (int64_t i = 0; i < s.tokens; ++i) {
    token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    StepPartTimes step;
    const auto start = Clock::now();
    s.engine->set_part_times(&step);
    const absl::Status status = s.engine->decode_step(token, kv, &logits);
    s.engine->set_part_times(nullptr);
    BATON_RETURN_IF_ERROR(status);
    step_seconds.push_back(seconds_between(start, Clock::now()));
    step_parts.push_back(step);
    ReadPass pass{0, 0};
    pass.bytes_per_s = measure_read_bandwidth(s.engine->pool(), *s.bandwidth_buffer, 1, &pass.prefetch);
    reads.push_back(pass);
  }
  return absl::OkStatus();
}

// Repetitions of the attention-alone timing per cell; a read pass before
// each evicts the store from cache (a step's weight stream does that too).
constexpr int kAttentionRepetitions = 5;

// One token's attention alone over the cell's store, as decode_step runs it:
// every layer, one query (seeded random) at the store's last position, on
// the engine's pool. Seconds of each repetition.
std::vector<double> time_attention(const DecodeSetup& s, KvCache& kv) {
  const KvGeometry& g = kv.geometry();
  Rng rng(11);
  std::vector<float> q(static_cast<size_t>(g.q_dim())), out(q.size());
  for (float& x : q) x = static_cast<float>(rng.uniform() * 2 - 1);
  std::vector<double> seconds;
  for (int r = 0; r < kAttentionRepetitions; ++r) {
    measure_read_bandwidth(s.engine->pool(), *s.bandwidth_buffer, 1);
    ThreadPool::Hot hot(s.engine->pool());
    const auto start = Clock::now();
    for (int l = 0; l < g.n_layer; ++l) kv.attend(l, kv.size() - 1, 1, q.data(), out.data(), &s.engine->pool());
    seconds.push_back(seconds_between(start, Clock::now()));
  }
  return seconds;
}

DecodeCell measure_cell(const DecodeSetup& s, int64_t context, const std::string& kv_name) {
  DecodeCell cell;
  cell.context = context;
  cell.kv = kv_name;
  double kv_bytes_per_cached_token = 0;
  std::vector<double> step_seconds;
  std::vector<ReadPass> reads;
  auto kv = bench_kv_cache(*s.engine, kv_name, context + s.tokens + 1, &cell.store, &kv_bytes_per_cached_token);
  absl::Status st = kv.status();
  if (st.ok()) {
    st = s.fill_by_prefill
             ? s.engine->prefill(synthetic_tokens(context, s.engine->model().spec().n_vocab, 1), **kv, nullptr)
             : fill_synthetic(**kv, context, 7);
  }
  std::vector<StepPartTimes> step_parts;
  if (st.ok()) st = time_steps(s, **kv, step_seconds, reads, step_parts);
  if (!st.ok()) {
    cell.error = std::string(st.message());
    return cell;
  }
  cell.attention_seconds = median(time_attention(s, **kv));
  double total_seconds = 0;
  for (double x : step_seconds) total_seconds += x;
  cell.tok_per_s = 1.0 / median(step_seconds);
  cell.mean_tok_per_s = s.tokens / total_seconds;
  for (const StepPartTimes& step : step_parts) {
    for (int p = 0; p < kStepParts; ++p) cell.part_seconds[p] += step.seconds[p];
  }
  for (double& x : cell.part_seconds) x /= static_cast<double>(s.tokens);
  // Step i attends over context + 2 + i tokens (the warm-up step's
  // included); a sliding-window layer (gemma3) reads its window of them.
  const double attended_tokens = context + 2 + (s.tokens - 1) / 2.0;
  cell.kv_bytes_per_token =
      kv_bytes_read_per_token(s.engine->kv_geometry(), attended_tokens, kv_bytes_per_cached_token);
  cell.achieved_bytes_per_s = (s.weight_bytes + cell.kv_bytes_per_token) * cell.tok_per_s;
  std::vector<double> read_rates;
  for (const ReadPass& pass : reads) read_rates.push_back(pass.bytes_per_s);
  cell.adjacent_ratio = adjacent_ratio(s.weight_bytes + cell.kv_bytes_per_token, step_seconds, read_rates);
  for (int p = 0; p < kStepParts; ++p) {
    if (s.part_weight_bytes[p] <= 0) continue;
    std::vector<double> part_seconds;
    for (const StepPartTimes& step : step_parts) part_seconds.push_back(step.seconds[p]);
    cell.part_adjacent_ratio[p] = adjacent_ratio(s.part_weight_bytes[p], part_seconds, read_rates);
  }
  const ReadPass best = *std::max_element(
      reads.begin(), reads.end(), [](const ReadPass& a, const ReadPass& b) { return a.bytes_per_s < b.bytes_per_s; });
  cell.bandwidth_bytes_per_s = best.bytes_per_s;
  cell.bandwidth_prefetch = best.prefetch;
  return cell;
}

}  // namespace

absl::Status bench_decode(const Args& args) {
  // --speculative N: replies decoded plainly and speculatively
  // (cmd_bench_speculative.cc), with its own flags.
  for (const std::string& arg : args) {
    if (arg == "--speculative" || arg.rfind("--speculative=", 0) == 0) return bench_decode_speculative(args);
  }
  ModelBenchFlags c;
  // "G": the group size min(32, head_dim) (kv_codec_list.h): g32 for the
  // llama-3.2 shapes.
  std::string contexts = "512,4096", kv_list = "f16,int8-gG-z3,int4-pc-kg128-gG-z3";
  int64_t tokens = 16;
  bool fill_by_prefill = false;
  std::string weights = "packed";
  FlagSet flags("baton bench decode",
                "--model FILE [--context 512,4096] [--kv f16,int8-g32-z3,...] [--threads 2] [--json]",
                "Decode speed of the CPU engine, one row per (context, KV codec): tokens/s, the weight and KV "
                "bytes read per token (KV: the store's bytes of K and V over the tokens a step attends, all "
                "layers) and their sum, the achieved read rate, and its ratio to the machine's memory read "
                "bandwidth: the best pass of a tuned reader in the same run (5 passes before the rows, one after "
                "every timed step; baton bench bandwidth checks the reader). KV codecs are wire codec names "
                "(common/kv_codec/kv_codec_config.h): the edge store QuantizedKvCache::store_config_for(codec) holds "
                "the context and attention reads it directly; \"f32\" is the engine's F32 cache. The context is "
                "filled with synthetic K/V unless --prefill is given (same attention cost, no long prefill). With "
                "--speculative N: plain against speculative decoding of greedy replies (see "
                "`baton bench decode --speculative 8 --help`).");
  add_model_bench_flags(flags, c);
  flags.add_string("context", &contexts, "comma-separated contexts: tokens already in the KV cache", "LIST");
  flags.add_string("kv", &kv_list,
                   "comma-separated KV codecs (f32 for the F32 cache); G stands for min(32, head_dim)", "LIST");
  flags.add_int64("tokens", &tokens, "tokens to decode and time per row");
  flags.add_bool("prefill", &fill_by_prefill, "fill the context by a real prefill");
  bool print_parts = false;
  flags.add_bool("parts", &print_parts,
                 "after the rows, each part of a step (norms, qkv, rope+store, attention, wo, gate+up, glu, down, "
                 "output): mean ms per token, share of the step and, for the weight products, the rate they read "
                 "their weights at against the run's best pass (the JSON has them either way)");
  flags.add_string("weights", &weights,
                   "packed: Q4_0 (on AVX2 also Q8_0, Q4_K, Q5_K, Q6_K) weights repacked at load into 16-row strips (what "
                   "the engine runs); gguf: the "
                   "kernels over the GGUF rows as stored (the layout before packing, for comparison)",
                   "packed|gguf");
  BATON_ASSIGN_OR_RETURN(const bool run, parse_bench_flags(flags, args));
  if (!run) return absl::OkStatus();
  if (weights != "packed" && weights != "gguf") {
    return absl::InvalidArgumentError("--weights: '" + weights + "' is neither packed nor gguf");
  }
  if (tokens < 1 || c.threads < 1) return absl::InvalidArgumentError("--tokens and --threads must be >= 1");

  std::vector<int64_t> context_values;
  for (const std::string& item : std::vector<std::string>(absl::StrSplit(contexts, ',', absl::SkipEmpty()))) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(item, &value) || value < 0) {
      return absl::InvalidArgumentError("--context: bad value '" + item + "'");
    }
    context_values.push_back(value);
  }
  BATON_ASSIGN_OR_RETURN(LoadedModel m,
                         load_model(c.model, c.threads, 64, FloatMatmul::kExact, /*pack_weights=*/weights == "packed"));
  const std::vector<std::string> kv_names =
      absl::StrSplit(expand_codec_list(kv_list, m.spec().head_dim), ',', absl::SkipEmpty());
  if (context_values.empty() || kv_names.empty()) {
    return absl::InvalidArgumentError("--context and --kv need at least one value");
  }
  const ReadBuffer bandwidth_buffer(int64_t{1} << 30);  // 1 GiB: far past the last-level cache
  DecodeRun result;
  result.model = m.spec().name;
  result.threads = c.threads;
  result.kernels = simd_level_name(active_simd_level());
  if (m.model->packed_bytes() > 0) result.kernels += "+packed";  // Q4_0 weights packed at load
  result.tokens = tokens;
  weight_bytes_per_part(*m.model, result.part_weight_bytes);
  for (double b : result.part_weight_bytes) result.weight_bytes_per_token += b;
  result.print_parts = print_parts;
  const DecodeSetup setup{m.engine.get(), tokens, fill_by_prefill, result.weight_bytes_per_token,
                          &bandwidth_buffer, result.part_weight_bytes};
  result.bandwidth_bytes_per_s =
      measure_read_bandwidth(m.engine->pool(), bandwidth_buffer, kRunBandwidthPasses, &result.bandwidth_prefetch);
  for (int64_t context : context_values) {
    for (const std::string& kv_name : kv_names) {
      result.cells.push_back(measure_cell(setup, context, kv_name));
      if (result.cells.back().bandwidth_bytes_per_s > result.bandwidth_bytes_per_s) {
        result.bandwidth_bytes_per_s = result.cells.back().bandwidth_bytes_per_s;
        result.bandwidth_prefetch = result.cells.back().bandwidth_prefetch;
      }
    }
  }
  if (c.json) {
    print_json_line(decode_json(result));
  } else {
    print_decode_table(result);
  }
  return absl::OkStatus();
}

}  // namespace baton::cli
