// `baton model quantize`: re-stores a model's matrices as Q4_0 or Q8_0 (1-D
// tensors as F32), or as llama.cpp's K-quant mixes Q4_K_M / Q5_K_M / Q6_K
// (common/model/quant_mix.h), and stamps the source weights' digest into the
// output so that its fingerprint matches the source it came from.
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "common/gguf/ggml_types.h"
#include "common/model/quant_mix.h"

namespace baton {

struct QuantizeOptions {
  QuantizeOptions() = default;
  QuantizeOptions(GgmlType type_, int n_threads_, QuantMix mix_ = QuantMix::kPure,
                  std::optional<GgmlType> output_type_ = std::nullopt)
      : type(type_), n_threads(n_threads_), mix(mix_), output_type(output_type_) {}

  GgmlType type = GgmlType::kQ4_0;  // q4_0 | q8_0 (also f16/bf16/f32 for conversions)
  int n_threads = 0;                // 0: all hardware threads
  // kPure: `type` for every matrix; a llama mix: `type` is its base (Q4_K, Q5_K, Q6_K).
  QuantMix mix = QuantMix::kPure;
  // Type of output.weight (a tied token_embd.weight), as llama-quantize's
  // --output-tensor-type: `q4_0` + Q6_K is llama.cpp's default Q4_0 file.
  std::optional<GgmlType> output_type;
};

absl::Status quantize_model(const std::string& in_path, const std::string& out_path,
                            const QuantizeOptions& options);

}  // namespace baton
