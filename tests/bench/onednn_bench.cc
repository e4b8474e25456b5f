// Our packed prefill kernels against oneDNN (Debian's libdnnl, 2.6) on the
// same CPU, shapes and thread count, in one run, each as a fraction of the
// int8 (or f32 FMA) peak measured in that run (cli::measure_cpu_peak, the
// figure `baton bench prefill` divides by). Built when CMake finds oneDNN.
//
//   build/bin/baton_microbench --benchmark_filter='Onednn|OursPrefill'
//       --benchmark_min_time=0.3
//
// Without OMP_PROC_BIND: libgomp binds the main thread to one place when it
// loads, before any benchmark, and the threads our pool starts inherit that
// mask, so a 2-thread pool ran on one CPU (the fifteenth session's table was
// taken so, and understated our 2-thread rows about 2x). Every benchmark here
// refuses to run when the calling thread may use fewer CPUs than it asks for.
//
// What each computes for one weight matrix (rows x cols, the Llama-3.2-1B
// projections: 2048 x 2048, 8192 x 2048, 2048 x 8192) and a micro-batch of
// `tokens` activation rows:
//   BM_OnednnGemmU8S8S32: dnnl_gemm_u8s8s32, one int32 dot per (token, row)
//     over all columns: int8 x int8 with no per-block scales, so less work
//     per product than Q4_0 / Q8_0 (one scale FMA per 32 columns). The
//     activations enter as u8 = x + 128 with ao = 128 (x in [-127, 127], as
//     our Q8_0 activations). Counter `exact`: 1 when every checked output
//     equals the exact integer (int64 reference), 0 when oneDNN's
//     intermediate int16 sums saturated (its documentation warns of this on
//     CPUs without VNNI).
//   BM_OnednnSgemm: dnnl_sgemm on f32 weights (the F16 weights converted once).
//   BM_OursPrefill: matmul() on the engine's packed Q4_0 / Q8_0 weights, and
//     on F16 weights (the exact f32 path), the engine's thread pool.
// ops = 2 x tokens x rows x cols for every one of them.
#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/cpu/matmul.h"
#include "common/util/fp16.h"
#include "common/util/thread_pool.h"
#include "cpu_peak.h"

namespace baton {
namespace {

ThreadPool& pool_of(int n_threads) {
  static std::unique_ptr<ThreadPool> pools[3];
  const int n = std::clamp(n_threads, 1, 2);
  if (!pools[n]) pools[n] = std::make_unique<ThreadPool>(n);
  return *pools[n];
}

// False (and the benchmark skipped with the reason) when the calling thread
// may run on fewer CPUs than `threads`: its pool's workers would share them.
bool cpus_suffice(benchmark::State& state, int threads) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) >= threads) return true;
  state.SkipWithError(("the calling thread may run on " + std::to_string(CPU_COUNT(&set)) + " CPU(s), fewer than " +
                       std::to_string(threads) + " threads (OMP_PROC_BIND binds it when libgomp loads; unset it)")
                          .c_str());
  return false;
}

// The peaks of n_threads threads, measured just before a benchmark's timed
// loop (a shared VM's speed moves within minutes; each figure is held
// against the machine's moment).
cli::CpuPeak peak_of(int n_threads) { return cli::measure_cpu_peak(pool_of(n_threads)); }

void set_peak_counter(benchmark::State& state, const char* name, double ops,
                      const std::optional<cli::PeakFigure>& peak) {
  if (!peak) return;
  state.counters[name] = benchmark::Counter(ops / peak->ops_per_s, benchmark::Counter::kIsRate);
}

