// Internal: the per-ISA entry points behind common/cpu/matmul.h and vec.h.
// Each *_scalar.cc / *_avx2.cc / *_avx512.cc file defines one set; matmul.cc and
// vec.cc pick a set by SimdLevel. Only call an ISA's functions after checking
// best_simd_level() — they may contain instructions this CPU lacks.
//
// ISA files keep everything else in an anonymous namespace and use no inline
// functions or templates from shared headers (STL containers, fp16.h, ...): a
// weak symbol compiled with -mavx512f could be picked by the linker for a
// baseline caller and fault on an older CPU.
#pragma once

#include <cstdint>

#include "common/gguf/ggml_types.h"

namespace baton::cpu_kernels {

// One matmul call, with activations already prepared for the weight type.
// Activation formats by weight type (matmul.cc prepares them):
//   F32 / F16 / BF16:       x (f32)
//   Q8_0 / Q4_0:            Q8_0: xq, xd per 32
//   Q5_0 / Q4_1 / Q5_1:     Q8_0 plus xsums per 32 (for the offset 16 or the minimum m)
//   Q4_K / Q5_K / Q6_K:     Q8_K: xq, xd per 256, xsums per 16 (ggml's bsums)
struct MatmulProblem {
  GgmlType type;            // weight type: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K
  const uint8_t* weights;   // [rows] rows of row_bytes each
  int64_t row_bytes;        // bytes of one row: cols / block elements * block bytes
  int64_t rows;             // output features
  int64_t cols;             // input features; a multiple of 32 (256 for K-quants) for Q types
  const float* x;           // F32/F16/BF16 weights: [n_tokens, cols] f32
  const int8_t* xq;         // quantized weights: [n_tokens, cols] Q8_0 or Q8_K quants of x
  const float* xd;          // Q8_0: [n_tokens, cols/32] scales (fp16-rounded) as f32;
                            // Q8_K: [n_tokens, cols/256] f32 scales
  const int16_t* xsums;     // Q5_0/Q4_1/Q5_1: [n_tokens, cols/32] sums of xq per block;
                            // K-quants: [n_tokens, cols/16] sums of xq per 16
  float* y;                 // [n_tokens, rows] f32
  const uint8_t* xu;        // panel kernel (Q4_0 / Q8_0 prefill): [n_tokens, cols] xq + 128 as u8
  const float* xdsum;       // panel kernel, K-quants: [n_tokens, cols/32] xd * (sum of xq per 32)
  const uint8_t* packed;    // Q4_0 / Q8_0 / K-quant weights packed at load (matmul.h), or null
  // Packed Q4_0 / Q8_0, the call's x block-major (one pointer serves every
  // token): [cols/32, n_tokens] blocks of 32 quants, -8 x their sum (Q4_0's
  // bias), their scale.
  const int8_t* xq_blocks;
  const int32_t* xbias_blocks;
  const float* xd_blocks;
  int64_t n_tokens;         // tokens of the call (the blocks' stride)
  // Packed Q4_K / Q5_K (p.packed): [n_tokens, cols/32] sums of the Q8_K
  // quants per 32 columns (pairs of xsums), beside xq and xd (Q8_K's,
  // row-major). Packed Q6_K reads xsums.
  const int16_t* xsums32 = nullptr;
  // Packed Q4_0 decode on AVX-512 (matmul_packed_avx512.cc): how many blocks
  // ahead each strip's nibbles and scales are prefetched to L1, whether that
  // prefetch is non-temporal (calls of up to 4 tokens, which read each line
  // once), and whether lines further on (kFarBlocks) are also asked for into
  // L2, and whether a one-token call loads each block's nibbles while it
  // multiplies the block before (packed_load_ahead). Chosen per CPU by
  // matmul.cc (set_packed_prefetch).
  int32_t packed_near_blocks = 16;
  bool packed_near_nta = false;
  bool packed_far_prefetch = true;
  bool packed_load_ahead = false;
};

// Writes y[t, r] for r in [row_begin, row_end), t in [tok_begin, tok_end).
using MatmulTileFn = void (*)(const MatmulProblem& p, int64_t row_begin, int64_t row_end,
                              int64_t tok_begin, int64_t tok_end);
// Q8_0 quantization of n floats (n % 32 == 0), ggml's formulas: d = amax/127,
// q = roundf(x / d) (as x * (1/d)), d stored as fp16.
using QuantizeBlocksFn = void (*)(const float* x, BlockQ8_0* y, int64_t n);
// Same, split: qs [n] int8, d [n/32] f32 (the fp16-rounded scale, widened).
using QuantizeSplitFn = void (*)(const float* x, int8_t* qs, float* d, int64_t n);

void matmul_tile_scalar(const MatmulProblem& p, int64_t row_begin, int64_t row_end,
                        int64_t tok_begin, int64_t tok_end);
void matmul_tile_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end,
                      int64_t tok_begin, int64_t tok_end);
