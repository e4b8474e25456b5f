// AVX2 kernels over Q4_0 and Q8_0 weights packed at load (matmul.h's
// pack_weight_matrix), the packing itself and the block-major x both ISAs'
// packed Q4_0 kernels (and this Q8_0 one) read. Entered only when
// best_simd_level() >= kAvx2 (see matmul_kernels.h for why nothing here may
// be an inline function or template shared with other files;
// matmul_packed_avx2_store.h's are internal to each AVX2 file that includes
// it).
//
// Q4_0: the layout is the AVX-512 kernel's (matmul_packed_avx512.cc): strips
// of 16 rows, block b's nibbles as 4 lines of 64 bytes, dword i of line j
// holding columns 4j..4j+3 (low nibbles) and 16+4j..16+4j+3 (high) of row i.
// A ymm register takes half a line: 8 rows. There is no vpdpbusd here, so
// each 4-column step is vpmaddubsw (nibble x quant, pairs summed to int16),
// and the block's 8 of them are summed in int16 before one vpmaddwd widens
// them: a pair is at most 2 x 15 x 127 = 3810, eight 30480 < 2^15, so the
// int16 sums are exact (Q4_0's unsigned nibbles are what make this hold;
// int8 weights would overflow at the second add). The block's int32 sum is
// then the same exact integer as the AVX-512 kernel's, and every (row, token)
// goes through the same float operations in the same order: cvt, d_w x d_x,
// one FMA per block. So a row's output is the same bits on either ISA, alone
// or with other tokens, in decode or in prefill.
//
// Q8_0 (this level only: the AVX-512 level keeps its kernels, VNNI panels for
// prefill and its GGUF-row decode tile): the same strips, block b's 16 x 32
// int8 quants as 8 lines of 64 bytes at 512 b, dword i of line j holding
// columns 4j..4j+3 of row i (the GGUF bytes qs[4j..4j+3], unchanged); then
// the fp16 scales of block b at 512 n_blocks + 32 b. Every block's quants
// start a cache line; the strip is the GGUF bytes (16 x 34 per block) plus
// padding to 64. Arithmetic per 4-column step (ggml's sign trick, as the
// GGUF-row kernel): vpmaddubsw(|w| as u8, x with w's sign). |w| <= 128 (a
// hostile file may hold -128: vpabsb leaves 0x80, 128 as u8) and x's Q8_0
// quants lie in [-127, 127], so a pair is at most 2 x 128 x 127 = 32512 <
// 2^15: exact, but two steps no longer fit int16 (65024), so each step is
// widened by vpmaddwd against ones (4 products of a row per int32 lane) and
// the 8 steps summed in int32: at most 32 x 128 x 127 = 520192, exact.
// (Splitting w + 128 into nibbles at pack time would keep int16 sums, but
// costs two vpmaddubsw and the nibble extraction per step instead of one
// vpmaddubsw and one vpmaddwd: no fewer operations.) The float steps are
// Q4_0's: cvt, d_w x d_x, one FMA per block in block order; so a token's
// outputs are the same bits in decode and prefill, whatever the row split.
#include <immintrin.h>

#include "common/cpu/matmul_kernels.h"
#include "common/cpu/matmul_packed_avx2_store.h"

