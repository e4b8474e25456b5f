// baton bench split: what one run measures (cmd_bench_split.cc) and its
// output (bench_split_report.cc: tables, JSON, the gnuplot figure).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench_report.h"
#include "common/kv_codec/kv_calibration.h"
#include "common/kv_codec/kv_codec_config.h"
#include "edge_decode/plan/split_policy.h"

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
  // Early tokens (--early-tokens K > 0; measured with the baseline codec
  // only): a second Prefill call of [0, n-1) that asks the cloud to sample K
  // greedy tokens after the prompt (PrefillRequest.early_tokens).
  int64_t early_asked = 0;             // K; 0: not measured
  int64_t early_received = 0;          // tokens in the EarlyTokens messages (K unless end-of-generation came)
  double first_early_ms = 0;           // call start -> the first EarlyTokens message, as the client reads it
  double early_cloud_ms = 0;           // that message's cloud_ms (the job's start -> its send) + the queue_ms
                                       // of the trailer, so from admission as cloud_ms is
  double early_stream_cloud_ms = 0;    // the early call's trailer (queue + prefill + encode tail: the K
                                       // decode steps included, as the trailer waits for them)
  double early_delta_ms = 0;           // edge: prefill of [last token, early tokens] - the one-token last step
  bool early_first_matches = false;    // the cloud's first early token equals the edge's local first token
};

// The cloud-side times of the early-token model for one length: measured
// (CPU cloud) or projected (GPU cloud), all in ms from the job's start.
struct EarlyCloud {
  double cloud_ms = 0;           // the plain stream's work (as modeled_split_ttft_ms takes it)
  double first_block_ms = 0;     // its first KV block
  double first_early_ms = 0;     // the first early token sent (measured: as read over loopback, as the
                                 // first block is, so the two share one frame)
  double stream_cloud_ms = 0;    // the early call's work up to its trailer
};

// The early-token rows of one length over one profile.
struct EarlyRow {
  double plain_ms = 0;        // cloud-only split TTFT (modeled_split_ttft_ms), the baseline codec
  double ahead_bytes = 0;     // KV bytes ahead of the first early token on the link
  double ttft_ms = 0;         // first token from the cloud
  double ratio = 0;           // plain_ms / ttft_ms (> 1: the early token comes sooner)
  double decoded_here_ms = 0; // first token decoded here: the split with the early call's cloud time + early_delta_ms
};

// Bytes the transport may hold ahead of a message the cloud writes now: the
// HTTP/2 window the edge grants a Prefill call with early tokens
// (early_tokens_window_bytes: 2 x BDP rounded up to a power of two, in
// [64 KiB, 4 MiB]; gRPC's own BDP window would be max(4 MiB, 2 x BDP)). The
// socket buffers and the link hold these bytes; QueuedWriteReactor writes one
// message at a time, so push_urgent overtakes only what waits above them.
double transport_window_bytes(const WanProfile& profile);

// KV bytes still ahead on the link of a message the cloud sends `at_ms`
// after the job's start: the blocks are produced evenly over [first block,
// cloud] and the link (rate x (1 - loss)) carries them from the first block
// on, so
//   produced  = wire_bytes x clamp((at - first_block) / (cloud - first_block), 0, 1)
//   delivered = rate x (1 - loss) x max(0, at - first_block)
//   ahead     = min(max(0, produced - delivered), transport_window_bytes)
// (an upper bound: part of the window is in flight, not queued).
double bytes_ahead(const LengthResult& r, const WanProfile& profile, double cloud_ms, double first_block_ms,
                   double at_ms);

// The early-token model of one length over one profile:
//   early TTFT     = RTT + first early + ahead / (rate x (1 - loss))
//   plain          = modeled_split_ttft_ms(cloud, first block)
//   decoded here   = modeled_split_ttft_ms(stream cloud, first block) + early_delta_ms
//   ratio          = plain / early TTFT
EarlyRow modeled_early(const LengthResult& r, const WanProfile& profile, const EarlyCloud& cloud);