void matmul_tile_avx512(const MatmulProblem& p, int64_t row_begin, int64_t row_end,
                        int64_t tok_begin, int64_t tok_end);

// matmul_decode_order's tile: y[t, r] for the tokens and rows given, each
// token's bit-identical to the one-token tile on it alone (tok_end =
// tok_begin + 1), weights unpacked once for several tokens where the ISA
// has such a kernel (AVX-512 Q4_0; other types and ISAs: token by token).
void decode_tile_avx512(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                        int64_t tok_end);

// The prefill GEMM over packed int8 weight panels (AVX-512 VNNI; Q4_0, Q8_0,
// Q4_K, Q5_K and Q6_K weights; x as xu = xq + 128 and xd per 32 columns (Q8_0, or
// for the K-quants Q8_K's quants with each 32's super-block scale, and xdsum)):
// y[t, r] for the rows
// and tokens given. Rows go in panels of kPanelRows, each packed once into
// `scratch` (panel_scratch_bytes(cols) bytes, the calling thread's) and run
// against every token. A token's outputs are the same whatever other tokens
// and rows the call holds (same operations, same order), but not bit-equal
// to matmul_tile_avx512's (another summation order).
constexpr int64_t kPanelRows = 32;
constexpr int64_t kPanelBlockBytes = 768;  // one strip of 16 rows x 32 columns, packed
constexpr int64_t panel_scratch_bytes(int64_t cols) { return kPanelRows / 16 * cols / 32 * kPanelBlockBytes; }
void panel_tile_avx512(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                       int64_t tok_end, uint8_t* scratch);
// FloatMatmul::kExact, F16 / BF16 / F32 weights, prefill calls (AVX-512): the
// same panels with f32 weights (widened when packed) and f32 FMAs against x.
// scratch: f32_scratch_bytes(cols).
constexpr int64_t f32_scratch_bytes(int64_t cols) { return kPanelRows * ((cols + 15) / 16 * 16) * 4; }
void f32_panel_tile_avx512(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                           int64_t tok_end, uint8_t* scratch);
// The same at the AVX2 level (matmul_avx2.cc): strips of 8 rows,
// the same scratch.
void f32_panel_tile_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                         int64_t tok_end, uint8_t* scratch);

