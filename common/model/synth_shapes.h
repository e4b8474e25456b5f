// Real model shapes for synthetic models (speed, memory and codec-size
// measurements need the real hyperparameters, not the real weights).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace baton {

struct SynthShape {
  std::string name;          // e.g. "llama-3.2-1b"
  std::string arch;          // llama | qwen2 | qwen3 | phi3 | gemma3
  int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx_train;
  float norm_eps;
  float rope_freq_base;
  // Llama 3.1+ RoPE scaling (written as rope_freqs.weight); factor 0 = none.
  float llama3_rope_factor;
  float llama3_low_freq_factor;
  float llama3_high_freq_factor;
  int llama3_original_ctx;
  bool tied_embeddings;
  // gemma3: the window of the sliding-window layers (every layer but each
  // sixth is one); 0 for the other architectures.
  int sliding_window = 0;
  // gemma3: linear RoPE scaling factor of the global layers; 0 = none.
  float rope_linear_factor = 0;
  int n_rot = 0;                   // rotated dims per head; 0 = head_dim (phi-4-mini: partial)
  // phi3 LongRoPE: the original context (rope_factors_long/short.weight and
  // rope.scaling.* are written when > 0); the long set runs when n_ctx_train exceeds it.
  int long_rope_original_ctx = 0;
};

const std::vector<SynthShape>& synth_shapes();
// nullptr when unknown.
const SynthShape* find_synth_shape(std::string_view name);
std::string synth_shape_names();  // "tiny, tiny-qwen2, ..."

}  // namespace baton
