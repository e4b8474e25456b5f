// Matrix x activations for every weight type Baton loads: the engine's hot path.
//
// Dispatched on SimdLevel (scalar / AVX2+FMA+F16C / AVX-512+VNNI). Quantized
// weights are multiplied in integers against quantized activations, as
// llama.cpp does (Q4_0/Q8_0/Q5_0/Q4_1/Q5_1 against Q8_0, the K-quants
// Q4_K/Q5_K/Q6_K against Q8_K), so all levels agree up to float summation order.
#pragma once

#include <cstdint>
#include <span>

#include "common/gguf/ggml_types.h"
#include "common/util/cpu_features.h"
#include "common/util/thread_pool.h"

namespace baton {

// A weight matrix as stored in GGUF: `rows` rows (output features) of `cols`
// elements (input features), each row ggml_row_bytes(type, cols) bytes, contiguous.
struct WeightMatrix {
  GgmlType type;
  const void* data;  // rows * ggml_row_bytes(type, cols) bytes
  int64_t rows;
  int64_t cols;      // a multiple of the block: 32 for Q4_0/Q8_0/Q5_0/Q4_1/Q5_1, 256 for K-quants
  // The same weights repacked at load for this CPU's kernels
  // (pack_weight_matrix), or null. When set, the AVX-512 and AVX2 levels
  // read them instead of `data` (decode and prefill); scalar reads `data`.
  const void* packed = nullptr;
};

// Weights repacked once, at load, into 16-row strips (Q4_0, at the AVX2 and
// AVX-512 levels; one layout, and the two kernels' outputs are the same bits):
// for each strip of 16 rows and each 32-column block, the 16 rows' packed
// nibbles as 4 x 64 bytes (lane i = row i's 4 bytes: the stored nibbles of
// columns 4j..4j+3 and 16+4j..16+4j+3), then the 16 fp16 scales of the
// block after all blocks' nibbles. The same bytes as GGUF's (18 per 32
// weights), so a packed copy replaces the mapped one. One kernel serves
// decode and prefill: it reads one contiguous stream per strip, multiplies
// 16 rows per vpdpbusd (AVX2: 8 per vpmaddubsw) with no per-row reduction, and the tokens of a call
// share each unpacked strip; a token's outputs are the same bits in any call.
// Q4_K, Q5_K and Q6_K (every K-quant matrix of a Q4_K_M file), at the AVX2
// level only (AVX-512 keeps its K-quant kernels over the GGUF rows): the same
// 16-row strips, one record per 256 columns: the quants' low 4 bits as Q4_0's
// 64-byte lines, Q5_K's 5th and Q6_K's 2 high bits in lines beside them;
// Q4_K / Q5_K's 6-bit scales and mins unpacked to bytes with fp16 d and dmin
// per row, Q6_K's int8 scales and fp16 d (2368 / 2880 / 3392 bytes against 16
// x 144 / 176 / 210 in GGUF; layouts in matmul_packed_kquant_avx2.cc); exact
// integer sums per super-block, a token's outputs the same bits in any call.
// Q8_0, at the AVX2 level only (AVX-512 keeps its VNNI panels for prefill and
// its decode tile over the GGUF rows): Q4_0's strips with the 16 rows' int8
// quants of a block as 8 x 64 bytes (lane i = row i's 4 bytes of columns
// 4j..4j+3), then the fp16 scales: the GGUF bytes (34 per 32 weights) plus
// padding to 64 per strip. One kernel for decode and prefill, 8 rows per
// vpmaddubsw (sign trick) widened by vpmaddwd per 4 columns: exact int32
// block sums, a token's outputs the same bits in any call.
// packed_weight_bytes: bytes of w's packed copy on this CPU; 0 when its type
// has no packed layout here (the kernels read the GGUF rows).
int64_t packed_weight_bytes(GgmlType type, int64_t rows, int64_t cols);
// The packed Q4_0 AVX-512 decode kernel's near software prefetch, in blocks
// ahead of the block it multiplies, for every call after this one,
// process-wide (0: none; -1: the vendor's default, 12 on AMD and 16
// elsewhere; matmul.cc set_packed_prefetch says why). Where the lines come
// from only: the outputs are the same bits at any distance.
void set_packed_near_blocks(int blocks);
int packed_near_blocks();
// Whether that prefetch is non-temporal (NTA) in calls of up to 4 tokens
// (1) or to L1 (T0; 0); -1: the vendor's default, NTA on AMD. Process-wide,
// the same bits either way.
void set_packed_near_nta(int nta);
bool packed_near_nta();
// Whether that kernel's one-token calls (decode steps) load each block's
// nibbles into registers while they multiply the block before (1) or as
// they multiply it (0); -1: the vendor's default, ahead on AMD.
// Process-wide, the same bits either way.
void set_packed_load_ahead(int ahead);
bool packed_load_ahead();
// Whether one-token calls over packed Q4_0 weights at the AVX-512 level,
// where the kernel loads a block ahead (packed_load_ahead), stream two
// places of the matrices at once on each thread (1) or one (0); -1: the
// vendor's default, two on AMD. Process-wide, the same bits either way.
void set_packed_two_streams(int two);
bool packed_two_streams();
// Packs w (its GGUF rows) into out (packed_weight_bytes(...) bytes, 64-byte
// aligned). Strips are independent: pool (may be null) splits them.
void pack_weight_matrix(const WeightMatrix& w, uint8_t* out, ThreadPool* pool);

// How F16 / BF16 / F32 weights are multiplied in prefill calls (2+ tokens).
//   kExact: f32 products and sums (the golden path: tests against the
//           reference engine and llama.cpp run it).
//   kBf16:  weights and x rounded to bf16 (8 mantissa bits), products summed
//           in f32 by vdpbf16ps: ~2x the f32 FMA rate, ~2^-9 relative error
//           per product. Only where the CPU has AVX-512 BF16 at the AVX-512
//           level; elsewhere (and for one token, and for quantized weights)
//           it is kExact. The cloud CPU backend's --cpu-matmul bf16.
enum class FloatMatmul { kExact, kBf16 };

// Whether FloatMatmul::kBf16 runs its own kernel here (else it is kExact).
bool bf16_matmul_available();

// Bytes of packed weights each pool thread keeps for prefill calls whose
// input is `cols` wide (memory plans count it per thread).
int64_t matmul_panel_scratch_bytes(int64_t cols);

// y[t, r] = sum_c W[r, c] * x[t, c].
//   x: [n_tokens, cols] f32 row-major; y: [n_tokens, rows] f32 row-major.
// Quantized weights: x is first quantized (into a thread-local scratch of the
// calling thread) to Q8_0 blocks (Q4_0/Q8_0/Q5_0/Q4_1/Q5_1; the last three also
// use the per-block sum of the quants) or Q8_K super-blocks (Q4_K/Q5_K/Q6_K),
// then integer dot products per block. Q4_0/Q8_0/Q4_K/Q5_K/Q6_K have AVX2 and
// AVX-512 kernels; Q5_0/Q4_1/Q5_1 (rare) run their AVX2 kernel at both levels.
// F32 / F16 / BF16 weights: f32 activations, weights widened on the fly.
// Other types are a BATON_CHECK failure (the model loader rejects them earlier).
// Parallel over rows (and tokens when rows are few) on `pool`; nullptr runs
// single-threaded. Uses active_simd_level().
void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool,
            FloatMatmul float_matmul = FloatMatmul::kExact);

