// Internal: per-ISA kernels of the KV codec and the quantized store
// (kv_kernels.cc holds the scalar set and the dispatch; *_avx2.cc the AVX2
// set). Same rules as common/cpu/matmul_kernels.h: ISA files keep helpers in
// an anonymous namespace and use no inline code from shared headers; call an
// ISA's functions only through kv_kernels().
//
// Shapes: q, out: [n] f32; codes as in kv_quant.h (INT8 [n] int8, INT4 [n/2]
// packed low nibble first); scales, mins: [n / group] f16. n % group == 0.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace baton::kv_kernels_impl {

// One KV head's rows in a quantized store plane (QuantizedKvCache layout):
// row j's codes at codes + j * row_code_bytes, its group scales (and INT4
// mins) at scales + j * row_groups (mins + j * row_groups).
struct KvHeadRows {
  int bits = 16;                     // 32 (F32 rows, F32KvCache), 16 (F16), 8 (INT8) or 4 (INT4)
  const uint8_t* codes = nullptr;    // row 0 of this head
  int64_t row_code_bytes = 0;        // stride between rows, bytes
  const uint16_t* scales = nullptr;  // f16, INT8 / INT4; row 0 of this head
  const uint16_t* mins = nullptr;    // f16, INT4 only
  int64_t row_groups = 0;            // stride between rows, scale entries
  int group = 0;                     // elements per scale group (INT8 / INT4)
  // (At bits 4 the INT4 layouts of the same names: blocked_from_rows.)
  // INT8 keys in key column blocks (see kKeyBlockRows), not rows: the codes
  // of rows [16b, 16b + 16) fill bytes [16b, 16b + 16) x row_code_bytes
  // (row_code_bytes = head_dim: a head's rows consecutive) in the order the
  // vector kernel's scores read them. Only a set with q8_reads_key_blocks
  // reads them in place; tiled_attention.cc turns a tile back into rows for
  // the others (key_rows_from_blocks).
  bool key_blocks = false;
  // INT8 values in value quads (see kValueQuadRows), not rows: the codes of
  // rows [4q, 4q + 4) fill bytes [4q, 4q + 4) x row_code_bytes (row_code_bytes
  // = head_dim) in the order a decode step's value product reads them. The
  // AVX-512 set reads them in place on that path and turns the tile back
  // into rows on its others (q8_reads_value_quads); tiled_attention.cc does
  // for the other sets (value_rows_from_quads).
  bool value_quads = false;
};

// Key column blocks: the INT8 keys of 16 consecutive rows r (of one head)
// as head_dim / 4 vectors of 64 bytes, vector j lane r = the codes of dims
// 4j .. 4j + 3 of row r, each + 128 (as u8): key_block_byte(r, d) for
// dim d of row r of the head (rows counted from a block's first). What the
// AVX-512 kernel's scores take for vpdpbusd (u8 keys x s8 queries, one
// lane per row), so that a decode step reads them as they lie instead of
// flipping and transposing 16 rows of every block of every tile (measured
// on BM_TiledAttentionDecodeInCache, values in rows: 60.7-61.1 against
// 71.0-71.9 us). The store keeps whole blocks (its runs of rows are a
// multiple of kKeyBlockRows) and starts tiles on block edges.
inline constexpr int kKeyBlockRows = 16;
inline int64_t key_block_byte(int64_t r, int d, int head_dim) {
  return r / kKeyBlockRows * kKeyBlockRows * head_dim + (d / 4) * (4 * kKeyBlockRows) + (r % kKeyBlockRows) * 4 + d % 4;
}
// Value quads: the INT8 values of 4 consecutive rows r (of one head) as
// one dword per dim, the 4 rows' codes in row order: value_quad_byte(r, d)
// for dim d of row r of the head. Each 64 bytes of a quad are the 4 rows of
// 16 consecutive dims: what q8_values_quads (AVX-512) multiplies by the
// broadcast weight codes of the 4 rows with vpdpbusd, made once per token
// instead of by 2 vpermb and 2 word unpacks per 32 dims and quad of every
// step.
inline constexpr int kValueQuadRows = 4;
inline int64_t value_quad_byte(int64_t r, int d, int head_dim) {
  return r / kValueQuadRows * kValueQuadRows * head_dim + int64_t{d} * kValueQuadRows + r % kValueQuadRows;
}
// Rows [first_row, first_row + n) of a head's INT8 values: from rows (row i
// at rows + i * row_stride) into value quads (the head's row 0 at quads) and
// back.
void value_quads_from_rows(const int8_t* rows, int64_t row_stride, int64_t first_row, int64_t n, int head_dim,
                           uint8_t* quads);
