// PrefillMetrics: the Prometheus metrics of baton-prefill (GET /metrics,
// metrics_http.h), as handles into a MetricsRegistry.
//
// Pushed by the service as work finishes:
//   baton_prefill_requests_total{outcome}        Prefill calls: "ok" or the gRPC code in lower case
//   baton_prefill_tokens_total                   tokens prefilled (computed, not served from a cache)
//   baton_prefill_cache_hit_bytes_total          KV bytes served from the prefix and session caches
//   baton_prefill_encode_seconds                 histogram: quantize + compress time per request
//   baton_prefill_seconds                        histogram: queue + compute time per request
//   baton_prefill_write_stalls_total             streams cancelled because the client stopped reading
// Pulled from the service at every scrape (collect_at_scrape):
//   baton_prefill_running, baton_prefill_queued, baton_prefill_ready
//   baton_prefill_prefix_cache_bytes, baton_prefill_prefix_cache_entries,
//   baton_prefill_prefix_cache_hit_tokens_total, baton_prefill_session_cache_bytes,
//   baton_prefill_session_cache_hit_tokens_total
//   baton_prefill_state_tier_up                  1 while the state tier is healthy (always, in memory)
//   baton_prefill_state_tier_{hits,misses,errors,corrupt,dropped_writes,writes,written_bytes}_total{kind}
//                                                the L2 (--state) per kind of value: "prefix" blocks
//                                                and "session"s (StateTierKindStats)
//   baton_prefill_pack_tier_{loads,rejected,stale_dropped,errors}_total
//                                                durable packs (--state or --pack-dir, PackLibraryStats):
//                                                fetched into memory, refused by verification (a
//                                                miss), memory copies dropped as deleted elsewhere,
//                                                backend calls that failed
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cloud_prefill/prefill_job.h"
#include "cloud_prefill/prefill_job_observer.h"
#include "cloud_prefill/prefill_service.h"
#include "common/util/metrics.h"

namespace baton {

struct PrefillMetrics final : PrefillJobObserver {
  explicit PrefillMetrics(MetricsRegistry& registry);

  // PrefillJobObserver: record_job, and write_stalls.
  void job_finished(const absl::StatusOr<PrefillJobResult>& result, uint64_t kv_bytes_per_token) override {
    record_job(result, kv_bytes_per_token);
  }
  Counter* write_stall_counter() override { return &write_stalls; }

  // One finished Prefill call.
  void record_outcome(const absl::Status& status);
  // One finished prefill job (run_prefill_job's answer): its outcome, and when
  // it succeeded the tokens it computed, the cache bytes it reused
  // (reused_tokens x `kv_bytes_per_token`, the size per token of the KV the
  // caches hold), its encode tail and its queue + compute time.
  void record_job(const absl::StatusOr<PrefillJobResult>& result, uint64_t kv_bytes_per_token);
  // Fills the pulled gauges and counters from `service` now.
  void collect(const PrefillService& service);
  // Calls collect(service) before every render of the registry. Call it once
  // service.Load() has returned (Load sets up the caches collect() reads).
  // `service` and this struct must outlive the registry's last render (stop
  // the metrics server before destroying the service).
  void collect_at_scrape(const PrefillService& service);

  MetricsRegistry& registry;
  // Pushed.
  Counter& tokens_prefilled;
  Counter& cache_hit_bytes;
  Histogram& encode_seconds;
  Histogram& prefill_seconds;
  Counter& write_stalls;  // counted by the service's WriteStallWatchdog
  // Pulled.
  Gauge& running;
  Gauge& queued;
  Gauge& ready;
  Gauge& prefix_cache_bytes;
  Gauge& prefix_cache_entries;
  Counter& prefix_cache_hit_tokens;
  Gauge& session_cache_bytes;
  Counter& session_cache_hit_tokens;
  Gauge& state_tier_up;

 private:
  void collect_state_tier(const StateTierStats& stats);
  void collect_pack_tier(const PackLibraryStats& stats);
};

}  // namespace baton
