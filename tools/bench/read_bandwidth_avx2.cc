// The AVX2 read kernel (read_bandwidth.h): 8 ymm loads (256 bytes, 4 cache
// lines) per round into 8 independent accumulators; with a prefetch of
// kReadPrefetches, the round's 4 lines that far ahead. Entered only at SIMD
// level >= avx2.
#include <immintrin.h>

#include "read_bandwidth.h"

namespace baton::cli::read_kernels {

namespace {

// kDistance bytes ahead (0: no prefetch), with the ReadHint kHint.
template <int kDistance, int kHint>
uint64_t read_sum(const uint64_t* data, int64_t words) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
  constexpr auto kMmHint = kHint == kReadT0 ? _MM_HINT_T0 : kHint == kReadNta ? _MM_HINT_NTA : _MM_HINT_T1;
  for (int64_t i = 0; i < words; i += 32) {
    const __m256i* p = reinterpret_cast<const __m256i*>(data + i);
    if constexpr (kDistance > 0) {
      // (past the buffer's end harmless: a prefetch never faults)
      const char* ahead = reinterpret_cast<const char*>(p) + kDistance;
      for (int line = 0; line < 4; ++line) _mm_prefetch(ahead + 64 * line, kMmHint);
    }
    s0 = _mm256_add_epi64(s0, _mm256_load_si256(p + 0));
    s1 = _mm256_add_epi64(s1, _mm256_load_si256(p + 1));
    s2 = _mm256_add_epi64(s2, _mm256_load_si256(p + 2));
    s3 = _mm256_add_epi64(s3, _mm256_load_si256(p + 3));
    s4 = _mm256_add_epi64(s4, _mm256_load_si256(p + 4));
    s5 = _mm256_add_epi64(s5, _mm256_load_si256(p + 5));
    s6 = _mm256_add_epi64(s6, _mm256_load_si256(p + 6));
    s7 = _mm256_add_epi64(s7, _mm256_load_si256(p + 7));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)),
                                     _mm256_add_epi64(_mm256_add_epi64(s4, s5), _mm256_add_epi64(s6, s7)));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

}  // namespace

uint64_t read_sum_avx2(const uint64_t* data, int64_t words, int prefetch) {
  return with_read_prefetch(prefetch, [&]<int kDistance, int kHint>() { return read_sum<kDistance, kHint>(data, words); });
}

}  // namespace baton::cli::read_kernels