namespace baton::cpu_kernels {
namespace {

typedef int32_t UnalignedInt32 __attribute__((may_alias, aligned(1)));

// Bytes of a strip's quants per 32-column block (4 or 8 bits x 16 rows x 32).
template <GgmlType kType>
constexpr int64_t kBlockQuantBytes = kType == GgmlType::kQ4_0 ? kPackedBlockNibbleBytes : kPackedQ8BlockBytes;
constexpr int64_t kBlockScaleBytes = kPackedBlockScaleBytes;
// How far ahead of the block being multiplied the quant stream is prefetched
// in decode (4 KiB, as the AVX-512 kernel: 16 Q4_0 blocks, 8 Q8_0 blocks).
constexpr int64_t kPrefetchBytes = 4096;
// Decode: halves per pass (two strips, 32 rows, as the AVX-512 kernel's two
// strips: two streams per thread; one strip measured 0.89-0.99 of the read
// bandwidth against 0.96-1.00 in the microbenchmark).
constexpr int kDecodeHalves = 4;

// One block's exact int32 sums of weight x quant for one half (8 rows) x T
// tokens. q: the half's quants of the block (line j at q + 64 j); xq: token
// t's 32 quants at xq + 32 t; xbias[t]: Q4_0's -8 x their sum (the nibbles
// enter unsigned). The empty asm statements are ordering fences (no
// instructions): GCC 12 otherwise computes the products of all steps first
// and spills them to the stack (16 ymm registers), running ~3x slower. A
// step's weights come after the previous step's sums are in registers.
template <GgmlType kType, int T>
void half_sums(const uint8_t* q, const int8_t* xq, const int32_t* xbias, __m256i (&sum)[T]) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (kType == GgmlType::kQ4_0) {
    const __m256i low_nibbles = _mm256_set1_epi8(0x0f);
    __m256i sum16[T];
    for (int j = 0; j < 4; ++j) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * j));
      __m256i w_low = _mm256_and_si256(v, low_nibbles);
      __m256i w_high = _mm256_and_si256(_mm256_srli_epi16(v, 4), low_nibbles);
      asm volatile("" : "+x"(w_low), "+x"(w_high));
      for (int t = 0; t < T; ++t) {
        const int8_t* x4 = xq + t * kQK8_0 + 4 * j;
        const __m256i x_low = _mm256_set1_epi32(*reinterpret_cast<const UnalignedInt32*>(x4));
        const __m256i x_high = _mm256_set1_epi32(*reinterpret_cast<const UnalignedInt32*>(x4 + 16));
        const __m256i pair =
            _mm256_add_epi16(_mm256_maddubs_epi16(w_low, x_low), _mm256_maddubs_epi16(w_high, x_high));
        sum16[t] = j == 0 ? pair : _mm256_add_epi16(sum16[t], pair);
        asm volatile("" : "+x"(sum16[t]));
      }
    }
    for (int t = 0; t < T; ++t) {
      sum[t] = _mm256_add_epi32(_mm256_madd_epi16(sum16[t], ones), _mm256_set1_epi32(xbias[t]));
    }
  } else {
    for (int j = 0; j < 8; ++j) {
      __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * j));
      __m256i w_abs = _mm256_abs_epi8(w);  // -128 stays 0x80: 128 as u8
      asm volatile("" : "+x"(w), "+x"(w_abs));
      for (int t = 0; t < T; ++t) {
        const __m256i x = _mm256_set1_epi32(*reinterpret_cast<const UnalignedInt32*>(xq + t * kQK8_0 + 4 * j));
        const __m256i pairs = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(x, w));
        const __m256i step = _mm256_madd_epi16(pairs, ones);
        sum[t] = j == 0 ? step : _mm256_add_epi32(sum[t], step);
        asm volatile("" : "+x"(sum[t]));
      }
    }
  }
}

