// AVX-512 VNNI decode over Q4_0 weights packed at load (matmul.h's
// pack_weight_matrix). Entered only when best_simd_level() == kAvx512 (see
// matmul_kernels.h for why nothing here may be an inline function or
// template shared with other files).
//
// Why a packed copy: GGUF's Q4_0 rows put 32 weights of ONE row in 18
// bytes, so a decode kernel over them multiplies two or four blocks of a row
// per vpdpbusd and then pays shuffles to line up the x quants, a per-block
// scale spread, and a reduction across lanes per row: measured ~33 GB/s of
// weights on two cores, about half of what this machine's memory delivers.
// Packed, a register's 16 int32 lanes are 16 ROWS: one 64-byte load holds 4
// columns' nibbles (low) and 4 more (high) of 16 rows, vpdpbusd multiplies
// them by x's 4 quants broadcast, and a 32-column block of 16 rows is 4
// loads, 6 ands/shifts, 8 vpdpbusd, then one convert, multiply and FMA. Each
// thread streams its strips front to back (one stream of nibbles, one of
// scales), which the prefetchers follow.
//
// Signs: the nibbles enter unsigned (0..15, the stored value) and x signed,
// so sum (n - 8) * xq = sum n * xq - 8 * sum xq: the block's accumulator
// starts at -8 * (sum of x's quants), p.xbias_blocks. x comes block-major
// (block b of every token of the call together): one pointer for all the
// tokens of a pass, where a pointer per token ran out of general registers
// (the compiler kept them in vector registers and moved them back per use). Exact in int32, so
// splitting a block's products over two chains changes nothing.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <type_traits>

#include "common/cpu/matmul_kernels.h"

