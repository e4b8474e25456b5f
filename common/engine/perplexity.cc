#include "common/engine/perplexity.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/util/check.h"

namespace baton {

double negative_log_likelihood(std::span<const float> logits, int32_t target) {
  BATON_CHECK(target >= 0 && static_cast<size_t>(target) < logits.size());
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
  return std::log(sum) + max_logit - logits[target];
}

absl::StatusOr<PerplexityResult> evaluate_perplexity(Engine& engine, std::span<const int32_t> tokens,
                                                     int64_t chunk_tokens, const KvCacheFactory& make_cache) {
  if (chunk_tokens < 2) {
    return absl::InvalidArgumentError(absl::StrFormat("chunk of %d tokens scores nothing; need >= 2", chunk_tokens));
  }
  const int n_vocab = engine.model().spec().n_vocab;
  PerplexityResult result;
  double total_nll = 0.0;
  std::vector<float> logits;  // [chunk, n_vocab]
  for (size_t begin = 0; begin + 1 < tokens.size(); begin += chunk_tokens) {
    const int64_t n = std::min<int64_t>(chunk_tokens, static_cast<int64_t>(tokens.size() - begin));
    if (n < 2) break;
    std::unique_ptr<KvCache> kv = make_cache ? make_cache(n) : engine.new_f32_kv_cache(n);
    BATON_RETURN_IF_ERROR(engine.prefill(tokens.subspan(begin, n), *kv, nullptr, &logits));
    for (int64_t i = 0; i + 1 < n; ++i) {
      total_nll += negative_log_likelihood(
          std::span<const float>(logits.data() + i * n_vocab, n_vocab), tokens[begin + i + 1]);
    }
    result.scored_tokens += n - 1;
    ++result.chunks;
  }
  if (result.scored_tokens == 0) return absl::InvalidArgumentError("need at least 2 tokens to score");
  result.mean_nll = total_nll / result.scored_tokens;
  result.perplexity = std::exp(result.mean_nll);
  return result;
}

}  // namespace baton
