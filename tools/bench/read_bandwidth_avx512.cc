// The AVX-512 read kernel (read_bandwidth.h): 8 zmm loads (512 bytes, 8 cache
// lines) per round into 8 independent accumulators, so loads, not the add
// chain, bound it; with a prefetch of kReadPrefetches, the round's 8 lines
// that far ahead. Entered only at SIMD level avx512.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "read_bandwidth.h"

namespace baton::cli::read_kernels {

namespace {

// kDistance bytes ahead (0: no prefetch), with the ReadHint kHint.
template <int kDistance, int kHint>
uint64_t read_sum(const uint64_t* data, int64_t words) {
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
  constexpr auto kMmHint = kHint == kReadT0 ? _MM_HINT_T0 : kHint == kReadNta ? _MM_HINT_NTA : _MM_HINT_T1;
  for (int64_t i = 0; i < words; i += 64) {
    const __m512i* p = reinterpret_cast<const __m512i*>(data + i);
    if constexpr (kDistance > 0) {
      // (past the buffer's end harmless: a prefetch never faults)
      const char* ahead = reinterpret_cast<const char*>(p) + kDistance;
      for (int line = 0; line < 8; ++line) _mm_prefetch(ahead + 64 * line, kMmHint);
    }
    s0 = _mm512_add_epi64(s0, _mm512_load_si512(p + 0));
    s1 = _mm512_add_epi64(s1, _mm512_load_si512(p + 1));
    s2 = _mm512_add_epi64(s2, _mm512_load_si512(p + 2));
    s3 = _mm512_add_epi64(s3, _mm512_load_si512(p + 3));
    s4 = _mm512_add_epi64(s4, _mm512_load_si512(p + 4));
    s5 = _mm512_add_epi64(s5, _mm512_load_si512(p + 5));
    s6 = _mm512_add_epi64(s6, _mm512_load_si512(p + 6));
    s7 = _mm512_add_epi64(s7, _mm512_load_si512(p + 7));
  }
  const __m512i s = _mm512_add_epi64(_mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)),
                                     _mm512_add_epi64(_mm512_add_epi64(s4, s5), _mm512_add_epi64(s6, s7)));
  return static_cast<uint64_t>(_mm512_reduce_add_epi64(s));
}

}  // namespace

uint64_t read_sum_avx512(const uint64_t* data, int64_t words, int prefetch) {
  return with_read_prefetch(prefetch, [&]<int kDistance, int kHint>() { return read_sum<kDistance, kHint>(data, words); });
}

}  // namespace baton::cli::read_kernels
