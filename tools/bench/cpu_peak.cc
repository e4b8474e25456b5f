#include "cpu_peak.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "common/util/check.h"
#include "common/util/cpu_features.h"
#include "cpu_peak_kernels.h"

namespace baton::cli {
namespace {

using Clock = std::chrono::steady_clock;

double int8_gain(double a, double b) { return 4.0 * a * b; }
double bf16_gain(double a, double b) { return 2.0 * a * b; }
double f32_gain(double a, double b) { return a * b; }

double run_int8_avx512(int64_t n, double a, double b) {
  return static_cast<double>(peak_kernels::int8_dot_avx512(n, static_cast<uint8_t>(a), static_cast<int8_t>(b)));
}
double run_int8_avx2(int64_t n, double a, double b) {
  return static_cast<double>(peak_kernels::int8_dot_avx2(n, static_cast<uint8_t>(a), static_cast<int8_t>(b)));
}
double run_bf16_avx512(int64_t n, double a, double b) {
  return peak_kernels::bf16_dot_avx512bf16(n, static_cast<float>(a), static_cast<float>(b));
}
double run_f32_avx512(int64_t n, double a, double b) {
  return peak_kernels::f32_fma_avx512(n, static_cast<float>(a), static_cast<float>(b));
}
double run_f32_avx2(int64_t n, double a, double b) {
  return peak_kernels::f32_fma_avx2(n, static_cast<float>(a), static_cast<float>(b));
}

// Whole-machine ops/s of `loop`: every thread of `pool` runs it at once; the
// wall time of the slowest thread counts (the pass ends when all are done).
PeakFigure measure_loop(ThreadPool& pool, const PeakLoop& loop, const CpuPeakOptions& options) {
  const int threads = pool.size();
  std::vector<double> sinks(static_cast<size_t>(threads) * 8, 0.0);  // a cache line per thread
  auto pass = [&](int64_t iterations) {
    const auto start = Clock::now();
    pool.parallel_for(threads, [&](int64_t begin, int64_t end) {
      // Inputs 1 x 1: no overflow to infinity or wrap that matters, no denormals.
      for (int64_t t = begin; t < end; ++t) sinks[static_cast<size_t>(t) * 8] += loop.run(iterations, 1.0, 1.0);
    });
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  int64_t iterations = 1 << 12;
  while (pass(iterations) < options.min_pass_seconds && iterations < (int64_t{1} << 34)) iterations *= 2;
  double best_seconds = 1e300;
  for (int i = 0; i < options.passes; ++i) best_seconds = std::min(best_seconds, pass(iterations));
  double kept = 0;
  for (double x : sinks) kept += x;
  // Keeps the results observable (the loops return them; this makes the
  // whole call chain's value used).
  asm volatile("" : : "g"(kept) : "memory");
  const double instructions = static_cast<double>(threads) * static_cast<double>(iterations) *
                              static_cast<double>(loop.instructions_per_iteration);
  return PeakFigure{loop.instruction, loop.ops_per_instruction, instructions * loop.ops_per_instruction / best_seconds};
}

}  // namespace

std::optional<PeakLoop> peak_loop(const std::string& name) {
  const SimdLevel level = active_simd_level();
  if (level == SimdLevel::kAvx512) {
    const int n = peak_kernels::kPeakAccumulators;
    if (name == "int8") return PeakLoop{"int8", "vpdpbusd zmm", 128, n, 16, run_int8_avx512, int8_gain};
    if (name == "f32") return PeakLoop{"f32", "vfmadd231ps zmm", 32, n, 16, run_f32_avx512, f32_gain};
    if (name == "bf16" && cpu_features().avx512bf16) {
      return PeakLoop{"bf16", "vdpbf16ps zmm", 64, n, 16, run_bf16_avx512, bf16_gain};
    }
  } else if (level == SimdLevel::kAvx2) {
    if (name == "int8") {
      return PeakLoop{"int8", "vpmaddubsw+vpmaddwd+vpaddd ymm", 64, peak_kernels::kPeakAccumulatorsAvx2Int8, 8,
                      run_int8_avx2, int8_gain};
    }
    if (name == "f32") {
      return PeakLoop{"f32", "vfmadd231ps ymm", 16, peak_kernels::kPeakAccumulatorsAvx2Fma, 8, run_f32_avx2, f32_gain};
    }
  }
  return std::nullopt;
}

CpuPeak measure_cpu_peak(ThreadPool& pool, const CpuPeakOptions& options) {
  CpuPeak peak;
  peak.threads = pool.size();
  peak.level = simd_level_name(active_simd_level());
  if (std::optional<PeakLoop> loop = peak_loop("int8")) peak.int8 = measure_loop(pool, *loop, options);
  if (std::optional<PeakLoop> loop = peak_loop("bf16")) peak.bf16 = measure_loop(pool, *loop, options);
  if (std::optional<PeakLoop> loop = peak_loop("f32")) peak.f32 = measure_loop(pool, *loop, options);
  return peak;
}

CpuPeak larger_peaks(const CpuPeak& a, const CpuPeak& b) {
  BATON_CHECK(a.threads == b.threads && a.level == b.level, "peaks of different pools or levels");
  auto larger = [](const std::optional<PeakFigure>& x, const std::optional<PeakFigure>& y) {
    if (!x || !y) return x ? x : y;
    return x->ops_per_s >= y->ops_per_s ? x : y;
  };
  CpuPeak out = a;
  out.int8 = larger(a.int8, b.int8);
  out.bf16 = larger(a.bf16, b.bf16);
  out.f32 = larger(a.f32, b.f32);
  return out;
}

}  // namespace baton::cli
