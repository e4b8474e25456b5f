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
          {"inter_token_ms", distribution_json(t.inter_token)},
          {"stream_tokens_per_s", fixed(t.stream_tokens_per_s, 2)},
          {"decode_batch_mean", fixed(t.decode_batch_mean, 2)},
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
    absl::PrintF("  %-28s %10.1f %10.1f %10.1f %10.1f %10.1f\n", "inter-token latency (ms)", t.inter_token.p50,
                 t.inter_token.p90, t.inter_token.p99, t.inter_token.max, t.inter_token.mean);
  }
  absl::PrintF("  %-28s %d (%.1f tok/s, %.2f requests/s; %.1f tok/s per reply once it streams; %.2f turns per "
               "decode step)\n",
               "tokens generated", t.tokens, t.tokens / run.wall_s, t.completed / run.wall_s, t.stream_tokens_per_s,
               t.decode_batch_mean);
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

std::vector<SweepRow> sweep_rows(const std::vector<SweepLevel>& levels) {
  std::vector<SweepRow> rows;
  double first = 0;
  for (const SweepLevel& level : levels) {
    SweepRow row;
    const LoadTally& t = level.tally;
    row.clients = level.clients;
    row.aggregate_tokens_per_s = level.wall_s > 0 ? static_cast<double>(t.tokens) / level.wall_s : 0;
    row.per_client_tokens_per_s = level.clients > 0 ? row.aggregate_tokens_per_s / static_cast<double>(level.clients) : 0;
    if (rows.empty()) first = row.aggregate_tokens_per_s;
    row.ratio_to_first = first > 0 ? row.aggregate_tokens_per_s / first : 0;
    row.stream_tokens_per_s = t.stream_tokens_per_s;
    row.decode_batch_mean = t.decode_batch_mean;
    row.inter_token_p50_ms = t.inter_token.p50;
    row.inter_token_p99_ms = t.inter_token.p99;
    row.ttft_p50_ms = t.ttft.p50;
    row.ttft_p99_ms = t.ttft.p99;
    row.completed = t.completed;
    row.sent = t.sent;
    row.max_running = level.max_running;
    rows.push_back(row);
  }
  return rows;
}

Json sweep_json(const LoadSweep& sweep) {
  Json levels = Json::array();
  const std::vector<SweepRow> rows = sweep_rows(sweep.levels);
  for (size_t i = 0; i < rows.size(); ++i) {
    const SweepRow& r = rows[i];
    const SweepLevel& level = sweep.levels[i];
    Json errors = Json::object();
    for (const auto& [kind, entry] : level.tally.errors) errors[kind] = {{"count", entry.first}, {"sample", entry.second}};
    levels.push_back({{"clients", r.clients},
                      {"wall_s", fixed(level.wall_s, 3)},
                      {"requests_sent", r.sent},
                      {"requests_completed", r.completed},
                      {"errors", std::move(errors)},
                      {"tokens_generated", level.tally.tokens},
                      {"aggregate_tokens_per_s", fixed(r.aggregate_tokens_per_s, 2)},
                      {"per_client_tokens_per_s", fixed(r.per_client_tokens_per_s, 2)},
                      {"ratio_to_first", fixed(r.ratio_to_first, 3)},
                      {"stream_tokens_per_s", fixed(r.stream_tokens_per_s, 2)},
                      {"decode_batch_mean", fixed(r.decode_batch_mean, 2)},
                      {"inter_token_ms", distribution_json(level.tally.inter_token)},
                      {"ttft_ms", distribution_json(level.tally.ttft)},
                      {"agent_max_running", r.max_running},
                      {"sessions_lost", level.lost}});
  }
  const IdentityCheck& id = sweep.identity;
  return {{"edge", sweep.edge},
          {"policy", sweep.policy},
          {"prompts", sweep.prompts},
          {"sessions_per_client", sweep.sessions_per_client},
          {"turns", sweep.turns},
          {"max_tokens", sweep.max_tokens},
          {"temperature", sweep.temperature},
          {"seed", sweep.seed},
          {"levels", std::move(levels)},
          {"greedy_identity",
           id.ran ? Json{{"compared_turns", id.compared},
                         {"differing_turns", id.differing},
                         {"identical", id.differing == 0},
                         {"first_difference", id.first_difference}}
                  : Json(nullptr)}};
}

void print_sweep_table(const LoadSweep& sweep) {
  absl::PrintF("load sweep: edge %s, sessions x turns %d x %d per client, policy %s, prompts %s, %d tokens per turn, "
               "temperature %g\n",
               sweep.edge, sweep.sessions_per_client, sweep.turns, sweep.policy, sweep.prompts, sweep.max_tokens,
               sweep.temperature);
  absl::PrintF("  %7s %10s %9s %11s %10s %7s %9s %9s %9s %9s %8s %8s\n", "clients", "aggregate", "vs first",
               "per client", "stream", "batch", "ITL p50", "ITL p99", "TTFT p50", "TTFT p99", "done", "running");
  absl::PrintF("  %7s %10s %9s %11s %10s %7s %9s %9s %9s %9s %8s %8s\n", "", "tok/s", "", "tok/s", "tok/s", "(mean)", "ms",
               "ms", "ms", "ms", "", "(max)");
  for (const SweepRow& r : sweep_rows(sweep.levels)) {
    absl::PrintF("  %7d %10.1f %8.2fx %11.1f %10.1f %7.2f %9.1f %9.1f %9.0f %9.0f %8s %8d\n", r.clients,
                 r.aggregate_tokens_per_s, r.ratio_to_first, r.per_client_tokens_per_s, r.stream_tokens_per_s,
                 r.decode_batch_mean, r.inter_token_p50_ms, r.inter_token_p99_ms, r.ttft_p50_ms, r.ttft_p99_ms,
                 absl::StrFormat("%d/%d", r.completed, r.sent), r.max_running);
  }
  for (const SweepLevel& level : sweep.levels) {
    for (const auto& [kind, entry] : level.tally.errors) {
      absl::PrintF("  %d clients: %d %s, e.g. %s\n", level.clients, entry.first, kind, entry.second);
    }
    if (level.lost > 0) absl::PrintF("  %d clients: %d sessions LOST turns\n", level.clients, level.lost);
  }
  const IdentityCheck& id = sweep.identity;
  if (!id.ran) {
    absl::PrintF("  greedy identity: not checked (temperature %g; it needs --temperature 0)\n", sweep.temperature);
  } else if (id.differing == 0) {
    absl::PrintF("  greedy identity: %d turns identical to the same requests run one at a time\n", id.compared);
  } else {
    absl::PrintF("  greedy identity: %d of %d turns DIFFER from the same requests run one at a time; first: %s\n",
                 id.differing, id.compared, id.first_difference);
  }
}

}  // namespace baton::cli
