// Kernel micro-benchmarks: matmul decode (n_tokens = 1, memory bound: bytes/s
// of weights streamed) and prefill (n_tokens = 64, compute bound: items/s =
// flop/s), next to a plain memory-read baseline so ratios come from one run.
// BM_MatmulDecodeVsReadBandwidth (Q4_0 vs the K-quants) reports the ratio itself.
//
//   build-kern/bin/baton_microbench --benchmark_min_time=0.2
//   build/bin/baton_microbench --benchmark_filter=VsReadBandwidth --benchmark_min_time=0.5
#include <benchmark/benchmark.h>
// (GCC 12's AVX-512 reductions read a deliberately undefined register:
// the same pragmas as the kernel files.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "common/cpu/matmul.h"
#include "common/engine/engine.h"
#include "common/model/model.h"
#include "common/util/check.h"
#include "common/util/fp16.h"
#include "common/util/cpu_features.h"
#include "common/util/huge_page_buffer.h"
#include "common/util/thread_pool.h"
#include "bench_decode.h"
#include "cpu_peak.h"
#include "cpu_peak_kernels.h"
#include "read_bandwidth.h"

namespace baton {
namespace {

// One pool per thread count, shared by all benchmarks (as the engine shares one).
ThreadPool* pool_for(int n_threads) {
  static std::unique_ptr<ThreadPool> pools[9];
  if (n_threads <= 1) return nullptr;
  if (!pools[n_threads]) pools[n_threads] = std::make_unique<ThreadPool>(n_threads);
  return pools[n_threads].get();
}

constexpr GgmlType kBenchTypes[] = {GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kF16,
                                     GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

// Random but well-formed weights: sane fp16 scales and values, no NaN/denormals.
std::vector<uint8_t> make_weights(GgmlType type, int64_t rows, int64_t cols) {
  std::mt19937 rng(42);
  std::vector<uint8_t> bytes(rows * ggml_row_bytes(type, cols));
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  const uint16_t scale = fp32_to_fp16(0.01f);
  if (type == GgmlType::kQ4_0) {
    auto* blocks = reinterpret_cast<BlockQ4_0*>(bytes.data());
    for (int64_t i = 0; i < rows * cols / 32; ++i) blocks[i].d = scale;
  } else if (type == GgmlType::kQ8_0) {
    auto* blocks = reinterpret_cast<BlockQ8_0*>(bytes.data());
    for (int64_t i = 0; i < rows * cols / 32; ++i) blocks[i].d = scale;
  } else {
    auto* halves = reinterpret_cast<uint16_t*>(bytes.data());
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (int64_t i = 0; i < rows * cols; ++i) halves[i] = fp32_to_fp16(dist(rng));
  }
  return bytes;
}

// Random but well-formed K-quant blocks: random bytes (quants, 6-bit scales
// and mins, Q6_K's int8 scales) with small finite fp16 d (and dmin).
std::vector<uint8_t> make_kquant_weights(GgmlType type, int64_t rows, int64_t cols) {
  const int64_t block_bytes = type == GgmlType::kQ4_K   ? sizeof(BlockQ4_K)
                              : type == GgmlType::kQ5_K ? sizeof(BlockQ5_K)
                                                        : sizeof(BlockQ6_K);
  const int64_t n_blocks = rows * cols / kQK_K;
  std::mt19937 rng(42);
  std::vector<uint8_t> bytes(n_blocks * block_bytes);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  const uint16_t scale = fp32_to_fp16(0.001f);
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint8_t* block = bytes.data() + i * block_bytes;
    if (type == GgmlType::kQ6_K) {
      std::memcpy(block + offsetof(BlockQ6_K, d), &scale, 2);
    } else {
      std::memcpy(block, &scale, 2);      // d
      std::memcpy(block + 2, &scale, 2);  // dmin
    }
  }
  return bytes;
}

bool is_kquant(GgmlType type) {
  return type == GgmlType::kQ4_K || type == GgmlType::kQ5_K || type == GgmlType::kQ6_K;
}

// Args: type index into kBenchTypes, rows, cols, threads, n_tokens.
// packed: the weights packed first (pack_weight_matrix), as an engine does
// at load; skipped where the type has no packed layout on this CPU.
void run_matmul_bench(benchmark::State& state, bool packed) {
  const GgmlType type = kBenchTypes[state.range(0)];
  const int64_t rows = state.range(1), cols = state.range(2);
  const int n_threads = static_cast<int>(state.range(3));
  const int64_t n_tokens = state.range(4);
  const int64_t packed_bytes = packed ? packed_weight_bytes(type, rows, cols) : 0;
  if (packed && packed_bytes == 0) {
    state.SkipWithError("no packed layout for this type on this CPU");
    return;
  }
  const std::vector<uint8_t> weights =
      is_kquant(type) ? make_kquant_weights(type, rows, cols) : make_weights(type, rows, cols);
  std::vector<float> x(n_tokens * cols), y(n_tokens * rows);  // [n_tokens, cols], [n_tokens, rows]
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.1f - 0.8f;
  WeightMatrix w{type, weights.data(), rows, cols};
  std::unique_ptr<uint8_t, decltype(&std::free)> packed_copy(nullptr, &std::free);
  if (packed) {
    packed_copy.reset(static_cast<uint8_t*>(std::aligned_alloc(64, packed_bytes)));
    pack_weight_matrix(w, packed_copy.get(), pool_for(2));
    w.packed = packed_copy.get();
  }
  ThreadPool* pool = pool_for(n_threads);
  for (auto _ : state) {
    matmul(w, x.data(), n_tokens, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(weights.size()));
  state.SetItemsProcessed(state.iterations() * 2 * rows * cols * n_tokens);  // flop
  state.SetLabel(std::string(ggml_type_name(type)) + (packed ? " packed " : " ") + simd_level_name(active_simd_level()));
}

void BM_Matmul(benchmark::State& state) { run_matmul_bench(state, /*packed=*/false); }

void decode_and_prefill_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "rows", "cols", "threads", "tokens"});
  for (int64_t type = 0; type < 3; ++type)
    for (int64_t rows : {2048, 8192})
      for (int64_t threads : {1, 2}) b->Args({type, rows, 2048, threads, 1});
  // The K-quants' decode, beside BM_MatmulPacked's.
  for (int64_t type = 3; type < 6; ++type)
    for (int64_t threads : {1, 2}) b->Args({type, 2048, 2048, threads, 1});
  for (int64_t type = 0; type < 6; ++type)
    for (int64_t threads : {1, 2}) b->Args({type, 2048, 2048, threads, 64});
  // Prefill micro-batches of 256 tokens (the panel kernel's packing amortized further).
  for (int64_t type = 0; type < 3; ++type)
    for (int64_t threads : {1, 2}) b->Args({type, 2048, 2048, threads, 256});
  // 16 tokens: the smallest call the panel kernel takes, where its packing weighs most.
  for (int64_t type = 0; type < 2; ++type) b->Args({type, 2048, 2048, 1, 16});
}
BENCHMARK(BM_Matmul)->Apply(decode_and_prefill_args)->UseRealTime();

