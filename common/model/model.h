// A loaded model: the GGUF mapping, its spec, and zero-copy views of every
// weight the engine reads. Small 1-D tensors (norms, biases, RoPE factors) are
// converted to owned F32 at load; matrices stay in their stored type.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/cpu/matmul.h"
#include "common/gguf/gguf_file.h"
#include "common/model/model_spec.h"
#include "common/util/huge_page_buffer.h"

namespace baton {

struct LayerWeights {
  std::vector<float> attn_norm;    // [n_embd]
  // wq/wk/wv (w_gate/w_up) may be row ranges of one fused tensor (phi3's
  // attn_qkv, ffn_up): zero-copy views, as the rows are contiguous.
  WeightMatrix wq;                 // [q_dim rows, n_embd cols]
  WeightMatrix wk;                 // [kv_dim, n_embd]
  WeightMatrix wv;                 // [kv_dim, n_embd]
  std::vector<float> bq, bk, bv;   // [q_dim], [kv_dim], [kv_dim]; empty unless qkv_bias
  // QK-norm weights, [head_dim] each, shared by all heads; empty unless qk_norm.
  std::vector<float> attn_q_norm, attn_k_norm;
  WeightMatrix wo;                 // [n_embd, q_dim]
  std::vector<float> ffn_norm;     // [n_embd]
  WeightMatrix w_gate;             // [n_ff, n_embd]
  WeightMatrix w_up;               // [n_ff, n_embd]
  WeightMatrix w_down;             // [n_embd, n_ff]
  // gemma3 (post_norms): RMSNorm weights of the attention and FFN outputs. [n_embd]; else empty.
  std::vector<float> post_attn_norm;
  std::vector<float> post_ffn_norm;
};

class Model {
 public:
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& path);
  static absl::StatusOr<std::unique_ptr<Model>> FromFile(std::unique_ptr<GgufFile> file);

  const ModelSpec& spec() const { return spec_; }
  const GgufFile& file() const { return *file_; }
  const std::string& path() const { return path_; }

  const WeightMatrix& token_embd() const { return token_embd_; }  // [n_vocab, n_embd]
  const WeightMatrix& output() const { return output_; }          // [n_vocab, n_embd]
  const std::vector<float>& output_norm() const { return output_norm_; }
  // Per rotated pair i: theta_i = pos * rope_inv_freq[i]  (base, factors —
  // rope_freqs or the LongRoPE set in use — and linear scaling folded in).
  // [n_rot / 2]. spec().rope.attn_factor multiplies cos and sin.
  const std::vector<float>& rope_inv_freq() const { return rope_inv_freq_; }
  // The table layer `layer` rotates with: rope_inv_freq(), or for a
  // sliding-window layer of a model with spec().rope_swa_freq_base > 0
  // (gemma3) the local one. [n_rot / 2]
  const std::vector<float>& rope_inv_freq(int layer) const {
    return layer_uses_swa_rope_.empty() || !layer_uses_swa_rope_[layer] ? rope_inv_freq_ : rope_swa_inv_freq_;
  }
  // The local table; empty unless spec().rope_swa_freq_base > 0. [n_rot / 2]
  const std::vector<float>& rope_swa_inv_freq() const { return rope_swa_inv_freq_; }
  const LayerWeights& layer(int i) const { return layers_[i]; }

  // Repacks, once, the matrices this CPU's kernels read faster in another
  // layout (Q4_0 on AVX2 and AVX-512, Q8_0 and Q4_K on AVX2: matmul.h's
  // pack_weight_matrix), points their WeightMatrix::packed at the copies,
  // and releases the mapped GGUF pages they came from, so the model stays
  // one copy in memory. Engines
  // call it; thread-safe; later calls return at once. Views of the GGUF
  // data (`data`) stay valid: a page read again comes back from the file.
  void pack_for_cpu(ThreadPool* pool) const;
  // Bytes of the packed copies (0 before pack_for_cpu, or where none apply).
  int64_t packed_bytes() const { return packed_bytes_; }

  // Bytes of all tensor data in the file.
  uint64_t weight_bytes() const;
  int64_t parameter_count() const;

 private:
  Model() = default;
  absl::Status bind();

  std::string path_;
  std::unique_ptr<GgufFile> file_;
  // pack_for_cpu's state: set once under pack_once_, read after it.
  mutable std::once_flag pack_once_;
  mutable HugePageBytes packed_;
  mutable int64_t packed_bytes_ = 0;
  ModelSpec spec_;
  WeightMatrix token_embd_{};
  mutable WeightMatrix output_{};  // mutable: pack_for_cpu sets `packed`
  std::vector<float> output_norm_;
  std::vector<float> rope_inv_freq_;
  std::vector<float> rope_swa_inv_freq_;   // [n_rot / 2]; empty unless rope_swa_freq_base > 0
  std::vector<bool> layer_uses_swa_rope_;  // [n_layer]; empty unless rope_swa_freq_base > 0
  mutable std::vector<LayerWeights> layers_;  // mutable: pack_for_cpu sets the matrices' `packed`
};

// RoPE inverse frequencies for a spec; `freq_factors` may be empty.
std::vector<float> compute_rope_inv_freq(const RopeSpec& rope, const std::vector<float>& freq_factors);

}  // namespace baton
