// Seeded synthetic models of real shapes: random weights scaled so
// activations stay finite (std 1/sqrt(fan_in)), norm weights 1 (gemma3:
// 1 + N(0, 0.1), stored with Gemma's +1 folded in as llama.cpp's converter
// does), and a valid llama-style
// (SentencePiece BPE) tokenizer with a synthetic vocabulary of the shape's size.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/gguf/ggml_types.h"
#include "common/model/synth_shapes.h"

namespace baton {

struct SynthOptions {
  GgmlType type = GgmlType::kF16;  // type of 2-D weights; 1-D tensors are f32
  uint64_t seed = 0;
  int n_threads = 0;               // 0: all hardware threads
};

// Writes the model to `path`. Same shape + seed gives the same source
// weights, whatever the stored type, so the source digest depends on them only.
absl::Status synthesize_model(const SynthShape& shape, const SynthOptions& options, const std::string& path);

// The llama.cpp `general.file_type` id for models whose matrices are `type`.
uint32_t llama_file_type(GgmlType type);

}  // namespace baton