namespace baton::cpu_kernels {
namespace {

// Four x quants read as one int32 wherever they sit (may alias the int8s).
typedef int32_t UnalignedInt32 __attribute__((may_alias, aligned(1)));

constexpr int64_t kBlockNibbleBytes = kPackedBlockNibbleBytes;
// How far ahead of the block being multiplied each strip's nibbles and
// scales are prefetched: p.packed_near_blocks (16 blocks on Intel, 12 on
// AMD; on Intel 8 to 64 measured the same within the noise; matmul.cc
// set_packed_prefetch gives the Zen 5 figures), to L1 (T0), or
// non-temporal (NTA) for calls of up to 4 tokens where p.packed_near_nta
// (AMD).

// S strips from `first` (packed_strip_at): block 0's nibbles and scales and
// the bytes from a block to the next (576 in a pair, 288 for a last strip
// alone). Two strips from an odd `first` lie in two pairs.
template <int S>
struct Strips {
  const uint8_t* nib[S];
  const uint8_t* scl[S];
  int64_t stride[S];
};
template <int S>
Strips<S> strips_at(const MatmulProblem& p, int64_t first) {
  const int64_t strip_bytes = packed_strip_bytes(p.cols);
  const int64_t n_strips = (p.rows + kPackedStripRows - 1) / kPackedStripRows;
  Strips<S> at;
  for (int s = 0; s < S; ++s) {
    const PackedStripAt a = packed_strip_at(first + s, n_strips, strip_bytes, kBlockNibbleBytes);
    at.nib[s] = p.packed + a.quants;
    at.scl[s] = p.packed + a.scales;
    at.stride[s] = a.stride;
  }
  return at;
}
// Decode (up to 4 tokens; p.packed_far_prefetch) also asks for the lines kFarBlocks blocks ahead (8 KiB
// per strip, and its scales) into L2, wrapping into the next S strips (the
// next row task's) as the near prefetch does. One token's arithmetic per
// line is too little for the near prefetch's 4 KiB to cover the memory's
// latency and the task's cold start: on the AVX-512 host without AMX
// (2026-12-05, BM_MatmulDecodeSequence, 2 threads) 8192 x 2048 / 2048 x
// 2048 / 2048 x 8192 streamed 0.94-0.95 / 0.89-0.91 / 0.92-0.95 of the best
// read against 0.85 / 0.84 / 0.87 without it, one thread 0.96-0.97 against
// 0.89; far 24 or 48 and near 8 measured the same. (Without any software
// prefetch: 0.68-0.73.) Batched steps: 2 tokens 0.88 against 0.84, 4 tokens
// 0.82 against 0.81 (8192 x 2048). Prefill's groups of 6 tokens find
// the strips in cache after the first group and keep the near prefetch only.
constexpr int64_t kFarBlocks = 32;

// One strip's block `block` ahead: its 4 lines of nibbles and its scales'
// line (both kernels' near prefetch), with the hint kHint.
template <int kHint>
inline void prefetch_strip_block(const uint8_t* nib, const uint8_t* scl, int64_t stride, int64_t block) {
  const char* ahead = reinterpret_cast<const char*>(nib + block * stride);
  for (int line = 0; line < 4; ++line) _mm_prefetch(ahead + 64 * line, static_cast<_mm_hint>(kHint));
  _mm_prefetch(reinterpret_cast<const char*>(scl + block * stride), static_cast<_mm_hint>(kHint));
}

// S strips (16 rows each, consecutive) x T tokens. Every (row, token) goes
// through the same float operations in the same order whatever S and T are,
// and its int32 block sums are exact whichever chains add them, so a token's
// outputs are the same bits alone or with others, in decode or in prefill.
// Up to 4 tokens a (strip, token) pair has two int32 chains (low and high
// nibbles: half the latency of a block; 2 strips x 4 tokens x 3 accumulators
// + 4 unpacked weights + 2 broadcasts + the mask = 31 registers; a batched
// step of 4 sessions measured ~3% faster than with one chain); from 5 on, one
// (the registers: 2 strips x 6 tokens x (int32 + f32 accumulator) = 24).
template <int S, int T, bool kNearNta = false>
void packed_kernel(const MatmulProblem& p, int64_t r0, int64_t t0, __mmask16 last_mask, const char* l2_lines,
                   int64_t l2_count) {
  const int64_t n_blocks = p.cols / kQK8_0;
  const Strips<S> at = strips_at<S>(p, r0 / kPackedStripRows);
  const auto& nib0 = at.nib;
  const auto& scl0 = at.scl;
  const auto& stride = at.stride;
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
  __m512 acc[S][T];
  for (int s = 0; s < S; ++s)
    for (int t = 0; t < T; ++t) acc[s][t] = _mm512_setzero_ps();
  const int64_t near_blocks = p.packed_near_blocks;
  const bool far_prefetch = T <= 4 && p.packed_far_prefetch;
  const int64_t n = p.n_tokens;
  const int8_t* xq = p.xq_blocks + t0 * kQK8_0;  // block b, token t: xq + (b n + t) 32
  const int32_t* xbias = p.xbias_blocks + t0;
  const float* xd = p.xd_blocks + t0;
  for (int64_t b = 0; b < n_blocks; ++b, xq += n * kQK8_0, xbias += n, xd += n) {
    if (b < l2_count) _mm_prefetch(l2_lines + 64 * b, _MM_HINT_T1);
    // Each strip's nibbles and scales near_blocks on (to L1) and, with the
    // far prefetch, kFarBlocks on (to L2); past the strips' end that is the
    // pair after them (the next row task's, usually this thread's next), so
    // a task does not start on a cold stream (the AVX2 kernel measured 0.77
    // -> 1.00 of the read bandwidth on 2048-column matrices with this; here
    // the far prefetch's reach into the next task is what mattered on Intel:
    // see kFarBlocks).
    for (int s = 0; s < S; ++s) {
      if (near_blocks > 0) {
        prefetch_strip_block<kNearNta ? _MM_HINT_NTA : _MM_HINT_T0>(nib0[s], scl0[s], stride[s], b + near_blocks);
      }
      if (far_prefetch) prefetch_strip_block<_MM_HINT_T1>(nib0[s], scl0[s], stride[s], b + kFarBlocks);
    }
    // Chains per (strip, token): low nibbles (columns 0..15) and high (16..31).
    constexpr bool kTwoChains = T <= 4;
    __m512i low[S][T], high[S][kTwoChains ? T : 1];
    for (int t = 0; t < T; ++t) {
      const __m512i bias = _mm512_set1_epi32(xbias[t]);
      for (int s = 0; s < S; ++s) {
        low[s][t] = bias;
        if constexpr (kTwoChains) high[s][t] = _mm512_setzero_si512();
      }
    }
    if constexpr (!kTwoChains) {
      for (int j = 0; j < 8; ++j) {  // columns 4j..4j+3: step j % 4's low (j < 4) or high nibbles
        __m512i w[S];
        for (int s = 0; s < S; ++s) {
          const __m512i v = _mm512_loadu_si512(nib0[s] + b * stride[s] + 64 * (j % 4));
          w[s] = _mm512_and_si512(j < 4 ? v : _mm512_srli_epi16(v, 4), low_nibbles);
        }
        for (int t = 0; t < T; ++t) {
          const __m512i x = _mm512_set1_epi32(*reinterpret_cast<const UnalignedInt32*>(xq + t * kQK8_0 + 4 * j));
          for (int s = 0; s < S; ++s) low[s][t] = _mm512_dpbusd_epi32(low[s][t], w[s], x);
        }
      }
    }
    for (int j = 0; j < (kTwoChains ? 4 : 0); ++j) {
      __m512i w_low[S], w_high[S];
      for (int s = 0; s < S; ++s) {
        const __m512i v = _mm512_loadu_si512(nib0[s] + b * stride[s] + 64 * j);
        w_low[s] = _mm512_and_si512(v, low_nibbles);
        w_high[s] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low_nibbles);
      }
      for (int t = 0; t < T; ++t) {
        // Loaded straight into the broadcast (vpdpbusd's memory operand
        // {1to16}), not through a general register.
        const int8_t* x4 = xq + t * kQK8_0 + 4 * j;
        const __m512i x_low = _mm512_set1_epi32(*reinterpret_cast<const UnalignedInt32*>(x4));
        const __m512i x_high = _mm512_set1_epi32(*reinterpret_cast<const UnalignedInt32*>(x4 + 16));
        for (int s = 0; s < S; ++s) {
          low[s][t] = _mm512_dpbusd_epi32(low[s][t], w_low[s], x_low);
          if constexpr (kTwoChains) high[s][t] = _mm512_dpbusd_epi32(high[s][t], w_high[s], x_high);
        }
      }
    }
    for (int s = 0; s < S; ++s) {
      const __m512 d =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scl0[s] + b * stride[s])));
      for (int t = 0; t < T; ++t) {
        __m512i sum = low[s][t];
        if constexpr (kTwoChains) sum = _mm512_add_epi32(sum, high[s][t]);
        const __m512 dot = _mm512_cvtepi32_ps(sum);
        acc[s][t] = _mm512_fmadd_ps(dot, _mm512_mul_ps(d, _mm512_set1_ps(xd[t])), acc[s][t]);
      }
    }
  }
  for (int s = 0; s < S; ++s) {
    const __mmask16 mask = s == S - 1 ? last_mask : static_cast<__mmask16>(0xffff);
    for (int t = 0; t < T; ++t) {
      _mm512_mask_storeu_ps(p.y + (t0 + t) * p.rows + r0 + s * kPackedStripRows, mask, acc[s][t]);
    }
  }
}

