// AVX2 kernel over K-quant weights (Q4_K, Q5_K, Q6_K) packed at load
// (matmul.h's pack_weight_matrix), and the packing itself. Entered only when
// best_simd_level() == kAvx2 (the AVX-512 level keeps its own K-quant
// kernels; see matmul_kernels.h for why nothing here may be an inline
// function or template shared with other files; matmul_packed_avx2_store.h's
// are internal to each AVX2 file that includes it). One kernel template
// serves the three types; a record type (Q4KRecord, Q5KRecord, Q6KRecord)
// says where its bytes are and how its scales enter.
//
// Layouts (matmul_kernels.h, packed_q*_k_strip_bytes): strips of 16 rows, one
// record per 256-column super-block. Sub-block u (0..7) is columns 32 u ..
// 32 u + 31; every record starts with the low 4 bits of the quants:
//   [0, 2048)     nibbles: sub-blocks 2 j and 2 j + 1 at 512 j as 8 lines of
//                 64 bytes; dword i of line k is row i's columns 32 u + 4 k ..
//                 + 3, sub-block 2 j in the low nibbles, 2 j + 1 in the high
//                 ones (Q4_K's GGUF qs[32 j + 4 k .. + 3] as they are). As
//                 Q4_0's packed lines: a ymm register takes half a line, 8 rows.
// Q4_K (2368 bytes; 16 x 144 GGUF bytes + 64):
//   [2048, 2176)  scales sc, u8 [sub-block 8][row 16].
//   [2176, 2304)  mins m, u8: half h (rows 8 h ..) at 64 h, group g (0..3) at
//                 16 g: row 8 h + g's 8 mins, then row 8 h + g + 4's (see
//                 min_term for why).
//   [2304, 2336)  d, fp16 [row 16];  [2336, 2368) dmin, fp16 [row 16].
// Q5_K (2880 bytes; 16 x 176 + 64): the 5th bits, then Q4_K's scales, mins,
// d and dmin 512 bytes later:
//   [2048, 2560)  8 lines of 64 bytes: dword i of line k holds the 5th bits
//                 of the nibble lines' line k columns, sub-block u's at bit u
//                 (Q5_K's GGUF qh[4 k .. + 3] as they are).
// Q6_K (3392 bytes; 16 x 210 + 32): quants 0..63 (GGUF's, q - 32 being the
// weight):
//   [2048, 3072)  the 2 high bits: sub-blocks 4 v .. 4 v + 3 at 2048 + 512 v
//                 as 8 lines of 64 bytes; dword i of line k holds those of
//                 the nibble lines' line k columns, sub-block 4 v + f's at
//                 bits 2 f, 2 f + 1.
//   [3072, 3328)  scales, int8 [sub-block 8][row 16][2]: the scales of the
//                 sub-block's two 16-column halves.
//   [3328, 3360)  d, fp16 [row 16];  [3360, 3392) zeros.
// Each a multiple of 64, so every record starts a cache line.
//
// Arithmetic, per (row, token, super-block), all integer until the end (Q8_K
// quants lie in [-127, 127]; 128 is bound enough):
//   a 4-column step multiplies the 8 rows' quants (unsigned) by x's by
//   vpmaddubsw: a lane of int16 adds 2 products per step; consecutive steps
//   add in int16 (exactly) as long as they fit: Q4_K 8 steps, 16 products of
//   at most 15 x 128 (30720 < 2^15); Q5_K 4 steps, 8 x 31 x 128 = 31744; Q6_K
//   2 steps, 4 x 63 x 128 = 32256. vpmaddwd against the rows' scales widens
//   and scales each such int16 sum.
//   Q4_K / Q5_K: A = sum over sub-blocks of sc x (its 32 products), sc
//   0..63: at most 8 x 63 x 32 x 31 x 128 = 63,995,904 < 2^31 (Q4_K
//   30,965,760); B = sum m x (sum of the sub-block's 32 quants), at most 8 x
//   63 x 4096 < 2^22;
//   acc = fma(float(A), d x xd, acc); acc = fma(-float(B), dmin x xd, acc).
//   Q6_K: sc signed int8; A = sum over the 16 halves of sc x (their 16
//   products), at most 16 x 128 x 16 x 63 x 128 = 264,241,152; per sub-block,
//   minus (32 sc) . (x's sums over the two halves, ggml's bsums) by vpmaddwd
//   (32 sc at most 4096 in int16, a sum at most 16 x 127), in all at most
//   133,169,152: the partial sums stay under 2^29 and the total is the exact
//   S = sum sc (q - 32) x;  acc = fma(float(S), d x xd, acc).
// The same operations in the same order for every row and token whatever the
// call's token count, row split or pass width: a token's outputs are the same
// bits in decode and in prefill.
#include <immintrin.h>

