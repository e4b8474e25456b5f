// EdgeMetrics: the Prometheus metrics of baton-edge (GET /metrics on the
// HTTP front end), as handles into a MetricsRegistry.
//
//   baton_edge_generate_total{outcome}            Generate calls by outcome: "ok" or the
//                                                 gRPC code in lower case ("unavailable", ...)
//   baton_edge_ttft_seconds                       histogram, time to first token
//   baton_edge_cloud_first_token_seconds          histogram, calls with early tokens: the first from the cloud
//   baton_edge_local_first_token_seconds          histogram, the first token sampled on the edge
//   baton_edge_early_tokens_total                 reply tokens the cloud sampled (early tokens) and were sent
//   baton_edge_speculative_drafted_tokens_total   draft tokens verified (speculative decoding)
//   baton_edge_speculative_accepted_tokens_total  draft tokens that became reply tokens
//   baton_edge_decode_tokens_per_second           histogram, mean decode speed per call
//   baton_edge_decode_batch_turns                 histogram, per call: the mean number of turns its
//                                                 decode steps served (--max-batch; 1: alone)
//   baton_edge_prefills_total{place}              where the prompt was prefilled: local | cloud | reused
//   baton_edge_kv_received_bytes_total            KV wire bytes received from the cloud
//   baton_edge_prompt_tokens_total, baton_edge_generated_tokens_total
//   baton_edge_cloud_reused_tokens_total          prompt tokens the cloud took from its caches
//   baton_edge_fallbacks_total{reason}            policy auto chose the cloud and fell back;
//                                                 reason: the failed call's gRPC code ("unavailable")
//   baton_edge_write_stalls_total                 server streams cancelled because the client stopped
//                                                 reading (--write-stall-timeout), pushed by EdgeService
//   baton_edge_memory_*_bytes, baton_edge_running, baton_edge_queued,
//   baton_edge_sessions, baton_edge_ready         gauges from a Health snapshot (record_health)
//
// Who records: the HTTP front end records the calls it relays
// (HttpFrontEndOptions::record_generate_metrics) and fills the gauges from
// Edge.Health at scrape time. If EdgeService records every Generate itself
// (record_outcome + record_stats in its reactor's OnDone), turn the front
// end's recording off so HTTP calls are not counted twice.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "common/util/metrics.h"
#include "proto/baton.pb.h"

namespace baton {

struct EdgeMetrics {
  explicit EdgeMetrics(MetricsRegistry& registry);

  // One finished Generate: "ok" or outcome_name(status.code()).
  void record_outcome(const absl::Status& status);
  // The Stats message that ended a successful Generate.
  void record_stats(const v1::Stats& stats);
  // Gauges from a Health answer (memory plan, load, state).
  void record_health(const v1::EdgeHealthResponse& health);

  MetricsRegistry& registry;
  Histogram& ttft_seconds;
  Histogram& cloud_first_token_seconds;
  Histogram& local_first_token_seconds;
  Counter& early_tokens;
  Counter& speculative_drafted;
  Counter& speculative_accepted;
  Histogram& decode_tokens_per_second;
  Histogram& decode_batch_turns;
  Counter& kv_received_bytes;
  Counter& prompt_tokens;
  Counter& generated_tokens;
  Counter& write_stalls;
  Gauge& memory_device_limit_bytes;
  Gauge& memory_weights_bytes;
  Gauge& memory_kv_budget_bytes;
  Gauge& memory_kv_used_bytes;
  Gauge& running;
  Gauge& queued;
  Gauge& sessions;
  Gauge& ready;  // 1 when READY, else 0
};

// "ok" for OK, else the code's name in lower case ("invalid_argument").
std::string outcome_name(absl::StatusCode code);
// The label of a Stats.fallback_reason: the gRPC code in its "(CODE)" in
// lower case, else "other" (the text itself is too varied for a label).
std::string fallback_reason_label(std::string_view reason);

}  // namespace baton
