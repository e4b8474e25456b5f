// baton bench decode: what one run measures (cmd_bench_decode.cc) and its
// output (bench_decode_report.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_report.h"

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
  double bandwidth_bytes_per_s = 0;  // median of the passes interleaved with the steps
  std::string error;
};

struct DecodeRun {
  std::string model;    // the model's name
  int64_t threads = 0;
  std::string kernels;  // SIMD level
  int64_t tokens = 0;   // timed tokens per cell
  double weight_bytes_per_token = 0;
  std::vector<DecodeCell> cells;
};

Json decode_json(const DecodeRun& run);
void print_decode_table(const DecodeRun& run);

}  // namespace baton::cli