void value_rows_from_quads(const uint8_t* quads, int64_t first_row, int64_t n, int head_dim, int8_t* rows,
                           int64_t row_stride);

// Rows [first_row, first_row + n) of a head's INT8 keys: from rows (row i
// at rows + i * row_stride, head_dim codes) into key column blocks (the
// head's row 0 at blocks) and back.
void key_blocks_from_rows(const int8_t* rows, int64_t row_stride, int64_t first_row, int64_t n, int head_dim,
                          uint8_t* blocks);
void key_rows_from_blocks(const uint8_t* blocks, int64_t first_row, int64_t n, int head_dim, int8_t* rows,
                          int64_t row_stride);

// The four layouts' conversions by a plane's bits (8 or 4) and kind (keys:
// key column blocks; values: quads), rows as bytes (INT8 codes as int8, INT4
// packed rows of head_dim / 2 bytes), rows [first_row, first_row + n) of a
// head (row i at rows + i * row_stride; the head's row 0 at blocked). INT4
// (AVX-512 with VBMI, q4_reads_blocks): keys in key column blocks of the
// packed bytes (two codes a byte, low nibble first) at key_block_byte(r, j,
// head_dim / 2) for byte j of row r, not offset (the codes are unsigned):
// each 64 bytes the dword of 4 bytes (8 dims) of 16 rows, what the INT4
// kernel splits into its low- and high-nibble key columns with two masks and
// a shift instead of transposing 16 rows per block. Values in nibble quads:
// quad q (rows 4q .. 4q + 3) holds 2 * head_dim bytes, its block s (dims 32s
// .. 32s + 31) 64 of them, byte 4t + i = code(row 4q + i, dim 32s + t) |
// code(row 4q + i, dim 32s + 16 + t) << 4 (t < 16): the low nibbles are the
// INT8 value quad's first vector of the block, the high ones its second.
void blocked_from_rows(int bits, bool keys, const uint8_t* rows, int64_t row_stride, int64_t first_row, int64_t n,
                       int head_dim, uint8_t* blocked);
void rows_from_blocked(int bits, bool keys, const uint8_t* blocked, int64_t first_row, int64_t n, int head_dim,
                       uint8_t* rows, int64_t row_stride);

// Scratch floats attend_heads needs.
inline int64_t attend_heads_scratch_floats(int n_q, int head_dim, int64_t n_ctx) {
  return int64_t{n_q} * n_ctx + 2 * int64_t{head_dim};
}

// Positions of one attention tile (tiled_attention.h): tiles start at
// multiples of it in absolute positions, so a query's arithmetic never
// depends on the other queries of a call. 128 since the thirty-third
// session (64 before): a decode call (one KV head's query heads over one
// tile) has a fixed cost per call and per online-softmax step (the setup,
// the tile max and alpha for its heads, the weight codes' scales, the
// next tile's prefetch), which 128 rows pay once where 64 paid it twice:
// INT8 decode attention, context 16384, 11.6-11.9 against 13.0-13.4 ms
// (baton bench decode, 2 threads, 5 alternating runs), the L2-resident
// kernel ~8% faster (BM_TiledAttentionDecodeInCache). It changes the bits
// of attention (a tile is one online-softmax step and one weight-code
// scale), the same on every path (scalar, AVX2, AVX-512, AMX).
inline constexpr int kAttentionTileRows = 128;

// The scalar kernels' online-softmax step of one query over a tile's scores
// s[lo, hi) whose largest is tile_max: the scores become their weights
// exp(s - m_new), (m, l) take the tile in, and acc [head_dim] is rescaled
// when the max moved (alpha is exactly 1 when it held, the common case: no
// exp call, no rescale, x * 1 == x; 0 for the empty state m = -inf).
inline void online_softmax_step(float* s, int lo, int hi, float tile_max, float* m, float* l, float* acc,
                                int head_dim) {
  const float m_new = std::max(*m, tile_max);
  const float alpha = m_new == *m ? 1.0f : std::exp(*m - m_new);
  float sum = 0.0f;
  for (int r = lo; r < hi; ++r) {
    s[r] = std::exp(s[r] - m_new);
    sum += s[r];
  }
  *m = m_new;
  *l = *l * alpha + sum;
  if (alpha != 1.0f) {
    for (int d = 0; d < head_dim; ++d) acc[d] *= alpha;
  }
}

// INT8 keys in place (attend_tile_q8): each query head is quantized like
// ggml's Q8_0 activations (blocks of kQ8Block dims, one f32 scale per block),
// so q . k is an exact integer dot product per block (VNNI: u8 x s8, the key
// codes offset by +128; AVX2: both widened to int16, vpmaddwd) times the
// block's query scale and the key's group scale. Decode reads each key byte once, with no dequantized tile.
inline constexpr int kQ8Block = 32;