// BM_Matmul with the weights packed at load (pack_weight_matrix: Q4_0 on
// AVX2 and AVX-512, Q8_0 and Q4_K / Q5_K / Q6_K on AVX2), for before/after
// ratios against BM_Matmul on the same arguments in one run.
void BM_MatmulPacked(benchmark::State& state) { run_matmul_bench(state, /*packed=*/true); }

void packed_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "rows", "cols", "threads", "tokens"});
  for (int64_t type : {0, 1, 3, 4, 5})
    for (int64_t tokens : {1, 64})
      for (int64_t threads : {1, 2}) b->Args({type, 2048, 2048, threads, tokens});
  // Q8_0 at BM_Matmul's other shapes: decode on 8192 rows, prefill of 256 tokens.
  for (int64_t threads : {1, 2}) b->Args({1, 8192, 2048, threads, 1});
  for (int64_t threads : {1, 2}) b->Args({1, 2048, 2048, threads, 256});
  // Q4_0 decode on a matrix that stays in L2 (288 KiB): the kernel's own
  // rate, beside the 2048 x 2048 one from L3 and the read-bandwidth ones.
  for (int64_t threads : {1, 2}) b->Args({0, 512, 1024, threads, 1});
  // Q4_0 prefill at the 1B shape's FFN matrices (gate/up 8192 x 2048, down
  // 2048 x 8192), 64 tokens (the engine's micro-batch).
  for (int64_t threads : {1, 2}) b->Args({0, 8192, 2048, threads, 64});
  for (int64_t threads : {1, 2}) b->Args({0, 2048, 8192, threads, 64});
}
BENCHMARK(BM_MatmulPacked)->Apply(packed_args)->UseRealTime();

