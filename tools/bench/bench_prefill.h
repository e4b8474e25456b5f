// baton bench prefill --local: what one run measures (cmd_bench_prefill.cc)
// and its output (bench_prefill_report.cc): one cell per prompt size, each
// held against the CPU peak measured in the same run (cpu_peak.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_report.h"
#include "cpu_peak.h"
#include "roofline.h"

namespace baton::cli {

// One prompt size.
struct PrefillCell {
  int64_t tokens = 0;
  double seconds = 0;          // the prefill of all `tokens`, one call
  double matmul_ops = 0;       // 2 x layer matrix elements x tokens + 2 x output projection (last token only)
  double attention_flops = 0;  // attention_flops(geometry, 0, tokens): QK^T and PV, windows respected
};

// What every cell of a run shares.
struct PrefillRun {
  std::string model;
  int64_t batch = 0;
  int64_t threads = 0;
  std::string kernels;  // SIMD level of the engine's kernels
  std::string kv_store;
  // What computes attention's two products: "amx tiles (tdpbssd, tdpbusd)"
  // (an INT8 store on the AVX-512 kernels where AMX-INT8 is usable and
  // BATON_AMX is not 0: calls of 16 query heads or more) or "vector".
  std::string attention_products;
  // The peaks of the cell being reported, measured on the engine's pool
  // just before it (after the previous cell) and just after it; the cell is
  // held against the larger, figure by figure (larger_peaks).
  CpuPeak peak_before, peak_after;
  CpuPeak peak;
  MatmulPeak matmul_peak;
  std::vector<PrefillCell> cells;
};

// One report per cell with the same keys for every cell (a peak the level
// has not measured is null in JSON, "not measured" in the table).
BenchReport prefill_cell_report(const PrefillRun& run, const PrefillCell& cell);

}  // namespace baton::cli
