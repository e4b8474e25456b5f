#include "cloud_prefill/cpu_prefill_backend.h"

#include "absl/strings/str_cat.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/util/cpu_features.h"

namespace baton {

CpuPrefillBackend::CpuPrefillBackend(const Model& model, int threads, FloatMatmul float_matmul)
    : engine_(model, EngineOptions{.n_threads = threads,
                                   .max_batch_tokens = kCpuPrefillMicroBatchTokens,
                                   .float_matmul = float_matmul}),
      name_(absl::StrCat("cpu:", simd_level_name(active_simd_level()), " x", engine_.pool().size(),
                         float_matmul == FloatMatmul::kBf16 && bf16_matmul_available() ? " bf16" : "")) {}

absl::Status CpuPrefillBackend::prefill(std::span<const int32_t> tokens, F32KvCache& kv,
                                        const LayerDoneFn& layer_done) {
  return engine_.prefill_layers(tokens, kv, layer_done);
}

absl::Status CpuPrefillBackend::decode(std::span<const int32_t> tokens, F32KvCache& kv,
                                       std::vector<float>* last_logits) {
  return engine_.prefill(tokens, kv, last_logits);
}

PrefillBackendFactory cpu_prefill_backend_factory(int threads, FloatMatmul float_matmul) {
  return [threads, float_matmul](const Model& model,
                                 int /*worker_index*/) -> absl::StatusOr<std::unique_ptr<PrefillBackend>> {
    return std::make_unique<CpuPrefillBackend>(model, threads, float_matmul);
  };
}

}  // namespace baton