// The Q4_0 prefill block step's instruction mix alone, in L1, on one thread
// (cpu_peak_kernels.h, q4_0_block_steps_avx512): the most the packed kernel
// could reach if nothing but its own instructions bounded it. of_int8_peak:
// against one thread's vpdpbusd peak measured just before. Arg: mix 0 (the
// prefill kernel: weights unpacked once per chunk), 1 (the decode kernel:
// nibbles unpacked every step), 2 (mix 0 without the scales' convert,
// multiply and FMA), 3 (mix 0 without the multiply by the x scale).
void BM_Q4_0BlockStep(benchmark::State& state) {
  if (active_simd_level() != SimdLevel::kAvx512) {
    state.SkipWithError("the AVX-512 kernels' mix: not the active SIMD level");
    return;
  }
  const auto mix = static_cast<cli::peak_kernels::BlockStepMix>(state.range(0));
  ThreadPool one(1);
  const cli::CpuPeak peak = cli::measure_cpu_peak(one);
  constexpr int64_t kSteps = 4096;
  constexpr double kOpsPerStep = 96.0 * 128.0;  // 96 vpdpbusd zmm of 64 MACs
  for (auto _ : state) benchmark::DoNotOptimize(cli::peak_kernels::q4_0_block_steps_avx512(kSteps, mix, 3));
  const double ops = static_cast<double>(state.iterations()) * kSteps * kOpsPerStep;
  state.SetItemsProcessed(static_cast<int64_t>(ops));
  if (peak.int8) state.counters["of_int8_peak"] = benchmark::Counter(ops / peak.int8->ops_per_s, benchmark::Counter::kIsRate);
  using Mix = cli::peak_kernels::BlockStepMix;
  state.SetLabel(mix == Mix::kUnpackedPanel    ? "unpacked panel (prefill)"
                 : mix == Mix::kPackedNibbles ? "nibbles unpacked per step (decode)"
                 : mix == Mix::kDotProductsOnly ? "dot products only, no scales"
                                                : "no multiply by the x scale");
}
BENCHMARK(BM_Q4_0BlockStep)->ArgName("mix")->DenseRange(0, 3)->UseRealTime();

// F16 weights in prefill, FloatMatmul::kBf16 (vdpbf16ps) beside BM_Matmul's
// exact f32 path. Args: threads, n_tokens.
void BM_MatmulF16Bf16(benchmark::State& state) {
  if (!bf16_matmul_available()) {
    state.SkipWithError("no AVX-512 BF16 on this CPU");
    return;
  }
  const int64_t rows = 2048, cols = 2048;
  const int n_threads = static_cast<int>(state.range(0));
  const int64_t n_tokens = state.range(1);
  const std::vector<uint8_t> weights = make_weights(GgmlType::kF16, rows, cols);
  std::vector<float> x(n_tokens * cols), y(n_tokens * rows);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.1f - 0.8f;
  const WeightMatrix w{GgmlType::kF16, weights.data(), rows, cols};
  ThreadPool* pool = pool_for(n_threads);
  for (auto _ : state) {
    matmul(w, x.data(), n_tokens, y.data(), pool, FloatMatmul::kBf16);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * 2 * rows * cols * n_tokens);  // flop
}
BENCHMARK(BM_MatmulF16Bf16)->ArgNames({"threads", "tokens"})->Args({1, 64})->Args({2, 64})->Args({1, 256})->Args({2, 256})->UseRealTime();

// Memory-read baseline: bench decode's divisor (cli::measure_read_bandwidth:
// a 1 GiB buffer on huge pages, far past the last-level cache, split over
// `threads`, the widest loads and 8 accumulators, one read with each software
// prefetch of kReadPrefetches, the best kept; a plain 4-word scalar loop here
// read ~1.8x slower on the AVX2 host, and the reader without prefetch 8-14%
// below the best on the Intel AVX-512 host: both flattered the matmul's
// ratio). Returns bytes/s.
constexpr int64_t kReadBufferBytes = int64_t{1} << 30;

