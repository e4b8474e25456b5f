#include "edge_decode/plan/split_policy.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/util/format_bytes.h"

namespace baton {
namespace {

std::string seconds_text(double ms) {
  if (ms < 1000.0) return absl::StrFormat("%.0f ms", ms);
  return absl::StrFormat("%.1f s", ms / 1000.0);
}

double or_assumed(double measured, double assumed) { return measured > 0 ? measured : assumed; }

}  // namespace

const char* prefill_place_name(v1::PrefillPlace place) {
  switch (place) {
    case v1::PREFILL_PLACE_LOCAL: return "local";
    case v1::PREFILL_PLACE_CLOUD: return "cloud";
    case v1::PREFILL_PLACE_REUSED: return "reused";
    case v1::PREFILL_PLACE_OVERLAP: return "overlap";
    default: return "unknown";
  }
}

const char* prefill_policy_name(PrefillPolicy policy) {
  switch (policy) {
    case PrefillPolicy::kAuto:
      return "auto";
    case PrefillPolicy::kLocal:
      return "local";
    case PrefillPolicy::kCloud:
      return "cloud";
  }
  return "auto";
}

absl::StatusOr<PrefillPolicy> parse_prefill_policy(const std::string& name) {
  if (name == "auto") return PrefillPolicy::kAuto;
  if (name == "local") return PrefillPolicy::kLocal;
  if (name == "cloud") return PrefillPolicy::kCloud;
  return absl::InvalidArgumentError(absl::StrCat("policy '", name, "' is not one of auto, local, cloud"));
}

PrefillPolicy prefill_policy_from_proto(v1::SplitPolicy policy, PrefillPolicy fallback) {
  switch (policy) {
    case v1::SPLIT_POLICY_AUTO:
      return PrefillPolicy::kAuto;
    case v1::SPLIT_POLICY_LOCAL:
      return PrefillPolicy::kLocal;
    case v1::SPLIT_POLICY_CLOUD:
      return PrefillPolicy::kCloud;
    default:
      return fallback;
  }
}

namespace {

// The figures of both lines, for the plans and their reasons.
struct SplitLines {
  double tokens = 0;              // positions [have, n-1)
  double local_extra_tokens = 0;  // what local prefill recomputes first
  double local_tps = 0;
  double call_ms = 0, compute_ms = 0, transfer_ms_per_token = 0;
  double local_ms(double x) const { return x <= 0 ? 0 : (local_extra_tokens + x) / local_tps * 1000.0; }
  double cloud_ms(double x) const { return x >= tokens ? 0 : call_ms + compute_ms + (tokens - x) * transfer_ms_per_token; }
  double overlap_ms(double x) const { return std::max(local_ms(x), cloud_ms(x)); }
};

// The best split x in [1, tokens - 1] by the crossing rounded both ways;
// nullopt when there is none (fewer than 2 tokens).
std::optional<uint32_t> best_overlap(const SplitLines& lines) {
  const uint32_t tokens = static_cast<uint32_t>(lines.tokens);
  if (tokens < 2) return std::nullopt;
  const double crossing = overlap_split_tokens(1000.0 / lines.local_tps, lines.local_extra_tokens,
                                               lines.cloud_ms(0), lines.transfer_ms_per_token);
  const double clamped = std::clamp(crossing, 1.0, static_cast<double>(tokens - 1));
  const uint32_t below = static_cast<uint32_t>(std::floor(clamped));
  const uint32_t above = std::min(below + 1, tokens - 1);
  return lines.overlap_ms(above) < lines.overlap_ms(below) ? above : below;
}

std::string overlap_text(const SplitPlan& plan, const SplitLines& lines) {
  const uint32_t a = plan.overlap_split_position;
  return absl::StrFormat(
      "split at %d: the edge prefills [%d, %d) in %s while the cloud streams [%d, %d) in %s (%s on the link)", a,
      plan.reused_tokens, a, seconds_text(plan.estimated_overlap_local_ms), a, plan.reused_tokens + plan.prefill_tokens,
      seconds_text(plan.estimated_overlap_cloud_ms),
      seconds_text((lines.tokens - (a - plan.reused_tokens)) * lines.transfer_ms_per_token));
}

// Fills the plan's place and estimate for a split x (0: cloud, tokens: local).
void place_at(SplitPlan& plan, uint32_t x) {
  plan.split_position = plan.reused_tokens + x;
  if (x == 0) {
    plan.place = v1::PREFILL_PLACE_CLOUD;
    plan.estimated_ms = plan.estimated_cloud_ms;
  } else if (x >= plan.prefill_tokens) {
    plan.place = v1::PREFILL_PLACE_LOCAL;
    plan.estimated_ms = plan.estimated_local_ms;
  } else {
    plan.place = v1::PREFILL_PLACE_OVERLAP;
    plan.estimated_ms = std::max(plan.estimated_overlap_local_ms, plan.estimated_overlap_cloud_ms);
  }
}

// Policy auto with a usable cloud: the smallest predicted time, the overlap
// only with kMinOverlapGain over the better pure plan.
void choose_auto(SplitPlan& plan, const std::string& local_text, const std::string& cloud_text,
                 const std::string& overlap) {
  const bool cloud_wins = plan.estimated_cloud_ms < plan.estimated_local_ms;
  const double pure_ms = std::min(plan.estimated_cloud_ms, plan.estimated_local_ms);
  const double overlap_ms = std::max(plan.estimated_overlap_local_ms, plan.estimated_overlap_cloud_ms);
  if (plan.overlap_split_position > 0 && overlap_ms < (1.0 - kMinOverlapGain) * pure_ms) {
    place_at(plan, plan.overlap_split_position - plan.reused_tokens);
    plan.reason = absl::StrFormat("overlap: %s est. (%s) vs the better single place %s by %.0f%%; %s vs %s",
                                  seconds_text(overlap_ms), overlap, cloud_wins ? "cloud" : "local",
                                  100.0 * (1.0 - overlap_ms / pure_ms), cloud_text, local_text);
    return;
  }
  const std::string why_not =
      plan.overlap_split_position == 0
          ? std::string()
          : absl::StrFormat("; no overlap: %s est. (%s) is not %.0f%% under %s", seconds_text(overlap_ms), overlap,
                            kMinOverlapGain * 100, seconds_text(pure_ms));
  place_at(plan, cloud_wins ? 0 : plan.prefill_tokens);
  plan.reason = cloud_wins ? absl::StrCat("cloud: ", cloud_text, " vs ", local_text, why_not)
                           : absl::StrCat("local: ", local_text, " vs ", cloud_text, why_not);
}

// GenerateRequest.split_position: the plan at that split, whatever the lines say.
void force_split(SplitPlan& plan, const SplitLines& lines, uint32_t position, const std::string& local_text,
                 const std::string& cloud_text) {
  const uint32_t x = std::min(position - std::min(position, plan.reused_tokens), plan.prefill_tokens);
  if (x > 0 && x < plan.prefill_tokens) {
    plan.overlap_split_position = plan.reused_tokens + x;
    plan.estimated_overlap_local_ms = lines.local_ms(x);
    plan.estimated_overlap_cloud_ms = lines.cloud_ms(x);
  }
  place_at(plan, x);
  const std::string at =
      plan.place == v1::PREFILL_PLACE_OVERLAP ? overlap_text(plan, lines)
                                              : (plan.place == v1::PREFILL_PLACE_CLOUD ? cloud_text : local_text);
  plan.reason = absl::StrFormat("%s: forced by the request's split_position %d; %s est. (%s); %s; %s",
                                prefill_place_name(plan.place), plan.split_position, seconds_text(plan.estimated_ms),
                                at, cloud_text, local_text);
}

}  // namespace

double overlap_split_tokens(double local_ms_per_token, double local_extra_tokens, double cloud_ms_at_zero,
                            double transfer_ms_per_token) {
  return (cloud_ms_at_zero - local_ms_per_token * local_extra_tokens) / (local_ms_per_token + transfer_ms_per_token);
}

SplitPlan decide_split(const SplitInputs& in) {
  SplitPlan plan;
  plan.reused_tokens = in.reused_tokens;
  plan.prefill_tokens = in.prefill_tokens;
  plan.split_position = in.reused_tokens;
  if (in.prefill_tokens == 0) {
    plan.place = v1::PREFILL_PLACE_REUSED;
    plan.reason = absl::StrFormat("reused: %d tokens already held, nothing to prefill", in.reused_tokens);
    return plan;
  }
  SplitLines lines;
  lines.tokens = static_cast<double>(in.prefill_tokens);
  const uint32_t local_tokens = std::max(in.local_prefill_tokens, in.prefill_tokens);
  lines.local_extra_tokens = static_cast<double>(local_tokens - in.prefill_tokens);
  lines.local_tps = or_assumed(in.local_prefill_tokens_per_s, kAssumedLocalPrefillTokensPerS);
  plan.estimated_local_ms = lines.local_ms(lines.tokens);
  const std::string local_text = absl::StrFormat(
      "local %s (%d tokens at %.0f tok/s%s)", seconds_text(plan.estimated_local_ms), local_tokens, lines.local_tps,
      in.local_prefill_tokens_per_s > 0 ? "" : ", assumed");
  if (in.policy == PrefillPolicy::kLocal) {
    place_at(plan, in.prefill_tokens);
    plan.reason = absl::StrCat("local: policy local (the prompt never leaves the device); ", local_text);
    return plan;
  }
  if (!in.cloud_configured) {
    place_at(plan, in.prefill_tokens);
    plan.reason = absl::StrCat("local: no cloud configured; ", local_text);
    return plan;
  }
  const double cloud_tps = or_assumed(in.cloud_prefill_tokens_per_s, kAssumedCloudPrefillTokensPerS);
  const double bandwidth = or_assumed(in.link_bytes_per_s, kAssumedLinkBytesPerS);
  const double rtt_ms = or_assumed(in.link_rtt_ms, kAssumedLinkRttMs);
  lines.call_ms = in.cloud_call_overhead_ms > 0 ? in.cloud_call_overhead_ms : rtt_ms + kAssumedCloudCallSetupMs;
  const double wire_bytes = lines.tokens * in.wire_bytes_per_token;
  lines.compute_ms = lines.tokens / cloud_tps * 1000.0;
  lines.transfer_ms_per_token = in.wire_bytes_per_token / bandwidth * 1000.0;
  plan.estimated_cloud_ms = lines.cloud_ms(0);
  if (const std::optional<uint32_t> x = best_overlap(lines)) {
    plan.overlap_split_position = in.reused_tokens + *x;
    plan.estimated_overlap_local_ms = lines.local_ms(*x);
    plan.estimated_overlap_cloud_ms = lines.cloud_ms(*x);
  }
  auto assumed = [](double measured) { return measured > 0 ? "" : ", assumed"; };
  const std::string call_text =
      in.cloud_call_overhead_ms > 0
          ? absl::StrFormat("per-call cost %.0f ms, measured", lines.call_ms)
          : absl::StrFormat("per-call cost %.0f ms = RTT %.0f ms%s + set-up %.0f ms, assumed", lines.call_ms, rtt_ms,
                            in.link_rtt_ms > 0 ? "" : " (assumed)", kAssumedCloudCallSetupMs);
  const std::string cloud_text = absl::StrFormat(
      "cloud %s est. (%s; %d tokens at %.0f tok/s%s; %s at %s%s)", seconds_text(plan.estimated_cloud_ms), call_text,
      in.prefill_tokens, cloud_tps, assumed(in.cloud_prefill_tokens_per_s),
      format_bytes(static_cast<uint64_t>(wire_bytes)), format_rate(bandwidth), assumed(in.link_bytes_per_s));
  const std::string overlap = plan.overlap_split_position > 0 ? overlap_text(plan, lines) : std::string();
  if (in.policy == PrefillPolicy::kCloud && !in.forced_split_position) {
    place_at(plan, 0);
    plan.reason = absl::StrCat("cloud: policy cloud; ", cloud_text, " vs ", local_text);
    return plan;
  }
  if (!in.cloud_reachable && in.policy != PrefillPolicy::kCloud) {
    place_at(plan, in.prefill_tokens);
    plan.reason = absl::StrCat("local: the cloud is ",
                               in.cloud_unusable_why.empty() ? "unreachable or not ready" : in.cloud_unusable_why,
                               "; ", local_text);
    return plan;
  }
  if (in.forced_split_position) {
    force_split(plan, lines, *in.forced_split_position, local_text, cloud_text);
    return plan;
  }
  choose_auto(plan, local_text, cloud_text, overlap);
  return plan;
}

void to_proto(const SplitPlan& plan, v1::Plan* out) {
  out->set_place(plan.place);
  out->set_reason(plan.reason);
  out->set_reused_tokens(plan.reused_tokens);
  out->set_prefill_tokens(plan.prefill_tokens);
  out->set_estimated_local_ms(plan.estimated_local_ms);
  out->set_estimated_cloud_ms(plan.estimated_cloud_ms);
  if (plan.place != v1::PREFILL_PLACE_REUSED) {
    out->set_split_position(plan.split_position);
    out->set_local_tokens(plan.local_tokens());
    out->set_cloud_tokens(plan.cloud_tokens());
  }
  out->set_estimated_ms(plan.estimated_ms);
  out->set_estimated_overlap_local_ms(plan.estimated_overlap_local_ms);
  out->set_estimated_overlap_cloud_ms(plan.estimated_overlap_cloud_ms);
}

void MovingAverage::add(double sample) {
  std::lock_guard<std::mutex> lock(mu_);
  value_ = samples_ == 0 ? sample : alpha_ * sample + (1.0 - alpha_) * value_;
  ++samples_;
}

double MovingAverage::value() const {
  std::lock_guard<std::mutex> lock(mu_);
  return value_;
}

int MovingAverage::samples() const {
  std::lock_guard<std::mutex> lock(mu_);
  return samples_;
}

}  // namespace baton
