// The wire codec of a request under `--codec auto` (DESIGN.md "KV codec":
// the edge picks the codec per request from the measured link and a quality
// floor). A pure decision, unit-tested without servers:
//   candidates = the calibration's quality table (kv_calibration.h: per codec,
//                wire bytes / F16, perplexity change, mean KL measured on
//                held-out text) less the codecs above the loss floor
//                (ppl_delta_pct > max_loss_pct) and those this request cannot
//                use (the caller says why: no calibration for tc, another
//                store than a continuing session's, a context that does not
//                fit the codec's store);
//   per candidate, decide_split with its wire bytes per token
//                (F16 bytes per token x the table's ratio);
//   the choice   = the candidate of the smallest predicted time to first
//                token (predicted_ttft_ms), or among the cloud plans within
//                kEqualTimeFraction of it the one of the least loss (mean KL,
//                then perplexity): on a fast link the bytes cost little and
//                a larger codec buys quality, on a slow one the smallest
//                codec within the floor wins. When no candidate is worth a
//                cloud call (every plan local, or nothing to prefill) the
//                codec only sets the store: the fallback (the agent's
//                previous default) when it qualifies, else the least loss.
// Without a table (no calibration anywhere, a format 1 file) or without any
// candidate, the fallback; the reason says why. The reason names the chosen
// codec with its predicted time and bytes, the runners-up with theirs and
// the codecs excluded.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/kv_codec/kv_calibration.h"
#include "common/kv_codec/kv_codec_config.h"
#include "edge_decode/plan/split_policy.h"

namespace baton {

// --max-kv-loss's default: perplexity within +1% of the F16 handoff.
inline constexpr double kDefaultMaxKvLossPct = 1.0;
// Cloud plans this much slower than the fastest count as equally fast.
inline constexpr double kEqualTimeFraction = 0.05;

struct CodecChoiceInputs {
  std::vector<KvCodecQuality> table;  // the calibration's quality table; empty: none
  std::string no_table_why;           // why there is none, for the reason
  double max_loss_pct = kDefaultMaxKvLossPct;
  double f16_bytes_per_token = 0;     // 2 bytes x K/V elements per token (all layers)
  KvCodecConfig fallback;             // without a table or a candidate
  // OK when this request can use `codec`; else why not (for the reason).
  std::function<absl::Status(const KvCodecConfig& codec)> usable;
  // The request's split inputs with `codec` on the wire; choose_codec
  // replaces wire_bytes_per_token with the table's figure.
  std::function<SplitInputs(const KvCodecConfig& codec)> split_inputs;
};

struct CodecChoice {
  KvCodecConfig codec;
  bool from_table = false;          // false: the fallback
  double wire_bytes_per_token = 0;  // the table's figure for `codec`; 0 with the fallback
  double predicted_ms = 0;          // predicted_ttft_ms of its plan; 0 with the fallback
  std::string reason;               // "codec auto: ..."
};

CodecChoice choose_codec(const CodecChoiceInputs& inputs);

// What a plan predicts for the time to first token's prefill part: the
// cloud's estimate when it goes to the cloud, the local one when local, 0
// when nothing is prefilled. The one place that reads a plan's estimates.
double predicted_ttft_ms(const SplitPlan& plan);

}  // namespace baton
