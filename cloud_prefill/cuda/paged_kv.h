// The device KV of the CUDA backend: fixed-size blocks of a pool
// (CudaKvBlockPool) holding, for block_tokens consecutive positions, the K and
// V of every layer. A sequence owns a block table: its block i holds
// positions [i * block_tokens, (i + 1) * block_tokens).
//
// Block layout (elements of dtype): [n_layer][2 (K, V)][block_tokens][kv_dim],
// kv_dim = n_head_kv * head_dim; K after RoPE.
#pragma once

#include <cstdint>

#include "cloud_prefill/cuda/cuda_dtype.h"

namespace baton::cuda {

struct PagedKvView {
  void* pool = nullptr;                  // device, [n_pool_blocks][block_elements()] of dtype
  CudaDType dtype = CudaDType::kBF16;    // kF16 or kBF16
  const int32_t* block_table = nullptr;  // device [sequence blocks]: pool block index of each
  int block_tokens = 0;                  // positions per block
  int n_layer = 0;
  int kv_dim = 0;                        // n_head_kv * head_dim

  int64_t block_elements() const { return int64_t{n_layer} * 2 * block_tokens * kv_dim; }
};

}  // namespace baton::cuda
