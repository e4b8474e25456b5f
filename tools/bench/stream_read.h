// A plain STREAM-like read: the self-test of read_bandwidth.h's kernel
// (`baton bench bandwidth`). Written separately on purpose, sharing no code
// with it: its own buffer, its own std::threads (no ThreadPool), a simple
// summing loop with no intrinsics and no prefetch, which the compiler builds
// as it likes for the CPU it runs on (as STREAM is built: -O3 for the host;
// here the loop compiled once per ISA, stream_read_loop.h, and picked by the
// SIMD level). If the tuned kernel reads slower than this, the tuned kernel
// is what is wrong.
//
// Integer words, so that the compiler may vectorize the sum (it may not
// reorder a double sum), and on 2 MiB pages where the kernel allows them, as
// the tuned kernel's buffer and the engine's packed weights are. Measured on
// the AVX-512 host (2 threads, 1 GiB, best of 5, alternating): four double
// partial sums on 4 KiB pages read 20.4-21.9 GB/s (eight 8-byte loads a
// line: too few lines in flight), the vectorized integer sum 24.1-29.0 on 4
// KiB pages and 32.0-32.2 on 2 MiB pages, the tuned kernel 32.8.
#pragma once

#include <cstdint>

#include "common/util/huge_page_buffer.h"

namespace baton::cli {

// `words` 64-bit words, every one 1, on 2 MiB pages where the kernel grants
// them (allocate_huge_pages, the engine's allocator for its packed weights).
class StreamBuffer {
 public:
  explicit StreamBuffer(int64_t words);
  const uint64_t* data() const { return reinterpret_cast<const uint64_t*>(bytes_.get()); }
  int64_t size() const { return size_; }

 private:
  HugePageBytes bytes_;
  int64_t size_;
};

// Sum of words[begin, end): one plain loop, built for the active SIMD level.
uint64_t stream_sum(const uint64_t* words, int64_t begin, int64_t end);
// The same loop built for AVX2 / AVX-512 (entered only at those levels).
uint64_t stream_sum_avx2(const uint64_t* words, int64_t begin, int64_t end);
uint64_t stream_sum_avx512(const uint64_t* words, int64_t begin, int64_t end);

// Best bytes/s over `passes` reads of all of `buffer`, split evenly over
// `threads` std::threads started for each pass. `*sum_out` (if set): the sum
// of the last pass (buffer.size(): every word is 1).
double stream_read_bandwidth(const StreamBuffer& buffer, int threads, int passes, uint64_t* sum_out = nullptr);

}  // namespace baton::cli
