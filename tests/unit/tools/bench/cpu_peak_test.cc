// The peak loops of tools/bench/cpu_peak.h: a roofline fraction is only as
// honest as its denominator, so every loop must execute exactly the
// instructions it is credited with (the accumulators' final values prove the
// count), its time must grow with the count, and the measured rate must stay
// below what any x86 core can issue.
#include "cpu_peak.h"

#include <algorithm>
#include <chrono>

#include <gtest/gtest.h>

#include "common/util/cpu_features.h"
#include "cpu_peak_kernels.h"

namespace baton::cli {
namespace {

// The sum run() must return: every lane of every accumulator gained
// lane_gain(a, b) once per instruction.
double expected_sum(const PeakLoop& loop, int64_t iterations, double a, double b) {
  return static_cast<double>(loop.lanes) * static_cast<double>(loop.instructions_per_iteration) *
         static_cast<double>(iterations) * loop.lane_gain(a, b);
}

std::vector<PeakLoop> active_loops() {
  std::vector<PeakLoop> loops;
  for (const char* name : {"int8", "bf16", "f32"}) {
    if (std::optional<PeakLoop> loop = peak_loop(name)) loops.push_back(*loop);
  }
  return loops;
}

TEST(CpuPeakTest, EveryLoopExecutesExactlyTheCountedInstructions) {
  const std::vector<PeakLoop> loops = active_loops();
  if (loops.empty()) GTEST_SKIP() << "scalar SIMD level: no peak loops";
  for (const PeakLoop& loop : loops) {
    // int8: a u8, b negative s8; floats: values exact in bf16.
    const double a = loop.name == "int8" ? 3 : 0.5, b = loop.name == "int8" ? -5 : 3;
    for (int64_t iterations : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{4096}}) {
      EXPECT_EQ(loop.run(iterations, a, b), expected_sum(loop, iterations, a, b))
          << loop.instruction << ", " << iterations << " iterations";
    }
  }
}

TEST(CpuPeakTest, Avx2LoopsCountEveryInstruction) {
  if (best_simd_level() < SimdLevel::kAvx2) GTEST_SKIP() << "no AVX2";
  // 8 int32 lanes x 8 chains, each triple adds 4 * a * b; 8 f32 lanes x 12 chains.
  EXPECT_EQ(peak_kernels::int8_dot_avx2(1000, 3, -5), 8 * 8 * 1000 * 4 * 3 * -5);
  // 2 * 100 * 127 fits int16 (vpmaddubsw saturates past it).
  EXPECT_EQ(peak_kernels::int8_dot_avx2(3, 100, 127), 8 * 8 * 3 * 4 * 100 * 127);
  EXPECT_EQ(peak_kernels::f32_fma_avx2(1000, 0.5f, 3.0f), 8.0 * 12 * 1000 * 1.5);
}

TEST(CpuPeakTest, Avx512LoopsCountEveryInstruction) {
  if (best_simd_level() < SimdLevel::kAvx512) GTEST_SKIP() << "no AVX-512";
  // 16 int32 lanes x 16 chains, each vpdpbusd adds 4 * a * b per lane.
  EXPECT_EQ(peak_kernels::int8_dot_avx512(1000, 3, -5), int64_t{16} * 16 * 1000 * 4 * 3 * -5);
  EXPECT_EQ(peak_kernels::int8_dot_avx512(5, 255, -128), int64_t{16} * 16 * 5 * 4 * 255 * -128);
  EXPECT_EQ(peak_kernels::f32_fma_avx512(1000, 0.5f, 3.0f), 16.0 * 16 * 1000 * 1.5);
  if (cpu_features().avx512bf16) {
    EXPECT_EQ(peak_kernels::bf16_dot_avx512bf16(1000, 0.5f, 3.0f), 16.0 * 16 * 1000 * 2 * 1.5);
  }
}

// The block-step mixes (the microbenchmark's ceiling of the packed Q4_0
// kernel) run every step they are asked for: 12 accumulators x 16 lanes
// each gain 32 x nibble per step, from unpacked bytes or from both nibbles
// of a packed byte.
TEST(CpuPeakTest, Q4_0BlockStepsRunEveryStep) {
  if (best_simd_level() < SimdLevel::kAvx512) GTEST_SKIP() << "no AVX-512";
  using peak_kernels::BlockStepMix;
  for (const BlockStepMix mix :
       {BlockStepMix::kUnpackedPanel, BlockStepMix::kPackedNibbles, BlockStepMix::kNoScaleMultiply}) {
    for (const int64_t steps : {int64_t{0}, int64_t{1}, int64_t{17}, int64_t{1000}}) {
      for (const uint8_t nibble : {uint8_t{1}, uint8_t{3}, uint8_t{15}}) {
        EXPECT_EQ(peak_kernels::q4_0_block_steps_avx512(steps, mix, nibble), 12.0 * 16 * 32 * nibble * steps)
            << static_cast<int>(mix) << ", " << steps << " steps, nibble " << int{nibble};
      }
    }
  }
  // Without the scales the int32 sums go in as raw bits: not 0 once a step ran.
  EXPECT_EQ(peak_kernels::q4_0_block_steps_avx512(0, BlockStepMix::kDotProductsOnly, 3), 0.0);
  EXPECT_NE(peak_kernels::q4_0_block_steps_avx512(5, BlockStepMix::kDotProductsOnly, 3), 0.0);
}

// Best of several timings of loop.run(iterations): the least disturbed one.
double best_seconds(const PeakLoop& loop, int64_t iterations) {
  double best = 1e300;
  for (int i = 0; i < 7; ++i) {
    const auto start = std::chrono::steady_clock::now();
    volatile double kept = loop.run(iterations, 1, 1);
    (void)kept;
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

TEST(CpuPeakTest, LoopTimeGrowsWithTheIterationCount) {
  const std::vector<PeakLoop> loops = active_loops();
  if (loops.empty()) GTEST_SKIP() << "scalar SIMD level: no peak loops";
  for (const PeakLoop& loop : loops) {
    const int64_t n = 200'000;  // ~1 ms at 2 instructions per cycle and 4 GHz
    const double ratio = best_seconds(loop, 4 * n) / best_seconds(loop, n);
    // 4x the work: ~4x the time (loose: a shared machine, timer granularity).
    EXPECT_GT(ratio, 2.5) << loop.instruction;
    EXPECT_LT(ratio, 8.0) << loop.instruction;
  }
}

TEST(CpuPeakTest, MeasuredPeaksAreBelowWhatACoreCanIssue) {
  ThreadPool pool(2);
  const CpuPeak peak = measure_cpu_peak(pool, CpuPeakOptions{3, 0.005});
  EXPECT_EQ(peak.threads, 2);
  if (active_simd_level() == SimdLevel::kScalar) {
    EXPECT_FALSE(peak.int8.has_value());
    return;
  }
  ASSERT_TRUE(peak.int8.has_value());
  ASSERT_TRUE(peak.f32.has_value());
  EXPECT_EQ(peak.bf16.has_value(), active_simd_level() == SimdLevel::kAvx512 && cpu_features().avx512bf16);
  // No x86 core issues more than 4 vector multiply instructions per cycle or
  // runs above 6 GHz: a rate past that means work was credited, not done.
  // A rate below 1% of it on every thread means the loop stalled.
  for (const std::optional<PeakFigure>& figure : {peak.int8, peak.bf16, peak.f32}) {
    if (!figure) continue;
    const double ceiling = 2 * 4 * 6e9 * figure->ops_per_instruction;  // 2 threads
    EXPECT_LT(figure->ops_per_s, ceiling) << figure->instruction;
    EXPECT_GT(figure->ops_per_s, ceiling / 400) << figure->instruction;
  }
}

}  // namespace
}  // namespace baton::cli