// One token over N whole pairs of strips (32 rows each; N = 2: two places
// of the weights side by side, matmul.cc set_packed_two_streams), each
// pair's next block loaded into registers right after its products of this
// block (p.packed_load_ahead; matmul.cc says why), so the loads are in
// flight while the core computes. A whole pair's block is 576 contiguous
// bytes (strip 0's nibbles, strip 1's at +256, both scales in the line at
// +512), so one pointer a pair walks it (the kernel it replaced held a
// nibble pointer, a scale pointer and a stride a strip and spilled them
// with two pairs) and its near prefetch asks for the block's 9 lines once
// (that one asked for the scales' line twice a pair). High nibbles are
// masked in place (v & 0xf0 = 16 n, no shift): their chain sums 16 x what
// packed_kernel's high chain sums, exactly (|16 x sum| < 2^19), and an
// arithmetic shift by 4 gives it back before the two chains are added, so a
// block's int32 sum, and every float operation after it, is packed_kernel<2,
// 1>'s: the same bits. x's quants enter vpdpbusd as broadcast memory
// operands and the masks as broadcast constants, so that two pairs' 16
// lines stay in registers (held in registers, x's 8 broadcasts and the two
// masks left GCC 12 too few, and it kept the lines on the stack).
// Measured on the Zen 5 host (2026-12-07, a temporary build with both
// kernels behind a switch, BM_MatmulDecodeNearPair's 32 calls of 8192 x
// 2048 in 60 alternating pairs in one process): one stream 1.145x /
// 1.200x / 1.288x the kernel it replaced, two streams 1.127x / 1.135x;
// whole decode steps (BM_DecodeStepNearPair, F32 cache, 150 pairs) 1.053x /
// 1.060x / 1.087x at context 512, 1.051x at 4096.
alignas(4) constexpr uint32_t kLowNibbles4 = 0x0f0f0f0fu, kHighNibbles4 = 0xf0f0f0f0u;
constexpr int64_t kPairStride = 2 * (kBlockNibbleBytes + kPackedBlockScaleBytes);
constexpr int kPairLines = kPairStride / 64;

