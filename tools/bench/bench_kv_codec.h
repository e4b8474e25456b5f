// baton bench kv-codec: what one run measures (cmd_bench_kv.cc) and its
// output (bench_kv_codec_report.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_report.h"

namespace baton::cli {

struct VariantResult {
  std::string codec;
  double raw_bytes_per_token = 0, encoded_bytes_per_token = 0, ratio_to_f16 = 0;
  double encode_mb_per_s = 0, decode_mb_per_s = 0;
  double rmse = 0, relative_rmse = 0;                     // decoded vs F32, and / RMS of the F32 K/V
  double key_relative_rmse = 0, value_relative_rmse = 0;  // the same over K only, V only
  std::string error;                                      // non-empty: variant not valid for the model
};

struct KvCodecRun {
  std::string model;  // the model's name
  int64_t tokens = 0;
  int64_t block_tokens = 0;
  std::string simd;  // SIMD level
  double f16_bytes_per_token = 0;
  std::vector<VariantResult> variants;
};

Json kv_codec_json(const KvCodecRun& run);
void print_kv_codec_table(const KvCodecRun& run);

}  // namespace baton::cli