double read_buffer_once(int n_threads) {
  static const cli::ReadBuffer* buffer = new cli::ReadBuffer(kReadBufferBytes);
  static ThreadPool* one = new ThreadPool(1);
  ThreadPool* pool = pool_for(n_threads);
  return cli::measure_read_bandwidth(pool != nullptr ? *pool : *one, *buffer, 1);
}

void BM_MemoryReadBandwidth(benchmark::State& state) {
  const int n_threads = static_cast<int>(state.range(0));
  double best = 0;
  for (auto _ : state) best = std::max(best, read_buffer_once(n_threads));
  state.counters["read_GBps"] = best / 1e9;  // the best read of the iterations (each reads kReadPrefetchCount times)
}
BENCHMARK(BM_MemoryReadBandwidth)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

// The packed Q4_0 decode's access pattern alone (loads summed, no
// arithmetic) against the same bytes read as one stream, over a 1 GiB
// buffer on huge pages split over the threads. pattern 0: one stream, 9
// lines per step (what a layout with two strips' nibbles and scales
// interleaved block by block read, matmul_kernels.h's pairs: 2 x 256 + 2 x
// 32 bytes); pattern 1: the layout before the pairs: a task of two strips of
// 2048 columns, each strip's 64 blocks of 256 bytes of nibbles and then their
// 32 bytes of scales, walked block by block over both strips (four streams),
// with the near prefetch `near` blocks ahead (0: none) wrapping into the
// next task as the kernel's does. On the Zen 5 host (2026-12-06, best of
// ~25 passes) one stream read 43.6 GB/s on one thread and 86.1 on two, the
// four streams 35.4-39.4 (near 16 / 8 / none) and 73.1 (near 8): that
// layout alone held the decode's stream to ~0.85 of the read there.
__attribute__((target("avx512f"))) void read_pattern(const uint8_t* buf, int64_t begin, int64_t end, int pattern,
                                                     int near, int64_t* sink) {
  __m512i acc = _mm512_setzero_si512();
  if (pattern == 0) {
    for (int64_t o = begin; o + 576 <= end; o += 576) {
      for (int l = 0; l < 9; ++l) acc = _mm512_add_epi32(acc, _mm512_loadu_si512(buf + o + 64 * l));
    }
  } else {
    constexpr int64_t kBlocks = 64, kStrip = kBlocks * (256 + 32), kPair = 2 * kStrip;
    for (int64_t t = (begin + kPair - 1) / kPair * kPair; t + 2 * kPair <= end; t += kPair) {
      for (int64_t b = 0; b < kBlocks; ++b) {
        for (int64_t s = 0; s < 2; ++s) {
          const uint8_t* nib = buf + t + s * kStrip + b * 256;
          if (near > 0) {
            const int64_t ahead = near * 256 + (b + near >= kBlocks ? kPair - kBlocks * 256 : 0);
            for (int l = 0; l < 4; ++l) _mm_prefetch(reinterpret_cast<const char*>(nib + ahead + 64 * l), _MM_HINT_T0);
          }
          for (int l = 0; l < 4; ++l) acc = _mm512_add_epi32(acc, _mm512_loadu_si512(nib + 64 * l));
          const uint8_t* scl = buf + t + s * kStrip + kBlocks * 256 + b * 32;
          acc = _mm512_add_epi32(acc, _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scl))));
        }
      }
    }
  }
  *sink += _mm512_reduce_add_epi32(acc);
}