// The projected GPU cloud of the early rows: the plain stream of
// projected_cloud, the first early token after the projected prompt prefill
// and one decode step of `decode_step_ms`, the trailer after K of them.
EarlyCloud projected_early_cloud(const LengthResult& r, double gpu_tok_s, double decode_step_ms);

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

// The split policy's inputs (decide_split, policy auto) for one length over
// one profile: the measured local and cloud speeds, the link, the measured
// wire bytes per token.
SplitInputs split_inputs_of(const LengthResult& r, const WanProfile& profile, double cloud_ms);

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
  // With early tokens measured (LengthResult::early_asked > 0, the baseline
  // codec): per length; else empty.
  std::vector<EarlyRow> early, projection_early;
};

// One wire codec: its measurements per length (the local fields are the
// length's one local measurement, the same in every codec) and its model per
// profile.
struct CodecRun {
  KvCodecConfig config;      // the wire codec
  std::string codec, store;  // its name, the edge store config
  double store_bytes_per_token = 0;
  std::vector<LengthResult> results;  // per length
  std::vector<ProfileRows> per_profile;
};

// `--codec auto`'s row of one length over one profile: the codec the edge's
// choose_codec (codec_choice.h) picks from the calibration's quality table
// and this length's measured figures, and the overlapped plan with it.
struct AutoRow {
  size_t codec = 0;          // index into SplitRun::codecs
  OverlapRow overlap;        // its gain: over the better of local and cloud-only with this codec
  double baseline_ms = 0;    // min(local, cloud-only with the baseline codec, SplitRun::codecs[0])
  double best_fixed_ms = 0;  // min(local, cloud-only with any measured codec within the loss floor)
  double gain = 0;           // baseline_ms / overlap.ttft_ms
  double gain_vs_best = 0;   // best_fixed_ms / overlap.ttft_ms
  std::string reason;        // choose_codec's
};

struct AutoProfileRows {
  std::vector<AutoRow> rows, projection;  // per length
};

struct SplitRun {
  std::string model_name, edge_model, cloud_model;
  int64_t threads = 0, decode_tokens = 0, repeat = 0;
  std::string gpu_source;  // where the projection's GPU tok/s come from
  std::vector<int64_t> lengths;
  std::vector<double> gpu_rates;  // per length: GPU prefill tok/s of the projection
  std::vector<WanProfile> profiles;
  std::vector<CodecRun> codecs;  // codecs[0]: the baseline (the local rows' store)
  // --codec auto: the calibration's quality table, the floor and the rows.
  bool auto_codec = false;
  std::string calibration;  // --calibration
  std::vector<KvCodecQuality> table;
  double max_kv_loss_pct = 0;
  double f16_bytes_per_token = 0;
  std::vector<AutoProfileRows> auto_rows;  // per profile
  std::string plot_path;  // --plot, or empty
  // --early-tokens K (0: no early rows) and the projection's GPU decode step.
  int64_t early_tokens = 0;
  double gpu_decode_step_ms = 0;
  std::string gpu_decode_source;  // where gpu_decode_step_ms comes from
};

// The auto row of length i over profile p (projection: with the projected
// GPU cloud): choose_codec with the run's table, floor and the baseline as
// its fallback, each candidate's split inputs from its own measurement (a
// codec the run did not measure is not usable), then modeled_overlap with
// the chosen codec's measurement.
AutoRow modeled_auto(const SplitRun& run, size_t p, size_t i, bool projection);

// Fills each codec's per_profile from its results, the profiles and the GPU
// rates, and with auto_codec the auto rows.
void model_profiles(SplitRun& run);

Json split_json(const SplitRun& run);
void print_split_tables(const SplitRun& run);
// Writes TTFT vs prompt length (local vs split per profile, projection
// dashed) as a PNG with gnuplot.
absl::Status write_split_plot(const SplitRun& run);

}  // namespace baton::cli
