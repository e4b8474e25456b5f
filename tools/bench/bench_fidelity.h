// baton bench fidelity: what one run measures (cmd_bench_fidelity.cc) and
// its output (bench_fidelity_report.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_report.h"

namespace baton::cli {

// One row of the table: sums over every scored token.
struct FidelityRow {
  std::string setting;        // "alone" / "split"
  std::string cloud_weights;  // for split rows: "f16" / "q4_0"; else ""
  std::string edge_weights;   // "f16" / "q4_0"
  std::string kv;             // wire codec name, or "f32" (engine cache)
  double nll = 0.0;
  double kl = 0.0;
  int64_t scored = 0;
  uint64_t wire_bytes = 0;  // split rows: payload bytes after zstd
  int64_t wire_tokens = 0;
  std::string error;
};

// Which cloud weights the split rows favour: per codec the split setting with
// the lower mean KL wins; the majority of codecs decides, the summed KL
// breaks a tie ("none" when no codec compared both).
struct FidelityVerdict {
  std::string recommended = "none";
  int f16_wins = 0, q4_wins = 0, compared = 0;
  double f16_kl_sum = 0, q4_kl_sum = 0;
};

struct FidelityRun {
  std::string model_path;  // --model
  std::string model_name;  // the model's name
  std::string edge_model;  // --edge-model, or empty when quantized from --model here
  std::string tokens_file;
  int64_t window = 0, prompt = 0, windows = 0;
  std::string protocol;  // the split protocol, in words
  std::vector<FidelityRow> rows;
  FidelityVerdict verdict;
};

FidelityVerdict fidelity_verdict(const std::vector<FidelityRow>& rows);

Json fidelity_json(const FidelityRun& run);
void print_fidelity_table(const FidelityRun& run);

}  // namespace baton::cli