#include <cstddef>

#include "common/cpu/matmul_kernels.h"
#include "common/cpu/matmul_packed_avx2_store.h"

namespace baton::cpu_kernels {
namespace {

typedef int32_t UnalignedInt32 __attribute__((may_alias, aligned(1)));
typedef int64_t UnalignedInt64 __attribute__((may_alias, aligned(1)));

// Every record: the nibble lines, then (Q5_K, Q6_K) the high bits' lines.
constexpr int64_t kNibbleBytes = 2048;
constexpr int64_t kHighBitsOffset = kNibbleBytes;
// Decode prefetches the strips' records this many super-blocks ahead (4.6 to
// 6.6 KiB a strip), and in the last ones the next row task's first records.
constexpr int64_t kPrefetchSupers = 2;
// Decode: halves per pass (two strips: two weight streams per thread).
constexpr int kDecodeHalves = 4;

// Half h's offset inside a record: rows 8 (h % 2) of strip h / 2.
int64_t half_offset(int h, int64_t strip_bytes, int64_t in_strip) { return h / 2 * strip_bytes + in_strip * (h % 2); }

// Sub-blocks 2 j and 2 j + 1 of a Q4_K / Q5_K GGUF block: the low and high
// nibbles of qs[32 j ..], in column order.
void unpack_nibbles(const uint8_t* qs, uint8_t* q) {
  for (int u = 0; u < 8; ++u)
    for (int l = 0; l < 32; ++l) {
      const uint8_t byte = qs[32 * (u / 2) + l];
      q[32 * u + l] = static_cast<uint8_t>(u % 2 == 0 ? byte & 0x0f : byte >> 4);
    }
}

// Q4_K (kBits 0) and Q5_K (kBits 1, the 5th bit of each quant): a 6-bit
// scale and min per sub-block, d and dmin per super-block.
template <int kBits>
struct ScaleMinRecord {
  static constexpr int kHighBits = kBits;                    // quant bits above the nibble
  static constexpr int kStepsPerSum = kBits == 0 ? 8 : 4;    // steps summed in int16 (see the top)
  static constexpr int64_t kScOffset = kNibbleBytes + 512 * kBits;
  static constexpr int64_t kMinOffset = kScOffset + 128;
  static constexpr int64_t kDOffset = kMinOffset + 128;
  static constexpr int64_t kDminOffset = kDOffset + 32;
  static constexpr int64_t kSuperBytes = kDminOffset + 32;
  static constexpr bool kMins = true;
  static constexpr int64_t kBlockBytes = kBits == 0 ? sizeof(BlockQ4_K) : sizeof(BlockQ5_K);

  // Sub-block u's scales for vpmaddwd, 8 rows from `upper` x 8 of the record
  // at `at`: row i's byte to both int16 halves of dword i (lane 0: rows
  // 0..3, lane 1: rows 4..7).
  static __m256i scales(const uint8_t* at, int upper, int u, int /*step*/) {
    const int64_t sc8 = *reinterpret_cast<const UnalignedInt64*>(at + kScOffset + 16 * u + 8 * upper);
    const __m256i spread = _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1,  //
                                            4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
    return _mm256_shuffle_epi8(_mm256_set1_epi64x(sc8), spread);
  }

  // A GGUF block's 256 quants in column order (Q5_K's 5th bit of column 32 u
  // + l is bit u of qh[l]).
  static void unpack_quants(const uint8_t* block, uint8_t* q) {
    unpack_nibbles(block + (kBits == 0 ? offsetof(BlockQ4_K, qs) : offsetof(BlockQ5_K, qs)), q);
    if constexpr (kBits == 1) {
      const uint8_t* qh = block + offsetof(BlockQ5_K, qh);
      for (int u = 0; u < 8; ++u)
        for (int l = 0; l < 32; ++l) q[32 * u + l] = static_cast<uint8_t>(q[32 * u + l] | ((qh[l] >> u) & 1) << 4);
    }
  }