// n_q query heads quantized by quantize_query_q8, consecutive: head i's codes
// at codes + i * head_dim, its block scales and biases at scales / bias +
// i * (head_dim / kQ8Block).
struct QueryQ8 {
  const int8_t* codes = nullptr;
  const float* scales = nullptr;  // block scale x the softmax scale
  const int32_t* bias = nullptr;  // -128 x the block's code sum (cancels the +128 on the keys)
};

// One query head, head_dim % kQ8Block == 0: per block b, with
// amax = max |q[d]| over the block, s = amax / 127, codes[d] =
// round(q[d] / s) (0 when amax = 0), scales[b] = s * scale, bias[b] = -128 *
// sum of the block's codes. A pure function of (q, scale): a query's codes
// never depend on the others of a call.
void quantize_query_q8(const float* q, int head_dim, float scale, int8_t* codes, float* scales, int32_t* bias);

// True when attend_tile_q8 takes these K / V rows: INT8 keys with groups a
// multiple of kQ8Block, INT8 values with groups a multiple of 32 (a 32-dim
// chunk of the integer value product shares one weight scale), and head_dim
// a multiple of kQ8Block (at most kQ8MaxHeadDim).
inline constexpr int kQ8MaxHeadDim = 256;
bool q8_tile_supported(const KvHeadRows& k, const KvHeadRows& v, int head_dim);

// The integer value product of attend_tile_q8. After the online-softmax step
// a head's tile weights are p_r = exp(s_r - m') (m and l are updated from
// these float p_r, unquantized). For each value group g the weights with the
// rows' group scales folded in, p_r * vs_r[g], are quantized to codes in
// [0, kQ8WeightMax] with one step per (head, tile, group), a function of
// that head's own scores and rows only:
//   p_ref = exp(t - m') (t the tile's largest score: exactly 1 when t = m',
//     the common case, no exp call); c = 1 / p_ref (0 when p_ref <=
//     kQ8WeightTiny: such a tile weighs under 2^-96 of the row that set m);
//   vs_max = max_{r in [lo, hi)} vs_r[g]; ratio = kQ8WeightMax / vs_max (0
//     when vs_max = 0);
//   code_r = min(lrint((p_r * c) * (vs_r[g] * ratio)), kQ8WeightMax);
//   step = p_ref * (vs_max / kQ8WeightMax)
// (vs_max and ratio are shared by the heads of one query position), and
// acc[d] = fma(float(sum_r code_r * v_r[d]), step, acc[d]) with the sum over
// the tile's rows exact in int32 (|sum| <= 128 * 32767 * 128 < 2^29).
// Error: |code_r * step - p_r * vs_r[g]| <= step / 2 (up to float
// rounding), so a tile moves acc[d] by at most n_rows * step / 2 * 127 =
// n_rows * p_ref * amax / (2 * kQ8WeightMax) (amax = 127 vs_max, the
// group's largest magnitude over the tile), and the normalized output (acc /
// l, l >= p_ref: the row of score t is in l) by at most kAttentionTileRows /
// (2 * kQ8WeightMax) * max amax = max amax / 512: half the error bound of
// the INT8 value codes themselves (amax / 254; with 64-row tiles it was a
// quarter). (u8 weights, 255 levels, would allow max amax / 4: too coarse.)
inline constexpr int kQ8WeightMax = 32767;
inline constexpr float kQ8WeightTiny = 0x1p-96f;

// Query positions that attend_tile_q8_positions takes in one call.
inline constexpr int kQ8MaxPositions = 64;

// Whether the AVX-512 set's attend_tile_q8_positions computes its two
// integer products on AMX tiles in calls of at least kQ8AmxMinHeads heads
// (a prefill's; a decode step's call has one position's few heads and stays
// on vpdpbusd / vpdpwssd): the CPU, the OS and BATON_AMX allow it
// (amx_int8_usable) and set_q8_amx_allowed has not turned it off. The tiles
// give the same integers (q . k by tdpbssd on the signed codes; p . V by
// tdpbusd on the 15-bit weight codes split in 8 high and 7 low bits, 128 x
// high + low), so a call's bits do not depend on it.
inline constexpr int kQ8AmxMinHeads = 16;
bool q8_amx_active();
// Tests and benches compare the two paths in one process (default: allowed).
void set_q8_amx_allowed(bool allowed);