void BM_PackedStreamPattern(benchmark::State& state) {
  const int pattern = static_cast<int>(state.range(0));
  const int near = static_cast<int>(state.range(1));
  const int n_threads = static_cast<int>(state.range(2));
  if (best_simd_level() != SimdLevel::kAvx512) {
    state.SkipWithError("needs the AVX-512 level");
    return;
  }
  const HugePageBytes buffer = allocate_huge_pages(kReadBufferBytes);
  if (buffer == nullptr) {
    state.SkipWithError("out of memory");
    return;
  }
  std::memset(buffer.get(), 1, kReadBufferBytes);
  ThreadPool* pool = pool_for(n_threads);
  int64_t sinks[2] = {};
  double best = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    auto run = [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        read_pattern(buffer.get(), kReadBufferBytes / n_threads * i, kReadBufferBytes / n_threads * (i + 1), pattern,
                     near, &sinks[i]);
      }
    };
    if (pool != nullptr) {
      pool->parallel_for(n_threads, std::ref(run));
    } else {
      run(0, 1);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(kReadBufferBytes) / seconds);
  }
  benchmark::DoNotOptimize(sinks);
  state.counters["best_GBps"] = best / 1e9;
}
BENCHMARK(BM_PackedStreamPattern)
    ->ArgNames({"pattern", "near", "threads"})
    ->Args({0, 0, 1})
    ->Args({1, 0, 1})
    ->Args({1, 8, 1})
    ->Args({1, 16, 1})
    ->Args({0, 0, 2})
    ->Args({1, 8, 2})
    ->UseRealTime();

// Element q (0..1) of v in sorted order (v[size * q]); 0 for none.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(static_cast<double>(v.size()) * q)];
}
double median(std::vector<double> v) { return quantile(std::move(v), 0.5); }

// The timed loop of a decode-shaped benchmark against the read bandwidth:
// each iteration times step() (decode calls over `weight_bytes` of weights),
// then one read_buffer_once on the same threads untimed, so both rates see the
// same machine state (this host is shared). Counters: weight_GBps (weight
// bytes / step time, median of the iterations), read_GBps (the best read
// pass when best_read, as bench decode divides by; else their median),
// of_read_bw (their ratio) and of_adjacent_read (the median of each
// iteration's rate over the read right after it).
template <typename Step>
void time_decode_against_reads(benchmark::State& state, int n_threads, int64_t weight_bytes, bool best_read,
                               Step&& step) {
  std::vector<double> step_seconds, matmul_rates, read_rates;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    step();
    benchmark::ClobberMemory();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.SetIterationTime(seconds);
    step_seconds.push_back(seconds);
    matmul_rates.push_back(static_cast<double>(weight_bytes) / seconds);
    state.PauseTiming();
    read_rates.push_back(read_buffer_once(n_threads));
    state.ResumeTiming();
  }
  const double weight_rate = median(matmul_rates);
  const double read_rate =
      best_read ? (read_rates.empty() ? 0.0 : *std::max_element(read_rates.begin(), read_rates.end()))
                : median(read_rates);
  state.SetBytesProcessed(state.iterations() * weight_bytes);
  state.counters["weight_GBps"] = weight_rate / 1e9;
  state.counters["read_GBps"] = read_rate / 1e9;
  state.counters["of_read_bw"] = read_rate > 0 ? weight_rate / read_rate : 0.0;
  // bench decode's "local": the ratio at the bandwidth of that moment, on a
  // host whose bandwidth changes within a run.
  state.counters["of_adjacent_read"] =
      cli::adjacent_ratio(static_cast<double>(weight_bytes), step_seconds, read_rates);
}

// Indices 4..7: Q4_0 packed at load (pack_weight_matrix; the AVX2 and
// AVX-512 levels), then Q4_K, Q5_K, Q6_K packed at load (the AVX2 level).
constexpr GgmlType kDecodeTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K,
                                     GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};
constexpr int64_t kFirstPackedDecodeType = 4;

