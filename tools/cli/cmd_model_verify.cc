// baton model verify: does Baton run this GGUF correctly? The fast engine
// (batched prefill, then one-token decode steps, on the stored weight types
// with 8-bit activations) against the golden ReferenceEngine (weights
// dequantized to f32, f32 activations, double accumulation) on the same
// tokens, every position compared.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "absl/strings/str_format.h"
#include "commands.h"
#include "common/engine/engine.h"
#include "common/engine/reference_engine.h"
#include "common/model/model.h"
#include "common/util/check.h"
#include "common/util/flags.h"
#include "report.h"

namespace baton::cli {
namespace {

struct Agreement {
  double max_abs_diff = 0;  // over every logit of every position
  double max_abs_logit = 0; // of the reference
  int64_t top1_same = 0;    // positions whose argmax agrees
  int64_t positions = 0;
  bool finite = true;
};

int argmax(const float* x, int n) { return static_cast<int>(std::max_element(x, x + n) - x); }

void compare_row(const float* fast, const std::vector<float>& ref, Agreement& a) {
  const int n = static_cast<int>(ref.size());
  for (int i = 0; i < n; ++i) {
    if (!std::isfinite(fast[i]) || !std::isfinite(ref[i])) a.finite = false;
    a.max_abs_diff = std::max(a.max_abs_diff, std::fabs(static_cast<double>(fast[i]) - ref[i]));
    a.max_abs_logit = std::max(a.max_abs_logit, std::fabs(static_cast<double>(ref[i])));
  }
  a.top1_same += argmax(fast, n) == argmax(ref.data(), n) ? 1 : 0;
  ++a.positions;
}

// The fast engine's logits at every position ([tokens, n_vocab]): a batched
// prefill of the first `n_prefill` tokens, then one decode step per token.
absl::StatusOr<std::vector<float>> fast_engine_logits(const Model& model, const std::vector<int32_t>& tokens,
                                                      int64_t n_prefill, int64_t threads) {
  Engine engine(model, EngineOptions{static_cast<int>(threads), 64});
  const int64_t n_tokens = static_cast<int64_t>(tokens.size());
  std::unique_ptr<KvCache> kv = engine.new_f32_kv_cache(n_tokens);
  std::vector<float> logits;
  std::vector<float> last;
  BATON_RETURN_IF_ERROR(engine.prefill(std::span<const int32_t>(tokens.data(), n_prefill), *kv, &last, &logits));
  for (int64_t i = n_prefill; i < n_tokens; ++i) {
    BATON_RETURN_IF_ERROR(engine.decode_step(tokens[i], *kv, &last));
    logits.insert(logits.end(), last.begin(), last.end());
  }
  return logits;
}

}  // namespace

absl::Status model_verify(const Args& args) {
  int64_t n_tokens = 16, n_prefill = -1, seed = 1, threads = 0;
  double max_rel_error = 0.05;
  bool json = false;
  FlagSet flags("baton model verify", "FILE [--tokens N] [--prefill N] [--max-rel-error X] [--json]",
                "Runs seeded random tokens through the fast engine (a batched prefill of the first "
                "--prefill tokens, then one decode step per token) and through the golden reference "
                "engine (f32 weights, f32 activations, double sums), and compares the logits at every "
                "position: max |difference|, relative to the largest |logit|, and argmax agreement. "
                "Exit status 1 when the relative error is above --max-rel-error or a logit is not finite.");
  flags.add_int64("tokens", &n_tokens, "tokens to run (1..4096)");
  flags.add_int64("prefill", &n_prefill, "of those, tokens in the batched prefill (default: half)");
  flags.add_int64("seed", &seed, "random seed of the tokens");
  flags.add_int64("threads", &threads, "engine threads (0: all)");
  flags.add_double("max-rel-error", &max_rel_error, "largest accepted max|diff| / max|logit|");
  flags.add_bool("json", &json, "one JSON object instead of the table");
  if (std::optional<absl::Status> done = parse_flags(flags, args)) return *done;
  if (flags.positional().size() != 1) {
    return exit_status(2, "baton model verify: expected one FILE\n");
  }
  if (n_tokens < 1 || n_tokens > 4096) {
    return absl::InvalidArgumentError(absl::StrFormat("--tokens %d is outside 1..4096", n_tokens));
  }
  if (n_prefill < 0) n_prefill = std::max<int64_t>(1, n_tokens / 2);
  if (n_prefill < 1 || n_prefill > n_tokens) {
    return absl::InvalidArgumentError(absl::StrFormat("--prefill %d is outside 1..%d (--tokens)", n_prefill, n_tokens));
  }
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(flags.positional()[0]));
  const ModelSpec& s = model->spec();
  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  std::vector<int32_t> tokens(n_tokens);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(s.n_vocab));
  BATON_ASSIGN_OR_RETURN(std::vector<float> fast_logits, fast_engine_logits(*model, tokens, n_prefill, threads));
  ReferenceEngine reference(*model);
  Agreement a;
  for (int64_t i = 0; i < n_tokens; ++i) {
    compare_row(fast_logits.data() + i * s.n_vocab, reference.forward(tokens[i]), a);
  }
  const double rel = a.max_abs_logit > 0 ? a.max_abs_diff / a.max_abs_logit : a.max_abs_diff;
  Report r("model verify " + flags.positional()[0]);
  r.add_text("architecture", "architecture", s.arch);
  r.add_int("tokens", "tokens (prefill + decode)", n_tokens);
  r.add_int("prefill_tokens", "in the batched prefill", n_prefill);
  r.add("max_abs_diff", "max |logit difference|", a.max_abs_diff, "", 6);
  r.add("max_abs_logit", "max |logit| (reference)", a.max_abs_logit, "", 4);
  r.add("max_rel_error", "relative (diff / max |logit|)", rel, "", 6);
  r.add_int("top1_agree", "positions with the same argmax", a.top1_same);
  r.add_text("finite", "all logits finite", a.finite ? "yes" : "no");
  const bool ok = a.finite && rel <= max_rel_error;
  r.add_text("verdict", "verdict", ok ? "ok" : absl::StrFormat("FAIL (limit %g)", max_rel_error));
  r.print(json);
  return ok ? absl::OkStatus() : exit_status(1);  // the verdict row says why
}

}  // namespace baton::cli