// acc + u (u8) . (the dword at w, s8, broadcast): vpdpbusd with its memory
// operand {1to16}.
inline __m512i dpbusd_broadcast(__m512i acc, __m512i u, const void* w) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*static_cast<const int32_t*>(w)));
  return acc;
}
// u & (the dword at m, broadcast): vpandd with its memory operand {1to16}.
inline __m512i and_broadcast(__m512i u, const uint32_t* m) {
  __m512i r;
  asm("vpandd %2%{1to16%}, %1, %0" : "=v"(r) : "v"(u), "m"(*m));
  return r;
}

// Token t0 over the pairs whose block 0 is at base[k], into out[k] (32
// floats each).
template <int N, bool kNearNta>
void pairs_stream(const MatmulProblem& p, const uint8_t* const (&base)[N], float* const (&out)[N], int64_t t0) {
  const int64_t n_blocks = p.cols / kQK8_0;
  const int64_t n = p.n_tokens;
  const int8_t* xq = p.xq_blocks + t0 * kQK8_0;  // block b: xq + b n 32
  const int32_t* xbias = p.xbias_blocks + t0;
  const float* xd = p.xd_blocks + t0;
  const uint8_t* at[N];
  const char* ahead[N];  // the near prefetch's block
  __m512 acc[N][2];
  __m512i lines[N][kPairLines - 1];  // the block's nibbles
#pragma GCC unroll 4
  for (int k = 0; k < N; ++k) {
    at[k] = base[k];
    ahead[k] = reinterpret_cast<const char*>(base[k] + p.packed_near_blocks * kPairStride);
    acc[k][0] = acc[k][1] = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int j = 0; j < kPairLines - 1; ++j) lines[k][j] = _mm512_loadu_si512(at[k] + 64 * j);
  }
  // One block; load_next (std::true_type): the next block's nibbles into
  // lines (not after the last block).
  auto block = [&](auto load_next) {
    const __m512i bias = _mm512_set1_epi32(xbias[0]);
    const __m512 xd_b = _mm512_set1_ps(xd[0]);
#pragma GCC unroll 4
    for (int k = 0; k < N; ++k) {
#pragma GCC unroll 9
      for (int line = 0; line < kPairLines; ++line) {
        _mm_prefetch(ahead[k] + 64 * line, kNearNta ? _MM_HINT_NTA : _MM_HINT_T0);
      }
      __m512i low[2] = {bias, bias}, high[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
#pragma GCC unroll 2
        for (int s = 0; s < 2; ++s) {
          const __m512i v = lines[k][4 * s + j];
          low[s] = dpbusd_broadcast(low[s], and_broadcast(v, &kLowNibbles4), xq + 4 * j);
          high[s] = dpbusd_broadcast(high[s], and_broadcast(v, &kHighNibbles4), xq + 4 * j + 16);
        }
      }
      if constexpr (decltype(load_next)::value) {
#pragma GCC unroll 8
        for (int j = 0; j < kPairLines - 1; ++j) lines[k][j] = _mm512_loadu_si512(at[k] + kPairStride + 64 * j);
      }
      const __m512i scales = _mm512_loadu_si512(at[k] + 2 * kBlockNibbleBytes);
#pragma GCC unroll 2
      for (int s = 0; s < 2; ++s) {
        const __m512 d = _mm512_cvtph_ps(s == 0 ? _mm512_castsi512_si256(scales) : _mm512_extracti64x4_epi64(scales, 1));
        const __m512 dot = _mm512_cvtepi32_ps(_mm512_add_epi32(low[s], _mm512_srai_epi32(high[s], 4)));
        acc[k][s] = _mm512_fmadd_ps(dot, _mm512_mul_ps(d, xd_b), acc[k][s]);
      }
      at[k] += kPairStride;
      ahead[k] += kPairStride;
    }
    xq += n * kQK8_0, xbias += n, xd += n;
  };
  for (int64_t b = 0; b + 1 < n_blocks; ++b) block(std::true_type{});
  block(std::false_type{});