  // Row i's scales, mins, d and dmin from its GGUF block (Q4_K and Q5_K
  // start alike: d, dmin, the 12 scale bytes).
  static void put_scales(const uint8_t* block, int64_t i, uint8_t* rec) {
    int sc[8], m_int[8];
    unpack_scales_mins_k4(block + offsetof(BlockQ4_K, scales), sc, m_int);
    uint8_t m[8];  // 6 bits each
    for (int u = 0; u < 8; ++u) {
      rec[kScOffset + 16 * u + i] = static_cast<uint8_t>(sc[u]);
      m[u] = static_cast<uint8_t>(m_int[u]);
    }
    // Row i = 8 h + g (+ 4): group g % 4 of half h, first or second 8 bytes.
    const int64_t h = i / 8, g = i % 4, second = i % 8 / 4;
    __builtin_memcpy(rec + kMinOffset + 64 * h + 16 * g + 8 * second, m, 8);
    __builtin_memcpy(rec + kDOffset + 2 * i, block + offsetof(BlockQ4_K, d), 2);
    __builtin_memcpy(rec + kDminOffset + 2 * i, block + offsetof(BlockQ4_K, dmin), 2);
  }
};
using Q4KRecord = ScaleMinRecord<0>;
using Q5KRecord = ScaleMinRecord<1>;
static_assert(Q4KRecord::kSuperBytes == kPackedQ4KSuperBytes && Q5KRecord::kSuperBytes == kPackedQ5KSuperBytes);

// Q6_K: a signed int8 scale per 16 columns, d per super-block; the quants
// enter as q (0..63) and the -32 through x's sums.
struct Q6KRecord {
  static constexpr int kHighBits = 2;
  static constexpr int kStepsPerSum = 2;
  static constexpr int64_t kScOffset = kNibbleBytes + 1024;
  static constexpr int64_t kDOffset = kScOffset + 256;
  static constexpr int64_t kSuperBytes = kDOffset + 64;  // d, then 32 bytes of padding
  static constexpr bool kMins = false;
  static constexpr int64_t kBlockBytes = sizeof(BlockQ6_K);

  // Sub-block u's two scales per row, sign-extended: dword i = row i's
  // (first half's, second half's) as int16 (lane 0: rows 0..3, lane 1: 4..7).
  static __m256i scale_pairs(const uint8_t* at, int upper, int u) {
    return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at + kScOffset + 32 * u + 16 * upper)));
  }
  // The scales of steps k .. k + 1 for vpmaddwd: the first half's (k < 4)
  // or the second's, in both int16 halves of each dword.
  static __m256i scales(const uint8_t* at, int upper, int u, int k) {
    const __m256i first = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13,  //
                                           0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13);
    const __m256i second = _mm256_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15,  //
                                            2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15);
    return _mm256_shuffle_epi8(scale_pairs(at, upper, u), k < 4 ? first : second);
  }

  // A GGUF block's 256 quants in column order. In each half of 128 (ql 64
  // bytes, qh 32): column l (l < 32) is ql[l] low | qh[l] bits 0-1, l + 32
  // ql[l + 32] low | bits 2-3, l + 64 ql[l] high | bits 4-5, l + 96
  // ql[l + 32] high | bits 6-7.
  static void unpack_quants(const uint8_t* block, uint8_t* q) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(block);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = b->ql + 64 * half;
      const uint8_t* qh = b->qh + 32 * half;
      uint8_t* out = q + 128 * half;
      for (int l = 0; l < 32; ++l) {
        out[l] = static_cast<uint8_t>((ql[l] & 0x0f) | (qh[l] & 3) << 4);
        out[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0x0f) | (qh[l] >> 2 & 3) << 4);
        out[l + 64] = static_cast<uint8_t>(ql[l] >> 4 | (qh[l] >> 4 & 3) << 4);
        out[l + 96] = static_cast<uint8_t>(ql[l + 32] >> 4 | (qh[l] >> 6 & 3) << 4);
      }
    }
  }

  static void put_scales(const uint8_t* block, int64_t i, uint8_t* rec) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(block);
    for (int u = 0; u < 8; ++u) {
      rec[kScOffset + 32 * u + 2 * i] = static_cast<uint8_t>(b->scales[2 * u]);
      rec[kScOffset + 32 * u + 2 * i + 1] = static_cast<uint8_t>(b->scales[2 * u + 1]);
    }
    __builtin_memcpy(rec + kDOffset + 2 * i, &b->d, 2);
  }
};
static_assert(Q6KRecord::kSuperBytes == kPackedQ6KSuperBytes);

