// The work counts the CPU benches divide by a measured peak or bandwidth
// (tools/bench/roofline.h, bench_prefill.h, bench_decode.h): each checked by
// hand on small shapes, so a fraction of peak means what the README says.
#include "roofline.h"

#include <gtest/gtest.h>

#include "bench_decode.h"
#include "bench_prefill.h"
#include "read_bandwidth.h"

namespace baton::cli {
namespace {

KvGeometry two_layers(std::vector<int32_t> windows = {}) {
  return KvGeometry{2, 4, 2, 8, std::move(windows)};  // n_head 4, head_dim 8
}

TEST(RooflineTest, AttentionFlopsCountEveryKeyEachQuerySees) {
  // 3 tokens from position 0 see 1 + 2 + 3 keys, per layer.
  EXPECT_EQ(attention_flops(two_layers(), 0, 3), 4.0 * 4 * 8 * (1 + 2 + 3) * 2);
  // A continuation from position 10 sees 11 + 12 keys.
  EXPECT_EQ(attention_flops(two_layers(), 10, 2), 4.0 * 4 * 8 * (11 + 12) * 2);
  EXPECT_EQ(attention_flops(two_layers(), 0, 0), 0.0);
}

TEST(RooflineTest, AttentionFlopsRespectSlidingWindows) {
  // Layer 0 full, layer 1 a window of 2: tokens 0..3 see 1, 2, 2, 2 there.
  EXPECT_EQ(attention_flops(two_layers({0, 2}), 0, 4), 4.0 * 4 * 8 * ((1 + 2 + 3 + 4) + (1 + 2 + 2 + 2)));
}

TEST(RooflineTest, KvBytesPerTokenAreTheStoreBytesOfEveryAttendedToken) {
  // 1000 bytes per cached token over both layers: 500 per layer.
  EXPECT_EQ(kv_bytes_read_per_token(two_layers(), 100, 1000), 100.0 * 1000);
  // A window of 10 on layer 1: that layer reads 10 tokens, layer 0 all 100.
  EXPECT_EQ(kv_bytes_read_per_token(two_layers({0, 10}), 100, 1000), 100.0 * 500 + 10.0 * 500);
  // Below the window both read everything.
  EXPECT_EQ(kv_bytes_read_per_token(two_layers({0, 10}), 4, 1000), 4.0 * 1000);
}

CpuPeak all_peaks() {
  CpuPeak peak;
  peak.threads = 2;
  peak.int8 = PeakFigure{"vpdpbusd zmm", 128, 800e9};
  peak.bf16 = PeakFigure{"vdpbf16ps zmm", 64, 400e9};
  peak.f32 = PeakFigure{"vfmadd231ps zmm", 32, 200e9};
  return peak;
}

TEST(RooflineTest, WeightTypeChoosesThePeak) {
  const CpuPeak peak = all_peaks();
  for (GgmlType quantized : {GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    const MatmulPeak chosen = matmul_peak_for(quantized, peak);
    EXPECT_EQ(chosen.kind, "int8");
    EXPECT_EQ(chosen.figure->ops_per_s, 800e9);
  }
  // The exact path widens every float type to f32 and runs FMAs.
  for (GgmlType float_type : {GgmlType::kBF16, GgmlType::kF16, GgmlType::kF32}) {
    EXPECT_EQ(matmul_peak_for(float_type, peak).kind, "f32");
    // FloatMatmul::kBf16 runs vdpbf16ps where this CPU has it (the peak was measured, the kernel is there).
    EXPECT_EQ(matmul_peak_for(float_type, peak, FloatMatmul::kBf16).kind, bf16_matmul_available() ? "bf16" : "f32");
  }
  CpuPeak no_bf16 = peak;
  no_bf16.bf16.reset();
  const MatmulPeak fallback = matmul_peak_for(GgmlType::kF16, no_bf16, FloatMatmul::kBf16);
  EXPECT_EQ(fallback.kind, "f32");
  EXPECT_EQ(fallback.figure->ops_per_s, 200e9);
  EXPECT_EQ(matmul_peak_for(GgmlType::kQ4_0, peak).weights, "q4_0");
}

PrefillRun run_of(const CpuPeak& peak) {
  PrefillRun run;
  run.model = "m";
  run.batch = 64;
  run.threads = 2;
  run.kernels = "avx512";
  run.kv_store = "f16";
  run.peak_before = run.peak_after = run.peak = peak;
  run.matmul_peak = matmul_peak_for(GgmlType::kQ4_0, peak);
  return run;
}

TEST(RooflineTest, LargerPeaksKeepTheLargerFigureByFigure) {
  CpuPeak slow = all_peaks(), fast = all_peaks();
  slow.int8->ops_per_s = 400e9;  // the int8 loop got one core's worth
  fast.f32->ops_per_s = 100e9;   // the f32 loop did, in the other pass
  fast.bf16.reset();             // (a figure only one pass has is kept)
  const CpuPeak larger = larger_peaks(slow, fast);
  EXPECT_EQ(larger.int8->ops_per_s, 800e9);
  EXPECT_EQ(larger.f32->ops_per_s, 200e9);
  ASSERT_TRUE(larger.bf16.has_value());
  EXPECT_EQ(larger.bf16->ops_per_s, 400e9);
  EXPECT_EQ(larger.threads, 2);
  EXPECT_EQ(larger_peaks(fast, slow).int8->ops_per_s, 800e9);  // either order
  CpuPeak none;
  none.threads = 2;  // the scalar level: no figure at all
  EXPECT_FALSE(larger_peaks(none, none).int8.has_value());
}

TEST(RooflineTest, PrefillCellIsHeldAgainstTheLargerOfThePeaksAroundIt) {
  PrefillRun run = run_of(all_peaks());
  run.peak_before.int8->ops_per_s = 400e9;
  run.peak = larger_peaks(run.peak_before, run.peak_after);
  run.matmul_peak = matmul_peak_for(GgmlType::kQ4_0, run.peak);
  const Json json = prefill_cell_report(run, PrefillCell{512, 2.0, 400e9, 40e9}).to_json();
  EXPECT_DOUBLE_EQ(json["peak_before_gop_per_s"].get<double>(), 400);
  EXPECT_DOUBLE_EQ(json["peak_after_gop_per_s"].get<double>(), 800);
  EXPECT_DOUBLE_EQ(json["peak_gop_per_s"].get<double>(), 800);
  EXPECT_DOUBLE_EQ(json["matmul_fraction_of_peak"].get<double>(), 0.25);
  // An F16 model is held against the f32 figures before and after.
  run.matmul_peak = matmul_peak_for(GgmlType::kF16, run.peak);
  run.peak_after.f32->ops_per_s = 150e9;
  const Json f16 = prefill_cell_report(run, PrefillCell{512, 2.0, 400e9, 40e9}).to_json();
  EXPECT_DOUBLE_EQ(f16["peak_before_gop_per_s"].get<double>(), 200);
  EXPECT_DOUBLE_EQ(f16["peak_after_gop_per_s"].get<double>(), 150);
}

TEST(RooflineTest, PrefillFractionsAreAchievedOverTheMeasuredPeak) {
  PrefillRun run = run_of(all_peaks());
  run.attention_products = "amx tiles (tdpbssd, tdpbusd)";
  PrefillCell cell{512, 2.0, 400e9, 40e9};
  const Json json = prefill_cell_report(run, cell).to_json();
  EXPECT_DOUBLE_EQ(json["prefill_tok_per_s"].get<double>(), 256);
  EXPECT_DOUBLE_EQ(json["matmul_gop_per_s"].get<double>(), 200);
  EXPECT_DOUBLE_EQ(json["attention_gflop_per_s"].get<double>(), 20);
  EXPECT_DOUBLE_EQ(json["all_gop_per_s"].get<double>(), 220);
  EXPECT_DOUBLE_EQ(json["matmul_fraction_of_peak"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(json["all_fraction_of_peak"].get<double>(), 0.275);
  EXPECT_EQ(json["peak_kind"], "int8");
  EXPECT_EQ(json["peak_instruction"], "vpdpbusd zmm");
  EXPECT_EQ(json["attention_products"], "amx tiles (tdpbssd, tdpbusd)");
}

TEST(RooflineTest, EveryPrefillCellHasTheSameKeysWithOrWithoutAPeak) {
  const Json measured = prefill_cell_report(run_of(all_peaks()), PrefillCell{64, 0.5, 1e9, 1e8}).to_json();
  const Json scalar = prefill_cell_report(run_of(CpuPeak{}), PrefillCell{2048, 3.0, 1e10, 1e9}).to_json();
  std::vector<std::string> keys_measured, keys_scalar;
  for (const auto& [key, value] : measured.items()) keys_measured.push_back(key);
  for (const auto& [key, value] : scalar.items()) keys_scalar.push_back(key);
  EXPECT_EQ(keys_measured, keys_scalar);
  // No peak measured (scalar level): null, never a made-up fraction.
  EXPECT_TRUE(scalar["matmul_fraction_of_peak"].is_null());
  EXPECT_TRUE(scalar["peak_gop_per_s"].is_null());
  EXPECT_FALSE(measured["matmul_fraction_of_peak"].is_null());
}

TEST(RooflineTest, DecodeRowsReportWeightsPlusKvBytesPerToken) {
  DecodeRun run;
  run.weight_bytes_per_token = 1e6;
  run.bandwidth_bytes_per_s = 3e7;  // the run's best pass
  DecodeCell cell;
  cell.context = 4096;
  cell.kv = "f16";
  cell.store = "f16";
  cell.tok_per_s = 10;
  cell.kv_bytes_per_token = 5e5;
  cell.achieved_bytes_per_s = (1e6 + 5e5) * 10;
  cell.bandwidth_bytes_per_s = 2e7;  // this row's best pass: shown, not divided by
  run.cells.push_back(cell);
  const Json row = decode_json(run)["rows"][0];
  EXPECT_EQ(row["weight_plus_kv_bytes_per_token"].get<double>(), 1.5e6);
  EXPECT_DOUBLE_EQ(row["achieved_gb_per_s"].get<double>(), 0.015);
  EXPECT_DOUBLE_EQ(row["ratio_to_bandwidth"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(row["memory_read_gb_per_s"].get<double>(), 0.02);
  EXPECT_DOUBLE_EQ(decode_json(run)["memory_read_best_gb_per_s"].get<double>(), 0.03);
  EXPECT_EQ(decode_json(run)["memory_read_best_prefetch"].get<std::string>(), kReadPrefetches[0].name);
  run.bandwidth_prefetch = 2;  // the best pass's software prefetch, by name
  EXPECT_EQ(decode_json(run)["memory_read_best_prefetch"].get<std::string>(), kReadPrefetches[2].name);
}

TEST(RooflineTest, AdjacentRatioDividesEachStepByThePassAfterIt) {
  // 1 MB a token; steps of 1 / 2 / 4 ms (1 / 0.5 / 0.25 GB/s) each followed
  // by a pass of 2 / 0.5 / 1 GB/s: ratios 0.5, 1, 0.25, median 0.5, where
  // the run's best pass (2 GB/s) against the median step (0.5 GB/s) gives
  // 0.25.
  EXPECT_DOUBLE_EQ(adjacent_ratio(1e6, {1e-3, 2e-3, 4e-3}, {2e9, 5e8, 1e9}), 0.5);
  // A step paired with another pass gives another ratio: the pairing counts.
  EXPECT_DOUBLE_EQ(adjacent_ratio(1e6, {1e-3, 2e-3, 4e-3}, {5e8, 2e9, 1e9}), 0.25);
  // Nothing to pair, or a pass missing: 0, never a made-up figure.
  EXPECT_EQ(adjacent_ratio(1e6, {}, {}), 0.0);
  EXPECT_EQ(adjacent_ratio(1e6, {1e-3, 2e-3}, {1e9}), 0.0);
  EXPECT_EQ(adjacent_ratio(1e6, {1e-3}, {0.0}), 0.0);
}

TEST(RooflineTest, DecodeRowsCarryTheAdjacentRatio) {
  DecodeRun run;
  run.weight_bytes_per_token = 1e6;
  run.bandwidth_bytes_per_s = 3e7;
  DecodeCell cell;
  cell.tok_per_s = 10;
  cell.achieved_bytes_per_s = 1e7;
  cell.adjacent_ratio = 0.875;
  const int gate_up = static_cast<int>(StepPart::kGateUp);
  run.part_weight_bytes[gate_up] = 5e5;
  cell.part_seconds[gate_up] = 0.05;
  cell.part_adjacent_ratio[gate_up] = 0.625;
  run.cells.push_back(cell);
  const Json row = decode_json(run)["rows"][0];
  EXPECT_DOUBLE_EQ(row["ratio_to_adjacent_read"].get<double>(), 0.875);
  // Every weight product carries its own; a part without weights has none.
  EXPECT_DOUBLE_EQ(row["parts"][gate_up]["ratio_to_adjacent_read"].get<double>(), 0.625);
  EXPECT_FALSE(row["parts"][static_cast<int>(StepPart::kGlu)].contains("ratio_to_adjacent_read"));
}

}  // namespace
}  // namespace baton::cli