#pragma GCC unroll 4
  for (int k = 0; k < N; ++k) {
    _mm512_storeu_ps(out[k], acc[k][0]);
    _mm512_storeu_ps(out[k] + kPackedStripRows, acc[k][1]);
  }
}

// packed_kernel for up to 4 tokens, whose lines each step reads once: the
// near prefetch non-temporal, and a decode step's loads a block ahead,
// where p says (matmul.cc set_packed_prefetch).
template <int S, int T>
void packed_kernel_few(const MatmulProblem& p, int64_t r0, int64_t t0, __mmask16 last_mask, const char* l2_lines,
                       int64_t l2_count) {
  static_assert(T <= 4, "groups of 6 (prefill) find the strips in cache after the first");
  if constexpr (T == 1 && S == 2) {
    // A whole pair: both strips' 16 rows, the first strip even (tasks may
    // start on an odd strip, whose two strips lie in two pairs).
    if (p.packed_load_ahead && l2_count == 0 && !p.packed_far_prefetch && last_mask == 0xffff &&
        r0 / kPackedStripRows % 2 == 0) {
      const uint8_t* const base[1] = {p.packed + r0 / kPackedStripRows * packed_strip_bytes(p.cols)};
      float* const out[1] = {p.y + t0 * p.rows + r0};
      if (p.packed_near_nta) return pairs_stream<1, true>(p, base, out, t0);
      return pairs_stream<1, false>(p, base, out, t0);
    }
  }
  if (p.packed_near_nta) return packed_kernel<S, T, true>(p, r0, t0, last_mask, l2_lines, l2_count);
  packed_kernel<S, T>(p, r0, t0, last_mask, l2_lines, l2_count);
}

// Tokens [tok_begin, tok_end) over S strips from r0: groups of 6 (prefill;
// the strips come from cache after the first group), then 4, 2, 1.
// The first group reads the strips from memory; while the later groups find
// them in cache, the strips after them (the next row task's, usually this
// thread's next) go to L2, one line per block of each group from the second
// on, so the next task's first group does not wait on memory either
// (measured +2 to +5% per matmul, one thread).
template <int S>
void packed_tokens(const MatmulProblem& p, int64_t r0, int64_t tok_begin, int64_t tok_end, __mmask16 last_mask) {
  const int64_t n_blocks = p.cols / kQK8_0;
  const int64_t strip_bytes = packed_strip_bytes(p.cols);
  const int64_t n_strips = (p.rows + kPackedStripRows - 1) / kPackedStripRows;
  const int64_t next_strip = r0 / kPackedStripRows + S;
  const int64_t next_strips = n_strips - next_strip < S ? n_strips - next_strip : S;
  const int64_t next_lines = next_strips > 0 ? next_strips * strip_bytes / 64 : 0;
  const char* next = next_lines > 0 ? reinterpret_cast<const char*>(p.packed + next_strip * strip_bytes) : nullptr;
  int64_t group = 0;
  // Group g >= 1 prefetches lines [(g - 1) n_blocks, g n_blocks) of the next strips.
  auto count = [&]() {
    const int64_t left = next_lines - (group - 1) * n_blocks;
    return group == 0 || left <= 0 ? 0 : left;
  };
  auto lines = [&]() { return count() > 0 ? next + (group - 1) * n_blocks * 64 : nullptr; };
  int64_t t = tok_begin;
  for (; t + 6 <= tok_end; t += 6, ++group) packed_kernel<S, 6>(p, r0, t, last_mask, lines(), count());
  switch (tok_end - t) {
    case 5:
      packed_kernel_few<S, 4>(p, r0, t, last_mask, lines(), count());
      return packed_kernel_few<S, 1>(p, r0, t + 4, last_mask, nullptr, 0);
    case 4: return packed_kernel_few<S, 4>(p, r0, t, last_mask, lines(), count());
    case 3:
      packed_kernel_few<S, 2>(p, r0, t, last_mask, lines(), count());
      return packed_kernel_few<S, 1>(p, r0, t + 2, last_mask, nullptr, 0);
    case 2: return packed_kernel_few<S, 2>(p, r0, t, last_mask, lines(), count());
    case 1: return packed_kernel_few<S, 1>(p, r0, t, last_mask, lines(), count());
    default: return;
  }
}