// matmul at a given level, for tests and benchmarks; level must be <= best_simd_level().
void matmul_with(SimdLevel level, const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
                 ThreadPool* pool, FloatMatmul float_matmul = FloatMatmul::kExact);

// y_i = W_i x for up to 8 matrices that share the input x (Q/K/V, gate/up):
// the same results as one matmul per matrix, but x is quantized once and all
// rows go out in one parallel loop (one pool wake-up instead of one per
// matrix). ws[i]: same cols; mixed storage (Q4_K beside Q6_K, F16 beside
// Q4_0) is one loop, each activation format prepared once; more than 8
// matrices or different widths run one call each. ys[i]: [n_tokens, ws[i]->rows] f32.
void matmul_many(std::span<const WeightMatrix* const> ws, const float* x, int64_t n_tokens,
                 std::span<float* const> ys, ThreadPool* pool, FloatMatmul float_matmul = FloatMatmul::kExact);
void matmul_many_with(SimdLevel level, std::span<const WeightMatrix* const> ws, const float* x, int64_t n_tokens,
                      std::span<float* const> ys, ThreadPool* pool, FloatMatmul float_matmul = FloatMatmul::kExact);

// The same products as matmul / matmul_many, but each token's row of y is
// bit-identical to a one-token call on that token alone (the decode kernels,
// the decode row split): n tokens that must come out exactly as n decode
// steps (speculative verification, a decode step of several sessions) in one
// pass over the weights. Each row task runs its tokens one after another
// while its rows are in cache, so the weights are read from memory once.
void matmul_decode_order(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool);
void matmul_many_decode_order(std::span<const WeightMatrix* const> ws, const float* x, int64_t n_tokens,
                              std::span<float* const> ys, ThreadPool* pool);

// Activation quantization to Q8_0 (ggml's formulas: d = amax/127, q = roundf(x/d)),
// dispatched. x: [n] f32, n % 32 == 0; y: [n/32] blocks. Bit-identical on all levels.
void quantize_row_q8_0_fast(const float* x, BlockQ8_0* y, int64_t n);

// Activation quantization to Q8_K (ggml's quantize_row_q8_K_ref: per 256, the
// signed element of largest |x| gives iscale = -127/max, q = nearest int of
// iscale*x (half to even) clamped to 127, d = 1/iscale, bsums per 16).
// x: [n] f32, n % 256 == 0; y: [n/256] blocks. Bit-identical on all levels.
void quantize_row_q8_k_fast(const float* x, BlockQ8_K* y, int64_t n);
void quantize_row_q8_k_with(SimdLevel level, const float* x, BlockQ8_K* y, int64_t n);

}  // namespace baton
