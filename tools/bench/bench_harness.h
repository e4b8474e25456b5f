// What the benches share: flag parsing and the common flags, loading a model
// with its CPU engine, the KV cache a codec name implies, synthetic prompts,
// the matrix work of a model, and percentiles. The in-process cloud is
// in_process_cloud.h, the in-memory KV handoff tools/cli/in_memory_handoff.h,
// the output bench_report.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench_commands.h"
#include "common/engine/engine.h"
#include "common/model/model.h"
#include "common/util/flags.h"

namespace baton::cli {

using Clock = std::chrono::steady_clock;

inline double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Parses a bench's flags: true when the bench runs; false when --help printed
// the usage (the bench ends OK); a usage error (exit 2) for a bad flag.
absl::StatusOr<bool> parse_bench_flags(FlagSet& flags, const Args& args);

// `status` (OK stays OK) with `context` in front of its message, e.g.
// "cloud: " + message; baton_main prints it as "baton: MESSAGE", exit 1.
absl::Status with_context(const std::string& context, const absl::Status& status);

// --model, --threads and --json, as most benches take them.
struct ModelBenchFlags {
  std::string model;
  int64_t threads = 2;
  bool json = false;
};
// Adds the three with the help texts of decode, prefill and perplexity (the
// other benches word theirs, and order them among their own flags).
void add_model_bench_flags(FlagSet& flags, ModelBenchFlags& values);

// A model and a CPU engine over it (the engine refers to the model).
struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Engine> engine;
  const ModelSpec& spec() const { return model->spec(); }
};
// The prefill micro-batch the runtime runs a model's weights with: F16 /
// BF16 / F32 weights are the cloud's (CpuPrefillBackend prefills the source
// weights, kCpuPrefillMicroBatchTokens), quantized ones the edge engine's
// (EngineOptions::max_batch_tokens).
int64_t runtime_micro_batch(const Model& model);

// batch_tokens: the engine's micro-batch; 0: runtime_micro_batch.
absl::StatusOr<LoadedModel> load_model(const std::string& path, int64_t threads, int64_t batch_tokens = 64,
                                       FloatMatmul float_matmul = FloatMatmul::kExact, bool pack_weights = true);

// Deterministic pseudo-random token ids in [0, n_vocab) (no tokenizer needed).
std::vector<int32_t> synthetic_tokens(int64_t n, int n_vocab, uint64_t seed);

// Elements of every layer matrix (q, k, v, o, gate, up, down) of all layers:
// 2 x this is the matmul FLOPs per prompt token.
int64_t layer_matrix_elements(const Model& model);

// A KV cache of `capacity` tokens for `kv` ("f32": the engine's F32 cache,
// else the edge store a wire codec name implies) and its bytes per cached
// token (all layers, K and V, codes plus scales).
absl::StatusOr<std::unique_ptr<KvCache>> bench_kv_cache(const Engine& engine, const std::string& kv, int64_t capacity,
                                                        std::string* store_name, double* bytes_per_token);

// Nearest-rank percentile (fraction in (0, 1]) of unsorted values; 0 when empty.
double percentile(std::vector<double> values, double fraction);
// The median, the mean of the middle two for an even count; values not empty.
double median(std::vector<double> values);

}  // namespace baton::cli