// Whether the AVX-512 set's attend_tile_q8_positions takes a decode step's
// value product (a call whose heads go in one run: q8_tile_positions'
// fused, value groups of whole 32-dim blocks) in 4-row quads on vpdpbusd
// instead of int16 row pairs on vpdpwssd: the CPU has AVX-512 VBMI (vpermb
// makes the quads) and set_q8_value_quads_allowed has not turned it off.
// The weight codes go to the quads as two unsigned bytes (code = 256 high +
// low, both sums exact), so a call's bits do not depend on it.
bool q8_value_quads_active();
// Tests and benches compare the two paths in one process (default: allowed).
void set_q8_value_quads_allowed(bool allowed);

// Whether the active kernel set reads INT8 keys in key column blocks
// (KvHeadRows::key_blocks) in place: it has q8_reads_key_blocks (AVX-512)
// and set_q8_key_blocks_allowed has not turned it off. A store made while it
// holds keeps its INT8 keys so (it decides once); attention over blocks
// while it does not reads each tile through key_rows_from_blocks, the same
// bits.
bool q8_key_blocks_active();
// Tests and benches compare the two layouts in one process (default: allowed).
void set_q8_key_blocks_allowed(bool allowed);

// INT4 K and V read in place (attend_tile_q4_positions: the AVX-512 set
// with VBMI, else the AVX2 set's): the INT8 kernel's integer steps over the
// 4-bit codes, each tile's rows unpacked once per call (AVX-512: keys into
// key columns, values into value quads; AVX2: widened rows and row pairs),
// with the groups' mins as float terms. With x = s c + mn (c
// in [0, 15]) = s (c - 8) + mn', mn' = mn + 8 s:
//   score = sum_b fma(float(sum_b) * qs_b, ks_g(b), .) (blocks in order, as
//     attend_tile_q8), sum_b = -8 * sum(codes_b) + sum_d code_d * c_d
//     (exact; bias_b / 16 of the INT8 query), then per block in order
//     score = fma(mn'_g(b), qs_b * sum(codes_b), score);
//   the weights, their codes and steps as attend_tile_q8 with the value
//     scales s_r and the value codes c - 8 (exact int32 sums), then per
//     value group acc[d] += sum_r p_r mn'_r(g) (the float weights).
// The query codes go in nibble order (q4_query_order), what the keys' nibbles
// give without a byte shuffle: the same products, so the same integers.
// q4_tile_supported: INT4 values (no mins missing), INT4 keys or INT8 keys
// (int4-k8: the INT8 kernel's keys, bias and scores, no mins' term); keys
// in key column blocks and INT4 values in nibble quads only at head_dim a
// multiple of 64 (the AVX-512 kernel reads them, q4_reads_blocks), key
// and value groups multiples of kQ8Block, head_dim a multiple of kQ8Block
// (at most kQ8MaxHeadDim; the AVX-512 kernel takes multiples of 64 and hands
// the others, head_dim 96 say, to the AVX2 one). The scalar set dequantizes.
bool q4_tile_supported(const KvHeadRows& k, const KvHeadRows& v, int head_dim);
// Puts quantized query codes (n bytes, n % 8 == 0) in the nibble order
// attend_tile_q4_positions takes: within each 8 dims, dims 0, 2, 4, 6, then
// 1, 3, 5, 7 (a block's scale and bias stay: the order stays in its block).
void q4_query_order(int8_t* codes, int64_t n);
// Whether attention may take the in-place INT4 kernel where the set has it
// (default: allowed unless the environment has BATON_INT4_IN_PLACE=0; tests
// and benches compare it with the dequantizing path).
bool q4_in_place_allowed();
void set_q4_in_place_allowed(bool allowed);
// Scratch floats of attend_tile_q4_positions for n_q heads: attend_tile_q8's
// and the heads' value-min sums.
inline int64_t attend_tile_q4_scratch_floats(int n_q, int head_dim) {
  return int64_t{n_q} * kAttentionTileRows * (1 + head_dim / 16) + int64_t{n_q} * (head_dim / 32);
}

// Scratch floats attend_tile_q8 needs for n_q heads (attend_tile_q8_positions:
// n_q = positions x heads): scores [n_q, kAttentionTileRows] f32, then the
// quantized weights [n_q, head_dim / 32, kAttentionTileRows] int16.
inline int64_t attend_tile_q8_scratch_floats(int n_q, int head_dim) {
  return int64_t{n_q} * kAttentionTileRows * (1 + head_dim / 16);
}