// H halves (8 rows each) from half `half0` of strip `strip` (H >= 2: half0
// 0, and halves 2, 3 are the next strip's), T tokens from t0. 16 ymm
// registers: T int sums (one half's at a time) + H T f32 accumulators +
// weights, broadcasts and constants: (H, T) = (4, 1) (decode), (1, 4),
// (1, 2), (1, 1).
template <GgmlType kType, int H, int T>
void packed_kernel(const MatmulProblem& p, int64_t strip, int64_t strip_bytes, int half0, int64_t t0,
                   int64_t first_row, int64_t last_rows) {
  static_assert(H == 1 || H == 2 || H == 4, "halves of one strip, or of two");
  constexpr int64_t kQuantBytes = kBlockQuantBytes<kType>;
  constexpr int64_t kPrefetchBlocks = kPrefetchBytes / kQuantBytes;
  constexpr int kStrips = (H + 1) / 2;
  const int64_t n_blocks = p.cols / kQK8_0;
  const int64_t n_strips = (p.rows + kPackedStripRows - 1) / kPackedStripRows;
  // Running pointers to block b's quants and scales of each strip's first
  // half (packed_strip_at); its second half at + 32 (scales: + 16).
  const uint8_t* quants[kStrips];
  const uint8_t* scl[kStrips];
  int64_t stride[kStrips];
  for (int i = 0; i < kStrips; ++i) {
    const PackedStripAt at = packed_strip_at(strip + i, n_strips, strip_bytes, kQuantBytes);
    quants[i] = p.packed + at.quants + 32 * half0;
    scl[i] = p.packed + at.scales + 16 * half0;
    stride[i] = at.stride;
  }
  __m256 acc[H][T];
  for (int h = 0; h < H; ++h)
    for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_ps();
  const int64_t n = p.n_tokens;
  const int8_t* xq = p.xq_blocks + t0 * kQK8_0;  // block b, token t: xq + (b n + t) 32
  const int32_t* xbias = p.xbias_blocks + t0;
  const float* xd = p.xd_blocks + t0;
  for (int64_t b = 0; b < n_blocks; ++b, xq += n * kQK8_0, xbias += n, xd += n) {
    if constexpr (T == 1) {
      // Decode streams from memory (prefill, T > 1, revisits the strip from
      // cache): each strip's quants and scales kPrefetchBlocks ahead. Past
      // the strips' end that is the pair after them (the next row task's,
      // usually this thread's next), so a task does not start on a cold
      // stream: with 2048 columns (64 blocks) that start was a quarter of
      // every strip.
      for (int i = 0; i < kStrips; ++i) {
        const char* line = reinterpret_cast<const char*>(quants[i] + kPrefetchBlocks * stride[i]);
        for (int l = 0; l < kQuantBytes / 64; ++l) _mm_prefetch(line + 64 * l, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(scl[i] + kPrefetchBlocks * stride[i]), _MM_HINT_T0);
      }
    }
    // Half by half, each half's sums into its accumulators at once: one
    // half's integer sums are live at a time. All halves' sums first, then
    // the float steps, kept decode's 4 halves' int16 sums on the stack: one
    // thread, in cache, 99.9 against 112.7 GFLOP/s now (Q4_0), 66.7 against
    // 73.6 (Q8_0).
    for (int h = 0; h < H; ++h) {
      __m256i sum[T];
      half_sums<kType, T>(quants[h / 2] + 32 * (h % 2), xq, xbias, sum);
      const __m256 d =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scl[h / 2] + 16 * (h % 2))));
      for (int t = 0; t < T; ++t) {
        acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[t]), _mm256_mul_ps(d, _mm256_set1_ps(xd[t])), acc[h][t]);
      }
    }
    for (int i = 0; i < kStrips; ++i) quants[i] += stride[i], scl[i] += stride[i];
  }
  store_halves<H, T>(p, acc, t0, first_row, last_rows);
}

// Every call over packed kType weights (strips of strip_bytes, in pairs).
template <GgmlType kType>
void packed_tile(const MatmulProblem& p, int64_t strip_bytes, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                 int64_t tok_end) {
  for_each_pass<kDecodeHalves>(row_begin, row_end, tok_begin, tok_end,
                               [&]<int H, int T>(int64_t strip, int half0, int64_t r, int64_t last_rows, int64_t t) {
                                 packed_kernel<kType, H, T>(p, strip, strip_bytes, half0, t, r, last_rows);
                               });
}

