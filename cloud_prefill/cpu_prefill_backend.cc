#include "cloud_prefill/cpu_prefill_backend.h"

#include "absl/strings/str_cat.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/util/cpu_features.h"

namespace baton {

CpuPrefillBackend::CpuPrefillBackend(const Model& model, int threads)
    : engine_(model, EngineOptions{.n_threads = threads}),
      name_(absl::StrCat("cpu:", simd_level_name(active_simd_level()), " x", engine_.pool().size())) {}

absl::Status CpuPrefillBackend::prefill(std::span<const int32_t> tokens, F32KvCache& kv,
                                        const LayerDoneFn& layer_done) {
  return engine_.prefill_layers(tokens, kv, layer_done);
}

absl::Status CpuPrefillBackend::decode(std::span<const int32_t> tokens, F32KvCache& kv,
                                       std::vector<float>* last_logits) {
  return engine_.prefill(tokens, kv, last_logits);
}

PrefillBackendFactory cpu_prefill_backend_factory(int threads) {
  return [threads](const Model& model, int /*worker_index*/) -> absl::StatusOr<std::unique_ptr<PrefillBackend>> {
    return std::make_unique<CpuPrefillBackend>(model, threads);
  };
}

}  // namespace baton
