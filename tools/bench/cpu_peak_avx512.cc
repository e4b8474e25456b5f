// AVX-512 peak loops (cpu_peak_kernels.h). Entered only at SIMD level avx512.
// The accumulators pass through an empty asm statement every round: the
// compiler must keep them in registers and cannot merge, hoist or drop a
// round, so the loop executes exactly the instructions the count says.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "cpu_peak_kernels.h"

namespace baton::cli::peak_kernels {
namespace {

#define BATON_PEAK_EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
// Two statements: a "+v" operand counts twice against asm's limit of 30.
#define BATON_PEAK_KEEP(acc)                                                                                        \
  asm volatile("" : "+v"(acc##0), "+v"(acc##1), "+v"(acc##2), "+v"(acc##3), "+v"(acc##4), "+v"(acc##5),            \
               "+v"(acc##6), "+v"(acc##7));                                                                         \
  asm volatile("" : "+v"(acc##8), "+v"(acc##9), "+v"(acc##10), "+v"(acc##11), "+v"(acc##12), "+v"(acc##13),        \
               "+v"(acc##14), "+v"(acc##15))
static_assert(kPeakAccumulators == 16, "BATON_PEAK_EACH lists 16 accumulators");

}  // namespace

int64_t int8_dot_avx512(int64_t iterations, uint8_t a, int8_t b) {
  __m512i va = _mm512_set1_epi8(static_cast<char>(a)), vb = _mm512_set1_epi8(b);
  asm volatile("" : "+v"(va), "+v"(vb));  // inputs unknown to the compiler
#define BATON_DECLARE(i) __m512i acc##i = _mm512_setzero_si512();
  BATON_PEAK_EACH(BATON_DECLARE)
#undef BATON_DECLARE
  for (int64_t it = 0; it < iterations; ++it) {
#define BATON_STEP(i) acc##i = _mm512_dpbusd_epi32(acc##i, va, vb);
    BATON_PEAK_EACH(BATON_STEP)
#undef BATON_STEP
    BATON_PEAK_KEEP(acc);
  }
  int64_t total = 0;
  // Lanes widened to int64 before the sum (16 x 16 int32 lanes may exceed int32).
#define BATON_SUM(i)                                                                 \
  total += _mm512_reduce_add_epi64(                                                  \
      _mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(acc##i)),        \
                       _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(acc##i, 1))));
  BATON_PEAK_EACH(BATON_SUM)
#undef BATON_SUM
  return total;
}

double f32_fma_avx512(int64_t iterations, float a, float b) {
  __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  asm volatile("" : "+v"(va), "+v"(vb));
#define BATON_DECLARE(i) __m512 acc##i = _mm512_setzero_ps();
  BATON_PEAK_EACH(BATON_DECLARE)
#undef BATON_DECLARE
  for (int64_t it = 0; it < iterations; ++it) {
#define BATON_STEP(i) acc##i = _mm512_fmadd_ps(va, vb, acc##i);
    BATON_PEAK_EACH(BATON_STEP)
#undef BATON_STEP
    BATON_PEAK_KEEP(acc);
  }
  double total = 0;
#define BATON_SUM(i) total += static_cast<double>(_mm512_reduce_add_ps(acc##i));
  BATON_PEAK_EACH(BATON_SUM)
#undef BATON_SUM
  return total;
}

}  // namespace baton::cli::peak_kernels
