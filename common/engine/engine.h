// The fast CPU forward pass: batched prefill and single-token decode over a
// KvCache, multi-threaded matmuls on the stored weight types (Q4_0/Q8_0 with
// 8-bit activations). Tested against ReferenceEngine (reference_engine.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "common/engine/kv_cache.h"
#include "common/model/model.h"
#include "common/util/thread_pool.h"

namespace baton {

struct EngineOptions {
  int n_threads = 0;             // 0: all hardware threads
  int max_batch_tokens = 64;     // prefill micro-batch, tokens per forward
};

class Engine {
 public:
  Engine(const Model& model, const EngineOptions& options);

  const Model& model() const { return model_; }
  KvGeometry kv_geometry() const;
  // An F32 KV cache for this model.
  std::unique_ptr<KvCache> new_f32_kv_cache(int64_t capacity_tokens) const;

  // Runs `tokens` at positions [kv.size(), kv.size() + n) and commits them.
  // last_logits (optional): logits of the last token, [n_vocab].
  // all_logits (optional): logits of every token, [n, n_vocab].
  // On error the cache keeps its previous size.
  absl::Status prefill(std::span<const int32_t> tokens, KvCache& kv, std::vector<float>* last_logits,
                       std::vector<float>* all_logits = nullptr);
  // One token at position kv.size(); logits: [n_vocab].
  absl::Status decode_step(int32_t token, KvCache& kv, std::vector<float>* logits);

  ThreadPool& pool() { return pool_; }

 private:
  // One micro-batch of n <= max_batch_tokens tokens at pos; logits for rows
  // [first_logit_row, n) go to `logits` ([n - first_logit_row, n_vocab]).
  absl::Status forward(const int32_t* tokens, int64_t n, int64_t pos, KvCache& kv,
                       int64_t first_logit_row, float* logits);

  const Model& model_;
  EngineOptions options_;
  ThreadPool pool_;
  // Scratch, sized for max_batch_tokens rows.
  std::vector<float> x_;       // [B, n_embd] residual stream
  std::vector<float> h_;       // [B, n_embd] normed input
  std::vector<float> q_;       // [B, q_dim]
  std::vector<float> k_;       // [B, kv_dim]
  std::vector<float> v_;       // [B, kv_dim]
  std::vector<float> attn_;    // [B, q_dim]
  std::vector<float> proj_;    // [B, n_embd]
  std::vector<float> gate_;    // [B, n_ff]
  std::vector<float> up_;      // [B, n_ff]
};

// Validates token ids against the vocabulary.
absl::Status check_tokens(std::span<const int32_t> tokens, int n_vocab);

}  // namespace baton