// Decode (one token) on a 1B-class matrix, as a fraction of the read
// bandwidth: after every timed matmul one read of bench decode's divisor
// (read_buffer_once) runs on the same threads, so both rates see the same
// machine state (this host is shared). Counters (time_decode_against_reads):
// weight_GBps (median), read_GBps (median of the read passes), of_read_bw.
// Args: type index into kDecodeTypes, rows, cols, threads, SIMD level.
void BM_MatmulDecodeVsReadBandwidth(benchmark::State& state) {
  const GgmlType type = kDecodeTypes[state.range(0)];
  const int64_t rows = state.range(1), cols = state.range(2);
  const int n_threads = static_cast<int>(state.range(3));
  const SimdLevel level = static_cast<SimdLevel>(state.range(4));
  if (level > best_simd_level()) {
    state.SkipWithError("SIMD level not available on this CPU");
    return;
  }
  const bool packed = state.range(0) >= kFirstPackedDecodeType;
  if (packed && (level < SimdLevel::kAvx2 || packed_weight_bytes(type, rows, cols) == 0)) {
    state.SkipWithError("no packed layout for this type at this level");
    return;
  }
  const std::vector<uint8_t> weights =
      is_kquant(type) ? make_kquant_weights(type, rows, cols) : make_weights(type, rows, cols);
  std::vector<float> x(cols), y(rows);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.1f - 0.8f;
  WeightMatrix w{type, weights.data(), rows, cols};
  std::unique_ptr<uint8_t, decltype(&std::free)> packed_copy(nullptr, &std::free);
  if (packed) {
    packed_copy.reset(static_cast<uint8_t*>(std::aligned_alloc(64, packed_weight_bytes(type, rows, cols))));
    pack_weight_matrix(w, packed_copy.get(), pool_for(2));
    w.packed = packed_copy.get();
  }
  ThreadPool* pool = pool_for(n_threads);
  time_decode_against_reads(state, n_threads, static_cast<int64_t>(weights.size()), /*best_read=*/false, [&] {
    matmul_with(level, w, x.data(), 1, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  });
  state.SetLabel(std::string(ggml_type_name(type)) + (packed ? " packed " : " ") + simd_level_name(level));
}

void decode_vs_bandwidth_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "rows", "cols", "threads", "level"});
  for (int64_t level : {1, 2})
    for (int64_t type = 0; type < 8; ++type)
      for (int64_t threads : {1, 2})
        for (const auto& shape : {std::pair<int64_t, int64_t>{2048, 8192}, {8192, 2048}})
          b->Args({type, shape.first, shape.second, threads, level});
}
BENCHMARK(BM_MatmulDecodeVsReadBandwidth)->Apply(decode_vs_bandwidth_args)->UseManualTime();

// 32 packed Q4_0 matrices of rows x cols (the same weights) on huge pages,
// one after another, as the model's packed copy holds a step's matrices;
// ws empty when the pages cannot be had.
struct PackedSequence {
  static constexpr int kMatrices = 32;
  HugePageBytes storage;
  std::vector<WeightMatrix> ws;
  int64_t bytes = 0;  // all of them
  PackedSequence(int64_t rows, int64_t cols) {
    const int64_t packed_bytes = packed_weight_bytes(GgmlType::kQ4_0, rows, cols);
    storage = allocate_huge_pages(packed_bytes * kMatrices);
    if (storage == nullptr) return;
    weights = make_weights(GgmlType::kQ4_0, rows, cols);
    for (int m = 0; m < kMatrices; ++m) {
      WeightMatrix w{GgmlType::kQ4_0, weights.data(), rows, cols};
      pack_weight_matrix(w, storage.get() + m * packed_bytes, pool_for(2));
      w.packed = storage.get() + m * packed_bytes;
      ws.push_back(w);
    }
    bytes = packed_bytes * kMatrices;
  }

 private:
  std::vector<uint8_t> weights;  // the GGUF rows every matrix was packed from
};

// A decode step's weight stream without the rest of the step: 32 packed Q4_0
// matrices of rows x cols (on huge pages, as the engine packs them) called in
// turn for one token, as a step calls its layers' matmuls; the per-call cost
// (a cold stream at each call's start, the threads' wait at its end) counts.
// One iteration is the 32 calls; after each, one read of bench decode's
// divisor on the same threads. Counters: weight_GBps (median of the
// iterations), read_GBps (the best read), of_read_bw (their ratio, as bench
// decode's ratio: a median step against the best read), of_adjacent_read
// (the median of each iteration's rate over the read after it). Args: rows, cols,
// threads, tokens (1: a decode step; 2-4: a batched step of that many
// sessions, or a speculative verify).
void BM_MatmulDecodeSequence(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1);
  const int n_threads = static_cast<int>(state.range(2));
  const int64_t n_tokens = state.range(3);
  if (packed_weight_bytes(GgmlType::kQ4_0, rows, cols) == 0) {
    state.SkipWithError("no packed Q4_0 layout on this CPU");
    return;
  }
  const PackedSequence seq(rows, cols);
  if (seq.ws.empty()) {
    state.SkipWithError("out of memory");
    return;
  }
  std::vector<float> x(cols * n_tokens), y(rows * n_tokens);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.1f - 0.8f;
  ThreadPool* pool = pool_for(n_threads);
  time_decode_against_reads(state, n_threads, seq.bytes, /*best_read=*/true, [&] {
    for (const WeightMatrix& w : seq.ws) matmul(w, x.data(), n_tokens, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  });
}
// A setting of the packed Q4_0 decode kernel's memory access, as the pair
// benchmarks take it: state.range(first) near prefetch blocks,
// state.range(first + 1) NTA (0 / 1), state.range(first + 2) one token's
// loads a block ahead (0 / 1; -1 the vendor's default).
struct NearSetting {
  int blocks;
  int nta;
  int ahead;
};
NearSetting near_setting(const benchmark::State& state, int first) {
  return {static_cast<int>(state.range(first)), static_cast<int>(state.range(first + 1)),
          static_cast<int>(state.range(first + 2))};
}