// The query positions of one attend_tile_q8_positions call: position j's
// n_q quantized query heads at head offset j * q_heads_stride of the
// QueryQ8 (codes + j * q_heads_stride * head_dim, scales and bias + j *
// q_heads_stride * (head_dim / kQ8Block)); its states at m + j *
// state_stride, l + j * state_stride, acc + j * state_stride * head_dim; its
// rows of the tile [lo[j], hi[j]) (lo[j] < hi[j]).
//
// next: optional rows to prefetch (to L2) while the call computes, rows the
// caller's later calls read (tiled_attention.cc: a part of the next tile's
// rows, every head of the task): K and V codes of `rows` rows, `stride`
// bytes apart, `lines` cache lines each. A kernel that takes them spreads them
// over its steps: a burst of them at once fills the core's miss buffers and
// stalls it until they drain, so the memory stream would not overlap the
// arithmetic. nta: to L1 as non-temporal (prefetchnta) instead of to L2
// (prefetcht1); tiled_attention.cc sets it for decode-sized calls where
// attention_prefetch_nta() holds.
struct TilePrefetch {
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  int64_t stride = 0;
  int rows = 0;
  int lines = 0;
  bool nta = false;
};

// Whether decode-sized attention calls (tiled_attention.cc: at most
// kSplitMaxQueries queries, the calls that read each tile once) prefetch
// the next tile non-temporally (TilePrefetch::nta), process-wide: 1 yes, 0
// no (prefetcht1, to L2), -1 the vendor's default: yes on AMD, as the
// packed weights' near prefetch (matmul.h, set_packed_near_nta). Measured
// on Zen 5 (BM_TiledAttentionDecodePrefetch, context 16384 streamed from
// memory, 2 threads, alternating runs): INT8 6.00-6.76 against 7.04-7.47 ms
// in fast phases, the same in slow ones; INT4 and F16 1-4% faster; 1 thread
// 3-8% (README, "Forty-sixth session"). A tile's lines
// go to L1 without a copy left in L2 or L3 (each is read once per token;
// the next tile's 17 KiB beside this one's fit in L1). Prefill calls read
// a tile over many heads' passes and keep prefetcht1. Where the lines come
// from only: the same bits either way.
void set_attention_prefetch_nta(int nta);
bool attention_prefetch_nta();

// Issues a TilePrefetch a few lines at a time, so a kernel spreads it over
// its steps: each step() prefetches (to L2: prefetcht1; nta: prefetchnta)
// the next lines of the K rows and as many of the V rows, in address order,
// so that `steps` steps issue them all, evenly (L lines over S steps: L / S
// per step, one more at the steps where the remainder's running sum passes
// S); finish() the lines still left.
class TilePrefetchSpread {
 public:
  TilePrefetchSpread(const TilePrefetch& p, int steps)
      : k_(p.k),
        v_(p.v),
        nta_(p.nta),
        row_skip_(p.stride - 64 * int64_t{p.lines - 1}),
        left_(p.rows * p.lines),
        lines_(p.lines),
        in_row_(p.lines),
        steps_(steps > 0 ? steps : 1),
        per_step_(left_ / steps_),
        extra_(left_ % steps_) {}
  void step() {
    // Nothing left (a prefill call's later heads): no bookkeeping either,
    // whose read-modify-write of err_ chained the calls through memory.
    if (left_ == 0) return;
    err_ += extra_;
    const bool more = err_ >= steps_;
    if (more) err_ -= steps_;
    lines(per_step_ + (more ? 1 : 0));
  }
  void finish() { lines(left_); }
  // Lines of K (and as many of V) not yet issued.
  int left() const { return left_; }

 private:
  // The next n lines (fewer when fewer are left): an offset walked line by
  // line, a row's last line stepping to the next row (a step is a few
  // instructions: the kernels call it in their inner loops). Only issued
  // lines form a pointer.
  void lines(int n) {
    n = n < left_ ? n : left_;
    left_ -= n;
    // The cursor in locals (written back once), not walked in the members.
    int64_t offset = offset_;
    int in_row = in_row_;
    for (; n > 0; --n) {
      if (nta_) {
        __builtin_prefetch(k_ + offset, 0, 0);
        __builtin_prefetch(v_ + offset, 0, 0);
      } else {
        __builtin_prefetch(k_ + offset, 0, 2);
        __builtin_prefetch(v_ + offset, 0, 2);
      }
      int64_t advance = 64;
      if (--in_row == 0) in_row = lines_, advance = row_skip_;
      offset += advance;
    }
    offset_ = offset, in_row_ = in_row;
  }

  const uint8_t* k_;
  const uint8_t* v_;
  bool nta_;
  int64_t offset_ = 0;  // of the next line from k_ (and v_)
  int64_t row_skip_;    // from a row's last line to the next row's first
  int left_;            // lines of K (and as many of V) not yet issued
  int lines_;
  int in_row_;          // lines of the current row not yet issued
  int steps_;
  int per_step_;        // lines every step issues
  int extra_;           // lines over per_step_ * steps_: one at every step that carries err_ past steps_
  int err_ = 0;
};