// Prefill of many tokens over two strips (32 rows): the decode kernel
// unpacks each block's nibbles again for every group of 6 tokens (an and, a
// shift and an and per 64 bytes: 24 of the ~160 vector instructions of a
// 2 x 6 block step), and its strips' nibbles with the x rows of 6 tokens do
// not stay in L1. Here the nibbles of a chunk of kChunkBlocks blocks of both
// strips are unpacked once into a 32 KiB panel of bytes 0..15 (the same bytes
// the and / shift make), by the chunk's first token group as it multiplies
// them (a separate unpacking pass before the groups waited on the nibbles'
// lines from L2: 1.23-1.25 against 1.17 ms for 2048 x 2048 x 64 tokens on
// one thread), and every later token group of the task runs over the panel
// before the next chunk; between chunks a (row, token)'s f32 sum waits in its
// own place in y (exact: a float stored and loaded). The integer block sums
// are the same, and each (row, token) takes the same FMAs in the same block
// order as in packed_kernel: the same bits. Measured on the Intel AVX-512
// host (a synthetic 2 x 6 block step in L1): 27.3 ns with the unpacking,
// 23.5-23.9 over an unpacked panel.
constexpr int64_t kChunkBlocks = 32;
// Panel block b at panel + b * kUnpackedBlockBytes: strip s's step j (columns
// 4j..4j+3, lane i = row i: line j % 4's low nibbles for j < 4, high for
// j >= 4) at + s * 512 + 64 j.
constexpr int64_t kUnpackedBlockBytes = 2 * 8 * 64;  // 2 strips x 8 steps x 64 bytes

// Lines to bring to L2 a few at a time (a burst of the next chunk's ~150
// lines at once would hold the fill buffers for as long as DRAM takes to
// answer them all): up to 4 contiguous ranges, walked in order.
struct SpreadPrefetch {
  const char* base[4] = {};
  int64_t bytes[4] = {};
  int ranges = 0;
  int range = 0;
  int64_t offset = 0;
  void add(const void* at, int64_t n) {
    base[ranges] = static_cast<const char*>(at);
    bytes[ranges++] = n;
  }
  // The next `lines` lines (fewer at the end).
  void step(int lines) {
    for (; lines > 0 && range < ranges; --lines) {
      _mm_prefetch(base[range] + offset, _MM_HINT_T1);
      offset += 64;
      if (offset >= bytes[range]) ++range, offset = 0;
    }
  }
};
// Lines per block step of a token group: the next chunk (2 strips x 32
// blocks x 4 lines of nibbles, and their scales' lines: ~290) over the first
// ~9 groups (2 or 4 per step measured slower in the model).
constexpr int kPrefetchLinesPerBlock = 1;

