// CudaModelWeights: a Model's weights on the device, uploaded once and shared
// (read-only) by every backend instance of the model.
//
// Matrices are stored in one 16-bit compute type: F16 when every matrix of
// the file is F16 (kept exact), else BF16 (BF16 as stored; F32, F16, Q8_0 and
// Q4_0 converted on the host at load with dequantize_row). Q, K and V of a
// layer are stacked into one matrix, and so are gate and up, so each is one
// GEMM. Norms, biases and RoPE frequencies stay F32.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cloud_prefill/cuda/cuda_dtype.h"
#include "cloud_prefill/cuda/device_memory.h"
#include "common/model/model.h"

namespace baton::cuda {

struct CudaLayerWeights {
  DeviceMemory attn_norm;  // f32 [n_embd]
  DeviceMemory wqkv;       // dtype [q_dim + 2 * kv_dim, n_embd]: rows of wq, then wk, then wv
  DeviceMemory bqkv;       // f32 [q_dim + 2 * kv_dim]; empty unless qkv_bias
  DeviceMemory wo;         // dtype [n_embd, q_dim]
  DeviceMemory ffn_norm;   // f32 [n_embd]
  DeviceMemory w_gate_up;  // dtype [2 * n_ff, n_embd]: rows of w_gate, then w_up
  DeviceMemory w_down;     // dtype [n_embd, n_ff]
};

class CudaModelWeights {
 public:
  // dtype_name: "auto" (see above), "f16" or "bf16". Uploads on the current device.
  static absl::StatusOr<std::shared_ptr<const CudaModelWeights>> Upload(const Model& model,
                                                                       const std::string& dtype_name);

  const Model& model() const { return model_; }
  CudaDType dtype() const { return dtype_; }
  const void* token_embd() const { return token_embd_.get(); }  // dtype [n_vocab, n_embd]
  const void* output() const { return output_ != nullptr ? output_ : token_embd_.get(); }  // [n_vocab, n_embd]
  const float* output_norm() const { return output_norm_.as<float>(); }  // [n_embd]
  const float* rope_inv_freq() const { return rope_inv_freq_.as<float>(); }  // [n_rot / 2]
  const CudaLayerWeights& layer(int i) const { return layers_[i]; }
  uint64_t device_bytes() const { return device_bytes_; }

 private:
  explicit CudaModelWeights(const Model& model) : model_(model) {}

  const Model& model_;
  CudaDType dtype_ = CudaDType::kBF16;
  DeviceMemory token_embd_;
  DeviceMemory output_storage_;  // empty for tied embeddings
  const void* output_ = nullptr;
  DeviceMemory output_norm_;
  DeviceMemory rope_inv_freq_;
  std::vector<CudaLayerWeights> layers_;
  uint64_t device_bytes_ = 0;
};

}  // namespace baton::cuda
