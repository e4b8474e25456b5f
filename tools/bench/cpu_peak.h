// The CPU's in-cache arithmetic peak, measured: the instructions a roofline
// divides by, run from registers on every pool thread at once (the threads a
// bench computes with), best of several short passes. Benches report their
// achieved ops/s as a fraction of these figures (bench prefill --local).
//
// Kernels (cpu_peak_kernels.h) are chosen by active_simd_level(), as the
// matmul kernels are, so BATON_SIMD=avx2 measures the AVX2 peak the AVX2
// kernels can reach:
//   int8: avx512 vpdpbusd zmm (64 MACs = 128 ops per instruction);
//         avx2   vpmaddubsw + vpmaddwd + vpaddd ymm (32 MACs = 64 ops per triple)
//   bf16: avx512 with avx512_bf16: vdpbf16ps zmm (32 MACs = 64 flops); else none
//   f32:  avx512 vfmadd231ps zmm (32 flops); avx2 vfmadd231ps ymm (16 flops)
// At the scalar level nothing is measured (no kernel of that level is meant
// to reach a peak).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/util/thread_pool.h"

namespace baton::cli {

// One measured peak of the whole machine.
struct PeakFigure {
  std::string instruction;        // e.g. "vpdpbusd zmm"
  double ops_per_instruction = 0; // 2 x MACs of one instruction (or triple)
  double ops_per_s = 0;           // all threads together, best pass
};

struct CpuPeak {
  int threads = 0;
  std::string level;               // simd_level_name of the kernels used
  std::optional<PeakFigure> int8;  // int8 dot products (u8 x s8 -> s32)
  std::optional<PeakFigure> bf16;  // bf16 dot products into f32
  std::optional<PeakFigure> f32;   // f32 fused multiply-add
};

struct CpuPeakOptions {
  int passes = 10;                // timed passes per kernel; the best counts (a shared machine)
  double min_pass_seconds = 0.02; // iterations grow until one pass takes this long
};

// Measures every peak the active SIMD level has, on all of `pool`'s threads.
CpuPeak measure_cpu_peak(ThreadPool& pool, const CpuPeakOptions& options = {});

// Figure by figure, the larger of two measurements of the same pool (a
// figure only one has is that one's). A bench that measures before and
// after its work holds the work against the machine's better moment: on a
// shared VM the compute two threads get can halve and come back within
// minutes.
CpuPeak larger_peaks(const CpuPeak& a, const CpuPeak& b);

// A peak loop of the active level, for the bench and the tests:
// `run(iterations, a, b)` executes iterations x `instructions_per_iteration`
// instructions (maddubs+madd+add triples for AVX2 int8) with every input
// element a (first operand) or b (second; int8: a as u8, b as s8) and returns
// the sum of every accumulator lane; each instruction adds `lane_gain(a, b)`
// to each of `lanes` lanes (int8: int32, wrapping; bf16: a, b rounded).
struct PeakLoop {
  std::string name;  // "int8", "bf16", "f32"
  std::string instruction;
  double ops_per_instruction = 0;
  int64_t instructions_per_iteration = 0;  // independent accumulators
  int lanes = 0;                           // 32-bit lanes per accumulator
  double (*run)(int64_t iterations, double a, double b) = nullptr;
  double (*lane_gain)(double a, double b) = nullptr;
};
// The loop `name` ("int8", "bf16", "f32") of the active SIMD level; nullopt
// where that level (or this CPU) has none.
std::optional<PeakLoop> peak_loop(const std::string& name);

}  // namespace baton::cli
