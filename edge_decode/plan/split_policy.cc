#include "edge_decode/plan/split_policy.h"

#include <algorithm>

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

SplitPlan decide_split(const SplitInputs& in) {
  SplitPlan plan;
  plan.reused_tokens = in.reused_tokens;
  plan.prefill_tokens = in.prefill_tokens;
  if (in.prefill_tokens == 0) {
    plan.place = v1::PREFILL_PLACE_REUSED;
    plan.reason = absl::StrFormat("reused: %d tokens already held, nothing to prefill", in.reused_tokens);
    return plan;
  }
  const double tokens = static_cast<double>(in.prefill_tokens);
  const uint32_t local_tokens = std::max(in.local_prefill_tokens, in.prefill_tokens);
  const double local_tps = or_assumed(in.local_prefill_tokens_per_s, kAssumedLocalPrefillTokensPerS);
  plan.estimated_local_ms = static_cast<double>(local_tokens) / local_tps * 1000.0;
  const std::string local_text = absl::StrFormat(
      "local %s (%d tokens at %.0f tok/s%s)", seconds_text(plan.estimated_local_ms), local_tokens, local_tps,
      in.local_prefill_tokens_per_s > 0 ? "" : ", assumed");
  if (in.policy == PrefillPolicy::kLocal) {
    plan.place = v1::PREFILL_PLACE_LOCAL;
    plan.reason = absl::StrCat("local: policy local (the prompt never leaves the device); ", local_text);
    return plan;
  }
  if (!in.cloud_configured) {
    plan.place = v1::PREFILL_PLACE_LOCAL;
    plan.reason = absl::StrCat("local: no cloud configured; ", local_text);
    return plan;
  }
  const double cloud_tps = or_assumed(in.cloud_prefill_tokens_per_s, kAssumedCloudPrefillTokensPerS);
  const double bandwidth = or_assumed(in.link_bytes_per_s, kAssumedLinkBytesPerS);
  const double rtt_ms = or_assumed(in.link_rtt_ms, kAssumedLinkRttMs);
  const double call_ms = in.cloud_call_overhead_ms > 0 ? in.cloud_call_overhead_ms : rtt_ms + kAssumedCloudCallSetupMs;
  const double wire_bytes = tokens * in.wire_bytes_per_token;
  const double compute_ms = tokens / cloud_tps * 1000.0;
  const double transfer_ms = wire_bytes / bandwidth * 1000.0;
  plan.estimated_cloud_ms = call_ms + compute_ms + transfer_ms;
  auto assumed = [](double measured) { return measured > 0 ? "" : ", assumed"; };
  const std::string call_text =
      in.cloud_call_overhead_ms > 0
          ? absl::StrFormat("per-call cost %.0f ms, measured", call_ms)
          : absl::StrFormat("per-call cost %.0f ms = RTT %.0f ms%s + set-up %.0f ms, assumed", call_ms, rtt_ms,
                            in.link_rtt_ms > 0 ? "" : " (assumed)", kAssumedCloudCallSetupMs);
  const std::string cloud_text = absl::StrFormat(
      "cloud %s est. (%s; %d tokens at %.0f tok/s%s; %s at %s%s)", seconds_text(plan.estimated_cloud_ms), call_text,
      in.prefill_tokens, cloud_tps, assumed(in.cloud_prefill_tokens_per_s),
      format_bytes(static_cast<uint64_t>(wire_bytes)), format_rate(bandwidth), assumed(in.link_bytes_per_s));
  if (in.policy == PrefillPolicy::kCloud) {
    plan.place = v1::PREFILL_PLACE_CLOUD;
    plan.reason = absl::StrCat("cloud: policy cloud; ", cloud_text, " vs ", local_text);
    return plan;
  }
  if (!in.cloud_reachable) {
    plan.place = v1::PREFILL_PLACE_LOCAL;
    plan.reason = absl::StrCat("local: the cloud is ",
                               in.cloud_unusable_why.empty() ? "unreachable or not ready" : in.cloud_unusable_why,
                               "; ", local_text);
    return plan;
  }
  if (plan.estimated_cloud_ms < plan.estimated_local_ms) {
    plan.place = v1::PREFILL_PLACE_CLOUD;
    plan.reason = absl::StrCat("cloud: ", cloud_text, " vs ", local_text);
  } else {
    plan.place = v1::PREFILL_PLACE_LOCAL;
    plan.reason = absl::StrCat("local: ", local_text, " vs ", cloud_text);
  }
  return plan;
}

void to_proto(const SplitPlan& plan, v1::Plan* out) {
  out->set_place(plan.place);
  out->set_reason(plan.reason);
  out->set_reused_tokens(plan.reused_tokens);
  out->set_prefill_tokens(plan.prefill_tokens);
  out->set_estimated_local_ms(plan.estimated_local_ms);
  out->set_estimated_cloud_ms(plan.estimated_cloud_ms);
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
