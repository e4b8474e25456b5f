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
                                                     int64_t chunk_tokens, const KvCacheFactory& make_cache,
                                                     int32_t bos_id) {
  if (bos_id >= 0) {
    // [BOS] + chunk[:-1] scores all of chunk: the same as scoring [BOS] + chunk
    // without BOS, so build those sequences and score all but their first.
    if (chunk_tokens < 1) return absl::InvalidArgumentError("chunk_tokens must be >= 1");
    PerplexityResult total;
    double nll = 0.0;
    std::vector<int32_t> sequence;
    for (size_t begin = 0; begin < tokens.size(); begin += chunk_tokens) {
      const size_t n = std::min<size_t>(chunk_tokens, tokens.size() - begin);
      sequence.assign(1, bos_id);
      sequence.insert(sequence.end(), tokens.begin() + begin, tokens.begin() + begin + n);
      BATON_ASSIGN_OR_RETURN(PerplexityResult part,
                             evaluate_perplexity(engine, sequence, static_cast<int64_t>(n) + 1, make_cache));
      nll += part.mean_nll * part.scored_tokens;
      total.scored_tokens += part.scored_tokens;
      ++total.chunks;
    }
    if (total.scored_tokens == 0) return absl::InvalidArgumentError("no tokens to score");
    total.mean_nll = nll / total.scored_tokens;
    total.perplexity = std::exp(total.mean_nll);
    return total;
  }
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
