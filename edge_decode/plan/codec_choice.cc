#include "edge_decode/plan/codec_choice.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/util/format_bytes.h"

namespace baton {
namespace {

// Runners-up the reason names; the rest are counted.
constexpr size_t kNamedRunnersUp = 3;

// Less loss (mean KL, the steadier figure; then the perplexity change).
bool less_loss(const KvCodecQuality& a, const KvCodecQuality& b) {
  if (a.mean_kl != b.mean_kl) return a.mean_kl < b.mean_kl;
  return a.ppl_delta_pct < b.ppl_delta_pct;
}

struct Candidate {
  KvCodecConfig codec;
  const KvCodecQuality* row = nullptr;
  double wire_bytes_per_token = 0;
  SplitPlan plan;
  double predicted_ms = 0;
};

// Whether the plan streams KV from the cloud (all of it, or the back part of
// an overlapped plan).
bool sends_kv(const SplitPlan& plan) {
  return plan.place == v1::PREFILL_PLACE_CLOUD || plan.place == v1::PREFILL_PLACE_OVERLAP;
}

// "tc-b2 (cloud 412 ms est., 1.2 MiB, ppl +0.03%)"; a plan that sends
// nothing: "int4-... (local 150 ms est., ppl +0.31%)".
std::string describe(const Candidate& c) {
  if (!sends_kv(c.plan)) {
    return absl::StrFormat("%s (%s %.0f ms est., ppl %+.2f%%)", c.row->codec, prefill_place_name(c.plan.place),
                           c.predicted_ms, c.row->ppl_delta_pct);
  }
  return absl::StrFormat("%s (%s %.0f ms est., %s, ppl %+.2f%%)", c.row->codec, prefill_place_name(c.plan.place),
                         c.predicted_ms, format_bytes(static_cast<uint64_t>(c.wire_bytes_per_token * c.plan.cloud_tokens())),
                         c.row->ppl_delta_pct);
}

// The table's rows split into candidates (with their plans) and the reasons
// of the others.
struct Sorted {
  std::vector<Candidate> candidates;  // by predicted time, then loss
  std::vector<std::string> over_floor, unusable;
};

Sorted sort_table(const CodecChoiceInputs& in) {
  Sorted out;
  for (const KvCodecQuality& row : in.table) {
    absl::StatusOr<KvCodecConfig> codec = parse_kv_codec_config(row.codec);
    if (!codec.ok()) {
      out.unusable.push_back(absl::StrCat(row.codec, " (", codec.status().message(), ")"));
      continue;
    }
    if (row.ppl_delta_pct > in.max_loss_pct) {
      out.over_floor.push_back(absl::StrFormat("%s (%+.2f%%)", row.codec, row.ppl_delta_pct));
      continue;
    }
    if (absl::Status usable = in.usable ? in.usable(*codec) : absl::OkStatus(); !usable.ok()) {
      out.unusable.push_back(absl::StrCat(row.codec, " (", usable.message(), ")"));
      continue;
    }
    Candidate c;
    c.codec = *codec;
    c.row = &row;
    c.wire_bytes_per_token = in.f16_bytes_per_token * row.wire_ratio;
    SplitInputs split = in.split_inputs(*codec);
    split.wire_bytes_per_token = c.wire_bytes_per_token;
    c.plan = decide_split(split);
    c.predicted_ms = predicted_ttft_ms(c.plan);
    out.candidates.push_back(std::move(c));
  }
  std::stable_sort(out.candidates.begin(), out.candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.predicted_ms != b.predicted_ms) return a.predicted_ms < b.predicted_ms;
    return less_loss(*a.row, *b.row);
  });
  return out;
}

