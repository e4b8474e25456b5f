// Speculative decoding with prompt-lookup drafts: tokens beyond the
// bandwidth wall on a CPU edge.
//
// A decode step reads every weight once for one token. When the reply
// copies from its context (a quoted document, code being edited, a
// transcript), the next tokens can be guessed from the context itself: the
// most recent earlier occurrence of the last few tokens (PromptLookup)
// proposes what followed it. DecodeStepper runs the pending token and the
// draft as one Engine::decode_rows call, one pass over the weights, and
// hands the caller the logits row by row; a draft token is taken only when
// the token the caller samples from the previous row equals it, and the KV
// of rows past the first mismatch is rolled back.
//
// Why the output cannot change: each row's logits are bit-identical to a
// decode step's (decode_rows), the caller's sampler draws exactly once per
// token it keeps, as plain decoding does, and a rejected draft token never
// reaches the sampler. So greedy output is token-identical, and seeded
// sampling is sample-identical for the same seed, which implies the standard
// speculative-sampling guarantee: with a point-mass draft q, "accept d with
// probability min(1, p(d)/q(d)) = p(d), else sample from p with d removed"
// is exactly "sample x ~ p, accept iff x == d".
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/engine/engine.h"
#include "common/kv_cache/kv_cache.h"

namespace baton {

// Bounds of GenerateRequest.speculative / --speculative, and the default.
inline constexpr uint32_t kMaxSpeculativeTokens = 16;
inline constexpr uint32_t kDefaultSpeculativeTokens = 8;

// Drafts by n-gram lookup in the token history (prompt and reply so far):
// for n from max_ngram down to min_ngram, the most recent earlier position
// where the history's last n tokens occur, and the tokens that followed it.
struct PromptLookupOptions {
  int min_ngram = 2;
  int max_ngram = 4;
  // Positions searched back from the end (0: the whole history). Bounds the
  // cost of a draft on very long contexts: 4096 * max_ngram comparisons.
  int64_t max_search = 4096;
};

// Up to `max_tokens` tokens continuing `history`; empty when no n-gram of
// the end occurs earlier.
std::vector<int32_t> prompt_lookup_draft(std::span<const int32_t> history, int max_tokens,
                                         const PromptLookupOptions& options = {});

// Where draft tokens come from when not from prompt lookup (a draft model:
// draft_model.h). A draft is only a guess: the verification keeps the
// output the target model's own, whatever a Drafter proposes.
class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to max_tokens tokens that may follow `history` (every token so far;
  // the last one is the pending token the target runs next). Empty: no
  // draft this step.
  virtual absl::StatusOr<std::vector<int32_t>> draft(std::span<const int32_t> history, int max_tokens) = 0;
};

// How many tokens to draft, from the running acceptance rate and the cost of
// a verification relative to a decode step, both measured as it runs.
// Draft tokens are taken in order until the first rejection; with each taken
// with probability a, verifying k of them yields E(k) = 1 + a + ... + a^k
// tokens for a cost of C(k + 1) decode steps; choose() returns the k in
// [0, max_draft] that maximizes E(k) / C(k + 1). k = 0 (plain decode)
// when no draft pays, with a probe every kProbeInterval steps so a reply
// that starts copying later switches speculation back on.
//
// C(rows) is measured per row count, not assumed linear: the weights kernel
// takes a few tokens per pass over a strip and then starts another, and past
// ~4 rows a memory-bound model's pass turns compute-bound (measured on the
// 1B shape: 2 / 4 / 8 rows cost 1.08 / 1.34 / 2.30 steps; one slope fitted
// to those drafted 8 tokens where 3 pay ~1.4x more). A row count not yet
// measured is estimated as 1 + beta * (rows - 1), beta fitted to every
// verification, so it is tried when that estimate says it pays, and then
// judged by its own cost.
class DraftController {
 public:
  // adaptive false: always max_draft (tests that exercise every rollback).
  explicit DraftController(int max_draft, bool adaptive = true);

  int max_draft() const { return max_draft_; }
  // Draft length for the next step (0: decode plainly).
  int choose();
  // After a verification of `drafted` tokens of which the first `accepted`
  // were taken.
  void record_verify(int drafted, int accepted);
  // Seconds of a plain step / of a verification of `rows` rows (1 + drafted).
  void record_time(int rows, double seconds);
  double acceptance() const;
  // The fitted cost of one row over a step (beta).
  double row_cost() const { return beta_; }
  // C(rows) in decode steps: measured for that row count, else the fit.
  double pass_cost(int rows) const;

  static constexpr int kProbeInterval = 16;