// Step k of sub-block u for the 8 rows of a half (`lines`: the record plus 32
// x (half % 2)): the quants of columns 32 u + 4 k .. + 3 as unsigned bytes,
// dword i = row i's 4.
template <int kHighBits>
__m256i step_quants(const uint8_t* lines, int u, int k) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lines + 512 * (u / 2) + 64 * k));
  __m256i q = _mm256_and_si256(u % 2 == 1 ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(0x0f));
  if constexpr (kHighBits > 0) {
    constexpr int kSubsPerByte = 8 / kHighBits;
    const __m256i bits = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(lines + kHighBitsOffset + 512 * (u / kSubsPerByte) + 64 * k));
    const int shift = 4 - kHighBits * (u % kSubsPerByte);  // the field's low bit to bit 4
    const __m256i moved = shift >= 0 ? _mm256_slli_epi16(bits, shift) : _mm256_srli_epi16(bits, -shift);
    q = _mm256_or_si256(q, _mm256_and_si256(moved, _mm256_set1_epi8(static_cast<char>(((1 << kHighBits) - 1) << 4))));
  }
  return q;
}

// Sum over the 8 sub-blocks of m x (sub-block's quant sum) for 8 rows: group g
// of the half's mins is [row g: m0..m7 | row g + 4: m0..m7] as int16 after
// widening; vpmaddwd against the token's 8 sums (both lanes) leaves 4 partial
// sums per row, and three vphaddd bring them to [rows 0..3 | rows 4..7].
__m256i min_term(const uint8_t* mins, __m256i xsums) {
  __m256i p[4];
  for (int g = 0; g < 4; ++g) {
    const __m256i m = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mins + 16 * g)));
    p[g] = _mm256_madd_epi16(m, xsums);
  }
  return _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
}