// The candidate taken. When the fastest plan goes to the cloud: the least
// loss among the cloud plans within kEqualTimeFraction of the fastest (so a
// fast link, where bytes cost little, buys quality). Else the codec only
// sets the store: the fallback when it qualifies, else the least loss.
size_t pick_candidate(const std::vector<Candidate>& candidates, const KvCodecConfig& fallback) {
  size_t best = 0;
  if (sends_kv(candidates.front().plan)) {
    const double limit = candidates.front().predicted_ms * (1.0 + kEqualTimeFraction);
    for (size_t i = 1; i < candidates.size(); ++i) {
      const Candidate& c = candidates[i];
      const bool equally_fast = sends_kv(c.plan) && c.predicted_ms <= limit;
      if (equally_fast && less_loss(*c.row, *candidates[best].row)) {
        best = i;
      }
    }
    return best;
  }
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i].codec == fallback) return i;
  }
  for (size_t i = 1; i < candidates.size(); ++i) {
    if (less_loss(*candidates[i].row, *candidates[best].row)) best = i;
  }
  return best;
}

// "; over the loss floor +1%: ...; not usable: ..."
std::string exclusions(const Sorted& sorted, double max_loss_pct) {
  std::string out;
  if (!sorted.over_floor.empty()) {
    absl::StrAppend(&out, absl::StrFormat("; over the loss floor %+.2f%%: ", max_loss_pct),
                    absl::StrJoin(sorted.over_floor, ", "));
  }
  if (!sorted.unusable.empty()) absl::StrAppend(&out, "; not usable: ", absl::StrJoin(sorted.unusable, ", "));
  return out;
}

}  // namespace

double predicted_ttft_ms(const SplitPlan& plan) {
  if (plan.estimated_ms > 0) return plan.estimated_ms;  // the chosen plan's, overlap included
  switch (plan.place) {
    case v1::PREFILL_PLACE_CLOUD: return plan.estimated_cloud_ms;
    case v1::PREFILL_PLACE_LOCAL: return plan.estimated_local_ms;
    default: return 0.0;
  }
}

CodecChoice choose_codec(const CodecChoiceInputs& in) {
  CodecChoice choice;
  choice.codec = in.fallback;
  const std::string fallback_name = in.fallback.to_string();
  if (in.table.empty()) {
    choice.reason = absl::StrCat("codec auto: ", fallback_name, ", the default (no quality table: ",
                                 in.no_table_why.empty() ? "none" : in.no_table_why, ")");
    return choice;
  }
  const Sorted sorted = sort_table(in);
  if (sorted.candidates.empty()) {
    choice.reason = absl::StrCat("codec auto: ", fallback_name, ", the default (no codec of the table qualifies",
                                 exclusions(sorted, in.max_loss_pct), ")");
    return choice;
  }
  const bool cloud_pays = sends_kv(sorted.candidates.front().plan);
  const size_t pick = pick_candidate(sorted.candidates, in.fallback);
  const Candidate& chosen = sorted.candidates[pick];
  choice.codec = chosen.codec;
  choice.from_table = true;
  choice.wire_bytes_per_token = chosen.wire_bytes_per_token;
  choice.predicted_ms = chosen.predicted_ms;
  std::vector<std::string> others;
  for (size_t i = 0; i < sorted.candidates.size() && others.size() < kNamedRunnersUp; ++i) {
    if (i != pick) others.push_back(describe(sorted.candidates[i]));
  }
  const size_t unnamed = sorted.candidates.size() - 1 - others.size();
  choice.reason = absl::StrCat(
      "codec auto: ", describe(chosen),
      !cloud_pays ? " (prefilled here either way: the codec only sets the store)"
      : pick > 0  ? absl::StrFormat(" (within %.0f%% of the fastest, with less loss)", 100 * kEqualTimeFraction)
                  : "",
      others.empty() ? "" : absl::StrCat(" over ", absl::StrJoin(others, ", ")),
      unnamed > 0 ? absl::StrFormat(" and %d more", unnamed) : "", exclusions(sorted, in.max_loss_pct));
  return choice;
}

}  // namespace baton
