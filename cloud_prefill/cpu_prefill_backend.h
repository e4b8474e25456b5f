// CpuPrefillBackend: the PrefillBackend over the CPU Engine (common/engine),
// computing a chunk layer by layer with Engine::prefill_layers.
#pragma once

#include <memory>
#include <string>

#include "cloud_prefill/prefill_backend.h"
#include "common/engine/engine.h"

namespace baton {

// Tokens per micro-batch of the backend's engine (the service's default
// chunk): the prefill GEMM repacks each weight once per micro-batch, so
// bigger ones amortize it (F16 weights, exact path, 512 tokens on the Intel
// AVX-512 host: 0.47 / 0.50 / 0.53 of the F32 FMA peak at 64 / 128 / 256).
inline constexpr int kCpuPrefillMicroBatchTokens = 256;

class CpuPrefillBackend final : public PrefillBackend {
 public:
  // threads: matmul threads of this backend's engine; 0: one per core.
  // float_matmul: F16 / BF16 / F32 weights exact or in bf16 (--cpu-matmul).
  CpuPrefillBackend(const Model& model, int threads, FloatMatmul float_matmul = FloatMatmul::kExact);

  std::string name() const override { return name_; }
  void begin_sequence() override {}
  absl::Status prefill(std::span<const int32_t> tokens, F32KvCache& kv, const LayerDoneFn& layer_done) override;
  absl::Status decode(std::span<const int32_t> tokens, F32KvCache& kv, std::vector<float>* last_logits) override;

 private:
  Engine engine_;
  std::string name_;
};

// One CpuPrefillBackend per worker, each with `threads` matmul threads.
PrefillBackendFactory cpu_prefill_backend_factory(int threads, FloatMatmul float_matmul = FloatMatmul::kExact);

}  // namespace baton