// H halves (8 rows each) from half `half0` of the strip at `strip` (H >= 2:
// half0 0, and halves 2, 3 are the next strip's), T tokens from t0; record
// type R.
template <typename R, int H, int T>
void packed_kquant_kernel(const MatmulProblem& p, const uint8_t* strip, int half0, int64_t t0, int64_t first_row,
                          int64_t last_rows) {
  static_assert(H == 1 || H == 2 || H == 4, "halves of one strip, or of two");
  constexpr int64_t kLinesPerRecord = R::kSuperBytes / 64;
  const int64_t n_super = p.cols / kQK_K;
  const int64_t strip_bytes = n_super * R::kSuperBytes;
  const uint8_t* rec = strip;  // the current super-block's record of the first strip
  __m256 acc[H][T];
  for (int h = 0; h < H; ++h)
    for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_ps();
  const int64_t sums32_per_token = p.cols / kQK8_0;
  const int64_t sums16_per_token = p.cols / 16;
  for (int64_t s = 0; s < n_super; ++s, rec += R::kSuperBytes) {
    // Decode streams from memory; prefill (T > 1) revisits the strip from
    // cache. Decode prefetches each strip's record kPrefetchSupers ahead, a
    // few lines per sub-block step (a burst of all 37 Q4_K lines at once
    // measured slower); in the last records, the next call's first ones (the
    // next row task, usually this thread's next), so a task does not start
    // on a cold stream.
    const bool next = s + kPrefetchSupers >= n_super;
    const int64_t next_shift = (H + half0 + 1) / 2 * strip_bytes;  // the next call's first strip
    const int64_t ahead = kPrefetchSupers * R::kSuperBytes - (next ? n_super * R::kSuperBytes - next_shift : 0);
    // Half by half: one half's integer sums are live at a time, and its
    // float steps follow them at once. With the sub-block loop outside the
    // halves, decode's 4 halves' int16 and int32 sums were all live and GCC
    // kept them on the stack: one thread, in cache, 61.1 / 31.8 / 26.8
    // against 76.8 / 50.0 / 37.2 GFLOP/s now (Q4_K / Q5_K / Q6_K).
    for (int h = 0; h < H; ++h) {
      const int hh = half0 + h;
      const uint8_t* lines = rec + half_offset(hh, strip_bytes, 32);
      __m256i isum[T];
      for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
      // Unrolled: u is then a constant in step_quants (the nibble half, the
      // high bits' shift, the line offsets); as a loop counter it made a
      // variable-count shift and branches per step (Q5_K / Q6_K decode, one
      // thread in cache, 53.6 / 41.2 against 63.6 / 54.2 GFLOP/s now; from
      // memory on 2 threads 0.71-0.72 / 0.61-0.64 of the read pass against
      // 0.92 / 0.90-0.92).
#pragma GCC unroll 8
      for (int u = 0; u < 8; ++u) {
        if constexpr (T == 1) {
          // Every strip's lines spread evenly over the H x 8 sub-block
          // steps of the record (each strip's in the steps of its own
          // halves only measured slower from memory).
          constexpr int kSteps = H * 8;
          const int step = 8 * h + u;
          for (int sh = 0; sh < H; sh += 2) {
            const char* line = reinterpret_cast<const char*>(rec + half_offset(sh, strip_bytes, 0) + ahead);
            for (int64_t i = kLinesPerRecord * step / kSteps; i < kLinesPerRecord * (step + 1) / kSteps; ++i) {
              _mm_prefetch(line + 64 * i, _MM_HINT_T0);
            }
          }
        }
        // Steps in groups of kStepsPerSum, each group's products summed in
        // int16, then widened and scaled.
        for (int k0 = 0; k0 < 8; k0 += R::kStepsPerSum) {
          __m256i sum16[T];
          for (int t = 0; t < T; ++t) sum16[t] = _mm256_setzero_si256();  // dead: the first step sets them
          for (int k = k0; k < k0 + R::kStepsPerSum; ++k) {
            __m256i w = step_quants<R::kHighBits>(lines, u, k);
            // Ordering fence (empty asm, no instructions), as in the Q4_0
            // kernel: keeps GCC from computing every step's products first
            // and spilling them.
            asm volatile("" : "+x"(w));
            for (int t = 0; t < T; ++t) {
              const int8_t* x4 = p.xq + (t0 + t) * p.cols + s * kQK_K + 32 * u + 4 * k;
              const __m256i x = _mm256_set1_epi32(*reinterpret_cast<const UnalignedInt32*>(x4));
              const __m256i prod = _mm256_maddubs_epi16(w, x);
              sum16[t] = k == k0 ? prod : _mm256_add_epi16(sum16[t], prod);
              asm volatile("" : "+x"(sum16[t]));
            }
          }
          const __m256i sc = R::scales(rec + half_offset(hh, strip_bytes, 0), hh % 2, u, k0);
          for (int t = 0; t < T; ++t) isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(sum16[t], sc));
        }
        if constexpr (!R::kMins) {
          // Q6_K's -32: minus (32 sc) . (x's sums over the sub-block's halves).
          const __m256i sc32 = _mm256_slli_epi16(R::scale_pairs(rec + half_offset(hh, strip_bytes, 0), hh % 2, u), 5);
          for (int t = 0; t < T; ++t) {
            const int16_t* xs = p.xsums + (t0 + t) * sums16_per_token + 16 * s + 2 * u;
            const __m256i pair = _mm256_set1_epi32(*reinterpret_cast<const UnalignedInt32*>(xs));
            isum[t] = _mm256_sub_epi32(isum[t], _mm256_madd_epi16(sc32, pair));
          }
        }
      }
      const uint8_t* at = rec + half_offset(hh, strip_bytes, 0);
      const __m256 d =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at + R::kDOffset + 16 * (hh % 2))));
      for (int t = 0; t < T; ++t) {
        const int64_t token = t0 + t;
        const __m256 xd = _mm256_set1_ps(p.xd[token * n_super + s]);
        acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(d, xd), acc[h][t]);
        if constexpr (R::kMins) {
          const __m256 dmin =
              _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at + R::kDminOffset + 16 * (hh % 2))));
          const __m256i xsums = _mm256_broadcastsi128_si256(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(p.xsums32 + token * sums32_per_token + 8 * s)));
          const __m256i mins = min_term(at + R::kMinOffset + 64 * (hh % 2), xsums);
          acc[h][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_mul_ps(dmin, xd), acc[h][t]);
        }
      }
    }
  }
  store_halves<H, T>(p, acc, t0, first_row, last_rows);
}