// Packs strips [strip_begin, strip_end) of p's GGUF rows (BlockQ4_0 or
// BlockQ8_0 blocks) into out, strips of strip_bytes in pairs
// (packed_strip_at): dword j of row i's quant bytes of a block goes to lane
// i of the block's line j. Each strip writes only its own blocks' bytes, so
// the two strips of a pair may be packed by different threads.
template <typename Block>
void pack_strips(const MatmulProblem& p, int64_t strip_bytes, int64_t strip_begin, int64_t strip_end, uint8_t* out) {
  constexpr int64_t kQuantBytes = kPackedStripRows * sizeof(Block::qs);
  const int64_t n_blocks = p.cols / kQK8_0;
  const int64_t n_strips = (p.rows + kPackedStripRows - 1) / kPackedStripRows;
  for (int64_t s = strip_begin; s < strip_end; ++s) {
    const PackedStripAt at = packed_strip_at(s, n_strips, strip_bytes, kQuantBytes);
    for (int64_t b = 0; b < n_blocks; ++b) {  // padding rows: scale 0, quants 0
      __builtin_memset(out + at.quants + b * at.stride, 0, kQuantBytes);
      __builtin_memset(out + at.scales + b * at.stride, 0, kBlockScaleBytes);
    }
    for (int64_t i = 0; i < kPackedStripRows; ++i) {
      const int64_t r = s * kPackedStripRows + i;
      if (r >= p.rows) break;
      const Block* row = reinterpret_cast<const Block*>(p.weights + r * p.row_bytes);
      for (int64_t b = 0; b < n_blocks; ++b) {
        uint8_t* q = out + at.quants + b * at.stride;
        for (int j = 0; j < kQuantBytes / 64; ++j) __builtin_memcpy(q + 64 * j + 4 * i, row[b].qs + 4 * j, 4);
        __builtin_memcpy(out + at.scales + b * at.stride + 2 * i, &row[b].d, 2);
      }
    }
  }
}

}  // namespace

void pack_q4_0_strips_avx2(const MatmulProblem& p, int64_t strip_begin, int64_t strip_end, uint8_t* out) {
  pack_strips<BlockQ4_0>(p, packed_strip_bytes(p.cols), strip_begin, strip_end, out);
}

void pack_q8_0_strips_avx2(const MatmulProblem& p, int64_t strip_begin, int64_t strip_end, uint8_t* out) {
  pack_strips<BlockQ8_0>(p, packed_q8_0_strip_bytes(p.cols), strip_begin, strip_end, out);
}

void packed_activations_avx2(const int8_t* qs, const float* d, int64_t cols, int64_t n_tokens, int64_t t,
                             int8_t* xq_blocks, int32_t* xbias_blocks, float* xd_blocks) {
  const int64_t n_blocks = cols / kQK8_0;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < n_blocks; ++b) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + b * kQK8_0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(xq_blocks + (b * n_tokens + t) * kQK8_0), q);
    // Sum of the 32 signed quants: as unsigned (q + 128), four sums of 8
    // bytes (vpsadbw against zero), less 32 x 128.
    const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(q, flip), _mm256_setzero_si256());
    const __m128i pair = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
    const int32_t sum = static_cast<int32_t>(_mm_cvtsi128_si64(_mm_add_epi64(pair, _mm_unpackhi_epi64(pair, pair)))) -
                        32 * 128;
    xbias_blocks[b * n_tokens + t] = -kQ4_0NibbleOffset * sum;
    xd_blocks[b * n_tokens + t] = d[b];
  }
}

void packed_decode_tile_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                             int64_t tok_end) {
  packed_tile<GgmlType::kQ4_0>(p, packed_strip_bytes(p.cols), row_begin, row_end, tok_begin, tok_end);
}

void packed_q8_0_tile_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                           int64_t tok_end) {
  packed_tile<GgmlType::kQ8_0>(p, packed_q8_0_strip_bytes(p.cols), row_begin, row_end, tok_begin, tok_end);
}

}  // namespace baton::cpu_kernels
