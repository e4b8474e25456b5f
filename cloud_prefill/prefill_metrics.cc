#include "cloud_prefill/prefill_metrics.h"

#include <string>

#include "absl/strings/ascii.h"

namespace baton {

PrefillMetrics::PrefillMetrics(MetricsRegistry& r)
    : registry(r),
      tokens_prefilled(r.counter("baton_prefill_tokens_total", "Tokens prefilled (computed, not served from a cache).")),
      cache_hit_bytes(r.counter("baton_prefill_cache_hit_bytes_total",
                                "KV bytes served from the prefix and session caches instead of computed.")),
      // 1 ms .. ~8 s.
      encode_seconds(r.histogram("baton_prefill_encode_seconds",
                                 "KV quantize + compress time per Prefill call, seconds.",
                                 exponential_buckets(0.001, 2, 14))),
      // 10 ms .. ~82 s.
      prefill_seconds(r.histogram("baton_prefill_seconds", "Queue + compute time per Prefill call, seconds.",
                                  exponential_buckets(0.01, 2, 14))),
      write_stalls(r.counter("baton_prefill_write_stalls_total",
                             "Prefill and GetPrefix streams cancelled because the client stopped reading "
                             "(--write-stall-timeout).")),
      running(r.gauge("baton_prefill_running", "Prefill calls computing now.")),
      queued(r.gauge("baton_prefill_queued", "Prefill calls admitted and waiting.")),
      ready(r.gauge("baton_prefill_ready", "1 when the service is READY, else 0.")),
      prefix_cache_bytes(r.gauge("baton_prefill_prefix_cache_bytes", "KV held by the prefix cache, bytes.")),
      prefix_cache_entries(r.gauge("baton_prefill_prefix_cache_entries", "Blocks held by the prefix cache.")),
      prefix_cache_hit_tokens(r.counter("baton_prefill_prefix_cache_hit_tokens_total",
                                        "Tokens served from the prefix cache.")),
      session_cache_bytes(r.gauge("baton_prefill_session_cache_bytes", "KV held by the session cache, bytes.")),
      session_cache_hit_tokens(r.counter("baton_prefill_session_cache_hit_tokens_total",
                                         "Tokens served from the session cache.")),
      state_tier_up(r.gauge("baton_prefill_state_tier_up",
                            "1 while the state tier (--state) is healthy (always with in-process state), else 0.")) {
  // The family exists from the first scrape.
  registry.counter("baton_prefill_requests_total", "Prefill calls by outcome.", {{"outcome", "ok"}}).inc(0);
}

void PrefillMetrics::record_outcome(const absl::Status& status) {
  const std::string outcome = status.ok() ? "ok" : absl::AsciiStrToLower(absl::StatusCodeToString(status.code()));
  registry.counter("baton_prefill_requests_total", "Prefill calls by outcome.", {{"outcome", outcome}}).inc();
}

void PrefillMetrics::record_job(const absl::StatusOr<PrefillJobResult>& result, uint64_t kv_bytes_per_token) {
  record_outcome(result.status());
  if (!result.ok()) return;
  tokens_prefilled.inc(static_cast<double>(result->computed_tokens));
  cache_hit_bytes.inc(static_cast<double>(result->reused_tokens) * static_cast<double>(kv_bytes_per_token));
  encode_seconds.observe(result->encode_tail_ms / 1000.0);
  prefill_seconds.observe((result->queue_ms + result->prefill_ms) / 1000.0);
}

void PrefillMetrics::collect(const PrefillService& service) {
  running.set(service.running());
  queued.set(service.queued());
  ready.set(service.state() == v1::SERVING_STATE_READY ? 1 : 0);
  const PrefixCacheStats prefix = service.prefix_cache_stats();
  prefix_cache_bytes.set(static_cast<double>(prefix.bytes));
  prefix_cache_entries.set(static_cast<double>(prefix.entries));
  prefix_cache_hit_tokens.advance_to(static_cast<double>(prefix.hit_tokens));
  const SessionCacheStats session = service.session_cache_stats();
  session_cache_bytes.set(static_cast<double>(session.bytes));
  session_cache_hit_tokens.advance_to(static_cast<double>(session.hit_tokens));
  collect_state_tier(service.state_tier_stats());
  collect_pack_tier(service.pack_library_stats());
}

void PrefillMetrics::collect_pack_tier(const PackLibraryStats& stats) {
  registry.counter("baton_prefill_pack_tier_loads_total", "Packs fetched from the durable tier into memory.")
      .advance_to(static_cast<double>(stats.loads));
  registry
      .counter("baton_prefill_pack_tier_rejected_total",
               "Pack values from the durable tier refused by verification (a miss, never used).")
      .advance_to(static_cast<double>(stats.rejected_values));
  registry
      .counter("baton_prefill_pack_tier_stale_dropped_total",
               "Packs dropped from memory because another replica deleted or replaced them.")
      .advance_to(static_cast<double>(stats.stale_dropped));
  registry.counter("baton_prefill_pack_tier_errors_total", "Durable pack tier calls that failed.")
      .advance_to(static_cast<double>(stats.backend_errors));
}

void PrefillMetrics::collect_state_tier(const StateTierStats& stats) {
  state_tier_up.set(stats.healthy ? 1 : 0);
  struct Field {
    const char* name;
    const char* help;
    uint64_t StateTierKindStats::*value;
  };
  static constexpr Field kFields[] = {
      {"baton_prefill_state_tier_hits_total", "State tier values read and verified.", &StateTierKindStats::hits},
      {"baton_prefill_state_tier_misses_total", "State tier reads that found nothing usable (absent, or a session "
       "the request does not own).", &StateTierKindStats::misses},
      {"baton_prefill_state_tier_errors_total", "State tier reads and writes that failed or were skipped while the "
       "tier was down.", &StateTierKindStats::errors},
      {"baton_prefill_state_tier_corrupt_total", "State tier values refused by verification (a miss, never used).",
       &StateTierKindStats::corrupt},
      {"baton_prefill_state_tier_dropped_writes_total", "State tier writes dropped (write queue full, or a session "
       "over the size cap).", &StateTierKindStats::dropped_writes},
      {"baton_prefill_state_tier_writes_total", "State tier values written.", &StateTierKindStats::writes},
      {"baton_prefill_state_tier_written_bytes_total", "Bytes of the state tier values written (what Redis holds).",
       &StateTierKindStats::written_bytes},
  };
  for (const Field& field : kFields) {
    registry.counter(field.name, field.help, {{"kind", "prefix"}})
        .advance_to(static_cast<double>(stats.prefix.*field.value));
    registry.counter(field.name, field.help, {{"kind", "session"}})
        .advance_to(static_cast<double>(stats.session.*field.value));
  }
}

void PrefillMetrics::collect_at_scrape(const PrefillService& service) {
  registry.add_collector([this, &service] { collect(service); });
}

}  // namespace baton
