#include "bench_harness.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "cloud_prefill/cpu_prefill_backend.h"
#include "common/engine/sampler.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/util/check.h"
#include "roofline.h"

namespace baton::cli {

absl::StatusOr<bool> parse_bench_flags(FlagSet& flags, const Args& args) {
  if (absl::Status status = flags.parse(args); !status.ok()) {
    return exit_status(2, absl::StrCat(status.message(), "\n(see --help)\n"));
  }
  if (flags.help_requested()) {
    std::fputs(flags.usage().c_str(), stdout);
    return false;
  }
  return true;
}

absl::Status with_context(const std::string& context, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, status.message()));
}

void add_model_bench_flags(FlagSet& flags, ModelBenchFlags& values) {
  flags.add_string("model", &values.model, "GGUF model file", "FILE");
  flags.add_int64("threads", &values.threads, "worker threads");
  flags.add_bool("json", &values.json, "print one JSON object instead of the table");
  flags.require("model");
}

int64_t runtime_micro_batch(const Model& model) {
  return float_weights(dominant_weight_type(model)) ? kCpuPrefillMicroBatchTokens : EngineOptions{}.max_batch_tokens;
}

absl::StatusOr<LoadedModel> load_model(const std::string& path, int64_t threads, int64_t batch_tokens,
                                       FloatMatmul float_matmul, bool pack_weights) {
  LoadedModel loaded;
  BATON_ASSIGN_OR_RETURN(loaded.model, Model::Load(path));
  if (batch_tokens <= 0) batch_tokens = runtime_micro_batch(*loaded.model);
  EngineOptions options{static_cast<int>(threads), static_cast<int>(batch_tokens), float_matmul};
  options.pack_weights = pack_weights;
  loaded.engine = std::make_unique<Engine>(*loaded.model, options);
  return loaded;
}

std::vector<int32_t> synthetic_tokens(int64_t n, int n_vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (auto& t : tokens) t = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(n_vocab));
  return tokens;
}

int64_t layer_matrix_elements(const Model& model) {
  int64_t total = 0;
  for (int i = 0; i < model.spec().n_layer; ++i) {
    const LayerWeights& l = model.layer(i);
    for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) total += w->rows * w->cols;
  }
  return total;
}

double percentile(std::vector<double> values, double fraction) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t rank = static_cast<size_t>(std::ceil(fraction * static_cast<double>(values.size())));
  return values[std::min(values.size() - 1, rank == 0 ? 0 : rank - 1)];
}

double median(std::vector<double> values) {
  BATON_CHECK(!values.empty());
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

absl::StatusOr<std::unique_ptr<KvCache>> bench_kv_cache(const Engine& engine, const std::string& kv, int64_t capacity,
                                                        std::string* store_name, double* bytes_per_token) {
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

}  // namespace baton::cli
