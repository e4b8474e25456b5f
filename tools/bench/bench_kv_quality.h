// baton bench kv-quality: what one run measures (cmd_bench_kv_quality.cc,
// through kv_quality.h) and its output (bench_kv_quality_report.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench_report.h"
#include "kv_quality.h"

namespace baton::cli {

struct KvQualityRun {
  std::string model;  // the model's name
  std::string text_file;
  int64_t chunk_tokens = 0;
  int64_t chunks = 0;
  int64_t scored_tokens = 0;
  bool bos = false;
  int64_t prompts = 0;  // greedy prompts run
  int64_t greedy_tokens = 0;
  double f16_bytes_per_token = 0;
  std::string baseline_codec;
  double baseline_perplexity = 0;
  double f32_local_perplexity = 0;
  std::vector<KvQualityRow> rows;
  std::string plot_path;  // --plot: where the rate-distortion figure goes
};

Json kv_quality_json(const KvQualityRun& run);
void print_kv_quality_table(const KvQualityRun& run);
// The rate-distortion figure (gnuplot PNG at run.plot_path): mean KL and the
// perplexity change against wire bytes / F16, the transform codecs (tc-*) as
// a curve per sink/recent setting, the other codecs as labelled points.
absl::Status write_kv_quality_plot(const KvQualityRun& run);

}  // namespace baton::cli
