#include "common/model/synth_shapes.h"

#include "absl/strings/str_join.h"

namespace baton {

const std::vector<SynthShape>& synth_shapes() {
  // name, arch, layers, embd, heads, kv heads, head dim, ffn, vocab, ctx, eps, rope base,
  // llama3 factor, low, high, original ctx, tied[, sliding window, linear RoPE factor, n_rot,
  // LongRoPE original ctx]
  static const std::vector<SynthShape> shapes = {
      {"tiny", "llama", 2, 64, 4, 2, 16, 160, 512, 2048, 1e-5f, 10000.0f, 0, 0, 0, 0, false},
      // tiny with Llama 3.1 frequency factors (short original context so they vary).
      {"tiny-llama3", "llama", 2, 64, 4, 2, 16, 160, 512, 2048, 1e-5f, 500000.0f, 8.0f, 1.0f, 4.0f, 64, true},
      {"tiny-qwen2", "qwen2", 2, 64, 4, 2, 16, 160, 512, 2048, 1e-6f, 1000000.0f, 0, 0, 0, 0, true},
      {"llama-3.2-1b", "llama", 16, 2048, 32, 8, 64, 8192, 128256, 131072, 1e-5f, 500000.0f, 32.0f, 1.0f,
       4.0f, 8192, true},
      {"llama-3.2-3b", "llama", 28, 3072, 24, 8, 128, 8192, 128256, 131072, 1e-5f, 500000.0f, 32.0f,
       1.0f, 4.0f, 8192, true},
      {"llama-3.1-8b", "llama", 32, 4096, 32, 8, 128, 14336, 128256, 131072, 1e-5f, 500000.0f, 8.0f,
       1.0f, 4.0f, 8192, false},
      {"qwen2.5-0.5b", "qwen2", 24, 896, 14, 2, 64, 4864, 151936, 32768, 1e-6f, 1000000.0f, 0, 0, 0, 0,
       true},
      {"qwen2.5-1.5b", "qwen2", 28, 1536, 12, 2, 128, 8960, 151936, 32768, 1e-6f, 1000000.0f, 0, 0, 0,
       0, true},
      // gemma3 (+ sliding window, linear RoPE factor of the global layers).
      // tiny-gemma3: 6 layers so layer 5 is global; window 8, and the 4B's
      // linear factor so local and global RoPE tables differ in base and scale.
      {"tiny-gemma3", "gemma3", 6, 64, 4, 2, 16, 160, 512, 2048, 1e-6f, 1000000.0f, 0, 0, 0, 0, true, 8, 8.0f},
      {"gemma-3-1b", "gemma3", 26, 1152, 4, 1, 256, 6912, 262144, 32768, 1e-6f, 1000000.0f, 0, 0, 0, 0, true,
       512, 0},
      {"gemma-3-4b", "gemma3", 34, 2560, 8, 4, 256, 10240, 262208, 131072, 1e-6f, 1000000.0f, 0, 0, 0, 0, true,
       1024, 8.0f},
      // qwen3: head_dim 32 != n_embd / n_head, as in the real models.
      {"tiny-qwen3", "qwen3", 2, 64, 4, 2, 32, 160, 512, 2048, 1e-6f, 1000000.0f, 0, 0, 0, 0, true},
      {"qwen3-0.6b", "qwen3", 28, 1024, 16, 8, 128, 3072, 151936, 40960, 1e-6f, 1000000.0f, 0, 0, 0, 0,
       true},
      {"qwen3-1.7b", "qwen3", 28, 2048, 16, 8, 128, 6144, 151936, 40960, 1e-6f, 1000000.0f, 0, 0, 0, 0,
       true},
      // phi3 like Phi-4-mini: GQA, partial rotary, tied, LongRoPE with the long
      // factors in use (context 4096 > original 1024).
      {"tiny-phi3", "phi3", 2, 64, 4, 2, 16, 160, 512, 4096, 1e-5f, 10000.0f, 0, 0, 0, 0, true, 0, 0, 12, 1024},
      // Phi-3-mini-128k / Phi-3.5-mini.
      {"phi-3-mini", "phi3", 32, 3072, 32, 32, 96, 8192, 32064, 131072, 1e-5f, 10000.0f, 0, 0, 0, 0, false,
       0, 0, 96, 4096},
      {"phi-4-mini", "phi3", 32, 3072, 24, 8, 128, 8192, 200064, 131072, 1e-5f, 10000.0f, 0, 0, 0, 0, true,
       0, 0, 96, 4096},
  };
  return shapes;
}

const SynthShape* find_synth_shape(std::string_view name) {
  for (const SynthShape& shape : synth_shapes()) {
    if (shape.name == name) return &shape;
  }
  return nullptr;
}

std::string synth_shape_names() {
  std::vector<std::string> names;
  for (const SynthShape& shape : synth_shapes()) names.push_back(shape.name);
  return absl::StrJoin(names, ", ");
}

}  // namespace baton
