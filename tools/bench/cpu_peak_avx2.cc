// AVX2 peak loops (cpu_peak_kernels.h). Entered only at SIMD level >= avx2.
// The int8 triple is written in asm: with intrinsics the compiler would
// compute maddubs(a, b) once (it is the same for every chain) and time only
// the adds. The FMA chains pass through an empty asm statement every round
// so none is merged, hoisted or dropped.
#include <immintrin.h>

#include "cpu_peak_kernels.h"

namespace baton::cli::peak_kernels {
namespace {

static_assert(kPeakAccumulatorsAvx2Int8 == 8, "the asm below runs 8 chains");
static_assert(kPeakAccumulatorsAvx2Fma == 12, "the loop below runs 12 chains");

int64_t lane_sum(__m256i v) {
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
  int64_t total = 0;
  for (int32_t x : lanes) total += x;
  return total;
}

double lane_sum(__m256 v) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  double total = 0;
  for (float x : lanes) total += x;
  return total;
}

}  // namespace

int64_t int8_dot_avx2(int64_t iterations, uint8_t a, int8_t b) {
  const __m256i va = _mm256_set1_epi8(static_cast<char>(a)), vb = _mm256_set1_epi8(b);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc0 = _mm256_setzero_si256(), acc1 = acc0, acc2 = acc0, acc3 = acc0, acc4 = acc0, acc5 = acc0,
          acc6 = acc0, acc7 = acc0;
  __m256i t;
  for (int64_t it = 0; it < iterations; ++it) {
#define BATON_TRIPLE(n)                     \
  "vpmaddubsw %[b], %[a], %[t]\n\t"        \
  "vpmaddwd %[ones], %[t], %[t]\n\t"       \
  "vpaddd %[t], %[acc" #n "], %[acc" #n "]\n\t"
    asm volatile(BATON_TRIPLE(0) BATON_TRIPLE(1) BATON_TRIPLE(2) BATON_TRIPLE(3) BATON_TRIPLE(4) BATON_TRIPLE(5)
                     BATON_TRIPLE(6) BATON_TRIPLE(7)
                 : [acc0] "+x"(acc0), [acc1] "+x"(acc1), [acc2] "+x"(acc2), [acc3] "+x"(acc3), [acc4] "+x"(acc4),
                   [acc5] "+x"(acc5), [acc6] "+x"(acc6), [acc7] "+x"(acc7), [t] "=&x"(t)
                 : [a] "x"(va), [b] "x"(vb), [ones] "x"(ones));
#undef BATON_TRIPLE
  }
  return lane_sum(acc0) + lane_sum(acc1) + lane_sum(acc2) + lane_sum(acc3) + lane_sum(acc4) + lane_sum(acc5) +
         lane_sum(acc6) + lane_sum(acc7);
}

double f32_fma_avx2(int64_t iterations, float a, float b) {
  __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  asm volatile("" : "+x"(va), "+x"(vb));
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0, acc4 = acc0, acc5 = acc0, acc6 = acc0,
         acc7 = acc0, acc8 = acc0, acc9 = acc0, acc10 = acc0, acc11 = acc0;
  for (int64_t it = 0; it < iterations; ++it) {
    acc0 = _mm256_fmadd_ps(va, vb, acc0);
    acc1 = _mm256_fmadd_ps(va, vb, acc1);
    acc2 = _mm256_fmadd_ps(va, vb, acc2);
    acc3 = _mm256_fmadd_ps(va, vb, acc3);
    acc4 = _mm256_fmadd_ps(va, vb, acc4);
    acc5 = _mm256_fmadd_ps(va, vb, acc5);
    acc6 = _mm256_fmadd_ps(va, vb, acc6);
    acc7 = _mm256_fmadd_ps(va, vb, acc7);
    acc8 = _mm256_fmadd_ps(va, vb, acc8);
    acc9 = _mm256_fmadd_ps(va, vb, acc9);
    acc10 = _mm256_fmadd_ps(va, vb, acc10);
    acc11 = _mm256_fmadd_ps(va, vb, acc11);
    asm volatile(""
                 : "+x"(acc0), "+x"(acc1), "+x"(acc2), "+x"(acc3), "+x"(acc4), "+x"(acc5), "+x"(acc6), "+x"(acc7),
                   "+x"(acc8), "+x"(acc9), "+x"(acc10), "+x"(acc11));
  }
  return lane_sum(acc0) + lane_sum(acc1) + lane_sum(acc2) + lane_sum(acc3) + lane_sum(acc4) + lane_sum(acc5) +
         lane_sum(acc6) + lane_sum(acc7) + lane_sum(acc8) + lane_sum(acc9) + lane_sum(acc10) + lane_sum(acc11);
}

}  // namespace baton::cli::peak_kernels
