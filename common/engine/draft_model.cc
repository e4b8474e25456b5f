#include "common/engine/draft_model.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "common/engine/sampler.h"
#include "common/model/model_metadata.h"
#include "common/util/check.h"
#include "common/util/sha256.h"

namespace baton {

absl::Status check_draft_model(const Model& target, const Model& draft) {
  if (draft.spec().n_vocab != target.spec().n_vocab) {
    return absl::InvalidArgumentError(
        absl::StrFormat("draft model %s has %d tokens in its vocabulary, the model %s has %d: a draft model must "
                        "share the model's tokenizer",
                        draft.spec().name, draft.spec().n_vocab, target.spec().name, target.spec().n_vocab));
  }
  const std::string want = to_hex(tokenizer_digest(target.file())), got = to_hex(tokenizer_digest(draft.file()));
  if (want != got) {
    return absl::InvalidArgumentError(
        absl::StrFormat("draft model %s has another tokenizer than the model %s (tokenizer digest %s, want %s): a "
                        "draft token must mean the same text",
                        draft.spec().name, target.spec().name, got.substr(0, 16), want.substr(0, 16)));
  }
  return absl::OkStatus();
}

ModelDrafter::ModelDrafter(Engine& engine, int64_t capacity_tokens)
    : engine_(engine), kv_(engine.new_f32_kv_cache(capacity_tokens)) {}

absl::StatusOr<std::vector<int32_t>> ModelDrafter::draft(std::span<const int32_t> history, int max_tokens) {
  std::vector<int32_t> out;
  const int64_t n = std::ssize(history);
  // Room for the history and the draft tokens it runs (all but the last).
  max_tokens = static_cast<int>(std::min<int64_t>(max_tokens, kv_->capacity() - n + 1));
  if (n == 0 || max_tokens <= 0) return out;
  // Reuse what the KV already holds of this history; the last history token
  // runs again for its logits (they were not kept).
  const auto mismatch = std::mismatch(cached_.begin(), cached_.end(), history.begin(), history.end());
  const int64_t common = std::min<int64_t>(mismatch.first - cached_.begin(), n - 1);
  kv_->set_size(common);
  cached_.resize(static_cast<size_t>(common));
  const std::span<const int32_t> fresh = history.subspan(static_cast<size_t>(common));
  if (fresh.size() == 1) {
    BATON_RETURN_IF_ERROR(engine_.decode_step(fresh[0], *kv_, &logits_));
  } else {
    BATON_RETURN_IF_ERROR(engine_.prefill(fresh, *kv_, &logits_));
  }
  cached_.insert(cached_.end(), fresh.begin(), fresh.end());
  Sampler greedy(SamplingParams{});
  for (;;) {
    const int32_t token = greedy.sample(logits_);
    out.push_back(token);
    if (std::ssize(out) == max_tokens) break;
    BATON_RETURN_IF_ERROR(engine_.decode_step(token, *kv_, &logits_));
    cached_.push_back(token);
  }
  return out;
}

}  // namespace baton
