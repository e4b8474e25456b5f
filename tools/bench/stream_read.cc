#include "stream_read.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "common/util/check.h"
#include "common/util/cpu_features.h"
#include "stream_read_loop.h"

namespace baton::cli {

StreamBuffer::StreamBuffer(int64_t words)
    : bytes_(allocate_huge_pages(words * static_cast<int64_t>(sizeof(uint64_t)))), size_(words) {
  BATON_CHECK(words > 0 && bytes_ != nullptr);
  auto* w = reinterpret_cast<uint64_t*>(bytes_.get());
  std::fill(w, w + words, uint64_t{1});
}

uint64_t stream_sum(const uint64_t* words, int64_t begin, int64_t end) {
  switch (active_simd_level()) {
    case SimdLevel::kAvx512:
      return stream_sum_avx512(words, begin, end);
    case SimdLevel::kAvx2:
      return stream_sum_avx2(words, begin, end);
    default:
      return plain_word_sum(words, begin, end);
  }
}

double stream_read_bandwidth(const StreamBuffer& buffer, int threads, int passes, uint64_t* sum_out) {
  const int64_t n = buffer.size();
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    std::vector<uint64_t> sums(static_cast<size_t>(threads) * 8, 0);  // a cache line per thread
    std::vector<std::thread> workers;
    const auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        sums[static_cast<size_t>(t) * 8] = stream_sum(buffer.data(), n * t / threads, n * (t + 1) / threads);
      });
    }
    for (std::thread& w : workers) w.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(n) * sizeof(uint64_t) / seconds);
    uint64_t total = 0;
    for (uint64_t s : sums) total += s;
    if (sum_out != nullptr) *sum_out = total;
    asm volatile("" : : "g"(total) : "memory");
  }
  return best;
}

}  // namespace baton::cli