struct TilePositions {
  int n = 1;  // 1 .. kQ8MaxPositions
  int64_t q_heads_stride = 0;
  int64_t state_stride = 0;
  const int* lo = nullptr;
  const int* hi = nullptr;
  TilePrefetch next;
};

struct KvKernels {
  // sum_i q[i] * x[i] for the dequantized x.
  float (*dot_f16)(const float* q, const uint16_t* x, int64_t n);
  float (*dot_int8)(const float* q, const int8_t* codes, const uint16_t* scales, int64_t n, int group);
  float (*dot_int4)(const float* q, const uint8_t* codes, const uint16_t* scales, const uint16_t* mins,
                    int64_t n, int group);
  // out[i] += p * x[i] for the dequantized x.
  void (*axpy_f16)(float p, const uint16_t* x, float* out, int64_t n);
  void (*axpy_int8)(float p, const int8_t* codes, const uint16_t* scales, float* out, int64_t n, int group);
  void (*axpy_int4)(float p, const uint8_t* codes, const uint16_t* scales, const uint16_t* mins, float* out,
                    int64_t n, int group);
  // out [n] = dequantized codes (per-token groups, as kv_quant.h).
  void (*dequantize_int8)(const int8_t* codes, const uint16_t* scales, int64_t n, int group, float* out);
  void (*dequantize_int4)(const uint8_t* codes, const uint16_t* scales, const uint16_t* mins, int64_t n, int group,
                          float* out);
  // In-place normalized Walsh-Hadamard transform of n_vectors vectors of n
  // floats (n a power of two).
  void (*hadamard_rows)(float* x, int64_t n_vectors, int n);
  // (The per-query kernel that QuantizedKvCache::attend ran before the tiled
  // attention; kept as the baseline of tests/bench/tiled_attention_bench.cc.)
  // Attention of n_q query heads that share one KV head (GQA) over rows
  // [0, n_ctx): out[i] = sum_j softmax_j(scale * q[i] . K_j) * V_j. Each K
  // and V row is dequantized once for all n_q heads, in one call per head
  // group (no per-row calls). q, out: [n_q, head_dim] f32 (consecutive heads);
  // scratch: attend_heads_scratch_floats() floats. head_dim % group == 0.
  void (*attend_heads)(const KvHeadRows& k, const KvHeadRows& v, const float* q, int n_q, int head_dim,
                       float scale, int64_t n_ctx, float* scratch, float* out);
  // Rows [first_row, first_row + n_rows) of one head (bits 16, 8 or 4),
  // dequantized: out [n_rows, head_dim]. Each row's values are those of
  // dequantize_int8 / dequantize_int4 / f16_to_f32 on it.
  void (*dequantize_head_rows)(const KvHeadRows& h, int64_t first_row, int64_t n_rows, int head_dim, float* out);
  // One tile step of online-softmax attention for n_q query heads that share
  // a KV head and one query position (GQA heads of one query): with rows
  // [lo, hi) of a tile (0 <= lo < hi <= kAttentionTileRows), s_r = scale *
  // q[i] . k_r, and per head i
  //   m' = max(m[i], max_r s_r); alpha = exp(m[i] - m')
  //   l[i] = alpha * l[i] + sum_r exp(s_r - m'); acc[i] = alpha * acc[i] + sum_r exp(s_r - m') v_r
  // (m = -inf, l = 0, acc = 0 is the empty state). Row r of the tile at
  // k + r * k_stride (v + r * v_stride), head_dim floats; rows outside
  // [lo, hi) are never read. A head's result depends only on its q, its
  // state, lo, hi and those rows (rows are grouped by their tile index),
  // never on n_q. q, acc: [n_q, head_dim]; m, l: [n_q]; scratch:
  // n_q * kAttentionTileRows floats.
  void (*attend_tile)(const float* k, int64_t k_stride, const float* v, int64_t v_stride, const float* q, int n_q,
                      int head_dim, float scale, int lo, int hi, float* m, float* l, float* acc, float* scratch);
  // Conversions, n elements.
  void (*f32_to_f16)(const float* x, uint16_t* out, int64_t n);
  void (*f16_to_f32)(const uint16_t* x, float* out, int64_t n);
  // c[t, j] = bias[j] + sum_i a[t, i] * b[i, j] for t < n, j < m: rows of a
  // at a + t * lda (k floats), b [k, m] row-major, rows of c at c + t * ldc.
  // The transform codec's projection and reconstruction (kv_transform_codec.cc).
  void (*affine_rows)(const float* a, int64_t lda, int64_t n, int k, const float* b, int m, const float* bias,
                      float* c, int64_t ldc);
  // The transform codec's reconstruction in integers:
  //   c[t, j] = fma(scale[j], float(sum_i a[t, i] * b[i, j]), bias[j])
  // for t < n, j < m, i < k: a rows of bytes at a + t * lda (the symbols), b
  // INT8 packed four components per column, [ceil(k / 4), m, 4] (zeros past
  // k: KvTransformHeadPlan::reconstruct_i8). Reads up to 3 bytes past each row's k (the caller
  // pads the last row). The integer sum is exact (k * 255 * 127 < 2^24, so
  // also as a float), so every set gives the same bits.
  void (*affine_u8_rows)(const uint8_t* a, int64_t lda, int64_t n, int k, const int8_t* b, int m,
                         const float* scale, const float* bias, float* c, int64_t ldc);
  // attend_tile over INT8 K and V read in place (q8_tile_supported): the
  // tile's row 0 is row tile_row of k and v (KvHeadRows of one head; rows
  // [tile_row + lo, tile_row + hi) are read, no other), q the n_q heads'
  // quantized queries. Score of row r for head i:
  //   s_r = sum_b float(bias[b] + sum_{d in b} codes[d] * (k_r[d] + 128)) * scales[b] * ks_r[group(b)]
  // (the integer sum exact), then the online-softmax step of attend_tile,
  // with each value row as p_r * vs_r[group] * v_r, the weights quantized
  // and the product summed in integers (kQ8WeightMax). The same determinism as
  // attend_tile: a head's result depends on its q, its state, lo, hi and
  // those rows only. scratch: attend_tile_q8_scratch_floats(n_q, head_dim).
  // (The value product in integers: kQ8WeightMax.)
  void (*attend_tile_q8)(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const QueryQ8& q, int n_q,
                         int head_dim, int lo, int hi, float* m, float* l, float* acc, float* scratch);
  // attend_tile_q8 for several query positions at once (prefill): the
  // tile's K and V rows (the union of the positions' [lo, hi)) are read and
  // rearranged once for all of them; each position's heads get the same bits
  // as attend_tile_q8 on that position alone. scratch:
  // attend_tile_q8_scratch_floats(pos.n * n_q, head_dim).
  void (*attend_tile_q8_positions)(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const QueryQ8& q,
                                   const TilePositions& pos, int n_q, int head_dim, float* m, float* l, float* acc,
                                   float* scratch);
  // attend_tile over F16 K and V read in place (f16_tile_supported), the
  // tile as attend_tile_q8's and q, scale as attend_tile's: the same
  // arithmetic as dequantizing the rows and calling attend_tile, without
  // the f32 copy of the tile (each value row converted once for the n_q
  // heads). Null in sets without it (the caller dequantizes). scratch: n_q *
  // kAttentionTileRows floats. next: rows to prefetch (as
  // TilePositions::next), spread over the call's value rows.
  void (*attend_tile_f16)(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const float* q, int n_q,
                          int head_dim, float scale, int lo, int hi, float* m, float* l, float* acc, float* scratch,
                          const TilePrefetch& next);
  // attend_tile_q8_positions issues TilePositions::next's prefetches, spread
  // over its steps (TilePrefetchSpread; AVX2 and AVX-512); else the caller
  // prefetches those rows itself before the call (scalar). attend_tile_f16,
  // where a set has it, always spreads its `next`.
  bool q8_spreads_prefetch;
  // attend_tile_q8_positions reads INT8 keys in key column blocks
  // (KvHeadRows::key_blocks) in place (AVX-512); false: rows only.
  bool q8_reads_key_blocks = false;
  // attend_tile_q8_positions takes INT8 values in value quads
  // (KvHeadRows::value_quads), in place where it can (AVX-512); false: rows only.
  bool q8_reads_value_quads = false;
  // attend_tile_q8_positions's call over INT4 values in rows and INT4 or
  // INT8 keys (q4_tile_supported; see above): null in sets without it (the
  // caller dequantizes each tile). scratch: attend_tile_q4_scratch_floats.
  void (*attend_tile_q4_positions)(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const QueryQ8& q,
                                   const TilePositions& pos, int n_q, int head_dim, float* m, float* l, float* acc,
                                   float* scratch) = nullptr;
  // attend_tile_q4_positions reads INT4 keys in key column blocks and INT4
  // values in nibble quads (KvHeadRows::key_blocks / value_quads at bits 4)
  // in place (AVX-512 with VBMI); false: INT4 rows only (tiled_attention.cc
  // turns a tile back into rows first).
  bool q4_reads_blocks = false;
  // Per-token group quantization, the same bytes as kv_quant.h's
  // quantize_int8_groups / quantize_int4_groups (the scales computed the
  // same way, the codes rounded to nearest even by the vector unit instead
  // of the magic-number sum); group % 16 == 0. Null in sets without it (the
  // scalar code in kv_quant.cc runs).
  void (*quantize_int8)(const float* x, int64_t n, int group, int8_t* codes, uint16_t* scales) = nullptr;
  void (*quantize_int4)(const float* x, int64_t n, int group, uint8_t* codes, uint16_t* scales,
                        uint16_t* mins) = nullptr;
  // quantize_query_q8 of n_heads consecutive heads (head h at q + h *
  // head_dim; its codes, scales and biases as QueryQ8 lays them out): the
  // same bytes and floats as the scalar function, head by head. Null in
  // sets without it (the scalar function runs per head).
  void (*quantize_queries_q8)(const float* q, int64_t n_heads, int head_dim, float scale, int8_t* codes,
                              float* scales, int32_t* bias) = nullptr;
};

