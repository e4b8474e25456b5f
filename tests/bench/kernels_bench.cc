// Kernel micro-benchmarks: matmul decode (n_tokens = 1, memory bound: bytes/s
// of weights streamed) and prefill (n_tokens = 64, compute bound: items/s =
// flop/s), next to a plain memory-read baseline so ratios come from one run.
//
//   build-kern/bin/baton_microbench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "common/cpu/matmul.h"
#include "common/util/fp16.h"
#include "common/util/thread_pool.h"

namespace baton {
namespace {

// One pool per thread count, shared by all benchmarks (as the engine shares one).
ThreadPool* pool_for(int n_threads) {
  static std::unique_ptr<ThreadPool> pools[9];
  if (n_threads <= 1) return nullptr;
  if (!pools[n_threads]) pools[n_threads] = std::make_unique<ThreadPool>(n_threads);
  return pools[n_threads].get();
}

constexpr GgmlType kBenchTypes[] = {GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kF16};

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

// Args: type index into kBenchTypes, rows, cols, threads, n_tokens.
void BM_Matmul(benchmark::State& state) {
  const GgmlType type = kBenchTypes[state.range(0)];
  const int64_t rows = state.range(1), cols = state.range(2);
  const int n_threads = static_cast<int>(state.range(3));
  const int64_t n_tokens = state.range(4);
  const std::vector<uint8_t> weights = make_weights(type, rows, cols);
  std::vector<float> x(n_tokens * cols), y(n_tokens * rows);  // [n_tokens, cols], [n_tokens, rows]
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.1f - 0.8f;
  const WeightMatrix w{type, weights.data(), rows, cols};
  ThreadPool* pool = pool_for(n_threads);
  for (auto _ : state) {
    matmul(w, x.data(), n_tokens, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(weights.size()));
  state.SetItemsProcessed(state.iterations() * 2 * rows * cols * n_tokens);  // flop
  state.SetLabel(std::string(ggml_type_name(type)) + " " + simd_level_name(active_simd_level()));
}

void decode_and_prefill_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "rows", "cols", "threads", "tokens"});
  for (int64_t type = 0; type < 3; ++type)
    for (int64_t rows : {2048, 8192})
      for (int64_t threads : {1, 2}) b->Args({type, rows, 2048, threads, 1});
  for (int64_t type = 0; type < 3; ++type)
    for (int64_t threads : {1, 2}) b->Args({type, 2048, 2048, threads, 64});
}
BENCHMARK(BM_Matmul)->Apply(decode_and_prefill_args)->UseRealTime();

// Memory-read baseline: sum of a 256 MiB buffer (far larger than any cache),
// split over `threads` like the decode matmul.
void BM_MemoryReadBandwidth(benchmark::State& state) {
  constexpr int64_t kBytes = int64_t{256} << 20;
  constexpr int64_t kWords = kBytes / 8;
  static std::vector<uint64_t>* buffer = [] {
    auto* v = new std::vector<uint64_t>(kWords);
    for (int64_t i = 0; i < kWords; ++i) (*v)[i] = static_cast<uint64_t>(i);
    return v;
  }();
  const int n_threads = static_cast<int>(state.range(0));
  ThreadPool* pool = pool_for(n_threads);
  constexpr int64_t kChunks = 256;  // 1 MiB per task
  std::vector<uint64_t> partial(kChunks);
  const uint64_t* data = buffer->data();
  auto sum_chunks = [&](int64_t begin, int64_t end) {
    for (int64_t chunk = begin; chunk < end; ++chunk) {
      const uint64_t* p = data + chunk * (kWords / kChunks);
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (int64_t i = 0; i < kWords / kChunks; i += 4) s0 += p[i], s1 += p[i + 1], s2 += p[i + 2], s3 += p[i + 3];
      partial[chunk] = s0 + s1 + s2 + s3;
    }
  };
  for (auto _ : state) {
    if (pool != nullptr) {
      pool->parallel_for(kChunks, sum_chunks);
    } else {
      sum_chunks(0, kChunks);
    }
    benchmark::DoNotOptimize(partial.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kBytes);
}
BENCHMARK(BM_MemoryReadBandwidth)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

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
