#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench_decode.h"
#include "bench_harness.h"
#include "read_bandwidth.h"
#include "report.h"

namespace baton::cli {

namespace {

// Attention alone as a share of the median step, and the rate it reads the
// KV at (bytes/s).
double attention_share(const DecodeCell& r) { return r.attention_seconds * r.tok_per_s; }
double attention_kv_rate(const DecodeCell& r) { return r.kv_bytes_per_token / r.attention_seconds; }

// The step without its attention: weight bytes over (median step - attention
// alone), as a fraction of the run's best read pass.
double rest_ratio(const DecodeRun& run, const DecodeCell& r) {
  const double rest_seconds = 1.0 / r.tok_per_s - r.attention_seconds;
  return rest_seconds > 0 ? run.weight_bytes_per_token / rest_seconds / run.bandwidth_bytes_per_s : 0.0;
}

// A part's weight bytes over its mean time, against the run's best pass (0
// for the parts without weights).
double part_ratio(const DecodeRun& run, const DecodeCell& r, int p) {
  return r.part_seconds[p] > 0 ? run.part_weight_bytes[p] / r.part_seconds[p] / run.bandwidth_bytes_per_s : 0.0;
}

// The mean step: the parts' sum (the clock between parts misses only the
// step's entry and exit).
double parts_total(const DecodeCell& r) {
  double total = 0;
  for (double x : r.part_seconds) total += x;
  return total;
}

void print_parts_table(const DecodeRun& run) {
  print_line("  parts of a step (mean over the timed steps):\n");
  print_line("  %7s  %-22s %-11s %8s %7s %10s %9s %7s %7s\n", "context", "kv codec", "part", "ms/tok", "share",
             "W MB/tok", "W GB/s", "ratio", "local");
  for (const DecodeCell& r : run.cells) {
    if (!r.error.empty()) continue;
    const double total = parts_total(r);
    for (int p = 0; p < kStepParts; ++p) {
      const char* name = step_part_name(static_cast<StepPart>(p));
      if (run.part_weight_bytes[p] > 0) {
        print_line("  %7d  %-22s %-11s %8.3f %7.3f %10.2f %9.2f %7.3f %7.3f\n", r.context, r.kv, name,
                   r.part_seconds[p] * 1e3, r.part_seconds[p] / total, run.part_weight_bytes[p] / 1e6,
                   run.part_weight_bytes[p] / r.part_seconds[p] / 1e9, part_ratio(run, r, p),
                   r.part_adjacent_ratio[p]);
      } else {
        print_line("  %7d  %-22s %-11s %8.3f %7.3f\n", r.context, r.kv, name, r.part_seconds[p] * 1e3,
                   r.part_seconds[p] / total);
      }
    }
  }
  print_line("  (ms/tok = the part's wall time per timed step, all layers; share = of the parts' sum; W = the weight "
             "bytes the part reads per token; W GB/s = W / its time; ratio = W GB/s / the run's best pass; local = W "
             "over the part's time in each step / the read pass after that step, median over the steps)\n");
}

}  // namespace

double adjacent_ratio(double bytes_per_token, const std::vector<double>& step_seconds,
                      const std::vector<double>& read_bytes_per_s) {
  if (step_seconds.empty() || step_seconds.size() != read_bytes_per_s.size()) return 0.0;
  std::vector<double> ratios;
  for (size_t i = 0; i < step_seconds.size(); ++i) {
    if (step_seconds[i] <= 0 || read_bytes_per_s[i] <= 0) return 0.0;
    ratios.push_back(bytes_per_token / step_seconds[i] / read_bytes_per_s[i]);
  }
  return median(std::move(ratios));
}

Json decode_json(const DecodeRun& run) {
  Json rows = Json::array();
  for (const DecodeCell& r : run.cells) {
    Json row = {{"context", r.context}, {"kv", r.kv}};
    if (!r.error.empty()) {
      row["error"] = r.error;
      rows.push_back(std::move(row));
      continue;
    }
    row["store"] = r.store;
    row["decode_tok_per_s"] = fixed(r.tok_per_s, 3);
    row["mean_decode_tok_per_s"] = fixed(r.mean_tok_per_s, 3);
    row["kv_bytes_per_token"] = whole(r.kv_bytes_per_token);
    row["weight_plus_kv_bytes_per_token"] = whole(run.weight_bytes_per_token + r.kv_bytes_per_token);
    row["weight_gb_per_s"] = fixed(run.weight_bytes_per_token * r.tok_per_s / 1e9, 3);
    row["achieved_gb_per_s"] = fixed(r.achieved_bytes_per_s / 1e9, 3);
    row["memory_read_gb_per_s"] = fixed(r.bandwidth_bytes_per_s / 1e9, 3);
    row["ratio_to_bandwidth"] = fixed(r.achieved_bytes_per_s / run.bandwidth_bytes_per_s, 4);
    row["ratio_to_adjacent_read"] = fixed(r.adjacent_ratio, 4);
    row["attention_ms_per_token"] = fixed(r.attention_seconds * 1e3, 3);
    row["attention_share_of_step"] = fixed(attention_share(r), 4);
    row["attention_kv_gb_per_s"] = fixed(attention_kv_rate(r) / 1e9, 3);
    row["rest_ratio_to_bandwidth"] = fixed(rest_ratio(run, r), 4);
    Json parts = Json::array();
    for (int p = 0; p < kStepParts; ++p) {
      Json part = {{"part", step_part_name(static_cast<StepPart>(p))},
                   {"ms_per_token", fixed(r.part_seconds[p] * 1e3, 4)}};
      if (run.part_weight_bytes[p] > 0) {
        part["weight_bytes_per_token"] = whole(run.part_weight_bytes[p]);
        part["ratio_to_bandwidth"] = fixed(part_ratio(run, r, p), 4);
        part["ratio_to_adjacent_read"] = fixed(r.part_adjacent_ratio[p], 4);
      }
      parts.push_back(std::move(part));
    }
    row["parts"] = std::move(parts);
    rows.push_back(std::move(row));
  }
  return {{"model", run.model},
          {"threads", run.threads},
          {"kernels", run.kernels},
          {"tokens_per_row", run.tokens},
          {"weight_bytes_per_token", whole(run.weight_bytes_per_token)},
          {"memory_read_best_gb_per_s", fixed(run.bandwidth_bytes_per_s / 1e9, 3)},
          {"memory_read_best_prefetch", kReadPrefetches[run.bandwidth_prefetch].name},
          {"rows", std::move(rows)}};
}

void print_decode_table(const DecodeRun& run) {
  print_line("decode: %s, %d threads, %s kernels, %d timed tokens per row; weights read per token %.2f MB; "
             "memory read bandwidth (best pass of the run) %.2f GB/s (its prefetch: %s)\n",
             run.model, run.threads, run.kernels, run.tokens, run.weight_bytes_per_token / 1e6,
             run.bandwidth_bytes_per_s / 1e9, kReadPrefetches[run.bandwidth_prefetch].name);
  print_line("  %7s  %-22s %-16s %8s %8s %10s %10s %12s %12s %7s %8s %8s %6s %9s %7s\n", "context", "kv codec",
             "store", "tok/s", "mean", "KV MB/tok", "W+KV MB/tok", "read GB/s", "memory GB/s", "ratio", "local",
             "attn ms", "share", "attn GB/s", "rest");
  for (const DecodeCell& r : run.cells) {
    if (!r.error.empty()) {
      print_line("  %7d  %-22s failed: %s\n", r.context, r.kv, r.error);
      continue;
    }
    print_line("  %7d  %-22s %-16s %8.2f %8.2f %10.3f %10.3f %12.2f %12.2f %7.3f %8.3f %8.2f %6.3f %9.2f %7.3f\n",
               r.context, r.kv, r.store, r.tok_per_s, r.mean_tok_per_s, r.kv_bytes_per_token / 1e6,
               (run.weight_bytes_per_token + r.kv_bytes_per_token) / 1e6, r.achieved_bytes_per_s / 1e9,
               r.bandwidth_bytes_per_s / 1e9, r.achieved_bytes_per_s / run.bandwidth_bytes_per_s, r.adjacent_ratio,
               r.attention_seconds * 1e3, attention_share(r), attention_kv_rate(r) / 1e9, rest_ratio(run, r));
  }
  print_line("  (tok/s = 1 / median step time, mean = tokens / total time; KV = K and V bytes the store holds for "
             "the tokens a step attends over (all layers, codes plus scales; sliding-window layers: their window) "
             "at the mean context of the timed steps; W+KV = weights + KV bytes per token; read = W+KV x tok/s; "
             "memory = best of this row's full-pool 1 GiB passes of the tuned reader (baton bench bandwidth), one "
             "after each timed step; ratio = read / the run's best pass (the header's figure); local = each step's read "
             "over the pass right after it, median over the steps: the ratio at the bandwidth of that moment, on a "
             "host whose bandwidth changes within a run; attn ms = one token's "
             "attention alone (every layer, one query at the store's last position, on the same threads, after a "
             "read pass that evicts the store), median of 5; share = attn ms / the median step; attn GB/s = KV "
             "MB/tok / attn ms: the rate attention reads the KV at; rest = weight bytes / (median step - attn ms) / the "
             "run's best pass: the ratio of the step without its attention)\n");
  if (run.print_parts) print_parts_table(run);
}

}  // namespace baton::cli