// Args: tokens, rows, cols, threads.
void BM_OnednnGemmU8S8S32(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  if (!cpus_suffice(state, threads)) return;
  std::mt19937 rng(7);
  std::vector<uint8_t> a(static_cast<size_t>(m * k));  // activations + 128
  std::vector<int8_t> b(static_cast<size_t>(n * k));   // weights, row-major [rows, cols]
  for (auto& x : a) x = static_cast<uint8_t>(1 + rng() % 255);  // x + 128, x in [-127, 127]
  for (auto& w : b) w = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
  std::vector<int32_t> c(static_cast<size_t>(m * n));
  const int32_t co = 0;
  omp_set_num_threads(threads);
  const double call_ops = 2.0 * static_cast<double>(m * n * k);
  const cli::CpuPeak peak = peak_of(threads);
  for (auto _ : state) {
    // C[m, n] = (A - 128)[m, k] x B^T: B is [n, k] row-major, op(B) = B^T.
    if (dnnl_gemm_u8s8s32('N', 'T', 'F', m, n, k, 1.0f, a.data(), k, 128, b.data(), k, 0, 0.0f, c.data(), n, &co) !=
        dnnl_success) {
      return state.SkipWithError("dnnl_gemm_u8s8s32 failed");
    }
    benchmark::DoNotOptimize(c.data());
  }
  bool exact = true;
  for (int64_t i = 0; i < m; i += std::max<int64_t>(1, m / 7)) {
    for (int64_t j = 0; j < n; j += std::max<int64_t>(1, n / 13)) {
      int64_t want = 0;
      for (int64_t e = 0; e < k; ++e) want += (int64_t{a[i * k + e]} - 128) * b[j * k + e];
      exact = exact && want == c[i * n + j];
    }
  }
  state.counters["exact"] = exact ? 1 : 0;
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(call_ops));
  set_peak_counter(state, "of_int8_peak", static_cast<double>(state.iterations()) * call_ops, peak.int8);
  state.SetLabel("oneDNN u8s8s32, no block scales");
}

void BM_OnednnSgemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  if (!cpus_suffice(state, threads)) return;
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(n * k)), c(static_cast<size_t>(m * n));
  for (float& x : a) x = dist(rng);
  for (float& w : b) w = fp16_to_fp32(fp32_to_fp16(dist(rng)));  // F16 weights, converted once
  omp_set_num_threads(threads);
  const double ops = 2.0 * static_cast<double>(m * n * k);
  const cli::CpuPeak peak = peak_of(threads);
  for (auto _ : state) {
    if (dnnl_sgemm('N', 'T', m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c.data(), n) != dnnl_success) {
      return state.SkipWithError("dnnl_sgemm failed");
    }
    benchmark::DoNotOptimize(c.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(ops));
  set_peak_counter(state, "of_f32_peak", static_cast<double>(state.iterations()) * ops, peak.f32);
  state.SetLabel("oneDNN sgemm, f32 weights");
}

