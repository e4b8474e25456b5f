// The machine's memory read bandwidth, as the decode bench divides by it:
// every pool thread streams its share of a buffer far larger than the
// last-level cache with the widest loads the active SIMD level has (zmm /
// ymm, 8 independent accumulators, 512 / 256 bytes per round), each pass
// once with every software prefetch of kReadPrefetches, best of several
// passes. An independent plain reader (stream_read.h) checks it (`baton
// bench bandwidth`).
#pragma once

#include <cstdint>

#include "common/util/huge_page_buffer.h"
#include "common/util/thread_pool.h"

namespace baton::cli {

// A buffer of `bytes` (a multiple of 64) on transparent huge pages where the
// kernel gives them (2 MiB-aligned, MADV_HUGEPAGE, as the packed weights
// decode streams), every page written
// (so a pass reads memory, not the shared zero page). Element i of its
// uint64 view holds i, so a full read sums to n (n - 1) / 2.
class ReadBuffer {
 public:
  explicit ReadBuffer(int64_t bytes);
  const uint64_t* words() const { return reinterpret_cast<const uint64_t*>(buffer_.get()); }
  int64_t bytes() const { return bytes_; }

 private:
  int64_t bytes_;
  HugePageBytes buffer_;
};

// Software prefetches the wide kernels may issue beside their loads: every
// line of a round `distance` bytes ahead, to L2 (T1), L1 (T0) or as a
// non-temporal prefetch (NTA); distance 0 none. The hardware prefetchers
// alone left bandwidth unread: on the Intel AVX-512 host (Xeon VM, 2
// threads, 1 GiB on huge pages, `baton bench bandwidth`) the plain zmm
// reader got 31.5-32.9 GB/s, one with T1 2 KiB ahead 36.6-37.9 in the same
// runs; 4 KiB ahead was slower than none (0.93-0.94x). On the Zen 5 host
// (2026-12-07, a standalone 2-thread zmm reader over 1 GiB, 6 rounds of
// every prefetch) the set up to T1 2 KiB read 54-68 GB/s while NTA 4 / 8
// KiB ahead read 67-76 and T1 4 KiB 71-75 in the same rounds: the longer
// ones joined the set then. Each pass tries them all and the best counts,
// so the divisor is what the best of them gets on the machine at hand.
enum ReadHint : int { kReadT1 = 0, kReadT0 = 1, kReadNta = 2 };
struct ReadPrefetch {
  int distance;  // bytes ahead of the round's first line; 0: none
  int hint;      // a ReadHint
  const char* name;
};
inline constexpr ReadPrefetch kReadPrefetches[] = {
    {0, kReadT1, "none"},           {1024, kReadT1, "T1 1 KiB ahead"},  {2048, kReadT1, "T1 2 KiB ahead"},
    {1024, kReadT0, "T0 1 KiB ahead"}, {4096, kReadT1, "T1 4 KiB ahead"}, {4096, kReadNta, "NTA 4 KiB ahead"},
    {8192, kReadNta, "NTA 8 KiB ahead"}};
inline constexpr int kReadPrefetchCount = sizeof(kReadPrefetches) / sizeof(kReadPrefetches[0]);

// kernel.template operator()<distance, hint>() for kReadPrefetches[prefetch]
// (a kernel templated on its prefetch; each SIMD file passes a lambda of its
// own, so no instance is shared between files built for different ISAs).
template <typename Kernel>
uint64_t with_read_prefetch(int prefetch, Kernel&& kernel) {
  static_assert(kReadPrefetchCount == 7, "one case per kReadPrefetches entry");
  switch (prefetch) {
    case 1: return kernel.template operator()<kReadPrefetches[1].distance, kReadPrefetches[1].hint>();
    case 2: return kernel.template operator()<kReadPrefetches[2].distance, kReadPrefetches[2].hint>();
    case 3: return kernel.template operator()<kReadPrefetches[3].distance, kReadPrefetches[3].hint>();
    case 4: return kernel.template operator()<kReadPrefetches[4].distance, kReadPrefetches[4].hint>();
    case 5: return kernel.template operator()<kReadPrefetches[5].distance, kReadPrefetches[5].hint>();
    case 6: return kernel.template operator()<kReadPrefetches[6].distance, kReadPrefetches[6].hint>();
    default: return kernel.template operator()<kReadPrefetches[0].distance, kReadPrefetches[0].hint>();
  }
}

// Sum of the uint64 words of [data, data + bytes) (wrapping), read with the
// kernel of the active SIMD level and software prefetch kReadPrefetches[prefetch]
// (the scalar kernel prefetches nothing); `bytes` a multiple of 8. The sum is
// what keeps the loads from being dropped, and lets the tests check that
// every word was read once.
uint64_t read_sum(const uint64_t* data, int64_t bytes, int prefetch = 0);
// The name of the kernel read_sum uses ("zmm x8", "ymm x8", "scalar x4").
const char* read_kernel_name();
// How many of kReadPrefetches that kernel tries (its first that many): all of
// them, or 1 (none) for the scalar kernel, which issues no prefetch.
int read_prefetch_count();

// Best bytes/s over `passes` full reads of `buffer` with each prefetch of
// kReadPrefetches (a pass reads it once per prefetch), all of `pool`'s
// threads reading contiguous 64-byte aligned shares at once. `best_prefetch`
// (if not null): the kReadPrefetches index of the best read.
double measure_read_bandwidth(ThreadPool& pool, const ReadBuffer& buffer, int passes, int* best_prefetch = nullptr);
// Bytes/s of one full read of `buffer` with kReadPrefetches[prefetch], as
// measure_read_bandwidth's passes read it.
double measure_read_pass(ThreadPool& pool, const ReadBuffer& buffer, int prefetch);

namespace read_kernels {
// words % 64 == 0 (AVX-512) / % 32 == 0 (AVX2); prefetch: a kReadPrefetches index.
uint64_t read_sum_avx512(const uint64_t* data, int64_t words, int prefetch = 0);
uint64_t read_sum_avx2(const uint64_t* data, int64_t words, int prefetch = 0);
}  // namespace read_kernels

}  // namespace baton::cli
