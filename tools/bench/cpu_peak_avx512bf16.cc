// The BF16 peak loop (cpu_peak_kernels.h): compiled with -mavx512bf16 as
// well, entered only when cpu_features().avx512bf16 and the SIMD level is
// avx512. Same register discipline as cpu_peak_avx512.cc.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "cpu_peak_kernels.h"

namespace baton::cli::peak_kernels {

#define BATON_PEAK_EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
static_assert(kPeakAccumulators == 16, "BATON_PEAK_EACH lists 16 accumulators");

double bf16_dot_avx512bf16(int64_t iterations, float a, float b) {
  // Both halves of each bf16 pair hold the value: a lane gains 2 * a * b.
  __m512bh va = _mm512_cvtne2ps_pbh(_mm512_set1_ps(a), _mm512_set1_ps(a));
  __m512bh vb = _mm512_cvtne2ps_pbh(_mm512_set1_ps(b), _mm512_set1_ps(b));
  asm volatile("" : "+v"(va), "+v"(vb));
#define BATON_DECLARE(i) __m512 acc##i = _mm512_setzero_ps();
  BATON_PEAK_EACH(BATON_DECLARE)
#undef BATON_DECLARE
  for (int64_t it = 0; it < iterations; ++it) {
#define BATON_STEP(i) acc##i = _mm512_dpbf16_ps(acc##i, va, vb);
    BATON_PEAK_EACH(BATON_STEP)
#undef BATON_STEP
    // Two statements: a "+v" operand counts twice against asm's limit of 30.
    asm volatile("" : "+v"(acc0), "+v"(acc1), "+v"(acc2), "+v"(acc3), "+v"(acc4), "+v"(acc5), "+v"(acc6), "+v"(acc7));
    asm volatile("" : "+v"(acc8), "+v"(acc9), "+v"(acc10), "+v"(acc11), "+v"(acc12), "+v"(acc13), "+v"(acc14),
                 "+v"(acc15));
  }
  double total = 0;
#define BATON_SUM(i) total += static_cast<double>(_mm512_reduce_add_ps(acc##i));
  BATON_PEAK_EACH(BATON_SUM)
#undef BATON_SUM
  return total;
}

}  // namespace baton::cli::peak_kernels
