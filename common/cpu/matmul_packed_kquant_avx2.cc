// AVX2 kernel over Q4_K weights packed at load (matmul.h's
// pack_weight_matrix), and the packing itself. Entered only when
// best_simd_level() == kAvx2 (the AVX-512 level keeps its own K-quant
// kernels; see matmul_kernels.h for why nothing here may be an inline
// function or template shared with other files; matmul_packed_avx2_store.h's
// are internal to each AVX2 file that includes it).
//
// Layout (matmul_kernels.h, packed_q4_k_strip_bytes): strips of 16 rows, one
// record of kSuperBytes per 256-column super-block:
//   [0, 2048)     nibbles: 4 chunks of 64 columns, chunk j at 512 j as 8 lines
//                 of 64 bytes; dword i of line k is row i's GGUF qs[32 j + 4 k ..
//                 + 3]: low nibbles columns 64 j + 4 k .. + 3 (sub-block 2 j),
//                 high nibbles 64 j + 32 + 4 k .. + 3 (sub-block 2 j + 1). As
//                 Q4_0's packed lines: a ymm register takes half a line, 8 rows.
//   [2048, 2176)  scales sc, u8 [sub-block 8][row 16].
//   [2176, 2304)  mins m, u8: half h (rows 8 h ..) at 64 h, group g (0..3) at
//                 16 g: row 8 h + g's 8 mins, then row 8 h + g + 4's (see
//                 min_term for why).
//   [2304, 2336)  d, fp16 [row 16];  [2336, 2368) dmin, fp16 [row 16].
// 2368 bytes per strip and super-block against 16 x 144 in the GGUF rows
// (+2.8%); a multiple of 64, so every record starts a cache line.
//
// Arithmetic, per (row, token, super-block), all integer until the end:
//   for each sub-block, the 32 nibble x quant products by vpmaddubsw in 8
//   steps of 4 columns, summed in int16: a lane adds 2 products per step, 16
//   in all, at most 16 x 15 x 128 = 30720 < 2^15 (Q8_K quants lie in
//   [-127, 127]; 128 is bound enough), so the int16 sums are exact;
//   vpmaddwd against (sc, sc) widens and scales: sc x (sub-block sum), at most
//   63 x 32 x 15 x 128 = 3870720, eight sub-blocks 30965760 < 2^31: the
//   super-block's int32 sum A = sum sc q.x is exact;
//   B = sum m x (sum of the sub-block's 32 quants), at most 8 x 63 x 4096 <
//   2^22, exact;
//   acc = fma(float(A), d x xd, acc); acc = fma(-float(B), dmin x xd, acc).
// The same operations in the same order for every row and token whatever the
// call's token count, row split or pass width: a token's outputs are the same
// bits in decode and in prefill.
#include <immintrin.h>

#include "common/cpu/matmul_kernels.h"
#include "common/cpu/matmul_packed_avx2_store.h"

