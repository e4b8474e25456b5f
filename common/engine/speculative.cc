#include "common/engine/speculative.h"

#include <algorithm>
#include <chrono>

#include "common/util/check.h"

namespace baton {

std::vector<int32_t> prompt_lookup_draft(std::span<const int32_t> history, int max_tokens,
                                         const PromptLookupOptions& options) {
  const int64_t size = static_cast<int64_t>(history.size());
  if (max_tokens <= 0 || size < 2) return {};
  const int64_t lowest = options.max_search > 0 ? std::max<int64_t>(0, size - options.max_search) : 0;
  for (int n = std::min<int64_t>(options.max_ngram, size - 1); n >= options.min_ngram; --n) {
    const int32_t* suffix = history.data() + size - n;
    // The most recent earlier occurrence that has at least one token after it.
    for (int64_t start = size - n - 1; start >= lowest; --start) {
      if (!std::equal(suffix, suffix + n, history.data() + start)) continue;
      const int64_t from = start + n;
      const int64_t count = std::min<int64_t>(max_tokens, size - from);
      return std::vector<int32_t>(history.begin() + from, history.begin() + from + count);
    }
  }
  return {};
}

DraftController::DraftController(int max_draft, bool adaptive)
    : max_draft_(std::max(0, max_draft)), adaptive_(adaptive), pass_cost_(static_cast<size_t>(max_draft_) + 2, 0.0) {}

double DraftController::pass_cost(int rows) const {
  if (rows <= 1) return 1.0;
  if (rows < static_cast<int>(pass_cost_.size()) && pass_cost_[static_cast<size_t>(rows)] > 0) {
    return pass_cost_[static_cast<size_t>(rows)];
  }
  return 1.0 + beta_ * (rows - 1);
}

double DraftController::acceptance() const { return taken_ / (taken_ + rejected_); }

int DraftController::choose() {
  if (max_draft_ == 0 || !adaptive_) return max_draft_;
  const double a = acceptance();
  int best_k = 0;
  double best = 1.0;  // plain decode: one token per step
  double expected = 1.0, power = 1.0;
  for (int k = 1; k <= max_draft_; ++k) {
    power *= a;
    expected += power;
    const double value = expected / pass_cost(k + 1);
    if (value > best) {
      best = value;
      best_k = k;
    }
  }
  if (best_k > 0) {
    plain_steps_ = 0;
    return best_k;
  }
  // Speculation does not pay now: decode plainly, probing now and then.
  if (++plain_steps_ < kProbeInterval) return 0;
  plain_steps_ = 0;
  return 1;
}

void DraftController::record_verify(int drafted, int accepted) {
  if (drafted <= 0) return;
  constexpr double kDecay = 0.9;  // about the last ten verifications
  taken_ = taken_ * kDecay + accepted;
  rejected_ = rejected_ * kDecay + (accepted < drafted ? 1.0 : 0.0);
}

void DraftController::record_time(int rows, double seconds) {
  constexpr double kWeight = 0.2;
  if (rows <= 1) {
    step_seconds_ = step_seconds_ == 0 ? seconds : step_seconds_ + kWeight * (seconds - step_seconds_);
    return;
  }
  if (step_seconds_ <= 0) return;
  const double steps = seconds / step_seconds_;
  const double sample = std::clamp((steps - 1.0) / (rows - 1), 0.01, 2.0);
  if (rows < static_cast<int>(pass_cost_.size())) {
    // A row count's first sample moves its estimate from the fit, not to the
    // sample alone: one pass slowed by a page fault or a busy core must not
    // rule its row count out for good.
    double& cost = pass_cost_[static_cast<size_t>(rows)];
    if (cost == 0) cost = 1.0 + beta_ * (rows - 1);
    cost += 2 * kWeight * (std::clamp(steps, 1.0, 1.0 + 2.0 * (rows - 1)) - cost);
  }
  beta_ += kWeight * (sample - beta_);
}

absl::Status EngineDecodeRunner::decode(std::span<const int32_t> tokens, KvCache& kv, std::vector<float>* logits) {
  if (tokens.size() == 1) return engine_.decode_step(tokens[0], kv, logits);
  std::vector<Engine::DecodeRow> rows;
  rows.reserve(tokens.size());
  for (int32_t t : tokens) rows.push_back({t, &kv});
  logits->resize(tokens.size() * static_cast<size_t>(engine_.model().spec().n_vocab));
  return engine_.decode_rows(rows, logits->data());
}

absl::Status EngineDecodeRunner::prefill(std::span<const int32_t> tokens, KvCache& kv,
                                         std::vector<float>* last_logits) {
  return engine_.prefill(tokens, kv, last_logits);
}

DecodeStepper::DecodeStepper(Engine& engine, KvCache& kv, int max_draft, const PromptLookupOptions& lookup,
                             bool adaptive)
    : own_runner_(std::make_unique<EngineDecodeRunner>(engine)),
      runner_(*own_runner_),
      kv_(kv),
      lookup_(lookup),
      controller_(std::min(max_draft, engine.max_batch_tokens() - 1), adaptive),
      n_vocab_(engine.model().spec().n_vocab) {}

DecodeStepper::DecodeStepper(DecodeRunner& runner, const Engine& engine, KvCache& kv, int max_draft,
                             const PromptLookupOptions& lookup, bool adaptive)
    : runner_(runner),
      kv_(kv),
      lookup_(lookup),
      controller_(std::min(max_draft, engine.max_batch_tokens() - 1), adaptive),
      n_vocab_(engine.model().spec().n_vocab) {}

std::span<const float> DecodeStepper::logits() const {
  return std::span<const float>(logits_).subspan(static_cast<size_t>(row_ * n_vocab_), static_cast<size_t>(n_vocab_));
}

absl::Status DecodeStepper::start(std::span<const int32_t> tokens, std::span<const int32_t> history,
                                  int64_t tokens_left) {
  if (tokens.empty()) return absl::InvalidArgumentError("DecodeStepper::start needs a token");
  if (tokens.size() == 1) return run(tokens[0], history, tokens_left);
  // Several tokens (the early tokens shown): one prefill, no draft.
  BATON_RETURN_IF_ERROR(runner_.prefill(tokens, kv_, &logits_));
  base_ = kv_.size() - 1;
  rows_.assign(1, tokens.back());
  row_ = 0;
  return absl::OkStatus();
}

absl::Status DecodeStepper::advance(int32_t token, std::span<const int32_t> history, int64_t tokens_left) {
  const int64_t next = row_ + 1;
  const int64_t drafted = static_cast<int64_t>(rows_.size()) - 1;
  if (next < static_cast<int64_t>(rows_.size()) && rows_[static_cast<size_t>(next)] == token) {
    row_ = next;  // the draft guessed it: its row's logits are already there
    ++stats_.accepted_tokens;
    return absl::OkStatus();
  }
  // A mismatch, or every row used: the verification's outcome is known.
  if (drafted > 0) controller_.record_verify(static_cast<int>(drafted), static_cast<int>(row_));
  kv_.set_size(base_ + row_ + 1);  // rows past the current one never happened
  return run(token, history, tokens_left);
}

void DecodeStepper::finish() {
  if (!rows_.empty()) kv_.set_size(base_ + row_ + 1);
  rows_.clear();
  row_ = 0;
}

absl::Status DecodeStepper::run(int32_t token, std::span<const int32_t> history, int64_t tokens_left) {
  base_ = kv_.size();
  int64_t k = controller_.choose();
  // No row past the cache, nor a row whose logits the caller cannot use
  // (the last token it keeps is sampled from the row before it).
  k = std::min({k, kv_.capacity() - base_ - 1, std::max<int64_t>(0, tokens_left - 1)});
  rows_.assign(1, token);
  const auto begin = std::chrono::steady_clock::now();
  if (k > 0) {
    // Prompt lookup first (free); the draft model where it finds nothing.
    std::vector<int32_t> draft = prompt_lookup_draft(history, static_cast<int>(k), lookup_);
    if (draft.empty() && drafter_ != nullptr) {
      absl::StatusOr<std::vector<int32_t>> guessed = drafter_->draft(history, static_cast<int>(k));
      if (!guessed.ok()) {
        rows_.clear();
        return guessed.status();
      }
      draft = std::move(*guessed);
      if (std::ssize(draft) > k) draft.resize(static_cast<size_t>(k));
    }
    rows_.insert(rows_.end(), draft.begin(), draft.end());
  }
  row_ = 0;
  if (absl::Status status = runner_.decode(rows_, kv_, &logits_); !status.ok()) {
    rows_.clear();
    return status;
  }
  if (rows_.size() == 1) {
    ++stats_.plain_steps;
  } else {
    ++stats_.verifies;
    stats_.drafted_tokens += rows_.size() - 1;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  controller_.record_time(static_cast<int>(rows_.size()), seconds);
  return absl::OkStatus();
}

}  // namespace baton
