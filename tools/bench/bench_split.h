// baton bench split: what one run measures (cmd_bench_split.cc) and its
// output (bench_split_report.cc: tables, JSON, the gnuplot figure).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench_report.h"

namespace baton::cli {

// One WAN profile: a line "NAME RATE RTT [JITTER_MS]" of deploy/wan/profiles.
struct WanProfile {
  std::string name;
  double bandwidth_bytes_per_s = 0;  // link rate each way
  double rtt_ms = 0;
  double loss = 0;                   // packet loss probability in [0, 1)
};

// What one prompt length measured (all times in ms, on this machine).
struct LengthResult {
  int64_t prompt_len = 0;
  // Local: prefill of [0, n-1) into the edge store, then the last prompt
  // token (one decode step) and the first sample.
  double local_prefill_ms = 0;
  double local_last_token_ms = 0;
  double local_ttft_ms = 0;
  // Split over loopback.
  double cloud_ms = 0;                // trailer ProducerStats: queue + prefill + encode tail
  double cloud_prefill_ms = 0;        // ProducerStats.prefill_ms alone
  double first_block_ms = 0;          // call start -> first KvBlock
  double receive_ms = 0;              // call start -> last message
  double ingest_ms = 0;               // last message -> segment committed (verify, decode, commit)
  double split_last_token_ms = 0;     // the edge's last prompt token + first sample
  double loopback_split_ttft_ms = 0;  // measured end to end over loopback (no WAN)
  uint64_t wire_bytes = 0;            // KV payload bytes received (after zstd)
  uint64_t quantized_bytes = 0;       // payload bytes before zstd
  // Decode over the ingested KV.
  double decode_mean_tok_s = 0;     // tokens / their total time
  double decode_p99_ms = 0;         // 99th percentile step time
  double decode_p99_tok_s = 0;      // 1000 / decode_p99_ms
  bool first_tokens_match = false;  // the split's first token equals the local one (greedy)
};

// The modeled time to first token of the split over `profile` for a length
// whose cloud work takes `cloud_ms` and whose first block arrives after
// `first_block_ms` (loopback) of it.
double modeled_split_ttft_ms(const LengthResult& r, const WanProfile& profile, double cloud_ms, double first_block_ms);

// Projected GPU cloud work for a length: prompt tokens / GPU tok/s; the first
// block comes after the same fraction of it as measured on the CPU cloud.
void projected_cloud(const LengthResult& r, double gpu_tok_s, double* cloud_ms, double* first_block_ms);

// The overlapped plan of one length over one profile: the split position a
// the edge's split policy picks (decide_split, policy auto, from this
// length's measured figures: the edge prefills [0, a), the cloud streams
// [a, n-1)), the place that makes (local, cloud or overlap) and its modeled
// TTFT, with the gain over the better of local and cloud-only (a ratio:
// > 1 is faster).
struct OverlapRow {
  int64_t split_position = 0;
  std::string place;
  double ttft_ms = 0;
  double gain = 0;
};

// The overlapped plan's modeled TTFT for split position a: the edge's part
// (a / (n-1) of the measured local prefill) runs beside the cloud's, whose
// transfer and ingest scale with the streamed share (n-1-a) / (n-1):
//   max(local part, RTT + max(cloud, first block + transfer of the share))
//     + ingest of the share + last token
// (a = 0: modeled_split_ttft_ms; a = n-1: the local TTFT).
OverlapRow modeled_overlap(const LengthResult& r, const WanProfile& profile, double cloud_ms, double first_block_ms);

// Per profile: the modeled split TTFT of every length, measured cloud and
// projected, and whether it beats local; the overlapped plan of each.
struct ProfileRows {
  std::vector<double> split_ms, projection_ms;
  std::vector<bool> split_wins, projection_wins;
  std::vector<OverlapRow> overlap, projection_overlap;
};

struct SplitRun {
  std::string model_name, edge_model, cloud_model;
  std::string codec, store;  // wire codec, edge store config
  double store_bytes_per_token = 0;
  int64_t threads = 0, decode_tokens = 0, repeat = 0;
  std::string gpu_source;  // where the projection's GPU tok/s come from
  std::vector<int64_t> lengths;
  std::vector<LengthResult> results;  // per length
  std::vector<double> gpu_rates;      // per length: GPU prefill tok/s of the projection
  std::vector<WanProfile> profiles;
  std::vector<ProfileRows> per_profile;
  std::string plot_path;  // --plot, or empty
};

// Fills run.per_profile from the results, profiles and GPU rates.
void model_profiles(SplitRun& run);

Json split_json(const SplitRun& run);
void print_split_tables(const SplitRun& run);
// Writes TTFT vs prompt length (local vs split per profile, projection
// dashed) as a PNG with gnuplot.
absl::Status write_split_plot(const SplitRun& run);

}  // namespace baton::cli
