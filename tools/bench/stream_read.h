// A plain STREAM-like read: the self-test of read_bandwidth.h's kernel
// (`baton bench bandwidth`). Written separately on purpose, sharing no code
// with it: its own buffer of doubles, its own std::threads (no ThreadPool),
// a simple summing loop the compiler builds as it likes. If the tuned kernel
// reads slower than this, the tuned kernel is what is wrong.
#pragma once

#include <cstdint>
#include <vector>

namespace baton::cli {

// Sum of values[begin, end) with four partial sums (so the loop is bound by
// loads, not by one add chain).
double stream_sum(const std::vector<double>& values, int64_t begin, int64_t end);

// Best bytes/s over `passes` reads of all of `values`, split evenly over
// `threads` std::threads started for each pass. `*sum_out` (if set): the sum
// of the last pass (values.size() for a buffer of ones).
double stream_read_bandwidth(const std::vector<double>& values, int threads, int passes, double* sum_out = nullptr);

}  // namespace baton::cli
