// The plain summing loop of stream_read.h, written once and compiled in each
// ISA's translation unit (stream_read.cc, stream_read_avx2.cc,
// stream_read_avx512.cc: internal linkage, so each keeps its own build). Not
// `target_clones`: an ifunc resolver runs before ThreadSanitizer's runtime
// is up and crashed the TSan build.
#pragma once

#include <cstdint>

namespace baton::cli {
namespace {

inline uint64_t plain_word_sum(const uint64_t* words, int64_t begin, int64_t end) {
  uint64_t sum = 0;
  for (int64_t i = begin; i < end; ++i) sum += words[i];
  return sum;
}

}  // namespace
}  // namespace baton::cli
