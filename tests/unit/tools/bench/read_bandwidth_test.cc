// The memory read kernels behind bench decode's bandwidth figure
// (tools/bench/read_bandwidth.h) and its plain STREAM-like self-test
// (tools/bench/stream_read.h): each must read every word exactly once, so
// bytes / seconds is the rate of what was read, for any start and length.
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "common/util/cpu_features.h"
#include "read_bandwidth.h"
#include "stream_read.h"

namespace baton::cli {
namespace {

// Sum of the words [begin, end) of a ReadBuffer (word i holds i).
uint64_t words_sum(int64_t begin, int64_t end) {
  uint64_t total = 0;
  for (int64_t i = begin; i < end; ++i) total += static_cast<uint64_t>(i);
  return total;
}

TEST(ReadBandwidthTest, ReadSumReadsEveryWordOnceForAnyStartAndLength) {
  const ReadBuffer buffer(64 * 1024);
  const int64_t n = buffer.bytes() / 8;
  EXPECT_EQ(read_sum(buffer.words(), buffer.bytes()), words_sum(0, n));
  for (int64_t begin : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{8}, int64_t{61}}) {
    for (int64_t end : {n, n - 1, n - 5, n - 64, begin + 70, begin + 1, begin}) {
      EXPECT_EQ(read_sum(buffer.words() + begin, (end - begin) * 8), words_sum(begin, end))
          << "[" << begin << ", " << end << ")";
    }
  }
}

TEST(ReadBandwidthTest, EachWideKernelSumsEveryWordWithEachPrefetch) {
  const ReadBuffer buffer(64 * 1024);
  const int64_t n = buffer.bytes() / 8;
  if (best_simd_level() < SimdLevel::kAvx2) GTEST_SKIP() << "no AVX2";
  for (int prefetch = 0; prefetch < kReadPrefetchCount; ++prefetch) {
    SCOPED_TRACE(kReadPrefetches[prefetch].name);
    EXPECT_EQ(read_kernels::read_sum_avx2(buffer.words(), n, prefetch), words_sum(0, n));
    EXPECT_EQ(read_kernels::read_sum_avx2(buffer.words() + 32, 64, prefetch), words_sum(32, 96));
    // The last round's prefetches point past the buffer: harmless.
    EXPECT_EQ(read_kernels::read_sum_avx2(buffer.words() + n - 32, 32, prefetch), words_sum(n - 32, n));
    if (best_simd_level() < SimdLevel::kAvx512) continue;
    EXPECT_EQ(read_kernels::read_sum_avx512(buffer.words(), n, prefetch), words_sum(0, n));
    EXPECT_EQ(read_kernels::read_sum_avx512(buffer.words() + 64, 128, prefetch), words_sum(64, 192));
    EXPECT_EQ(read_kernels::read_sum_avx512(buffer.words() + n - 64, 64, prefetch), words_sum(n - 64, n));
  }
}

TEST(ReadBandwidthTest, ReadSumWithEachPrefetchReadsEveryWordOnce) {
  const ReadBuffer buffer(64 * 1024);
  const int64_t n = buffer.bytes() / 8;
  for (int prefetch = 0; prefetch < kReadPrefetchCount; ++prefetch) {
    EXPECT_EQ(read_sum(buffer.words() + 3, (n - 8) * 8, prefetch), words_sum(3, n - 5)) << kReadPrefetches[prefetch].name;
  }
}

TEST(ReadBandwidthTest, PrefetchesAreDistinctAndTheFirstIsNone) {
  EXPECT_EQ(kReadPrefetches[0].distance, 0);  // the plain read stays one of the candidates
  for (int a = 0; a < kReadPrefetchCount; ++a) {
    for (int b = a + 1; b < kReadPrefetchCount; ++b) {
      EXPECT_FALSE(kReadPrefetches[a].distance == kReadPrefetches[b].distance &&
                   kReadPrefetches[a].hint == kReadPrefetches[b].hint)
          << a << " and " << b;
    }
  }
}

TEST(ReadBandwidthTest, MeasuredBandwidthIsPositiveAndFinite) {
  ThreadPool pool(2);
  const ReadBuffer buffer(8 << 20);
  int best_prefetch = -1;
  const double rate = measure_read_bandwidth(pool, buffer, 2, &best_prefetch);
  EXPECT_GT(rate, 1e8);   // 100 MB/s: far below any machine this runs on
  EXPECT_LT(rate, 1e13);  // 10 TB/s: beyond any CPU's caches
  EXPECT_GE(best_prefetch, 0);
  EXPECT_LT(best_prefetch, kReadPrefetchCount);
  EXPECT_GT(measure_read_pass(pool, buffer, kReadPrefetchCount - 1), 1e8);
}

TEST(StreamReadTest, StreamSumAddsEveryValueOnce) {
  std::vector<uint64_t> values(1003);
  std::iota(values.begin(), values.end(), uint64_t{0});
  EXPECT_EQ(stream_sum(values.data(), 0, 1003), uint64_t{1002} * 1003 / 2);
  EXPECT_EQ(stream_sum(values.data(), 5, 8), uint64_t{5 + 6 + 7});
  EXPECT_EQ(stream_sum(values.data(), 7, 7), uint64_t{0});
  // Each ISA's build of the loop where this CPU runs it (a vectorized body
  // and its scalar tail: 1003 words, odd ranges).
  for (const SimdLevel level : {SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (best_simd_level() < level) continue;
    const auto sum = level == SimdLevel::kAvx2 ? stream_sum_avx2 : stream_sum_avx512;
    EXPECT_EQ(sum(values.data(), 0, 1003), uint64_t{1002} * 1003 / 2) << simd_level_name(level);
    EXPECT_EQ(sum(values.data(), 3, 1000), uint64_t{999} * 1000 / 2 - 3) << simd_level_name(level);
  }
}

TEST(StreamReadTest, EveryThreadReadsItsShareOnce) {
  const StreamBuffer ones(100'003);  // not a multiple of the threads
  for (int threads : {1, 2, 3}) {
    uint64_t sum = 0;
    EXPECT_GT(stream_read_bandwidth(ones, threads, 2, &sum), 0.0);
    EXPECT_EQ(sum, static_cast<uint64_t>(ones.size())) << threads << " threads";
  }
}

}  // namespace
}  // namespace baton::cli
