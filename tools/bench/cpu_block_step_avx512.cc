// The Q4_0 prefill block step's instruction mix in L1 (cpu_peak_kernels.h):
// what the packed kernel (common/cpu/matmul_packed_avx512.cc) could reach if
// nothing but its own instructions bounded it. Entered only at SIMD level
// avx512.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstring>

#include "cpu_peak_kernels.h"

namespace baton::cli::peak_kernels {
namespace {

constexpr int kBlocks = 16;  // the step cycles over this many blocks' data (8 KiB of panel, all in L1)

// 2 strips x 6 tokens of one 32-column block, as packed_prefill_pair's
// chunk_kernel<6> (kUnpacked) or the decode kernel's packed_kernel<2, 6>
// (nibbles unpacked by an and, a shift and an and per 64 bytes); kScale
// false: the int32 sums are added to the f32 accumulators as raw bits
// instead of the convert, multiply and FMA (the dot products' own share);
// kMultiply false: the convert and FMA by the weight scale alone (the
// per-token multiply by the x scale left out).
// noipa: the data comes in as pointers the loop cannot rematerialize. A
// clone specialized on the caller's thread_local arrays (GCC's constprop)
// recomputed their addresses in the loop through __tls_get_addr, a call that
// spilled the 12 accumulators and ran vzeroupper every step: that version
// measured 0.52-0.56 of the peak for mix 0, this one ~0.62.
template <bool kUnpacked, bool kScale, bool kMultiply = true>
[[gnu::noipa]] double block_steps(int64_t iterations, const uint8_t* panel, const int8_t* xq, const int32_t* xbias,
                   const float* xd, const uint16_t* scales) {
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
  __m512 acc[2][6];
  for (int s = 0; s < 2; ++s)
    for (int t = 0; t < 6; ++t) acc[s][t] = _mm512_setzero_ps();
  for (int64_t it = 0; it < iterations; ++it) {
    const int b = static_cast<int>(it % kBlocks);
    const uint8_t* w = panel + b * 1024;
    const int8_t* x = xq + b * 6 * 32;
    __m512i dot[2][6];
#pragma GCC unroll 6
    for (int t = 0; t < 6; ++t) {
      const __m512i bias = _mm512_set1_epi32(xbias[b * 6 + t]);
      dot[0][t] = bias;
      dot[1][t] = bias;
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      __m512i ws[2];
#pragma GCC unroll 2
      for (int s = 0; s < 2; ++s) {
        if constexpr (kUnpacked) {
          ws[s] = _mm512_load_si512(w + s * 512 + 64 * j);
        } else {
          const __m512i v = _mm512_load_si512(w + s * 256 + 64 * (j % 4));
          ws[s] = _mm512_and_si512(j < 4 ? v : _mm512_srli_epi16(v, 4), low_nibbles);
        }
      }
#pragma GCC unroll 6
      for (int t = 0; t < 6; ++t) {
        int32_t four;
        std::memcpy(&four, x + t * 32 + 4 * j, 4);
        const __m512i xv = _mm512_set1_epi32(four);
        dot[0][t] = _mm512_dpbusd_epi32(dot[0][t], ws[0], xv);
        dot[1][t] = _mm512_dpbusd_epi32(dot[1][t], ws[1], xv);
      }
    }
#pragma GCC unroll 2
    for (int s = 0; s < 2; ++s) {
      const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(scales + (b * 2 + s) * 16)));
#pragma GCC unroll 6
      for (int t = 0; t < 6; ++t) {
        if constexpr (kScale && !kMultiply) {
          acc[s][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[s][t]), d, acc[s][t]);
        } else if constexpr (kScale) {
          acc[s][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[s][t]), _mm512_mul_ps(d, _mm512_set1_ps(xd[b * 6 + t])),
                                      acc[s][t]);
        } else {
          acc[s][t] = _mm512_add_ps(acc[s][t], _mm512_castsi512_ps(dot[s][t]));
        }
      }
    }
  }
  float lanes[16];
  double total = 0;
  for (int s = 0; s < 2; ++s) {
    for (int t = 0; t < 6; ++t) {
      _mm512_storeu_ps(lanes, acc[s][t]);
      for (float v : lanes) total += v;
    }
  }
  return total;
}

}  // namespace

double q4_0_block_steps_avx512(int64_t iterations, BlockStepMix mix, uint8_t nibble) {
  // Every weight byte `nibble` (unpacked: 0..15; packed: the low and high
  // nibble both), every x quant 1, bias 0, scales 1: a step adds 32 * nibble
  // to each lane of each of the 12 accumulators.
  alignas(64) static thread_local uint8_t panel[kBlocks * 1024];
  alignas(64) static thread_local int8_t xq[kBlocks * 6 * 32];
  alignas(64) static thread_local int32_t xbias[kBlocks * 6];
  alignas(64) static thread_local float xd[kBlocks * 6];
  alignas(64) static thread_local uint16_t scales[kBlocks * 2 * 16];
  const bool unpacked = mix != BlockStepMix::kPackedNibbles;
  std::memset(panel, unpacked ? nibble : (nibble | nibble << 4), sizeof(panel));
  std::memset(xq, 1, sizeof(xq));
  std::memset(xbias, 0, sizeof(xbias));
  for (float& v : xd) v = 1.0f;
  for (uint16_t& v : scales) v = 0x3c00;  // fp16 1.0
  switch (mix) {
    case BlockStepMix::kUnpackedPanel: return block_steps<true, true>(iterations, panel, xq, xbias, xd, scales);
    case BlockStepMix::kPackedNibbles: return block_steps<false, true>(iterations, panel, xq, xbias, xd, scales);
    case BlockStepMix::kDotProductsOnly: return block_steps<true, false>(iterations, panel, xq, xbias, xd, scales);
    case BlockStepMix::kNoScaleMultiply:
      return block_steps<true, true, false>(iterations, panel, xq, xbias, xd, scales);
  }
  return 0;
}

}  // namespace baton::cli::peak_kernels
