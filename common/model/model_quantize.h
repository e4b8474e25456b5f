// `baton model quantize`: re-stores a model's matrices as Q4_0 or Q8_0 (1-D
// tensors as F32) and stamps the source weights' digest into the output so
// that its fingerprint matches the source it came from.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "common/gguf/ggml_types.h"

namespace baton {

struct QuantizeOptions {
  GgmlType type = GgmlType::kQ4_0;  // q4_0 | q8_0 (also f16/bf16/f32 for conversions)
  int n_threads = 0;                // 0: all hardware threads
};

absl::Status quantize_model(const std::string& in_path, const std::string& out_path,
                            const QuantizeOptions& options);

}  // namespace baton
