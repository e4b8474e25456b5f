// baton bench decode: what one run measures (cmd_bench_decode.cc) and its
// output (bench_decode_report.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/engine/engine.h"
#include "bench_report.h"
#include "command_status.h"

namespace baton::cli {

// One (context, KV) cell of the decode table.
struct DecodeCell {
  int64_t context = 0;
  std::string kv;                    // "f32" or a wire codec name
  std::string store;                 // the edge store's config ("f32" for the F32 cache)
  double tok_per_s = 0;              // 1 / median step time
  double mean_tok_per_s = 0;         // timed tokens / their total time
  double kv_bytes_per_token = 0;     // KV read per decoded token at the mean context
  double achieved_bytes_per_s = 0;
  double bandwidth_bytes_per_s = 0;  // best of the read passes interleaved with this row's steps
  int bandwidth_prefetch = 0;        // its software prefetch (a kReadPrefetches index)
  // adjacent_ratio(): each timed step's read rate over the read pass right
  // after it, median over the steps. On a host whose bandwidth changes
  // within a run, the ratio to the bandwidth of that moment, beside the
  // ratio to the run's best pass (a step of a slow moment divided by a pass
  // of a fast one).
  double adjacent_ratio = 0;
  // Attention alone, as a step runs it (every layer, one query at the
  // store's last position, from memory): median seconds per token.
  double attention_seconds = 0;
  // Each part of a step (Engine::set_part_times, indexed by StepPart): mean
  // wall seconds per timed step.
  double part_seconds[kStepParts] = {};
  // Each weight product's adjacent_ratio (its weight bytes over its time in
  // each step, against the read pass after that step); 0 for the parts
  // without weights.
  double part_adjacent_ratio[kStepParts] = {};
  std::string error;
};

struct DecodeRun {
  std::string model;    // the model's name
  int64_t threads = 0;
  std::string kernels;  // SIMD level
  int64_t tokens = 0;   // timed tokens per cell
  double weight_bytes_per_token = 0;
  // The weight bytes each part of a step reads (0 for the parts without
  // weights); they add up to weight_bytes_per_token.
  double part_weight_bytes[kStepParts] = {};
  bool print_parts = false;  // --parts: the table of parts after the rows
  // What every row's ratio divides by: the best read pass of the whole run
  // (kRunBandwidthPasses before the rows, and every row's), the best this
  // CPU did (read_bandwidth.h's tuned reader, baton bench bandwidth).
  double bandwidth_bytes_per_s = 0;
  int bandwidth_prefetch = 0;  // the best pass's software prefetch (a kReadPrefetches index)
  std::vector<DecodeCell> cells;
};

// The median over the timed steps of (bytes_per_token / step_seconds[i]) /
// read_bytes_per_s[i], the read pass measured right after step i (0 when
// there are none, or the sizes differ).
double adjacent_ratio(double bytes_per_token, const std::vector<double>& step_seconds,
                      const std::vector<double>& read_bytes_per_s);

Json decode_json(const DecodeRun& run);
void print_decode_table(const DecodeRun& run);

// baton bench decode --speculative (cmd_bench_speculative.cc): greedy
// replies decoded plainly and with prompt-lookup speculation, side by side
// in one run, per task.
struct SpeculativeReply {
  int64_t prompt_tokens = 0;
  int64_t tokens = 0;           // reply tokens (the same count both ways)
  double plain_seconds = 0;     // decoding them with decode steps
  double speculative_seconds = 0;
  uint64_t verifies = 0;        // decode_rows calls with a draft
  uint64_t plain_steps = 0;     // decode steps the speculative run still made
  uint64_t drafted = 0;
  uint64_t accepted = 0;
  bool identical = false;       // the two replies agree token for token
};

struct SpeculativeTask {
  std::string name;  // "quote" or "free"
  std::vector<SpeculativeReply> replies;
  // Aggregates over the replies: tokens / total seconds of each way.
  double plain_tok_per_s() const;
  double speculative_tok_per_s() const;
  double ratio() const;         // speculative / plain
  double acceptance() const;    // accepted / drafted (0 without drafts)
  // Reply tokens per forward pass of the speculative run.
  double tokens_per_pass() const;
  int identical() const;        // replies that agree
};

struct SpeculativeRun {
  std::string model;
  int64_t threads = 0;
  std::string kernels;
  std::string store;      // the KV store the replies decode over
  int64_t max_draft = 0;  // --speculative
  std::string draft;      // --draft: the draft model's name; empty: prompt lookup
  std::vector<SpeculativeTask> tasks;
  // What a verification costs: rows (1 = a decode step) and the median
  // seconds of one decode_rows call of that many rows after the first quote
  // prompt. rows / (seconds / step seconds) is the speed-up if every draft
  // token were taken. batched_seconds: one decode_rows call of the same
  // number of rows, one row for each of that many sessions (caches) holding
  // the same prompt: what a batched step of baton-edge --max-batch costs.
  struct VerifyCost {
    int64_t rows = 0;
    double seconds = 0;
    double batched_seconds = 0;
  };
  std::vector<VerifyCost> verify_costs;
};

Json speculative_json(const SpeculativeRun& run);
void print_speculative_table(const SpeculativeRun& run);
// Runs --speculative; `args` are bench decode's.
absl::Status bench_decode_speculative(const Args& args);

}  // namespace baton::cli