 private:
  int max_draft_;
  bool adaptive_;
  // Decayed counts of draft tokens taken and of rejections: a = taken /
  // (taken + rejected); a prior of 1 taken and 1 rejected.
  double taken_ = 1.0, rejected_ = 1.0;
  double step_seconds_ = 0;  // moving average of a plain step (0: not measured)
  double beta_ = 0.25;       // cost of one extra row over a step; refined by record_time
  // pass_cost_[rows]: moving average of the measured cost of a pass of that
  // many rows, in steps; 0 = not measured.
  std::vector<double> pass_cost_;
  int plain_steps_ = 0;      // plain steps since the last draft
};

// Where a DecodeStepper's passes run: the Engine itself (EngineDecodeRunner),
// or a scheduler that shares each pass among several sessions (the edge's
// DecodeBatcher seat), so a speculative turn's draft rows join the other
// turns' decode steps.
class DecodeRunner {
 public:
  virtual ~DecodeRunner() = default;
  // One decode step per token at kv.size(), kv.size() + 1, ... as
  // Engine::decode_rows; commits them. logits: resized to [n, n_vocab].
  virtual absl::Status decode(std::span<const int32_t> tokens, KvCache& kv, std::vector<float>* logits) = 0;
  // Engine::prefill of `tokens`; last_logits: [n_vocab].
  virtual absl::Status prefill(std::span<const int32_t> tokens, KvCache& kv, std::vector<float>* last_logits) = 0;
};

// The Engine, one caller at a time.
class EngineDecodeRunner final : public DecodeRunner {
 public:
  explicit EngineDecodeRunner(Engine& engine) : engine_(engine) {}
  absl::Status decode(std::span<const int32_t> tokens, KvCache& kv, std::vector<float>* logits) override;
  absl::Status prefill(std::span<const int32_t> tokens, KvCache& kv, std::vector<float>* last_logits) override;

 private:
  Engine& engine_;
};

struct DecodeStepperStats {
  uint64_t verifies = 0;         // decode_rows calls with a draft
  uint64_t plain_steps = 0;      // decode_step calls
  uint64_t drafted_tokens = 0;   // draft tokens verified
  uint64_t accepted_tokens = 0;  // draft tokens taken
};

// Drives decoding for a caller that samples: logits() is the distribution
// of the next token; the caller samples t from it and calls advance(t,
// history) with history ending in t; finish() leaves the KV holding exactly
// what plain decoding would (every kept token but the last sampled one).
// max_draft 0: plain decode_step, one token per call.
class DecodeStepper {
 public:
  // `kv` holds the context; its size() is where the pending token goes.
  // adaptive: as DraftController's. The passes run on `engine`.
  DecodeStepper(Engine& engine, KvCache& kv, int max_draft, const PromptLookupOptions& lookup = {},
                bool adaptive = true);
  // The passes run through `runner` (which must outlive the stepper);
  // `engine` gives the vocabulary and the most rows of a pass.
  DecodeStepper(DecodeRunner& runner, const Engine& engine, KvCache& kv, int max_draft,
                const PromptLookupOptions& lookup = {}, bool adaptive = true);

  // Runs `tokens` (not yet in the KV) into the KV: the first call of a
  // decode (the last prompt token; with tokens shown before decoding
  // started, those too, as one prefill without a draft). history: every
  // token so far, ending in `tokens`.
  // tokens_left: as advance()'s.
  absl::Status start(std::span<const int32_t> tokens, std::span<const int32_t> history,
                     int64_t tokens_left = std::numeric_limits<int64_t>::max());
  // Logits of the next token, [n_vocab]: valid until the next call.
  std::span<const float> logits() const;
  // The caller sampled `token` from logits() and keeps it (history ends in
  // it): a matching draft row moves on without compute; otherwise the rows
  // past this point are rolled back and `token` runs with a new draft.
  // tokens_left: the most tokens the caller may still keep after `token`
  // (no draft past them).
  absl::Status advance(int32_t token, std::span<const int32_t> history,
                       int64_t tokens_left = std::numeric_limits<int64_t>::max());
  // The decode ends after a token sampled from logits() (not run): rolls
  // back the draft rows past the current one.
  void finish();

  const DecodeStepperStats& stats() const { return stats_; }
  const DraftController& controller() const { return controller_; }
  // Drafts from `drafter` (which must outlive the stepper) where prompt
  // lookup finds nothing; null: prompt lookup alone. A pass's measured cost
  // (the controller's C) then includes the drafting.
  void set_drafter(Drafter* drafter) { drafter_ = drafter; }

 private:
  // Runs `token` and a draft continuing `history` as rows from kv.size().
  absl::Status run(int32_t token, std::span<const int32_t> history, int64_t tokens_left);

  std::unique_ptr<DecodeRunner> own_runner_;  // the Engine constructor's
  DecodeRunner& runner_;
  KvCache& kv_;
  PromptLookupOptions lookup_;
  Drafter* drafter_ = nullptr;
  DraftController controller_;
  int64_t n_vocab_;
  int64_t base_ = 0;             // kv size before the rows of the last run
  std::vector<int32_t> rows_;    // tokens of the last run: [pending, draft...]
  int64_t row_ = 0;              // the row whose logits are current
  std::vector<float> logits_;    // [rows, n_vocab]
  DecodeStepperStats stats_;
};

}  // namespace baton
