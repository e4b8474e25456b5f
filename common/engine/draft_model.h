// A draft model for speculative decoding (baton-edge --draft F, baton bench
// decode --speculative N --draft F): a smaller GGUF that shares the target's
// tokenizer proposes the next tokens greedily, one cheap decode step each,
// and the target verifies them in one pass (speculative.h). Prompt lookup
// only guesses when the reply copies its context; a draft model guesses
// everywhere it agrees with the target.
//
// The drafter keeps its own KV of the sequence and the tokens it holds; each
// call reuses the longest prefix they share with the history (the target
// took some draft tokens and rejected the rest), rolls the rest back, and
// runs only what is new. Greedy (a point-mass draft), so the verification
// rule keeps the target's output distribution exactly.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/engine/engine.h"
#include "common/engine/speculative.h"
#include "common/kv_cache/kv_cache.h"
#include "common/model/model.h"

namespace baton {

// OK when `draft` can draft for `target`: the same vocabulary size and the
// same tokenizer (digest of its vocabulary, merges and special tokens), so
// a draft token id means the same text. The error names both.
absl::Status check_draft_model(const Model& target, const Model& draft);

// The most threads of a draft model's engine (--draft-threads).
inline constexpr int kMaxDraftThreads = 64;

class ModelDrafter final : public Drafter {
 public:
  // engine: the draft model's, used by this drafter alone (one caller at a
  // time); capacity_tokens: the longest history (plus draft) it drafts for:
  // past it, no draft (the target decodes plainly).
  ModelDrafter(Engine& engine, int64_t capacity_tokens);

  absl::StatusOr<std::vector<int32_t>> draft(std::span<const int32_t> history, int max_tokens) override;

  // Tokens the drafter's KV holds (tests).
  const std::vector<int32_t>& cached() const { return cached_; }

 private:
  Engine& engine_;
  std::unique_ptr<KvCache> kv_;
  std::vector<int32_t> cached_;  // the tokens at kv_ positions [0, size)
  std::vector<float> logits_;
};

}  // namespace baton