// Q4_0 weights packed at load (matmul.h's pack_weight_matrix): strips of 16
// rows, packed_strip_bytes(cols) bytes each (64-byte multiple), in pairs:
// strips 2u and 2u + 1 share the 2 packed_strip_bytes(cols) from
// 2u packed_strip_bytes(cols), interleaved block by block (block b: strip
// 2u's 256 bytes of nibbles, strip 2u + 1's, then their 32 bytes of fp16
// scales each: 576 bytes), so that a task of two strips reads one stream (a
// last strip alone: 256 + 32 bytes a block). packed_strip_at says where.
// Why: on the Zen 5 host (2026-12-06) the loads alone of two strips stored
// apart (four streams a task: two strips' nibbles and scales) read at
// 35.4-39.4 GB/s on one thread against 43.6 for one stream
// (BM_PackedStreamPattern), and the decode kernel over the pairs streams
// 0.87-0.88 of a ~54 GB/s read on two threads against 0.72-0.76 before
// (BM_MatmulDecodeSequence, 8192 x 2048).
// Q8_0 (AVX2 level only): the same with 512 bytes of int8 quants per block,
// packed_q8_0_strip_bytes(cols) a strip (layout in matmul_packed_avx2.cc).
constexpr int64_t kPackedStripRows = 16;
// The packed Q4_0 kernels read the nibbles unsigned (0..15, the stored
// value), so a block's integer dot with x's quants q starts at -8 x sum q
// (sum (n - 8) q = sum n q - 8 sum q): every writer of xbias_blocks
// (packed_activations_avx2, quantize_q8_0_packed_avx512,
// quantize_q8_0_block_major_avx512) takes the offset from here, so that
// they cannot part.
constexpr int32_t kQ4_0NibbleOffset = 8;
constexpr int64_t kPackedBlockNibbleBytes = 256;  // 16 rows x 32 columns x 4 bits
constexpr int64_t kPackedQ8BlockBytes = 512;      // 16 rows x 32 columns x 8 bits
constexpr int64_t kPackedBlockScaleBytes = 32;    // 16 rows x fp16
// A strip of cols / 32 blocks of block_quant_bytes each, then their scales,
// rounded up to a 64-byte multiple.
constexpr int64_t packed_block_strip_bytes(int64_t cols, int64_t block_quant_bytes) {
  return (cols / 32 * (block_quant_bytes + kPackedBlockScaleBytes) + 63) / 64 * 64;
}
constexpr int64_t packed_strip_bytes(int64_t cols) { return packed_block_strip_bytes(cols, kPackedBlockNibbleBytes); }
// Strip s (of n_strips) of a packed matrix: block b's quants at quants + b
// stride bytes from the matrix's start, its scales at scales + b stride.
struct PackedStripAt {
  int64_t quants;
  int64_t scales;
  int64_t stride;
};
constexpr PackedStripAt packed_strip_at(int64_t s, int64_t n_strips, int64_t strip_bytes, int64_t block_quant_bytes) {
  const int64_t k = s % 2;                                // place in the pair
  const int64_t g = k == 1 || s + 1 < n_strips ? 2 : 1;  // strips in the pair
  const int64_t pair = (s - k) * strip_bytes;
  return {pair + k * block_quant_bytes, pair + g * block_quant_bytes + k * kPackedBlockScaleBytes,
          g * (block_quant_bytes + kPackedBlockScaleBytes)};
}
constexpr int64_t packed_q8_0_strip_bytes(int64_t cols) { return packed_block_strip_bytes(cols, kPackedQ8BlockBytes); }
// Packs strips [strip_begin, strip_end) of p's GGUF rows (p.weights) into
// out (strip s where packed_strip_at says). Rows past p.rows: zeros.
// (Both ISAs' packed kernels read this layout.)
void pack_q4_0_strips_avx2(const MatmulProblem& p, int64_t strip_begin, int64_t strip_end, uint8_t* out);
// Every call over packed Q4_0 (decode, decode order, prefill; p.packed; x as
// p.xq_blocks, p.xbias_blocks, p.xd_blocks): y[t, r] for rows [row_begin, row_end) (row_begin a multiple of 16)
// and tokens [tok_begin, tok_end). Each token's outputs are the same bits as
// a call on that token alone: weights unpacked once serve several tokens.
// The AVX2 kernel's outputs are the same bits as the AVX-512 one's (each
// block's exact int32 sum, then the same float operations in the same order).
void packed_decode_tile_avx512(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                               int64_t tok_end);
void packed_decode_tile_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                             int64_t tok_end);
// One token over two whole pairs of packed Q4_0 strips at once, rows [ra,
// ra + 32) of a's matrix and [rb, rb + 32) of b's (the same x: a and b are
// matrices of one call, or the same one), their lines in two streams side by
// side (matmul.cc set_packed_two_streams says why), by the one-pair
// kernel's body (matmul_packed_avx512.cc pairs_stream) over both. Each
// strip's block sums are packed_kernel's exact int32s and its float steps
// the same: the same bits.
void packed_two_pairs_avx512(const MatmulProblem& a, int64_t ra, const MatmulProblem& b, int64_t rb);

// Q8_0 weights packed at load on AVX2 (not AVX-512: that level keeps its
// kernels, the VNNI panels for prefill and its GGUF-row decode tile).
// Packs strips [strip_begin, strip_end) of p's GGUF Q8_0 rows into out
// (strip s at s * packed_q8_0_strip_bytes(p.cols)). Rows past p.rows: zeros.
void pack_q8_0_strips_avx2(const MatmulProblem& p, int64_t strip_begin, int64_t strip_end, uint8_t* out);
// Every call over packed Q8_0 (p.packed; x as p.xq_blocks and p.xd_blocks,
// as the packed Q4_0 kernel's, xbias_blocks unused): y[t, r] for rows
// [row_begin, row_end) (row_begin a multiple of 16) and tokens [tok_begin,
// tok_end). Each (row, token) output is the same bits as a call on that
// token alone, whatever the row split: each block's exact int32 sum, then
// one FMA per block in block order.
void packed_q8_0_tile_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                           int64_t tok_end);

