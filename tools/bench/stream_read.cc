#include "stream_read.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace baton::cli {

double stream_sum(const std::vector<double>& values, int64_t begin, int64_t end) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = begin;
  for (; i + 4 <= end; i += 4) {
    s0 += values[static_cast<size_t>(i)];
    s1 += values[static_cast<size_t>(i + 1)];
    s2 += values[static_cast<size_t>(i + 2)];
    s3 += values[static_cast<size_t>(i + 3)];
  }
  for (; i < end; ++i) s0 += values[static_cast<size_t>(i)];
  return (s0 + s1) + (s2 + s3);
}

double stream_read_bandwidth(const std::vector<double>& values, int threads, int passes, double* sum_out) {
  const int64_t n = static_cast<int64_t>(values.size());
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    std::vector<double> sums(static_cast<size_t>(threads) * 8, 0.0);  // a cache line per thread
    std::vector<std::thread> workers;
    const auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        sums[static_cast<size_t>(t) * 8] = stream_sum(values, n * t / threads, n * (t + 1) / threads);
      });
    }
    for (std::thread& w : workers) w.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(n) * sizeof(double) / seconds);
    double total = 0;
    for (double s : sums) total += s;
    if (sum_out != nullptr) *sum_out = total;
    asm volatile("" : : "g"(total) : "memory");
  }
  return best;
}

}  // namespace baton::cli
