// Split policy: where to prefill a request's new tokens (DESIGN.md "Why it
// pays": offloading wins when the link moves the KV faster than the edge
// computes it). A pure decision from measured figures, so it is unit-tested
// without servers:
//   local_ms = prefill_tokens / local prefill tok/s
//   cloud_ms = per-call cost + prefill_tokens / cloud prefill tok/s
//            + prefill_tokens * wire bytes per token / link bandwidth
// and auto takes the smallest of local, cloud and the overlapped plan: the
// edge prefills the front x of the tokens while the cloud computes them all
// and streams only the rest (the split position a = have + x):
//   overlap_ms(x) = max(local x tokens, per-call + compute + (tokens - x) x wire / bandwidth)
// minimized where the rising local line crosses the falling cloud line
// (overlap_split_tokens), x rounded to the better neighbour and kept inside
// (0, tokens); it is chosen only when it beats both pure plans by
// kMinOverlapGain (it costs two moving parts and edge CPU beside the
// stream's ingest). The per-call cost is what a cloud call costs
// whatever its length (round trip, stream set-up, header and trailer,
// verification and commit): measured over earlier cloud calls, else the
// Health round trip + kAssumedCloudCallSetupMs. So a turn shorter than about
// per-call cost x local tok/s stays local. Unknown figures (0) take the
// stated assumptions below, and the reason marks them "assumed". Policy LOCAL never
// contacts the cloud (privacy); CLOUD always asks it (the caller fails
// rather than falling back); an unconfigured or unreachable cloud means local.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "proto/baton.pb.h"

namespace baton {

enum class PrefillPolicy { kAuto, kLocal, kCloud };

// "auto", "local", "cloud".
const char* prefill_policy_name(PrefillPolicy policy);
absl::StatusOr<PrefillPolicy> parse_prefill_policy(const std::string& name);
// UNSPECIFIED -> `fallback` (the agent's --policy).
PrefillPolicy prefill_policy_from_proto(v1::SplitPolicy policy, PrefillPolicy fallback);
// Where a prefill ran: "local", "cloud", "overlap", "reused" ("unknown" otherwise); the
// name in stats, JSON and metric labels.
const char* prefill_place_name(v1::PrefillPlace place);

// Assumptions for figures not measured yet.
inline constexpr double kAssumedCloudPrefillTokensPerS = 2000.0;  // a modest GPU
inline constexpr double kAssumedLinkBytesPerS = 12.5e6;           // 100 Mbit/s
inline constexpr double kAssumedLinkRttMs = 50.0;
inline constexpr double kAssumedLocalPrefillTokensPerS = 50.0;    // a laptop CPU on a 1B model
// A cloud call's fixed cost beyond the round trip until one is measured:
// stream set-up, the header, the trailer's verification and the commit.
inline constexpr double kAssumedCloudCallSetupMs = 50.0;
// The overlapped plan must predict at least this fraction less time than the
// better pure plan: its edge prefill shares the CPU with the stream's
// verification and decoding, which the lines do not model.
inline constexpr double kMinOverlapGain = 0.05;

struct SplitInputs {
  PrefillPolicy policy = PrefillPolicy::kAuto;
  bool cloud_configured = false;         // --cloud set
  bool cloud_reachable = false;          // last Health (or a served call) said READY
  // Why the cloud is not usable when !cloud_reachable, e.g. "not ready
  // (WARMING at the last Health check)"; empty: "unreachable or not ready".
  std::string cloud_unusable_why;
  uint32_t reused_tokens = 0;            // positions the session / pack already holds
  uint32_t prefill_tokens = 0;           // positions [have, n-1) to prefill
  // Positions local prefill would compute (more than prefill_tokens when a
  // lossless store recomputes earlier turns); 0: prefill_tokens.
  uint32_t local_prefill_tokens = 0;
  double local_prefill_tokens_per_s = 0; // measured on this device; 0: unknown
  double cloud_prefill_tokens_per_s = 0; // the cloud's Health figure; 0: unknown
  double link_bytes_per_s = 0;           // moving average over recent KV transfers; 0: unknown
  double link_rtt_ms = 0;                // moving average of Health round trips; 0: unknown
  // Fixed cost of one cloud call, round trip included (moving average over
  // served calls: request to commit less the cloud's compute and the
  // transfer); 0: unknown (RTT + kAssumedCloudCallSetupMs).
  double cloud_call_overhead_ms = 0;
  double wire_bytes_per_token = 0;       // the codec's expected wire size per token (all layers, K+V)
  // Set (GenerateRequest.split_position): the split position a in
  // [reused_tokens, reused_tokens + prefill_tokens] to use instead of the
  // policy's choice, under policies auto (with a usable cloud) and cloud.
  std::optional<uint32_t> forced_split_position;
};

struct SplitPlan {
  v1::PrefillPlace place = v1::PREFILL_PLACE_LOCAL;
  std::string reason;                    // the decision with its numbers
  uint32_t reused_tokens = 0;
  uint32_t prefill_tokens = 0;
  double estimated_local_ms = 0;
  double estimated_cloud_ms = 0;         // per-call cost + prefill + transfer; 0 if not estimated
  // The split position a: [reused, a) local, [a, reused + prefill) from the
  // cloud (LOCAL: reused + prefill; CLOUD and REUSED: reused).
  uint32_t split_position = 0;
  // The chosen plan's predicted time (estimated_local_ms, estimated_cloud_ms
  // or the overlap's max of its two parts): what to compare across codecs.
  double estimated_ms = 0;
  // The best overlapped plan, chosen or not (0 when the cloud was not
  // estimated or no split inside (reused, reused + prefill) exists): its
  // split position and the predicted times of its edge and cloud parts.
  uint32_t overlap_split_position = 0;
  double estimated_overlap_local_ms = 0;
  double estimated_overlap_cloud_ms = 0;
  uint32_t local_tokens() const { return split_position - reused_tokens; }
  uint32_t cloud_tokens() const { return reused_tokens + prefill_tokens - split_position; }
};

SplitPlan decide_split(const SplitInputs& inputs);

// The crossing of the overlapped plan's two lines, in tokens the edge
// prefills (unclamped, may be outside [0, tokens]): local_ms_per_token x
// (local_extra_tokens + x) = cloud_ms_at_zero - transfer_ms_per_token x x,
// where cloud_ms_at_zero is the cloud-only estimate and local_extra_tokens
// what a local prefill recomputes before the new positions (a lossless
// store's earlier turns).
double overlap_split_tokens(double local_ms_per_token, double local_extra_tokens, double cloud_ms_at_zero,
                            double transfer_ms_per_token);

void to_proto(const SplitPlan& plan, v1::Plan* out);

// An exponentially weighted moving average (weight `alpha` on the newest
// sample); value() is 0 until the first sample. Thread-safe.
class MovingAverage {
 public:
  explicit MovingAverage(double alpha = 0.3) : alpha_(alpha) {}
  void add(double sample);
  double value() const;
  int samples() const;

 private:
  double alpha_;
  mutable std::mutex mu_;
  double value_ = 0;   // guarded by mu_
  int samples_ = 0;    // guarded by mu_
};

}  // namespace baton