namespace baton::cpu_kernels {
namespace {

typedef int32_t UnalignedInt32 __attribute__((may_alias, aligned(1)));
typedef int64_t UnalignedInt64 __attribute__((may_alias, aligned(1)));

constexpr int64_t kSuperBytes = kPackedQ4KSuperBytes;
constexpr int64_t kScOffset = 2048;
constexpr int64_t kMinOffset = 2176;
constexpr int64_t kDOffset = 2304;
constexpr int64_t kDminOffset = 2336;
// Decode prefetches the strips' records this many super-blocks ahead (4.6 KiB
// a strip), and in the last ones the next row task's first records.
constexpr int64_t kPrefetchSupers = 2;
constexpr int64_t kLinesPerRecord = kSuperBytes / 64;
constexpr int64_t kPrefetchLinesPerSub = (kLinesPerRecord + 7) / 8;
// Decode: halves per pass (two strips: two weight streams per thread).
constexpr int kDecodeHalves = 4;

// Half h's offset inside a record: rows 8 (h % 2) of strip h / 2.
int64_t half_offset(int h, int64_t strip_bytes, int64_t in_strip) { return h / 2 * strip_bytes + in_strip * (h % 2); }

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
// half0 0, and halves 2, 3 are the next strip's), T tokens from t0.
template <int H, int T>
void packed_q4_k_kernel(const MatmulProblem& p, const uint8_t* strip, int half0, int64_t t0, int64_t first_row,
                        int64_t last_rows) {
  static_assert(H == 1 || H == 2 || H == 4, "halves of one strip, or of two");
  const int64_t n_super = p.cols / kQK_K;
  const int64_t strip_bytes = packed_q4_k_strip_bytes(p.cols);
  const __m256i low_nibbles = _mm256_set1_epi8(0x0f);
  // Scales: 8 bytes (rows) broadcast to both lanes; row r's byte to both
  // int16 halves of dword r (lane 0: rows 0..3, lane 1: rows 4..7).
  const __m256i sc_spread = _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1,  //
                                             4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
  const uint8_t* rec = strip;  // the current super-block's record of the first strip
  __m256 acc[H][T];
  for (int h = 0; h < H; ++h)
    for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_ps();
  const int64_t sums_per_token = p.cols / kQK8_0;
  for (int64_t s = 0; s < n_super; ++s, rec += kSuperBytes) {
    // Decode streams from memory; prefill (T > 1) revisits the strip from
    // cache. Decode prefetches each strip's record kPrefetchSupers ahead, a
    // few lines per sub-block (a burst of all 37 at once measured slower); in
    // the last records, the next call's first ones (the next row task,
    // usually this thread's next), so a task does not start on a cold stream.
    const bool next = s + kPrefetchSupers >= n_super;
    const int64_t next_shift = (H + half0 + 1) / 2 * strip_bytes;  // the next call's first strip
    const int64_t ahead = kPrefetchSupers * kSuperBytes - (next ? n_super * kSuperBytes - next_shift : 0);
    __m256i isum[H][T];
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t) isum[h][t] = _mm256_setzero_si256();
    for (int sub = 0; sub < 8; ++sub) {
      const int chunk = sub / 2;
      const bool high = sub % 2 == 1;  // the high nibbles of the chunk's bytes
      if constexpr (T == 1) {
        for (int h = 0; h < H; h += 2) {
          const char* line = reinterpret_cast<const char*>(rec + half_offset(h, strip_bytes, 0) + ahead);
          for (int64_t i = kPrefetchLinesPerSub * sub; i < kPrefetchLinesPerSub * (sub + 1) && i < kLinesPerRecord; ++i) {
            _mm_prefetch(line + 64 * i, _MM_HINT_T0);
          }
        }
      }
      __m256i sum16[H][T];
      for (int k = 0; k < 8; ++k) {
        for (int h = 0; h < H; ++h) {
          const int hh = half0 + h;
          const __m256i v = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(rec + half_offset(hh, strip_bytes, 32) + 512 * chunk + 64 * k));
          __m256i w = _mm256_and_si256(high ? _mm256_srli_epi16(v, 4) : v, low_nibbles);
          // Ordering fence (empty asm, no instructions), as in the Q4_0
          // kernel: keeps GCC from computing every step's products first and
          // spilling them.
          asm volatile("" : "+x"(w));
          for (int t = 0; t < T; ++t) {
            const int8_t* x4 = p.xq + (t0 + t) * p.cols + s * kQK_K + 64 * chunk + 32 * high + 4 * k;
            const __m256i x = _mm256_set1_epi32(*reinterpret_cast<const UnalignedInt32*>(x4));
            const __m256i prod = _mm256_maddubs_epi16(w, x);
            sum16[h][t] = k == 0 ? prod : _mm256_add_epi16(sum16[h][t], prod);
            asm volatile("" : "+x"(sum16[h][t]));
          }
        }
      }
      for (int h = 0; h < H; ++h) {
        const int hh = half0 + h;
        const int64_t sc8 = *reinterpret_cast<const UnalignedInt64*>(rec + half_offset(hh, strip_bytes, 8) +
                                                                     kScOffset + 16 * sub);
        const __m256i sc = _mm256_shuffle_epi8(_mm256_set1_epi64x(sc8), sc_spread);
        for (int t = 0; t < T; ++t) {
          const __m256i scaled = _mm256_madd_epi16(sum16[h][t], sc);
          isum[h][t] = _mm256_add_epi32(isum[h][t], scaled);
        }
      }
    }
    for (int h = 0; h < H; ++h) {
      const int hh = half0 + h;
      const uint8_t* at = rec + half_offset(hh, strip_bytes, 0);
      const __m256 d = _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + kDOffset + 16 * (hh % 2))));
      const __m256 dmin = _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + kDminOffset + 16 * (hh % 2))));
      for (int t = 0; t < T; ++t) {
        const int64_t token = t0 + t;
        const __m256i xsums = _mm256_broadcastsi128_si256(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(p.xsums32 + token * sums_per_token + 8 * s)));
        const __m256i mins = min_term(at + kMinOffset + 64 * (hh % 2), xsums);
        const __m256 xd = _mm256_set1_ps(p.xd[token * n_super + s]);
        acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h][t]), _mm256_mul_ps(d, xd), acc[h][t]);
        acc[h][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_mul_ps(dmin, xd), acc[h][t]);
      }
    }
  }
  store_halves<H, T>(p, acc, t0, first_row, last_rows);
}

}  // namespace

