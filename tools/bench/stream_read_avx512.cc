// stream_read.h's loop built for avx512 (tools/CMakeLists.txt gives *_avx512.cc
// its flags); entered only at that SIMD level.
#include "stream_read.h"
#include "stream_read_loop.h"

namespace baton::cli {

uint64_t stream_sum_avx512(const uint64_t* words, int64_t begin, int64_t end) {
  return plain_word_sum(words, begin, end);
}

}  // namespace baton::cli