// True when attend_tile_f16 takes these rows: F16 keys and values, head_dim a
// multiple of 16 up to 128.
inline bool f16_tile_supported(const KvHeadRows& k, const KvHeadRows& v, int head_dim) {
  return k.bits == 16 && v.bits == 16 && head_dim % 16 == 0 && head_dim <= 128;
}

// The most components affine_u8_rows sums (its sums stay below 2^24).
inline constexpr int kAffineU8MaxK = 512;

// The set for active_simd_level(), chosen once.
const KvKernels& kv_kernels();

// Per-ISA sets. AVX2 kernels call the scalar ones below for groups that are
// not a multiple of 8 (Hadamard: n < 8), so every set handles every valid input.
KvKernels kv_kernels_scalar();
KvKernels kv_kernels_avx2();
// The AVX2 set's in-place INT8 tile step (kv_kernels_q8_avx2.cc): integer
// products by vpmaddwd, exact as the scalar's.
void attend_tile_q8_avx2(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const QueryQ8& q, int n_q,
                         int head_dim, int lo, int hi, float* m, float* l, float* acc, float* scratch);
void attend_tile_q8_positions_avx2(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const QueryQ8& q,
                                   const TilePositions& pos, int n_q, int head_dim, float* m, float* l, float* acc,
                                   float* scratch);
