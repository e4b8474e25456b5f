#include "read_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "common/util/check.h"
#include "common/util/cpu_features.h"

namespace baton::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Words per round of the wide kernels; read_sum splits off the tail.
int64_t round_words() {
  switch (active_simd_level()) {
    case SimdLevel::kAvx512:
      return 64;
    case SimdLevel::kAvx2:
      return 32;
    case SimdLevel::kScalar:
      break;
  }
  return 4;
}

uint64_t read_sum_scalar(const uint64_t* data, int64_t words) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= words; i += 4) {
    s0 += data[i];
    s1 += data[i + 1];
    s2 += data[i + 2];
    s3 += data[i + 3];
  }
  for (; i < words; ++i) s0 += data[i];
  return s0 + s1 + s2 + s3;
}

}  // namespace

ReadBuffer::ReadBuffer(int64_t bytes) : bytes_(bytes) {
  BATON_CHECK(bytes > 0 && bytes % 64 == 0);
  // On huge pages, as the engine's packed weights are (common/model/model.cc):
  // on 4 KiB pages the reader ran ~10% slower in the median (AVX2 host, 10
  // alternating `bench bandwidth --passes 5-6` runs each: 22.9 vs 25.1
  // GB/s), a divisor that flattered every decode ratio by as much.
  buffer_ = allocate_huge_pages(bytes);
  BATON_CHECK(buffer_ != nullptr);
  auto* words = reinterpret_cast<uint64_t*>(buffer_.get());
  const int64_t n = bytes / 8;
  for (int64_t i = 0; i < n; ++i) words[i] = static_cast<uint64_t>(i);
}

uint64_t read_sum(const uint64_t* data, int64_t bytes, int prefetch) {
  BATON_CHECK(prefetch >= 0 && prefetch < kReadPrefetchCount);
  const int64_t words = bytes / 8;
  const int64_t step = round_words();
  // The wide kernels use aligned loads: the unaligned head goes the scalar way.
  int64_t head = 0;
  while (head < words && (reinterpret_cast<uintptr_t>(data + head) % 64) != 0) ++head;
  const int64_t body = head < words ? (words - head) / step * step : 0;
  uint64_t sum = read_sum_scalar(data, head) + read_sum_scalar(data + head + body, words - head - body);
  switch (active_simd_level()) {
    case SimdLevel::kAvx512:
      return sum + read_kernels::read_sum_avx512(data + head, body, prefetch);
    case SimdLevel::kAvx2:
      return sum + read_kernels::read_sum_avx2(data + head, body, prefetch);
    case SimdLevel::kScalar:
      break;
  }
  return sum + read_sum_scalar(data + head, body);
}

const char* read_kernel_name() {
  switch (active_simd_level()) {
    case SimdLevel::kAvx512:
      return "zmm x8";
    case SimdLevel::kAvx2:
      return "ymm x8";
    case SimdLevel::kScalar:
      break;
  }
  return "scalar x4";
}

int read_prefetch_count() { return active_simd_level() == SimdLevel::kScalar ? 1 : kReadPrefetchCount; }

double measure_read_pass(ThreadPool& pool, const ReadBuffer& buffer, int prefetch) {
  const int threads = pool.size();
  const int64_t lines = buffer.bytes() / 64;
  std::vector<uint64_t> sums(static_cast<size_t>(threads) * 8, 0);  // a cache line per thread
  const auto start = Clock::now();
  pool.parallel_for(threads, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t first = lines * t / threads, last = lines * (t + 1) / threads;
      sums[static_cast<size_t>(t) * 8] += read_sum(buffer.words() + first * 8, (last - first) * 64, prefetch);
    }
  });
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  uint64_t kept = 0;
  for (uint64_t s : sums) kept += s;
  asm volatile("" : : "g"(kept) : "memory");  // the sums are the loads' only use
  return static_cast<double>(buffer.bytes()) / seconds;
}

double measure_read_bandwidth(ThreadPool& pool, const ReadBuffer& buffer, int passes, int* best_prefetch) {
  const int prefetches = read_prefetch_count();
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    for (int prefetch = 0; prefetch < prefetches; ++prefetch) {
      const double rate = measure_read_pass(pool, buffer, prefetch);
      if (rate > best) {
        best = rate;
        if (best_prefetch != nullptr) *best_prefetch = prefetch;
      }
    }
  }
  return best;
}

}  // namespace baton::cli
