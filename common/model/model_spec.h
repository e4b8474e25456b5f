// The shape of a transformer as read from GGUF metadata: everything the engine,
// the KV codec and the memory planner need to know about a model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace baton {

class GgufFile;

enum class RopeType {
  kNorm,  // rotate pairs (2i, 2i+1): llama
  kNeox,  // rotate pairs (i, i + n_rot/2): qwen2, GPT-NeoX
};
const char* rope_type_name(RopeType type);

// Which LongRoPE frequency-factor tensor the model runs with.
enum class LongRopeFactors {
  kNone,   // no LongRoPE
  kShort,  // rope_factors_short.weight: the serving context fits the original one
  kLong,   // rope_factors_long.weight: the serving context exceeds it
};
const char* long_rope_factors_name(LongRopeFactors factors);  // none | short | long

struct RopeSpec {
  RopeType type = RopeType::kNorm;
  float freq_base = 10000.0f;
  int n_rot = 0;                       // rotated dims per head (<= head_dim, even)
  std::string scaling_type = "none";  // none | linear (llama3 arrives as freq factors)
  float scaling_factor = 1.0f;         // linear: positions are divided by it
  bool has_freq_factors = false;       // rope_freqs.weight present: [n_rot/2] divisors
  // LongRoPE ("su", phi3): rope_factors_long/short.weight ([n_rot/2] divisors)
  // with one set chosen per model load (arch/phi3.cc: long_rope_uses_long_factors).
  LongRopeFactors long_rope = LongRopeFactors::kNone;
  int original_context = 0;            // rope.scaling.original_context_length, tokens (LongRoPE)
  float attn_factor = 1.0f;            // multiplies cos and sin of the rotated dims (LongRoPE)
};

struct ModelSpec {
  std::string arch;     // general.architecture: llama | qwen2 | qwen3 | phi3 | gemma3
  std::string name;     // general.name (informational)
  int n_layer = 0;
  int n_embd = 0;       // residual width
  int n_head = 0;       // query heads
  int n_head_kv = 0;    // key/value heads (GQA: n_head % n_head_kv == 0)
  int head_dim = 0;     // per-head width of Q, K and V
  int n_ff = 0;         // FFN hidden width
  int n_vocab = 0;
  int n_ctx_train = 0;  // trained context length, tokens
  float norm_eps = 1e-5f;
  RopeSpec rope;
  bool qkv_bias = false;
  bool qk_norm = false;          // per-head RMSNorm of Q and K before RoPE (attn_q_norm / attn_k_norm)
  bool tied_embeddings = false;  // no output.weight: logits use token_embd
  // Sliding-window attention per layer (see KvGeometry::layer_window): empty,
  // or n_layer entries, 0 = full attention, W > 0 = the layer sees W tokens.
  std::vector<int32_t> layer_window;
  // Gemma 3 (see common/model/arch/gemma3.cc); the defaults are llama's.
  float embedding_scale = 1.0f;    // token embeddings are multiplied by it (gemma3: sqrt(n_embd))
  bool post_norms = false;         // post_attention_norm / post_ffw_norm on each block's output
  bool gelu_ffn = false;           // GeGLU (tanh-approximated GELU of the gate) instead of SwiGLU
  // > 0: sliding-window layers rotate with this base, unscaled and without
  // frequency factors (gemma3: 10000); the other layers use `rope`.
  float rope_swa_freq_base = 0.0f;
  // Q is multiplied by it before attention, whose own scale is
  // 1/sqrt(head_dim) (gemma3 27B: sqrt(head_dim / (n_embd / n_head))).
  float query_scale = 1.0f;

  int64_t q_dim() const { return int64_t{n_head} * head_dim; }
  int64_t kv_dim() const { return int64_t{n_head_kv} * head_dim; }
  // K and V of one token across all layers, in elements.
  int64_t kv_elements_per_token() const { return 2 * int64_t{n_layer} * kv_dim(); }
};

// Reads and validates the spec from GGUF metadata and tensor shapes.
// Errors name the key or tensor and the offending value.
absl::StatusOr<ModelSpec> model_spec_from_gguf(const GgufFile& file);

}  // namespace baton