// K-quant weights packed at load on AVX2 (not AVX-512: its K-quant kernels
// read the GGUF rows): strips of 16 rows, one record per 256 columns (layouts
// in matmul_packed_kquant_avx2.cc), each a multiple of 64 bytes:
//   Q4_K 2368: nibbles 2048, scales and mins as u8 128 + 128, d and dmin fp16 32 + 32;
//   Q5_K 2880: Q4_K's plus the 5th bits, 512, after the nibbles;
//   Q6_K 3392: nibbles 2048, the 2 high bits 1024, int8 scales 256, d fp16 32, 32 of padding.
constexpr int64_t kPackedQ4KSuperBytes = 2368;
constexpr int64_t kPackedQ5KSuperBytes = 2880;
constexpr int64_t kPackedQ6KSuperBytes = 3392;
constexpr int64_t packed_q4_k_strip_bytes(int64_t cols) { return cols / 256 * kPackedQ4KSuperBytes; }
constexpr int64_t packed_q5_k_strip_bytes(int64_t cols) { return cols / 256 * kPackedQ5KSuperBytes; }
constexpr int64_t packed_q6_k_strip_bytes(int64_t cols) { return cols / 256 * kPackedQ6KSuperBytes; }
// The 8 6-bit scales and mins of a Q4_K / Q5_K super-block from its 12
// packed bytes (ggml's get_scale_min_k4). Baseline code (the scalar file):
// any level may call it.
void unpack_scales_mins_k4(const uint8_t* s, int* sc, int* m);
// Pack strips [strip_begin, strip_end) of p's GGUF Q4_K / Q5_K / Q6_K rows
// into out (strip s at s * packed_q*_k_strip_bytes(p.cols)). Rows past
// p.rows: zeros.
void pack_q4_k_strips_avx2(const MatmulProblem& p, int64_t strip_begin, int64_t strip_end, uint8_t* out);
void pack_q5_k_strips_avx2(const MatmulProblem& p, int64_t strip_begin, int64_t strip_end, uint8_t* out);
void pack_q6_k_strips_avx2(const MatmulProblem& p, int64_t strip_begin, int64_t strip_end, uint8_t* out);
// Every call over packed Q4_K / Q5_K / Q6_K (p.packed; x as Q8_K: p.xq, p.xd
// per 256, p.xsums per 16 (Q6_K), p.xsums32 (Q4_K, Q5_K)): y[t, r] for rows
// [row_begin, row_end) (row_begin a multiple of 16) and tokens [tok_begin,
// tok_end). Each (row, token) output is the same bits as a call on that
// token alone, whatever the row split.
void packed_q4_k_tile_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                           int64_t tok_end);
void packed_q5_k_tile_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                           int64_t tok_end);
void packed_q6_k_tile_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                           int64_t tok_end);

// The packed kernel's x for token t of n_tokens (its Q8_0 quants qs [cols]
// and scales d [cols/32]): block b's 32 quants to xq_blocks + (b n_tokens +
// t) 32, -8 x their sum to xbias_blocks[b n_tokens + t], d[b] to
// xd_blocks[b n_tokens + t].
// (AVX2 instructions: it serves the AVX-512 level too.)
void packed_activations_avx2(const int8_t* qs, const float* d, int64_t cols, int64_t n_tokens, int64_t t,
                             int8_t* xq_blocks, int32_t* xbias_blocks, float* xd_blocks);

// Token t's Q8_0 quantization of x [cols] (quantize_q8_0_split's qs and d,
// the same bits) and, in the same pass, what packed_activations_avx2 makes of
// them: sixteen blocks at a time, their scales and quants' sums in lanes.
void quantize_q8_0_packed_avx512(const float* x, int64_t cols, int64_t n_tokens, int64_t t, int8_t* qs, float* d,
                                 int8_t* xq_blocks, int32_t* xbias_blocks, float* xd_blocks);
// The same block-major quants, scales and biases (block b, token t at b *
// n_tokens + t) of blocks [b_begin, b_end) of every token of x ([n_tokens,
// cols]), written block by block (contiguous stores), without the row-major
// copy: a prefill call whose matrices all read the block-major form.
void quantize_q8_0_block_major_avx512(const float* x, int64_t cols, int64_t n_tokens, int64_t b_begin, int64_t b_end,
                                      int8_t* xq_blocks, int32_t* xbias_blocks, float* xd_blocks);

// xu[i] = xq[i] + 128 (as u8), n bytes.
void offset_quants_avx512(const int8_t* xq, uint8_t* xu, int64_t n);