void attend_tile_q4_positions_avx2(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const QueryQ8& q,
                                   const TilePositions& pos, int n_q, int head_dim, float* m, float* l, float* acc,
                                   float* scratch);
// The AVX2 set with affine_rows at 16 lanes and the attention tile steps
// (attend_tile, the in-place INT8 / F16 ones) at 16 lanes with VNNI
// (kv_kernels_avx512.cc).
KvKernels kv_kernels_avx512();

float dot_int8_scalar(const float* q, const int8_t* codes, const uint16_t* scales, int64_t n, int group);
float dot_int4_scalar(const float* q, const uint8_t* codes, const uint16_t* scales, const uint16_t* mins,
                      int64_t n, int group);
void axpy_int8_scalar(float p, const int8_t* codes, const uint16_t* scales, float* out, int64_t n, int group);
void axpy_int4_scalar(float p, const uint8_t* codes, const uint16_t* scales, const uint16_t* mins, float* out,
                      int64_t n, int group);
void dequantize_int8_scalar(const int8_t* codes, const uint16_t* scales, int64_t n, int group, float* out);
void dequantize_int4_scalar(const uint8_t* codes, const uint16_t* scales, const uint16_t* mins, int64_t n, int group,
                            float* out);
void hadamard_rows_scalar(float* x, int64_t n_vectors, int n);
void affine_rows_scalar(const float* a, int64_t lda, int64_t n, int k, const float* b, int m, const float* bias,
                        float* c, int64_t ldc);
void affine_u8_rows_scalar(const uint8_t* a, int64_t lda, int64_t n, int k, const int8_t* b, int m,
                           const float* scale, const float* bias, float* c, int64_t ldc);
void dequantize_head_rows_scalar(const KvHeadRows& h, int64_t first_row, int64_t n_rows, int head_dim, float* out);
void attend_tile_scalar(const float* k, int64_t k_stride, const float* v, int64_t v_stride, const float* q, int n_q,
                        int head_dim, float scale, int lo, int hi, float* m, float* l, float* acc, float* scratch);
void attend_tile_q8_scalar(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const QueryQ8& q, int n_q,
                           int head_dim, int lo, int hi, float* m, float* l, float* acc, float* scratch);
void attend_tile_q8_positions_scalar(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const QueryQ8& q,
                                     const TilePositions& pos, int n_q, int head_dim, float* m, float* l, float* acc,
                                     float* scratch);
void attend_heads_scalar(const KvHeadRows& k, const KvHeadRows& v, const float* q, int n_q, int head_dim, float scale,
                         int64_t n_ctx, float* scratch, float* out);

}  // namespace baton::kv_kernels_impl
