// baton bench load: what one run measures (cmd_bench_load.cc) and its output
// (bench_load_report.cc).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bench_report.h"
#include "proto/baton.pb.h"

namespace baton::cli {

// Peak and current resident memory of a process (/proc/PID/status).
struct MemorySample {
  uint64_t hwm_bytes = 0;  // VmHWM: peak resident set since the process started
  uint64_t rss_bytes = 0;  // VmRSS
};

// Samples one process every 100 ms while the load runs.
struct MemoryWatch {
  int64_t pid = 0;
  std::string name;
  MemorySample at_start;
  uint64_t max_rss_bytes = 0;  // largest VmRSS seen by the sampler
  uint64_t hwm_bytes = 0;      // VmHWM at the last sample (the kernel's peak, start-up included)
  int samples = 0;
  bool gone = false;           // the process went away during the run

  void sample();
};

// The agent's own view, polled while the load runs.
struct AgentWatch {
  uint64_t max_kv_used_bytes = 0;  // KV held by sessions in memory (MemoryPlan.kv_used_bytes)
  uint32_t max_running = 0;
  uint32_t max_queued = 0;
  int samples = 0;
  int failures = 0;                // Health calls that failed
};

struct Distribution {
  double p50 = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
  size_t count = 0;
};
Distribution distribution(std::vector<double> values);

// The "nothing lost" check of one completed session against the listing.
struct SessionCheck {
  std::string id;
  uint64_t expected_tokens = 0;
  int64_t listed_tokens = -1;  // -1: not listed
  bool persisted = false;
  bool in_memory = false;
  std::string problem;  // empty: intact
};

// What the run counted over every turn.
struct LoadTally {
  int64_t sent = 0, completed = 0, failed = 0, skipped = 0, tokens = 0, retries = 0, fallbacks = 0;
  std::map<std::string, std::pair<int64_t, std::string>> errors;  // kind -> (count, first message)
  std::map<std::string, int64_t> places;                          // prefill place -> completed turns
  Distribution ttft, total;                                       // ms, completed turns
  // ms between consecutive tokens of a completed turn, as the client received
  // them (tokens that came in one message: 0 after the first).
  Distribution inter_token;
  // Mean over completed turns of more than one token: (tokens - 1) / (last
  // token - first token), the speed a reader sees once the reply streams.
  double stream_tokens_per_s = 0;
  // Mean over completed turns of Stats.decode_batch_mean: how many turns
  // shared a decode step (the agent's --max-batch at work); 0: not reported.
  double decode_batch_mean = 0;
};

struct LoadRun {
  std::string edge, policy, prompts;  // prompts: "32,256 tokens"
  int64_t clients = 0, sessions_per_client = 0, turns = 0, max_tokens = 0, seed = 0;
  double wall_s = 0;
  LoadTally tally;
  v1::MemoryPlan memory;  // the agent's plan (Health before the run)
  AgentWatch agent;
  MemoryWatch edge_memory, cloud_memory;
  int64_t sessions_complete = 0, sessions_incomplete = 0, lost = 0;
  std::vector<SessionCheck> checks;
};

Json load_json(const LoadRun& run);
void print_load_table(const LoadRun& run);

// --clients LIST: one load run per client count, in order.
struct SweepLevel {
  int64_t clients = 0;
  double wall_s = 0;
  LoadTally tally;
  uint32_t max_running = 0;  // Generate calls the agent ran at once (Health)
  int64_t lost = 0;          // sessions that lost turns
};

// The greedy identity check of a sweep: every level's replies against the
// same requests run one at a time (one client, one call in flight).
struct IdentityCheck {
  bool ran = false;              // only at temperature 0
  int64_t compared = 0;          // turns compared (completed in both runs)
  int64_t differing = 0;
  std::string first_difference;  // empty: none
};

// One row of the sweep table. aggregate: tokens of all clients per second of
// the level's wall time; per_client: aggregate / clients; ratio: aggregate
// over the first level's.
struct SweepRow {
  int64_t clients = 0;
  double aggregate_tokens_per_s = 0;
  double per_client_tokens_per_s = 0;
  double ratio_to_first = 0;  // 0 when the first level made no tokens
  double stream_tokens_per_s = 0;
  double decode_batch_mean = 0;  // turns per decode step, as the agent reported
  double inter_token_p50_ms = 0, inter_token_p99_ms = 0;
  double ttft_p50_ms = 0, ttft_p99_ms = 0;
  int64_t completed = 0, sent = 0;
  uint32_t max_running = 0;
};
std::vector<SweepRow> sweep_rows(const std::vector<SweepLevel>& levels);

struct LoadSweep {
  std::string edge, policy, prompts;
  int64_t sessions_per_client = 0, turns = 0, max_tokens = 0, seed = 0;
  double temperature = 0;
  std::vector<SweepLevel> levels;
  IdentityCheck identity;
};

Json sweep_json(const LoadSweep& sweep);
void print_sweep_table(const LoadSweep& sweep);

}  // namespace baton::cli