// FloatMatmul::kBf16 (F16 / BF16 / F32 weights, AVX-512 BF16): the same
// panels of kPanelRows rows, weights rounded to bf16 when packed, x as bf16
// pairs in p.xu ([n_tokens, bf16_padded_cols(cols)] bf16, written by
// bf16_activations_avx512bf16 per token). scratch: bf16_scratch_bytes(cols).
constexpr int64_t bf16_padded_cols(int64_t cols) { return (cols + 31) / 32 * 32; }
constexpr int64_t bf16_scratch_bytes(int64_t cols) { return kPanelRows * bf16_padded_cols(cols) * 2; }
void bf16_panel_tile_avx512bf16(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                                int64_t tok_end, uint8_t* scratch);
void bf16_activations_avx512bf16(const float* x, int64_t cols, uint8_t* out);

// Tiles for the K-quant weights (Q4_K, Q5_K, Q6_K) x Q8_K activations.
void kquant_tile_scalar(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                        int64_t tok_end);
void kquant_tile_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                      int64_t tok_end);
void kquant_tile_avx512(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                        int64_t tok_end);
// Tiles for Q5_0, Q4_1, Q5_1 weights x Q8_0 activations plus xsums.
void legacy_tile_scalar(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                        int64_t tok_end);
// The AVX2 one also serves the AVX-512 level.
void legacy_tile_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                      int64_t tok_end);

// Q8_K quantization of n floats (n % 256 == 0), ggml's quantize_row_q8_K_ref:
// per 256, the signed element of largest |x| (the first one) gives
// iscale = -127/max, q = nearest (half to even) int of iscale*x, clamped to 127,
// d = 1/iscale, bsums per 16. An all-zero block has d = 0 and q = 0.
using QuantizeQ8KFn = void (*)(const float* x, BlockQ8_K* y, int64_t n);
// Same, split: qs [n] int8, d [n/256] f32, bsums [n/16] int16.
using QuantizeQ8KSplitFn = void (*)(const float* x, int8_t* qs, float* d, int16_t* bsums, int64_t n);
void quantize_q8_k_scalar(const float* x, BlockQ8_K* y, int64_t n);
void quantize_q8_k_avx2(const float* x, BlockQ8_K* y, int64_t n);
void quantize_q8_k_avx512(const float* x, BlockQ8_K* y, int64_t n);
void quantize_q8_k_split_scalar(const float* x, int8_t* qs, float* d, int16_t* bsums, int64_t n);
void quantize_q8_k_split_avx2(const float* x, int8_t* qs, float* d, int16_t* bsums, int64_t n);
void quantize_q8_k_split_avx512(const float* x, int8_t* qs, float* d, int16_t* bsums, int64_t n);

void quantize_q8_0_scalar(const float* x, BlockQ8_0* y, int64_t n);
void quantize_q8_0_avx2(const float* x, BlockQ8_0* y, int64_t n);
void quantize_q8_0_avx512(const float* x, BlockQ8_0* y, int64_t n);
void quantize_q8_0_split_scalar(const float* x, int8_t* qs, float* d, int64_t n);
void quantize_q8_0_split_avx2(const float* x, int8_t* qs, float* d, int64_t n);
void quantize_q8_0_split_avx512(const float* x, int8_t* qs, float* d, int64_t n);

// vec.h kernels, per ISA.
float dot_f32_scalar(const float* a, const float* b, int64_t n);
float dot_f32_avx2(const float* a, const float* b, int64_t n);
float dot_f32_avx512(const float* a, const float* b, int64_t n);
void axpy_f32_scalar(float a, const float* x, float* y, int64_t n);
void axpy_f32_avx2(float a, const float* x, float* y, int64_t n);
void axpy_f32_avx512(float a, const float* x, float* y, int64_t n);
void scale_f32_scalar(float* y, float a, int64_t n);
void scale_f32_avx2(float* y, float a, int64_t n);
void scale_f32_avx512(float* y, float a, int64_t n);
void silu_mul_f32_scalar(float* gate, const float* up, int64_t n);
void silu_mul_f32_avx2(float* gate, const float* up, int64_t n);
void silu_mul_f32_avx512(float* gate, const float* up, int64_t n);
void gelu_mul_f32_scalar(float* gate, const float* up, int64_t n);
void gelu_mul_f32_avx2(float* gate, const float* up, int64_t n);
void gelu_mul_f32_avx512(float* gate, const float* up, int64_t n);

}  // namespace baton::cpu_kernels