// One pair: `run` timed at setting a and at b, in the order a_first says
// (flipped for the next pair, so neither always goes first); the vendor's
// defaults are back after. Returns a's seconds over b's: b's speed over a's.
template <typename Run>
double paired_speed_ratio(bool& a_first, NearSetting a, NearSetting b, Run&& run) {
  auto timed = [&](NearSetting at) {
    set_packed_near_blocks(at.blocks);
    set_packed_near_nta(at.nta);
    set_packed_load_ahead(at.ahead);
    const auto start = std::chrono::steady_clock::now();
    run();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  double a_seconds = 0, b_seconds = 0;
  if (a_first) {
    a_seconds = timed(a), b_seconds = timed(b);
  } else {
    b_seconds = timed(b), a_seconds = timed(a);
  }
  a_first = !a_first;
  set_packed_near_blocks(-1);
  set_packed_near_nta(-1);
  set_packed_load_ahead(-1);
  return a_seconds / b_seconds;
}

// The memory access of the packed Q4_0 decode kernel, two settings A and B
// (set_packed_near_blocks, set_packed_near_nta, set_packed_load_ahead) in pairs: each iteration
// reads bench decode's divisor once (the machine's state now), then runs
// BM_MatmulDecodeSequence's 32 calls (8192 x 2048, 2 threads) with A and
// with B, the order swapped every iteration, so both see the same state of
// a host whose memory speed changes with the hour. Counters: b_over_a, the
// median over the iterations of B's rate over A's, and the same over the
// iterations whose read pass came within 10% of the run's best
// (b_over_a_fast) and the others (b_over_a_slow), with their counts. Args:
// A's blocks, NTA (0 / 1) and loads ahead (0 / 1 / -1), B's.
void BM_MatmulDecodeNearPair(benchmark::State& state) {
  const NearSetting near_a = near_setting(state, 0), near_b = near_setting(state, 3);
  constexpr int64_t rows = 8192, cols = 2048;
  constexpr int n_threads = 2;
  if (packed_weight_bytes(GgmlType::kQ4_0, rows, cols) == 0 || best_simd_level() != SimdLevel::kAvx512) {
    state.SkipWithError("needs the packed Q4_0 AVX-512 kernel");
    return;
  }
  const PackedSequence seq(rows, cols);
  if (seq.ws.empty()) {
    state.SkipWithError("out of memory");
    return;
  }
  std::vector<float> x(cols), y(rows);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.1f - 0.8f;
  ThreadPool* pool = pool_for(n_threads);
  auto sequence = [&] {
    for (const WeightMatrix& w : seq.ws) matmul(w, x.data(), 1, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  };
  std::vector<double> reads, ratios;
  bool a_first = true;
  for (auto _ : state) {
    reads.push_back(read_buffer_once(n_threads));
    ratios.push_back(paired_speed_ratio(a_first, near_a, near_b, sequence));
  }
  const double best = reads.empty() ? 0.0 : *std::max_element(reads.begin(), reads.end());
  std::vector<double> fast, slow;
  for (size_t i = 0; i < ratios.size(); ++i) (reads[i] >= 0.9 * best ? fast : slow).push_back(ratios[i]);
  state.counters["b_over_a"] = median(ratios);
  state.counters["b_over_a_fast"] = median(fast);
  state.counters["b_over_a_slow"] = median(slow);
  state.counters["n_fast"] = static_cast<double>(fast.size());
  state.counters["n_slow"] = static_cast<double>(slow.size());
  state.counters["best_read_GBps"] = best / 1e9;
}
BENCHMARK(BM_MatmulDecodeNearPair)
    ->ArgNames({"a", "a_nta", "a_ahead", "b", "b_nta", "b_ahead"})
    ->Args({16, 0, -1, 8, 0, -1})
    ->Args({16, 0, -1, 12, 0, -1})
    ->Args({16, 0, -1, 24, 0, -1})
    ->Args({12, 0, -1, 10, 0, -1})
    ->Args({12, 0, -1, 8, 0, -1})
    ->Args({12, 0, -1, 12, 1, -1})
    ->Args({12, 1, -1, 16, 1, -1})
    ->Args({12, 1, -1, 8, 1, -1})
    ->Args({12, 1, 0, 12, 1, 1})
    ->Iterations(60)
    ->UseRealTime();

// The same two settings over whole decode steps of a real model file
// (BATON_PAIR_MODEL: a GGUF path, e.g. build/models/llama-3.2-1b-q4_0.gguf;
// skipped without it): the engine on 2 threads, an F32 cache after a
// prefill of `ctx` tokens, then steps at A and at B in alternation, the
// order swapped every pair. Counters: b_speed_over_a, the median over the
// pairs of A's step time over B's, with its quartiles.
void BM_DecodeStepNearPair(benchmark::State& state) {
  const char* path = std::getenv("BATON_PAIR_MODEL");
  if (path == nullptr) return state.SkipWithError("set BATON_PAIR_MODEL to a GGUF file");
  auto model = Model::Load(path);
  if (!model.ok()) return state.SkipWithError(std::string(model.status().message()).c_str());
  const NearSetting near_a = near_setting(state, 0), near_b = near_setting(state, 3);
  const int64_t ctx = state.range(6);
  Engine engine(**model, EngineOptions{2, 64});
  auto kv = engine.new_f32_kv_cache(ctx + 2 * state.max_iterations + 2);
  std::vector<int32_t> prompt(static_cast<size_t>(ctx));
  for (int64_t i = 0; i < ctx; ++i) prompt[static_cast<size_t>(i)] = static_cast<int32_t>(1 + (i * 7919) % 1000);
  std::vector<float> logits;
  if (!engine.prefill(prompt, *kv, &logits).ok()) return state.SkipWithError("prefill");
  auto step = [&] { BATON_CHECK(engine.decode_step(5, *kv, &logits).ok()); };
  std::vector<double> ratios;
  bool a_first = true;
  for (auto _ : state) ratios.push_back(paired_speed_ratio(a_first, near_a, near_b, step));
  state.counters["b_speed_over_a"] = median(ratios);
  state.counters["q1"] = quantile(ratios, 0.25);
  state.counters["q3"] = quantile(ratios, 0.75);
}
BENCHMARK(BM_DecodeStepNearPair)
    ->ArgNames({"a", "a_nta", "a_ahead", "b", "b_nta", "b_ahead", "ctx"})
    ->Args({16, 0, 0, 12, 1, 0, 512})
    ->Args({12, 1, 0, 12, 1, 1, 512})
    ->Iterations(150)
    ->UseRealTime();

BENCHMARK(BM_MatmulDecodeSequence)
    ->ArgNames({"rows", "cols", "threads", "tokens"})
    ->Args({8192, 2048, 2, 1})
    ->Args({2048, 2048, 2, 1})
    ->Args({2048, 8192, 2, 1})
    ->Args({8192, 2048, 1, 1})
    ->Args({8192, 2048, 2, 2})
    ->Args({8192, 2048, 2, 4})
    ->UseManualTime();

// Cost of one parallel_for with trivial work: the per-call overhead decode pays
// ~100+ times per token.
void BM_ParallelForOverhead(benchmark::State& state) {
  ThreadPool* pool = pool_for(static_cast<int>(state.range(0)));
  int64_t sink[8] = {};
  for (auto _ : state) {
    pool->parallel_for(pool->size(), [&](int64_t begin, int64_t) { sink[begin] += 1; });
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_ParallelForOverhead)->ArgName("threads")->Arg(2)->UseRealTime();

}  // namespace
}  // namespace baton