// Args: type (0 Q4_0, 1 Q8_0, 2 F16), tokens, rows, cols, threads.
void BM_OursPrefill(benchmark::State& state) {
  const GgmlType type = state.range(0) == 0 ? GgmlType::kQ4_0 : state.range(0) == 1 ? GgmlType::kQ8_0 : GgmlType::kF16;
  const int64_t m = state.range(1), rows = state.range(2), cols = state.range(3);
  const int threads = static_cast<int>(state.range(4));
  if (!cpus_suffice(state, threads)) return;
  std::mt19937 rng(9);
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * ggml_row_bytes(type, cols)));
  for (auto& x : bytes) x = static_cast<uint8_t>(rng());
  const uint16_t scale = fp32_to_fp16(0.01f);
  if (type == GgmlType::kQ4_0) {
    auto* blocks = reinterpret_cast<BlockQ4_0*>(bytes.data());
    for (int64_t i = 0; i < rows * cols / kQK4_0; ++i) blocks[i].d = scale;
  } else if (type == GgmlType::kQ8_0) {
    auto* blocks = reinterpret_cast<BlockQ8_0*>(bytes.data());
    for (int64_t i = 0; i < rows * cols / kQK8_0; ++i) blocks[i].d = scale;
  } else {
    auto* halves = reinterpret_cast<uint16_t*>(bytes.data());
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (int64_t i = 0; i < rows * cols; ++i) halves[i] = fp32_to_fp16(dist(rng));
  }
  WeightMatrix w{type, bytes.data(), rows, cols};
  ThreadPool& pool = pool_of(threads);
  const int64_t packed_bytes = packed_weight_bytes(type, rows, cols);
  std::unique_ptr<uint8_t, decltype(&std::free)> packed(nullptr, &std::free);
  if (packed_bytes > 0) {
    packed.reset(static_cast<uint8_t*>(std::aligned_alloc(64, static_cast<size_t>((packed_bytes + 63) / 64 * 64))));
    pack_weight_matrix(w, packed.get(), &pool);
    w.packed = packed.get();
  }
  std::vector<float> x(static_cast<size_t>(m * cols)), y(static_cast<size_t>(m * rows));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  const double ops = 2.0 * static_cast<double>(m * rows * cols);
  const cli::CpuPeak peak = peak_of(threads);
  {
    ThreadPool::Hot hot(pool);
    for (auto _ : state) {
      matmul(w, x.data(), m, y.data(), threads > 1 ? &pool : nullptr);
      benchmark::DoNotOptimize(y.data());
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(ops));
  const double all = static_cast<double>(state.iterations()) * ops;
  if (type == GgmlType::kF16) {
    set_peak_counter(state, "of_f32_peak", all, peak.f32);
  } else {
    set_peak_counter(state, "of_int8_peak", all, peak.int8);
  }
  state.SetLabel(std::string(ggml_type_name(type)) + (packed_bytes > 0 ? " packed" : ""));
}

// Shape by shape, each library's kernel beside ours (a shared VM drifts
// between benchmarks minutes apart): the weight matrices of the 1B model's
// projections, the engine's 64-token micro-batch and a 512-token one.
[[maybe_unused]] const bool kRegistered = [] {
  // This file links libgomp into the whole microbenchmark binary: say so at
  // start when it has already bound the main thread (every pool of every
  // benchmark inherits the mask).
  cpu_set_t set;
  CPU_ZERO(&set);
  const unsigned online = std::thread::hardware_concurrency();
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && static_cast<unsigned>(CPU_COUNT(&set)) < online) {
    std::fprintf(stderr,
                 "warning: this thread may run on %d of %u CPUs (OMP_PROC_BIND=%s); the thread pools of every "
                 "benchmark inherit that mask\n",
                 CPU_COUNT(&set), online, std::getenv("OMP_PROC_BIND") ? std::getenv("OMP_PROC_BIND") : "unset");
  }
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{2048, 2048}, {8192, 2048}, {2048, 8192}}) {
    for (const int64_t tokens : {64, 512}) {
      for (const int64_t threads : {2, 1}) {
        if (threads == 1 && (tokens != 64 || rows != 2048 || cols != 2048)) continue;
        const std::vector<int64_t> gemm{tokens, rows, cols, threads};
        const std::vector<std::string> gemm_names{"tokens", "rows", "cols", "threads"};
        benchmark::RegisterBenchmark("BM_OnednnGemmU8S8S32", BM_OnednnGemmU8S8S32)
            ->Args(gemm)->ArgNames(gemm_names)->UseRealTime();
        for (const int64_t type : {0, 1}) {
          benchmark::RegisterBenchmark("BM_OursPrefill", BM_OursPrefill)
              ->Args({type, tokens, rows, cols, threads})
              ->ArgNames({"type", "tokens", "rows", "cols", "threads"})
              ->UseRealTime();
        }
        benchmark::RegisterBenchmark("BM_OnednnSgemm", BM_OnednnSgemm)->Args(gemm)->ArgNames(gemm_names)->UseRealTime();
        benchmark::RegisterBenchmark("BM_OursPrefill", BM_OursPrefill)
            ->Args({2, tokens, rows, cols, threads})
            ->ArgNames({"type", "tokens", "rows", "cols", "threads"})
            ->UseRealTime();
      }
    }
  }
  return true;
}();

}  // namespace
}  // namespace baton