// Row i's 256 quants (column order) into a record: the low 4 bits to the
// nibble lines, the kHighBits above them to the high bits' lines. The
// record starts zeroed.
template <int kHighBits>
void put_quants(const uint8_t* q, int64_t i, uint8_t* rec) {
  for (int u = 0; u < 8; ++u)
    for (int k = 0; k < 8; ++k)
      for (int b = 0; b < 4; ++b) {
        const int quant = q[32 * u + 4 * k + b];
        const int64_t in_line = 64 * k + 4 * i + b;
        rec[512 * (u / 2) + in_line] |= static_cast<uint8_t>((quant & 0x0f) << (4 * (u % 2)));
        if constexpr (kHighBits > 0) {
          constexpr int kSubsPerByte = 8 / kHighBits;
          rec[kHighBitsOffset + 512 * (u / kSubsPerByte) + in_line] |=
              static_cast<uint8_t>((quant >> 4) << (kHighBits * (u % kSubsPerByte)));
        }
      }
}

template <typename R>
void pack_strips(const MatmulProblem& p, int64_t strip_begin, int64_t strip_end, uint8_t* out) {
  const int64_t n_super = p.cols / kQK_K;
  const int64_t strip_bytes = n_super * R::kSuperBytes;
  for (int64_t st = strip_begin; st < strip_end; ++st) {
    uint8_t* strip = out + st * strip_bytes;
    __builtin_memset(strip, 0, static_cast<size_t>(strip_bytes));  // padding rows: d = dmin = 0, all zeros
    for (int64_t i = 0; i < kPackedStripRows; ++i) {
      const int64_t r = st * kPackedStripRows + i;
      if (r >= p.rows) break;
      const uint8_t* row = p.weights + r * p.row_bytes;
      for (int64_t s = 0; s < n_super; ++s) {
        uint8_t q[kQK_K];
        R::unpack_quants(row + s * R::kBlockBytes, q);
        put_quants<R::kHighBits>(q, i, strip + s * R::kSuperBytes);
        R::put_scales(row + s * R::kBlockBytes, i, strip + s * R::kSuperBytes);
      }
    }
  }
}

template <typename R>
void packed_tile(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin, int64_t tok_end) {
  const int64_t strip_bytes = p.cols / kQK_K * R::kSuperBytes;
  for_each_pass<kDecodeHalves>(row_begin, row_end, tok_begin, tok_end,
                               [&]<int H, int T>(int64_t strip, int half0, int64_t r, int64_t last_rows, int64_t t) {
                                 packed_kquant_kernel<R, H, T>(p, p.packed + strip * strip_bytes, half0, t, r, last_rows);
                               });
}

}  // namespace

void pack_q4_k_strips_avx2(const MatmulProblem& p, int64_t strip_begin, int64_t strip_end, uint8_t* out) {
  pack_strips<Q4KRecord>(p, strip_begin, strip_end, out);
}
void pack_q5_k_strips_avx2(const MatmulProblem& p, int64_t strip_begin, int64_t strip_end, uint8_t* out) {
  pack_strips<Q5KRecord>(p, strip_begin, strip_end, out);
}
void pack_q6_k_strips_avx2(const MatmulProblem& p, int64_t strip_begin, int64_t strip_end, uint8_t* out) {
  pack_strips<Q6KRecord>(p, strip_begin, strip_end, out);
}

void packed_q4_k_tile_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                           int64_t tok_end) {
  packed_tile<Q4KRecord>(p, row_begin, row_end, tok_begin, tok_end);
}
void packed_q5_k_tile_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                           int64_t tok_end) {
  packed_tile<Q5KRecord>(p, row_begin, row_end, tok_begin, tok_end);
}
void packed_q6_k_tile_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                           int64_t tok_end) {
  packed_tile<Q6KRecord>(p, row_begin, row_end, tok_begin, tok_end);
}

}  // namespace baton::cpu_kernels
