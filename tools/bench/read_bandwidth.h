// The machine's memory read bandwidth, as the decode bench divides by it:
// every pool thread streams its share of a buffer far larger than the
// last-level cache with the widest loads the active SIMD level has (zmm /
// ymm, 8 independent accumulators, 512 / 256 bytes per round), best of
// several passes. An independent plain reader (stream_read.h) checks it
// (`baton bench bandwidth`).
#pragma once

#include <cstdint>
#include <memory>

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
  const uint64_t* words() const { return words_.get(); }
  int64_t bytes() const { return bytes_; }

 private:
  struct Free {
    void operator()(uint64_t* p) const;
  };
  int64_t bytes_;
  std::unique_ptr<uint64_t[], Free> words_;
};

// Sum of the uint64 words of [data, data + bytes) (wrapping), read with the
// kernel of the active SIMD level; `bytes` a multiple of 8. The sum is what
// keeps the loads from being dropped, and lets the tests check that every
// word was read once.
uint64_t read_sum(const uint64_t* data, int64_t bytes);
// The name of the kernel read_sum uses ("zmm x8", "ymm x8", "scalar x4").
const char* read_kernel_name();

// Best bytes/s over `passes` full reads of `buffer`, all of `pool`'s threads
// reading contiguous 64-byte aligned shares at once.
double measure_read_bandwidth(ThreadPool& pool, const ReadBuffer& buffer, int passes);

namespace read_kernels {
uint64_t read_sum_avx512(const uint64_t* data, int64_t words);  // words % 64 == 0
uint64_t read_sum_avx2(const uint64_t* data, int64_t words);    // words % 32 == 0
}  // namespace read_kernels

}  // namespace baton::cli
