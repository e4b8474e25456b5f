// Held-out perplexity of a model over a token sequence. The sequence is cut
// into consecutive chunks of `chunk_tokens`, each evaluated from an empty KV
// cache. Without a BOS id every token of a chunk but its first is scored by
// the logits of the token before it; with one (the tiny-model trainer's
// recipe) each chunk runs as [BOS] + chunk[:-1] and every chunk token is scored.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "absl/status/statusor.h"
#include "common/engine/engine.h"

namespace baton {

struct PerplexityResult {
  double mean_nll = 0.0;     // nats per scored token
  double perplexity = 0.0;   // exp(mean_nll)
  int64_t scored_tokens = 0;
  int64_t chunks = 0;
};

// `make_cache` gives the KV cache each chunk runs on (F32 when empty), so the
// same measurement can be made over quantized KV stores.
using KvCacheFactory = std::function<std::unique_ptr<KvCache>(int64_t capacity_tokens)>;

absl::StatusOr<PerplexityResult> evaluate_perplexity(Engine& engine, std::span<const int32_t> tokens,
                                                     int64_t chunk_tokens,
                                                     const KvCacheFactory& make_cache = nullptr,
                                                     int32_t bos_id = -1);

// -log softmax(logits)[target], computed stably in double. logits: [n_vocab].
double negative_log_likelihood(std::span<const float> logits, int32_t target);

}  // namespace baton
