#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench_load.h"
#include "common/util/format_bytes.h"

namespace baton::cli {
namespace {

Json memory_json(const MemoryWatch& w) {
  if (w.pid <= 0) return nullptr;
  return {{"pid", w.pid},
          {"vm_hwm_bytes", w.hwm_bytes},
          {"max_sampled_rss_bytes", w.max_rss_bytes},
          {"rss_at_start_bytes", w.at_start.rss_bytes},
          {"samples", w.samples},
          {"exited", w.gone}};
}

Json distribution_json(const Distribution& d) {
  return {{"count", d.count},         {"p50", fixed(d.p50, 2)}, {"p90", fixed(d.p90, 2)},
          {"p99", fixed(d.p99, 2)},   {"max", fixed(d.max, 2)}, {"mean", fixed(d.mean, 2)}};
}

}  // namespace

Json load_json(const LoadRun& run) {
  const LoadTally& t = run.tally;
  Json errors = Json::object(), places = Json::object(), sessions = Json::array();
  for (const auto& [kind, entry] : t.errors) errors[kind] = {{"count", entry.first}, {"sample", entry.second}};
  for (const auto& [place, count] : t.places) places[place] = count;
  for (const SessionCheck& k : run.checks) {
    sessions.push_back({{"id", k.id},
                        {"expected_tokens", k.expected_tokens},
                        {"listed_tokens", k.listed_tokens},
                        {"persisted", k.persisted},
                        {"in_memory", k.in_memory},
                        {"problem", k.problem}});
  }
  const v1::MemoryPlan& m = run.memory;
  return {{"edge", run.edge},
          {"clients", run.clients},
          {"sessions_per_client", run.sessions_per_client},
          {"turns", run.turns},
          {"policy", run.policy},
          {"prompts", run.prompts},
          {"max_tokens", run.max_tokens},
          {"seed", run.seed},
          {"wall_s", fixed(run.wall_s, 3)},
          {"requests_sent", t.sent},
          {"requests_completed", t.completed},
          {"requests_failed", t.failed},
          {"turns_skipped", t.skipped},
          {"retries", t.retries},
          {"errors", std::move(errors)},
          {"ttft_ms", distribution_json(t.ttft)},
          {"total_ms", distribution_json(t.total)},
          {"tokens_generated", t.tokens},
          {"tokens_per_s", fixed(t.tokens / run.wall_s, 2)},
          {"requests_per_s", fixed(t.completed / run.wall_s, 3)},
          {"prefill_places", std::move(places)},
          {"fallbacks", t.fallbacks},
          {"edge_memory_plan",
           {{"device_limit_bytes", m.device_limit_bytes()},
            {"weights_bytes", m.weights_bytes()},
            {"scratch_bytes", m.scratch_bytes()},
            {"headroom_bytes", m.headroom_bytes()},
            {"kv_budget_bytes", m.kv_budget_bytes()}}},
          {"agent",
           {{"max_kv_used_bytes", run.agent.max_kv_used_bytes},
            {"max_running", run.agent.max_running},
            {"max_queued", run.agent.max_queued},
            {"health_samples", run.agent.samples},
            {"health_failures", run.agent.failures}}},
          {"edge_memory", memory_json(run.edge_memory)},
          {"cloud_memory", memory_json(run.cloud_memory)},
          {"sessions_complete", run.sessions_complete},
          {"sessions_incomplete", run.sessions_incomplete},
          {"sessions_lost", run.lost},
          {"nothing_lost", run.lost == 0},
          {"sessions", std::move(sessions)}};
}

void print_load_table(const LoadRun& run) {
  const LoadTally& t = run.tally;
  absl::PrintF("load: edge %s, %d clients x %d sessions x %d turns, policy %s, prompts %s, %d tokens per turn\n",
               run.edge, run.clients, run.sessions_per_client, run.turns, run.policy, run.prompts, run.max_tokens);
  absl::PrintF("  %-28s %d sent, %d completed, %d failed, %d turns skipped, %d retries (%.1f s)\n", "requests", t.sent,
               t.completed, t.failed, t.skipped, t.retries, run.wall_s);
  for (const auto& [kind, entry] : t.errors) {
    absl::PrintF("  %-28s %d, e.g. %s\n", "  " + kind, entry.first, entry.second);
  }
  if (t.completed == 0) {
    absl::PrintF("  %-28s no completed request\n", "latency");
  } else {
    absl::PrintF("  %-28s %10s %10s %10s %10s %10s\n", "", "p50", "p90", "p99", "max", "mean");
    absl::PrintF("  %-28s %10.1f %10.1f %10.1f %10.1f %10.1f\n", "time to first token (ms)", t.ttft.p50, t.ttft.p90,
                 t.ttft.p99, t.ttft.max, t.ttft.mean);
    absl::PrintF("  %-28s %10.1f %10.1f %10.1f %10.1f %10.1f\n", "total latency (ms)", t.total.p50, t.total.p90,
                 t.total.p99, t.total.max, t.total.mean);
  }
  absl::PrintF("  %-28s %d (%.1f tok/s, %.2f requests/s)\n", "tokens generated", t.tokens, t.tokens / run.wall_s,
               t.completed / run.wall_s);
  std::string place_text;
  for (const auto& [place, count] : t.places) absl::StrAppend(&place_text, place_text.empty() ? "" : ", ", place, " ", count);
  absl::PrintF("  %-28s %s; %d fell back to local\n", "prefill", place_text.empty() ? "-" : place_text, t.fallbacks);
  const v1::MemoryPlan& m = run.memory;
  absl::PrintF("  %-28s limit %s (weights %s, scratch %s, headroom %s, KV %s)\n", "edge memory plan",
               format_bytes(m.device_limit_bytes()), format_bytes(m.weights_bytes()), format_bytes(m.scratch_bytes()),
               format_bytes(m.headroom_bytes()), format_bytes(m.kv_budget_bytes()));
  absl::PrintF("  %-28s KV held by sessions up to %s of its %s budget; up to %d running, %d queued (%d polls)\n",
               "edge agent (Health)", format_bytes(run.agent.max_kv_used_bytes), format_bytes(m.kv_budget_bytes()),
               run.agent.max_running, run.agent.max_queued, run.agent.samples);
  for (const MemoryWatch* w : {&run.edge_memory, &run.cloud_memory}) {
    if (w->pid <= 0) continue;
    absl::PrintF("  %-28s VmHWM %s, max sampled RSS %s (%s at start)%s\n", w->name + " memory high-water",
                 format_bytes(w->hwm_bytes), format_bytes(w->max_rss_bytes), format_bytes(w->at_start.rss_bytes),
                 w->gone ? "; the process exited during the run" : "");
  }
  absl::PrintF("  %-28s %d complete, %d incomplete; %s\n", "sessions", run.sessions_complete, run.sessions_incomplete,
               run.lost == 0 ? "nothing lost (each complete session listed with its token count)"
                             : absl::StrFormat("%d LOST", run.lost));
  for (const SessionCheck& k : run.checks) {
    if (!k.problem.empty()) absl::PrintF("    %s: %s\n", k.id, k.problem);
  }
}

}  // namespace baton::cli