// T tokens from t0 over the chunk [b0, b0 + nb) of two strips from r0: the
// accumulators start at 0 (first chunk) or at what y holds, and go back to y.
// kUnpack (the chunk's first token group): the weights come from the strips'
// nibbles, unpacked step by step into the panel's layout (above
// kUnpackedBlockBytes) and stored there for the groups after it, so that the nibbles' reads from
// L2 overlap this group's products instead of stalling a pass of their own.
template <int T, bool kUnpack = false>
void chunk_kernel(const MatmulProblem& p, uint8_t* panel, const Strips<2>& at, int64_t b0, int64_t nb, int64_t r0,
                  int64_t t0, bool first, __mmask16 last_mask, SpreadPrefetch& ahead) {
  const __mmask16 masks[2] = {static_cast<__mmask16>(0xffff), last_mask};
  __m512 acc[2][T];
  for (int s = 0; s < 2; ++s) {
    for (int t = 0; t < T; ++t) {
      acc[s][t] = first ? _mm512_setzero_ps()
                        : _mm512_maskz_loadu_ps(masks[s], p.y + (t0 + t) * p.rows + r0 + s * kPackedStripRows);
    }
  }
  const int64_t n = p.n_tokens;
  const int8_t* xq = p.xq_blocks + (b0 * n + t0) * kQK8_0;  // block b, token t: xq + (b n + t) 32
  const int32_t* xbias = p.xbias_blocks + b0 * n + t0;
  const float* xd = p.xd_blocks + b0 * n + t0;
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
  for (int64_t b = 0; b < nb; ++b, xq += n * kQK8_0, xbias += n, xd += n) {
    uint8_t* w = panel + b * kUnpackedBlockBytes;
    ahead.step(kPrefetchLinesPerBlock);
    __m512i dot[2][T];
    for (int t = 0; t < T; ++t) {
      const __m512i bias = _mm512_set1_epi32(xbias[t]);
      dot[0][t] = bias;
      dot[1][t] = bias;
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      __m512i w0, w1;
      if constexpr (kUnpack) {
        // Step j: line j % 4's low (j < 4) or high nibbles, the panel's layout.
        const __m512i v0 = _mm512_loadu_si512(at.nib[0] + (b0 + b) * at.stride[0] + 64 * (j % 4));
        const __m512i v1 = _mm512_loadu_si512(at.nib[1] + (b0 + b) * at.stride[1] + 64 * (j % 4));
        w0 = _mm512_and_si512(j < 4 ? v0 : _mm512_srli_epi16(v0, 4), low_nibbles);
        w1 = _mm512_and_si512(j < 4 ? v1 : _mm512_srli_epi16(v1, 4), low_nibbles);
        _mm512_store_si512(w + 64 * j, w0);
        _mm512_store_si512(w + 512 + 64 * j, w1);
      } else {
        w0 = _mm512_load_si512(w + 64 * j), w1 = _mm512_load_si512(w + 512 + 64 * j);
      }
      for (int t = 0; t < T; ++t) {
        const __m512i x = _mm512_set1_epi32(*reinterpret_cast<const UnalignedInt32*>(xq + t * kQK8_0 + 4 * j));
        dot[0][t] = _mm512_dpbusd_epi32(dot[0][t], w0, x);
        dot[1][t] = _mm512_dpbusd_epi32(dot[1][t], w1, x);
      }
    }
    for (int s = 0; s < 2; ++s) {
      const __m512 d = _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at.scl[s] + (b0 + b) * at.stride[s])));
      for (int t = 0; t < T; ++t) {
        acc[s][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[s][t]), _mm512_mul_ps(d, _mm512_set1_ps(xd[t])), acc[s][t]);
      }
    }
  }
  for (int s = 0; s < 2; ++s) {
    for (int t = 0; t < T; ++t) {
      _mm512_mask_storeu_ps(p.y + (t0 + t) * p.rows + r0 + s * kPackedStripRows, masks[s], acc[s][t]);
    }
  }
}