void pack_q4_k_strips_avx2(const MatmulProblem& p, int64_t strip_begin, int64_t strip_end, uint8_t* out) {
  const int64_t n_super = p.cols / kQK_K;
  const int64_t strip_bytes = packed_q4_k_strip_bytes(p.cols);
  for (int64_t st = strip_begin; st < strip_end; ++st) {
    uint8_t* strip = out + st * strip_bytes;
    __builtin_memset(strip, 0, static_cast<size_t>(strip_bytes));  // padding rows: d = dmin = 0, all zeros
    for (int64_t i = 0; i < kPackedStripRows; ++i) {
      const int64_t r = st * kPackedStripRows + i;
      if (r >= p.rows) break;
      const BlockQ4_K* row = reinterpret_cast<const BlockQ4_K*>(p.weights + r * p.row_bytes);
      for (int64_t s = 0; s < n_super; ++s) {
        uint8_t* rec = strip + s * kSuperBytes;
        for (int j = 0; j < 4; ++j)
          for (int k = 0; k < 8; ++k) __builtin_memcpy(rec + 512 * j + 64 * k + 4 * i, row[s].qs + 32 * j + 4 * k, 4);
        int sc[8], m_int[8];
        unpack_scales_mins_k4(row[s].scales, sc, m_int);
        uint8_t m[8];  // 6 bits each
        for (int sub = 0; sub < 8; ++sub) {
          rec[kScOffset + 16 * sub + i] = static_cast<uint8_t>(sc[sub]);
          m[sub] = static_cast<uint8_t>(m_int[sub]);
        }
        // Row i = 8 h + g (+ 4): group g % 4 of half h, first or second 8 bytes.
        const int64_t h = i / 8, g = i % 4, second = i % 8 / 4;
        __builtin_memcpy(rec + kMinOffset + 64 * h + 16 * g + 8 * second, m, 8);
        __builtin_memcpy(rec + kDOffset + 2 * i, &row[s].d, 2);
        __builtin_memcpy(rec + kDminOffset + 2 * i, &row[s].dmin, 2);
      }
    }
  }
}

void packed_q4_k_tile_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                           int64_t tok_end) {
  for_each_pass<kDecodeHalves>(row_begin, row_end, tok_begin, tok_end,
                               [&]<int H, int T>(int64_t strip, int half0, int64_t r, int64_t last_rows, int64_t t) {
                                 packed_q4_k_kernel<H, T>(p, p.packed + strip * packed_q4_k_strip_bytes(p.cols), half0, t, r, last_rows);
                               });
}

}  // namespace baton::cpu_kernels