// Tokens [tok_begin, tok_end) over the two strips from r0, chunk by chunk.
// While a chunk's token groups run, the next chunk's lines (or, at the
// strips' end, the first chunk of the two strips after them: the next row
// task's, usually this thread's next) are asked for, kPrefetchLinesPerBlock
// lines per block step; what short calls leave is asked for at the chunk's
// end.
void packed_prefill_pair(const MatmulProblem& p, int64_t r0, int64_t tok_begin, int64_t tok_end,
                         __mmask16 last_mask) {
  const int64_t n_blocks = p.cols / kQK8_0;
  const int64_t strip_bytes = packed_strip_bytes(p.cols);
  const int64_t n_strips = (p.rows + kPackedStripRows - 1) / kPackedStripRows;
  const int64_t strip0 = r0 / kPackedStripRows;
  const Strips<2> at = strips_at<2>(p, strip0);
  alignas(64) uint8_t panel[kChunkBlocks * kUnpackedBlockBytes];
  for (int64_t b0 = 0; b0 < n_blocks; b0 += kChunkBlocks) {
    const int64_t nb = n_blocks - b0 < kChunkBlocks ? n_blocks - b0 : kChunkBlocks;
    // The next chunk's nibbles and scales of both strips, to L2 here (they
    // are read once, by the next chunk's first token group): blocks
    // [next_first, + next_nb) of the pairs holding them, one range a pair.
    const int64_t next_b0 = b0 + nb;
    int64_t next_strip = strip0, next_first = next_b0;
    if (next_b0 >= n_blocks) next_strip = strip0 + 2, next_first = 0;
    SpreadPrefetch ahead;
    const int64_t next_nb = n_blocks - next_first < kChunkBlocks ? n_blocks - next_first : kChunkBlocks;
    for (int64_t pair = next_strip / 2; pair * 2 < n_strips && pair * 2 <= next_strip + 1; ++pair) {
      const int64_t stride = packed_strip_at(pair * 2, n_strips, strip_bytes, kBlockNibbleBytes).stride;
      ahead.add(p.packed + pair * 2 * strip_bytes + next_first * stride, next_nb * stride);
    }
    const bool first = b0 == 0;
    // The first group unpacks the chunk as it goes (kChunkedMinTokens: a
    // task has at least two groups of 6).
    chunk_kernel<6, true>(p, panel, at, b0, nb, r0, tok_begin, first, last_mask, ahead);
    int64_t t = tok_begin + 6;
    for (; t + 6 <= tok_end; t += 6) chunk_kernel<6>(p, panel, at, b0, nb, r0, t, first, last_mask, ahead);
    switch (tok_end - t) {
      case 5: chunk_kernel<5>(p, panel, at, b0, nb, r0, t, first, last_mask, ahead); break;
      case 4: chunk_kernel<4>(p, panel, at, b0, nb, r0, t, first, last_mask, ahead); break;
      case 3: chunk_kernel<3>(p, panel, at, b0, nb, r0, t, first, last_mask, ahead); break;
      case 2: chunk_kernel<2>(p, panel, at, b0, nb, r0, t, first, last_mask, ahead); break;
      case 1: chunk_kernel<1>(p, panel, at, b0, nb, r0, t, first, last_mask, ahead); break;
      default: break;
    }
    ahead.step(1 << 20);  // what few token groups left (short calls)
  }
}

// Tokens per task from which two strips take packed_prefill_pair (two token
// groups share each unpacked chunk).
constexpr int64_t kChunkedMinTokens = 12;

}  // namespace

void packed_decode_tile_avx512(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                               int64_t tok_end) {
  int64_t r = row_begin;
  for (; r < row_end; r += 2 * kPackedStripRows) {
    const int64_t rows = row_end - r < 2 * kPackedStripRows ? row_end - r : 2 * kPackedStripRows;
    const int64_t last_rows = rows > kPackedStripRows ? rows - kPackedStripRows : rows;
    const __mmask16 last_mask = static_cast<__mmask16>(last_rows >= 16 ? 0xffff : (1u << last_rows) - 1);
    if (rows > kPackedStripRows && tok_end - tok_begin >= kChunkedMinTokens) {
      packed_prefill_pair(p, r, tok_begin, tok_end, last_mask);
    } else if (rows > kPackedStripRows) {
      packed_tokens<2>(p, r, tok_begin, tok_end, last_mask);
    } else {
      packed_tokens<1>(p, r, tok_begin, tok_end, last_mask);
    }
  }
}

void packed_two_pairs_avx512(const MatmulProblem& a, int64_t ra, const MatmulProblem& b, int64_t rb) {
  const int64_t a_bytes = packed_strip_bytes(a.cols), b_bytes = packed_strip_bytes(b.cols);
  const uint8_t* const base[2] = {a.packed + ra / kPackedStripRows * a_bytes, b.packed + rb / kPackedStripRows * b_bytes};
  float* const out[2] = {a.y + ra, b.y + rb};
  if (a.packed_near_nta) return pairs_stream<2, true>(a, base, out, 0);
  pairs_stream<2, false>(a, base, out, 0);
}

}  // namespace baton::cpu_kernels
