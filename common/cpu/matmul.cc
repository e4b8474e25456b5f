#include "common/cpu/matmul.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <vector>

#include "common/cpu/matmul_kernels.h"
#include "common/util/check.h"

namespace baton {
namespace {

using cpu_kernels::MatmulProblem;

struct MatmulKernels {
  cpu_kernels::MatmulTileFn tile;         // F32/F16/BF16, Q4_0, Q8_0
  // matmul_decode_order's tile for the same types; null: `tile` token by token.
  cpu_kernels::MatmulTileFn decode_tile;
  cpu_kernels::MatmulTileFn kquant_tile;  // Q4_K, Q5_K, Q6_K
  cpu_kernels::MatmulTileFn legacy_tile;  // Q5_0, Q4_1, Q5_1 (AVX2 kernel at the AVX-512 level too)
  cpu_kernels::QuantizeBlocksFn quantize_blocks;
  cpu_kernels::QuantizeSplitFn quantize_split;
  cpu_kernels::QuantizeQ8KFn quantize_q8_k;
  cpu_kernels::QuantizeQ8KSplitFn quantize_q8_k_split;
  // The prefill GEMM over packed panels (Q4_0 / Q8_0 from kPanelMinTokens
  // tokens on), and the xu it reads; null where the ISA has none.
  void (*panel_tile)(const MatmulProblem&, int64_t, int64_t, int64_t, int64_t, uint8_t*) = nullptr;
  void (*offset_quants)(const int8_t*, uint8_t*, int64_t) = nullptr;
  // FloatMatmul::kExact prefill of F16 / BF16 / F32 weights over f32 panels.
  void (*f32_panel_tile)(const MatmulProblem&, int64_t, int64_t, int64_t, int64_t, uint8_t*) = nullptr;
  // Decode (and decode-order) tile over Q4_0 weights packed at load, and
  // the block-major x it reads.
  cpu_kernels::MatmulTileFn packed_decode_tile = nullptr;
  void (*packed_activations)(const int8_t*, const float*, int64_t, int64_t, int64_t, int8_t*, int32_t*,
                             float*) = nullptr;
  // Every call over Q4_K / Q5_K / Q6_K weights packed at load (AVX2 only:
  // the AVX-512 level's K-quant kernels read the GGUF rows), x as Q8_K (plus
  // xsums32 for Q4_K / Q5_K).
  cpu_kernels::MatmulTileFn packed_q4_k_tile = nullptr;
  // Every call over Q8_0 weights packed at load (AVX2 only: the AVX-512
  // level keeps its panels and decode tile), x block-major as for Q4_0.
  cpu_kernels::MatmulTileFn packed_q8_0_tile = nullptr;
  cpu_kernels::MatmulTileFn packed_q5_k_tile = nullptr;
  cpu_kernels::MatmulTileFn packed_q6_k_tile = nullptr;
  // quantize_split and packed_activations of one token in one pass, or null.
  void (*packed_quantize)(const float*, int64_t, int64_t, int64_t, int8_t*, float*, int8_t*, int32_t*,
                          float*) = nullptr;
  // The block-major form alone, blocks [b_begin, b_end) of every token, or
  // null (quantize_q8_0_block_major_avx512).
  void (*block_major_quantize)(const float*, int64_t, int64_t, int64_t, int64_t, int8_t*, int32_t*,
                               float*) = nullptr;

  // The packed K-quant tile for `type`, or null (not a K-quant, or none here).
  cpu_kernels::MatmulTileFn packed_kquant_tile(GgmlType type) const {
    switch (type) {
      case GgmlType::kQ4_K: return packed_q4_k_tile;
      case GgmlType::kQ5_K: return packed_q5_k_tile;
      case GgmlType::kQ6_K: return packed_q6_k_tile;
      default: return nullptr;
    }
  }
};

const MatmulKernels& kernels_for(SimdLevel level) {
  namespace k = cpu_kernels;
  static const MatmulKernels kScalar{k::matmul_tile_scalar,          nullptr,
                                     k::kquant_tile_scalar,          k::legacy_tile_scalar,
                                     k::quantize_q8_0_scalar,        k::quantize_q8_0_split_scalar,
                                     k::quantize_q8_k_scalar,        k::quantize_q8_k_split_scalar};
  static const MatmulKernels kAvx2{k::matmul_tile_avx2,          nullptr,
                                   k::kquant_tile_avx2,          k::legacy_tile_avx2,
                                   k::quantize_q8_0_avx2,        k::quantize_q8_0_split_avx2,
                                   k::quantize_q8_k_avx2,        k::quantize_q8_k_split_avx2,
                                   nullptr,                      nullptr,
                                   k::f32_panel_tile_avx2,       k::packed_decode_tile_avx2,
                                   k::packed_activations_avx2,   k::packed_q4_k_tile_avx2,
                                   k::packed_q8_0_tile_avx2,     k::packed_q5_k_tile_avx2,
                                   k::packed_q6_k_tile_avx2};
  static const MatmulKernels kAvx512{k::matmul_tile_avx512,          k::decode_tile_avx512,
                                     k::kquant_tile_avx512,          k::legacy_tile_avx2,
                                     k::quantize_q8_0_avx512,        k::quantize_q8_0_split_avx512,
                                     k::quantize_q8_k_avx512,        k::quantize_q8_k_split_avx512,
                                     k::panel_tile_avx512,           k::offset_quants_avx512,
                                     k::f32_panel_tile_avx512,       k::packed_decode_tile_avx512,
                                     k::packed_activations_avx2,     nullptr,
                                     nullptr,                        nullptr,
                                     nullptr,                        k::quantize_q8_0_packed_avx512,
                                     k::quantize_q8_0_block_major_avx512};
  BATON_CHECK(level <= best_simd_level(), "SIMD level not supported by this CPU");
  switch (level) {
    case SimdLevel::kAvx512: return kAvx512;
    case SimdLevel::kAvx2: return kAvx2;
    case SimdLevel::kScalar: break;
  }
  return kScalar;
}

// What x becomes before the integer dot products of a weight type.
enum class ActivationFormat {
  kFloat,         // F32 / F16 / BF16 weights: x as is
  kQ8_0,          // Q4_0 / Q8_0: Q8_0 quants and scales
  kQ8_0WithSums,  // Q5_0 / Q4_1 / Q5_1: Q8_0 plus the sum of quants per block
  kQ8_K,          // Q4_K / Q5_K / Q6_K: Q8_K quants, scales and sums per 16
};

ActivationFormat activation_format(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ8_0: return ActivationFormat::kQ8_0;
    case GgmlType::kQ5_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1: return ActivationFormat::kQ8_0WithSums;
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K: return ActivationFormat::kQ8_K;
    default: return ActivationFormat::kFloat;
  }
}

// Elements and bytes per block of every weight type matmul takes.
struct BlockShape {
  int64_t elements;
  int64_t bytes;
};

BlockShape block_shape(GgmlType type) {
  // Every stored weight type the loader accepts (not Q8_K: activations only).
  if (!ggml_type_supported(static_cast<uint32_t>(type))) return {0, 0};  // check_matrix rejects it
  return {ggml_block_elements(type), ggml_block_bytes(type)};
}

cpu_kernels::MatmulTileFn tile_for(const MatmulKernels& kernels, ActivationFormat format) {
  switch (format) {
    case ActivationFormat::kQ8_K: return kernels.kquant_tile;
    case ActivationFormat::kQ8_0WithSums: return kernels.legacy_tile;
    default: return kernels.tile;
  }
}

// Prepared activations of the calling thread, reused across calls (grow only).
struct ActivationScratch {
  std::vector<int8_t> q8_0_qs;     // [n_tokens, cols]
  std::vector<float> q8_0_d;       // [n_tokens, cols/32]
  std::vector<int16_t> q8_0_sums;  // [n_tokens, cols/32]
  std::vector<int8_t> q8_k_qs;     // [n_tokens, cols]
  std::vector<float> q8_k_d;       // [n_tokens, cols/256]
  std::vector<int16_t> q8_k_sums;  // [n_tokens, cols/16]
  std::vector<uint8_t> q8_0_xu;    // [n_tokens, cols]: q8_0_qs + 128, for the panel kernel
  std::vector<uint8_t> q8_k_xu;    // K-quant panels: [n_tokens, cols] q8_k_qs + 128
  std::vector<float> q8_k_xd32;    // K-quant panels: [n_tokens, cols/32] each 32's super-block scale
  std::vector<float> q8_k_xdsum;   // K-quant panels: [n_tokens, cols/32] d * sum of the 32 quants
  std::vector<uint8_t> bf16_x;     // [n_tokens, bf16_padded_cols(cols)] bf16, for FloatMatmul::kBf16
  std::vector<int8_t> q8_0_blocks_qs;   // packed Q4_0 / Q8_0: [cols/32, n_tokens, 32] q8_0_qs block-major
  std::vector<int32_t> q8_0_blocks_bias;  // [cols/32, n_tokens] -8 x the block's sum of quants (Q4_0's)
  std::vector<float> q8_0_blocks_d;     // [cols/32, n_tokens]
  std::vector<int16_t> q8_k_sums32;     // packed Q4_K / Q5_K: [n_tokens, cols/32] sums of q8_k_qs per 32
};
thread_local ActivationScratch t_scratch;
// The panel kernel's packed weights, per pool thread (panel_scratch_bytes(cols)).
thread_local std::vector<uint8_t> t_panel;

// Rows per parallel task. Decode streams weights: a few KiB per task keeps the
// split even while rows stay contiguous per thread. Prefill tiles are 4 rows.
constexpr int64_t kDecodeRowsPerTask = 32;
constexpr int64_t kPrefillRowsPerTask = 16;
constexpr int64_t kPrefillTokensPerTask = 16;
// Prefill calls of two tokens or more run Q4_0 / Q8_0 through the panel
// kernel, whatever their size: a token's outputs must not depend on the
// micro-batch it falls in (the same prompt gives the same KV whether it
// came in one chunk or several, on the cloud or on the edge). One token is
// a decode step (the decode tile), as before.
constexpr int64_t kPanelMinTokens = 2;

// The packed Q4_0 AVX-512 decode's software prefetch, per vendor: the far
// one into L2 on Intel only. Intel
// (AVX-512 without AMX, 2026-12-05, BM_MatmulDecodeSequence, 2 threads, the
// strips stored apart): with the far prefetch 0.89-0.95 of the best read,
// 0.84-0.87 without. AMD Zen 5 (2026-12-06, the same benchmark, 8192 x 2048):
// with the strips stored apart the far prefetch cost a third of the stream
// in the host's fast phases (35.3-35.9 GB/s of weights against 53.4-60.3,
// read pass 84-87 GB/s); over the pairs (matmul_kernels.h), near 16 blocks
// without it streamed 0.71-0.83 of a fast phase's read and 0.87-0.88 of a
// slow one's (~54 GB/s), near 8 0.57-0.79 and 0.90-0.92, no software
// prefetch 0.55 and 0.90-0.91.
// The near one: 12 blocks on AMD, 16 elsewhere, unless set_packed_near_blocks
// says otherwise (-1: the vendor's). Zen 5 (2026-12-07, BM_MatmulDecodeNearPair:
// two distances in alternation in one run, so both see the host's phase;
// medians of 60 pairs): in runs in its slow phases (best read pass ~48-53
// GB/s) 12 read at 1.021-1.030x of 16's rate (3 runs) and 8 at 1.028-1.044x
// (3), in runs in its fast ones (~80 GB/s) 12 at 1.000-1.008x (4) and 8 at
// 0.941-0.955x (5): 12 loses nowhere. (Intel: 8 to 64 measured the same
// within the noise.)
// Non-temporal (NTA) on AMD for calls of up to 4 tokens, T0 elsewhere
// (set_packed_near_nta): on Zen 5 (the same benchmark, 12 blocks both ways)
// NTA read at 1.008-1.034x of T0's rate in 10 runs, slow phases and fast
// (the least, 1.008x, in a fast one); T1 at 0.90-1.00x. Those arms are two
// instances of the kernel (packed_kernel's kNearNta), and two instances can
// part by a few percent on code layout alone (README, "Forty-second
// session"): with both hints behind a run-time switch in one instance
// (a temporary build) NTA still read at 1.012-1.028x of T0 (3 runs).
// (A line read once need not pass through L2 and L3 on its way out: AMD's
// L3 is filled by L2's evictions.) Not measured on Intel, where NTA fills L1
// only: T0 stays.
// Loads one block ahead in one-token calls on AMD (set_packed_load_ahead):
// the kernel's demand loads of block b + 1 go out before block b's
// products, so the core has them in flight while it computes, as a plain
// reader's run of loads has (the prefetches alone left the stream at
// 0.78-0.87 of the read pass in the Zen 5 host's fast stretches, its loads
// alone without arithmetic 0.89-0.91, the reader ~1.0). Zen 5 (2026-12-07,
// both ways behind this switch in one process, medians of 60 pairs):
// BM_MatmulDecodeNearPair/a:12/a_nta:1/a_ahead:0/b:12/b_nta:1/b_ahead:1
// 1.069x and 1.078x (fast stretches 1.093x and 1.104x, slow 1.050x and
// 1.051x); whole decode steps (BM_DecodeStepNearPair, 150 pairs) 1.035x,
// 1.037x and 1.040x (a first form of the kernel: 1.100x, 1.102x and
// 1.022x). Not measured on Intel: its kernel stays as it was. Since the
// 49th session the kernel behind this switch walks whole pairs of strips
// with one pointer each and loads a pair's next block right after its
// products (matmul_packed_avx512.cc pairs_stream; 1.15-1.29x the kernel
// above in one stream, 1.13x with two, 1.05-1.09x in whole steps); pairs that
// are not whole (a matrix's last 16-31 rows, tasks from an odd strip) take
// packed_kernel.
std::atomic<int> g_packed_near_blocks{-1};
std::atomic<int> g_packed_near_nta{-1};
std::atomic<int> g_packed_load_ahead{-1};
// Two streams a thread in one-token calls on AMD (set_packed_two_streams):
// the call's row tasks go in pairs, task k with task k + half, and a
// thread multiplies both pairs of strips block by block side by side
// (packed_two_pairs_avx512), so each thread keeps two places of the
// weights in flight instead of one (each core's own limit on the lines it
// has in flight is what held a fast phase's stream to 0.71-0.79 of the
// read pass inside its calls: README, "Forty-eighth session"). Zen 5
// (2026-12-07, BM_MatmulDecodeSequence, 2 threads, both ways in
// alternation, a temporary switch): 8192 x 2048 0.94 / 1.04 / 0.85 of the
// read pass beside each run against 0.75 / 0.89 / 0.78, 2048 x 2048 0.92 /
// 0.95 / 0.84 against 0.72 / 0.81 / 0.69. Not measured on Intel: off there.
std::atomic<int> g_packed_two_streams{-1};
int vendor_near_blocks() { return cpu_features().amd ? 12 : 16; }
void set_packed_prefetch(MatmulProblem& p) {
  p.packed_far_prefetch = !cpu_features().amd;
  p.packed_near_blocks = packed_near_blocks();
  p.packed_near_nta = packed_near_nta();
  p.packed_load_ahead = packed_load_ahead();
}

// Calls of at least this many tokens quantize x block by block when only
// block-major readers need it (prepare_activations): one quantize_16_blocks
// per block and 16 tokens.
constexpr int64_t kBlockMajorMinTokens = 16;
// Most matrices one grouped call takes (Q/K/V is three, gate/up two).
constexpr size_t kMaxGroupMatrices = 8;

// F32 / F16 / BF16 weights through the plain tile in prefill (the scalar
// level; AVX2 and AVX-512 run f32 panels): calls of more tokens run in
// blocks of this many, block after block (TaskSplit::tokens_outer). Each row
// tile reads its tokens' f32 activations whole (cols x 4 bytes each); with
// 512 tokens of 8192 columns those are 16 MiB, streamed again for every 16
// rows. Measured on the AVX2 tile before AVX2 had panels (baton_microbench
// BM_OursPrefill, 2048 x 8192 at 512 tokens): 111.7 vs 50.6 GFLOP/s. A
// token's outputs are the same bits in any block (each (row, token) is its
// own chain of FMAs).
constexpr int64_t kFloatTokenBlock = 64;

// How one matrix's output is cut into parallel tasks.
struct TaskSplit {
  int64_t rows_per_task;
  int64_t tokens_per_task;
  int64_t row_tasks;
  int64_t token_tasks;
  // Task order: false, the token tasks of a row task are consecutive; true,
  // the row tasks of a token task are (a token block's activations stay in
  // cache while every row goes by).
  bool tokens_outer = false;
  int64_t tasks() const { return row_tasks * token_tasks; }
  // Rows and tokens of task `local` (0 <= local < tasks()).
  int64_t row_task(int64_t local) const { return tokens_outer ? local % row_tasks : local / token_tasks; }
  int64_t token_task(int64_t local) const { return tokens_outer ? local / row_tasks : local % token_tasks; }
};

TaskSplit split_for(int64_t rows, int64_t n_tokens, int n_threads) {
  TaskSplit t{};
  t.rows_per_task = n_tokens == 1 ? kDecodeRowsPerTask : kPrefillRowsPerTask;
  t.row_tasks = (rows + t.rows_per_task - 1) / t.rows_per_task;
  t.tokens_per_task = n_tokens;
  // Few rows, many tokens (e.g. a small projection during prefill): split tokens too.
  if (t.row_tasks < 2 * n_threads && n_tokens > kPrefillTokensPerTask) t.tokens_per_task = kPrefillTokensPerTask;
  // Small decode matrices: smaller row chunks so every thread gets work.
  if (n_tokens == 1 && t.row_tasks < n_threads) {
    t.rows_per_task = std::max<int64_t>(4, (rows + n_threads - 1) / n_threads);
    t.row_tasks = (rows + t.rows_per_task - 1) / t.rows_per_task;
  }
  t.token_tasks = (n_tokens + t.tokens_per_task - 1) / t.tokens_per_task;
  return t;
}

// The plain tile's split for float weights: split_for's, in token blocks of
// kFloatTokenBlock (tokens outer) when the call has more.
TaskSplit float_split(int64_t rows, int64_t n_tokens, int n_threads) {
  TaskSplit t = split_for(rows, n_tokens, n_threads);
  if (n_tokens > kFloatTokenBlock && t.tokens_per_task > kFloatTokenBlock) {
    t.tokens_per_task = kFloatTokenBlock;
    t.token_tasks = (n_tokens + kFloatTokenBlock - 1) / kFloatTokenBlock;
    t.tokens_outer = true;
  }
  return t;
}

// Decode over packed weights: tasks of whole 16-row strips (32 rows, as
// split_for's decode tasks; fewer when the matrix is small, so every thread
// gets work).
TaskSplit packed_decode_split(int64_t rows, int n_threads) {
  constexpr int64_t kStrip = cpu_kernels::kPackedStripRows;
  TaskSplit t{};
  t.rows_per_task = kDecodeRowsPerTask;
  if ((rows + t.rows_per_task - 1) / t.rows_per_task < n_threads) {
    t.rows_per_task = std::max<int64_t>(kStrip, ((rows + n_threads - 1) / n_threads + kStrip - 1) / kStrip * kStrip);
  }
  t.row_tasks = (rows + t.rows_per_task - 1) / t.rows_per_task;
  t.tokens_per_task = 1;  // decode_order runs all tokens in each row task; see matmul_group
  t.token_tasks = 1;
  return t;
}

// The panel kernel's split: panels of kPanelRows rows with every token (the
// packing is paid once per task); tokens are cut only when there are too few
// panels to keep every thread busy.
TaskSplit panel_split(int64_t rows, int64_t n_tokens, int n_threads) {
  TaskSplit t{};
  t.rows_per_task = cpu_kernels::kPanelRows;
  t.row_tasks = (rows + t.rows_per_task - 1) / t.rows_per_task;
  t.tokens_per_task = n_tokens;
  if (t.row_tasks < 4 * n_threads && n_tokens >= 4 * kPanelMinTokens) t.tokens_per_task = (n_tokens + 3) / 4;
  t.token_tasks = (n_tokens + t.tokens_per_task - 1) / t.tokens_per_task;
  return t;
}

void check_matrix(const WeightMatrix& w, int64_t n_tokens) {
  const BlockShape block = block_shape(w.type);
  BATON_CHECK(block.elements > 0, "matmul: unsupported weight type");
  BATON_CHECK(w.rows >= 0 && w.cols >= 0 && n_tokens >= 0);
  BATON_CHECK(w.cols % block.elements == 0, "matmul: cols must be a multiple of the weight type's block");
}

// Runs fn(t) for every token, on the pool when there are enough tokens.
template <typename Fn>
void for_each_token(int64_t n_tokens, ThreadPool* pool, Fn fn) {
  auto run = [&](int64_t t_begin, int64_t t_end) {
    for (int64_t t = t_begin; t < t_end; ++t) fn(t);
  };
  if (pool != nullptr && n_tokens >= 8) {
    pool->parallel_for(n_tokens, std::ref(run));
  } else {
    run(0, n_tokens);
  }
}

template <typename T>
T* grown(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}

// x [n_tokens, cols] in the quantized formats a group needs (pointers into
// the calling thread's scratch; nullptr for formats not needed).
struct PreparedActivations {
  const int8_t* q8_0_qs = nullptr;
  const float* q8_0_d = nullptr;
  const int16_t* q8_0_sums = nullptr;
  const int8_t* q8_k_qs = nullptr;
  const float* q8_k_d = nullptr;
  const int16_t* q8_k_sums = nullptr;
  const uint8_t* q8_0_xu = nullptr;
  const uint8_t* q8_k_xu = nullptr;
  const float* q8_k_xd32 = nullptr;
  const float* q8_k_xdsum = nullptr;
  const uint8_t* bf16_x = nullptr;
  const int8_t* q8_0_blocks_qs = nullptr;
  const int32_t* q8_0_blocks_bias = nullptr;
  const float* q8_0_blocks_d = nullptr;
  const int16_t* q8_k_sums32 = nullptr;
};

// Fills `prepared` with every format `needed` (indexed by ActivationFormat) asks for.
void prepare_activations(const MatmulKernels& kernels, const bool (&needed)[4], bool panel, bool panel_sums,
                         bool block_major_x, bool row_major_q8_0, bool packed_sums32, bool bf16, const float* x,
                         int64_t n_tokens, int64_t cols, ThreadPool* pool, PreparedActivations* prepared) {
  ActivationScratch& scratch = t_scratch;
  if (bf16) {
    const int64_t row_bytes = cpu_kernels::bf16_padded_cols(cols) * 2;
    uint8_t* out = grown(scratch.bf16_x, n_tokens * row_bytes);
    for_each_token(n_tokens, pool, [&](int64_t t) {
      cpu_kernels::bf16_activations_avx512bf16(x + t * cols, cols, out + t * row_bytes);
    });
    prepared->bf16_x = out;
  }
  const bool q8_0_sums = needed[static_cast<int>(ActivationFormat::kQ8_0WithSums)];
  // Only block-major readers (packed Q4_0 weights) in a call of many tokens:
  // the quants go straight into the block-major arrays, block by block,
  // with no row-major copy. Token by token, each token's blocks landed 32
  // bytes apart from the previous token's, one line per block of every
  // token: the copy was half of the prefill's activation work (rdtsc around
  // it, 512 tokens: 117.6 against 57.1 Mcycles over the call with the copy
  // knocked out).
  if (block_major_x && !row_major_q8_0 && kernels.block_major_quantize != nullptr && n_tokens >= kBlockMajorMinTokens) {
    const int64_t n_blocks = cols / kQK8_0;
    int8_t* bqs = grown(scratch.q8_0_blocks_qs, n_tokens * cols);
    int32_t* bias = grown(scratch.q8_0_blocks_bias, n_tokens * n_blocks);
    float* bd = grown(scratch.q8_0_blocks_d, n_tokens * n_blocks);
    auto run = [&](int64_t begin, int64_t end) {
      kernels.block_major_quantize(x, cols, n_tokens, begin, end, bqs, bias, bd);
    };
    if (pool != nullptr) {
      pool->parallel_for(n_blocks, std::ref(run));
    } else {
      run(0, n_blocks);
    }
    prepared->q8_0_blocks_qs = bqs;
    prepared->q8_0_blocks_bias = bias;
    prepared->q8_0_blocks_d = bd;
  } else if (needed[static_cast<int>(ActivationFormat::kQ8_0)] || q8_0_sums || block_major_x) {
    int8_t* qs = grown(scratch.q8_0_qs, n_tokens * cols);
    float* d = grown(scratch.q8_0_d, n_tokens * cols / kQK8_0);
    int16_t* sums = q8_0_sums ? grown(scratch.q8_0_sums, n_tokens * cols / kQK8_0) : nullptr;
    uint8_t* xu = panel ? grown(scratch.q8_0_xu, n_tokens * cols) : nullptr;
    // The packed Q4_0 / Q8_0 kernels' block-major copy (block b, token t at b * n_tokens + t).
    const int64_t n_blocks = cols / kQK8_0;
    int8_t* bqs = block_major_x ? grown(scratch.q8_0_blocks_qs, n_tokens * cols) : nullptr;
    int32_t* bias = block_major_x ? grown(scratch.q8_0_blocks_bias, n_tokens * n_blocks) : nullptr;
    float* bd = block_major_x ? grown(scratch.q8_0_blocks_d, n_tokens * n_blocks) : nullptr;
    for_each_token(n_tokens, pool, [&](int64_t t) {
      int8_t* token_qs = qs + t * cols;
      if (bqs != nullptr && kernels.packed_quantize != nullptr) {
        kernels.packed_quantize(x + t * cols, cols, n_tokens, t, token_qs, d + t * n_blocks, bqs, bias, bd);
      } else {
        kernels.quantize_split(x + t * cols, token_qs, d + t * n_blocks, cols);
        if (bqs != nullptr) kernels.packed_activations(token_qs, d + t * n_blocks, cols, n_tokens, t, bqs, bias, bd);
      }
      if (xu != nullptr) kernels.offset_quants(token_qs, xu + t * cols, cols);
      if (sums == nullptr) return;
      for (int64_t b = 0; b < cols / kQK8_0; ++b) {
        int sum = 0;
        for (int i = 0; i < kQK8_0; ++i) sum += token_qs[b * kQK8_0 + i];
        sums[t * cols / kQK8_0 + b] = static_cast<int16_t>(sum);
      }
    });
    prepared->q8_0_qs = qs;
    prepared->q8_0_d = d;
    prepared->q8_0_sums = sums;
    prepared->q8_0_blocks_qs = bqs;
    prepared->q8_0_blocks_bias = bias;
    prepared->q8_0_blocks_d = bd;
    prepared->q8_0_xu = xu;
  }
  if (needed[static_cast<int>(ActivationFormat::kQ8_K)]) {
    int8_t* qs = grown(scratch.q8_k_qs, n_tokens * cols);
    float* d = grown(scratch.q8_k_d, n_tokens * cols / kQK_K);
    int16_t* sums = grown(scratch.q8_k_sums, n_tokens * cols / 16);
    // K-quant panels: the same Q8_K activations (llama.cpp's), spread per
    // 32-element sub-block: quants + 128, the super-block's scale, and scale
    // times the sub-block's sum of quants (two of Q8_K's sums per 16).
    const int64_t blocks = cols / kQK8_0;
    uint8_t* xu = panel_sums ? grown(scratch.q8_k_xu, n_tokens * cols) : nullptr;
    float* xd32 = panel_sums ? grown(scratch.q8_k_xd32, n_tokens * blocks) : nullptr;
    float* xdsum = panel_sums ? grown(scratch.q8_k_xdsum, n_tokens * blocks) : nullptr;
    // Packed Q4_K / Q5_K: the sums per 32 (a sub-block's, for its min),
    // exact in int16 (at most 32 x 127).
    int16_t* sums32 = packed_sums32 ? grown(scratch.q8_k_sums32, n_tokens * blocks) : nullptr;
    for_each_token(n_tokens, pool, [&](int64_t t) {
      kernels.quantize_q8_k_split(x + t * cols, qs + t * cols, d + t * cols / kQK_K, sums + t * cols / 16, cols);
      if (sums32 != nullptr) {
        const int16_t* s16 = sums + t * cols / 16;
        for (int64_t b = 0; b < blocks; ++b) {
          sums32[t * blocks + b] = static_cast<int16_t>(s16[2 * b] + s16[2 * b + 1]);
        }
      }
      if (xu == nullptr) return;
      kernels.offset_quants(qs + t * cols, xu + t * cols, cols);
      for (int64_t b = 0; b < blocks; ++b) {
        const float scale = d[t * cols / kQK_K + b * kQK8_0 / kQK_K];
        const int16_t* pair = sums + t * cols / 16 + 2 * b;
        xd32[t * blocks + b] = scale;
        xdsum[t * blocks + b] = scale * static_cast<float>(pair[0] + pair[1]);
      }
    });
    prepared->q8_k_xu = xu;
    prepared->q8_k_xd32 = xd32;
    prepared->q8_k_xdsum = xdsum;
    prepared->q8_k_qs = qs;
    prepared->q8_k_d = d;
    prepared->q8_k_sums = sums;
    prepared->q8_k_sums32 = sums32;
  }
}

// Runs matrices that share one input as one parallel loop: x is prepared
// once per activation format the matrices need (Q8_0 for Q4_0/Q8_0, Q8_K for
// the K-quants, ...; a Q4_K wq beside a Q6_K wv share one Q8_K copy) and the
// tasks of all matrices are concatenated, matrix after matrix, so each thread
// streams a contiguous run of rows and the pool is woken once.
// decode_order: every token's row of y is computed exactly as a one-token
// call computes it (the decode kernel over the decode row split), token after
// token inside each row task, so the task's weights come from memory once and
// from cache for the other tokens.
void matmul_group(SimdLevel level, std::span<const WeightMatrix* const> ws, const float* x, int64_t n_tokens,
                  std::span<float* const> ys, ThreadPool* pool, bool decode_order, FloatMatmul float_matmul) {
  BATON_CHECK(ws.size() == ys.size() && !ws.empty() && ws.size() <= kMaxGroupMatrices,
              "matmul: one output per matrix, 1..8 matrices");
  // Prefill calls (2+ tokens) of Q4_0 / Q8_0 / Q4_K / Q5_K / Q6_K weights go
  // through the panel kernel where the ISA has one, with the activations
  // their other kernels take (Q8_0; Q8_K for the K-quants, spread per 32).
  const MatmulKernels& kernels = kernels_for(level);
  const bool panel_possible = !decode_order && kernels.panel_tile != nullptr && n_tokens >= kPanelMinTokens;
  auto in_panel = [&](GgmlType type) {
    return panel_possible && (type == GgmlType::kQ4_0 || type == GgmlType::kQ8_0 || type == GgmlType::kQ4_K ||
                              type == GgmlType::kQ5_K || type == GgmlType::kQ6_K);
  };
  // Q4_0 (AVX2, AVX-512) and Q8_0 (AVX2) packed at load: every call
  // (decode, decode order, prefill) takes the packed kernel of its type,
  // with x's Q8_0 quants, sums and scales block-major.
  auto packed_decode = [&](const WeightMatrix& w) {
    return w.packed != nullptr && ((w.type == GgmlType::kQ4_0 && kernels.packed_decode_tile != nullptr) ||
                                   (w.type == GgmlType::kQ8_0 && kernels.packed_q8_0_tile != nullptr));
  };
  // Q4_K / Q5_K / Q6_K packed at load (AVX2 level only; null packed K-quant
  // tiles elsewhere): every call takes the packed K-quant kernel, with x's
  // Q8_K quants.
  auto packed_kquant = [&](const WeightMatrix& w) {
    return w.packed != nullptr && kernels.packed_kquant_tile(w.type) != nullptr;
  };
  bool needed[4] = {};  // by ActivationFormat
  bool panel = false, panel_sums = false, block_major_x = false, packed_sums32 = false;
  bool row_major_q8_0 = false;  // a matrix that reads x's Q8_0 quants (or sums) row by row: panels, tiles
  for (const WeightMatrix* w : ws) {
    check_matrix(*w, n_tokens);
    BATON_CHECK(w->cols == ws[0]->cols, "matmul: grouped matrices share the input width");
    if (packed_kquant(*w)) {
      packed_sums32 = packed_sums32 || w->type != GgmlType::kQ6_K;  // the mins' sums per 32
      needed[static_cast<int>(ActivationFormat::kQ8_K)] = true;
      continue;
    }
    if (packed_decode(*w)) {
      block_major_x = true;
      needed[static_cast<int>(ActivationFormat::kQ8_0)] = true;
      continue;
    }
    const ActivationFormat format = activation_format(w->type);
    if (format == ActivationFormat::kQ8_0 || format == ActivationFormat::kQ8_0WithSums) row_major_q8_0 = true;
    if (in_panel(w->type) && format == ActivationFormat::kQ8_K) {
      needed[static_cast<int>(ActivationFormat::kQ8_K)] = true;
      panel_sums = true;
    } else if (in_panel(w->type)) {
      needed[static_cast<int>(ActivationFormat::kQ8_0)] = true;
      panel = true;
    } else {
      needed[static_cast<int>(format)] = true;
    }
  }
  int64_t total_rows = 0;
  for (const WeightMatrix* w : ws) total_rows += w->rows;
  if (n_tokens == 0 || total_rows == 0) return;
  const int n_threads = pool != nullptr ? pool->size() : 1;

  // Float weights in bf16 (FloatMatmul::kBf16): prefill calls, where the CPU has it.
  const bool bf16 = !decode_order && float_matmul == FloatMatmul::kBf16 && level == SimdLevel::kAvx512 &&
                    bf16_matmul_available() && n_tokens >= kPanelMinTokens &&
                    needed[static_cast<int>(ActivationFormat::kFloat)];
  PreparedActivations prepared;
  prepare_activations(kernels, needed, panel, panel_sums, block_major_x, row_major_q8_0, packed_sums32, bf16, x,
                      n_tokens, ws[0]->cols, pool, &prepared);

  MatmulProblem problems[kMaxGroupMatrices];
  cpu_kernels::MatmulTileFn tiles[kMaxGroupMatrices];
  cpu_kernels::MatmulTileFn decode_tiles[kMaxGroupMatrices];  // decode_order: several tokens at once, or null
  bool panels[kMaxGroupMatrices];  // matrix i runs through the panel kernel
  bool bf16s[kMaxGroupMatrices];    // matrix i runs through the bf16 panel kernel
  bool f32s[kMaxGroupMatrices];     // matrix i runs through the f32 panel kernel
  bool packeds[kMaxGroupMatrices];  // matrix i runs through the packed decode kernel
  TaskSplit splits[kMaxGroupMatrices];
  int64_t first_task[kMaxGroupMatrices + 1];  // task index where matrix i starts
  first_task[0] = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    const WeightMatrix& w = *ws[i];
    MatmulProblem& problem = problems[i];
    problem = MatmulProblem{};
    problem.type = w.type;
    problem.weights = static_cast<const uint8_t*>(w.data);
    const BlockShape block = block_shape(w.type);
    problem.row_bytes = w.cols / block.elements * block.bytes;
    problem.rows = w.rows;
    problem.cols = w.cols;
    problem.y = ys[i];
    problem.x = x;
    const bool packed_k = packed_kquant(w);
    packeds[i] = packed_decode(w) || packed_k;
    panels[i] = in_panel(w.type) && !packeds[i];
    if (packeds[i]) problem.packed = static_cast<const uint8_t*>(w.packed);
    set_packed_prefetch(problem);
    problem.xsums32 = prepared.q8_k_sums32;
    problem.xq_blocks = prepared.q8_0_blocks_qs;
    problem.xbias_blocks = prepared.q8_0_blocks_bias;
    problem.xd_blocks = prepared.q8_0_blocks_d;
    problem.n_tokens = n_tokens;
    const ActivationFormat format = activation_format(w.type);
    if (format == ActivationFormat::kQ8_K) {
      problem.xq = prepared.q8_k_qs;
      problem.xd = panels[i] ? prepared.q8_k_xd32 : prepared.q8_k_d;
      problem.xsums = prepared.q8_k_sums;
      problem.xu = prepared.q8_k_xu;
      problem.xdsum = prepared.q8_k_xdsum;
    } else if (format != ActivationFormat::kFloat) {
      problem.xq = prepared.q8_0_qs;
      problem.xd = prepared.q8_0_d;
      problem.xsums = prepared.q8_0_sums;
      problem.xu = prepared.q8_0_xu;
    }
    tiles[i] = tile_for(kernels, format);
    const cpu_kernels::MatmulTileFn packed_tile = packed_k                       ? kernels.packed_kquant_tile(w.type)
                                                  : w.type == GgmlType::kQ8_0 ? kernels.packed_q8_0_tile
                                                                              : kernels.packed_decode_tile;
    decode_tiles[i] = packeds[i] ? packed_tile : tiles[i] == kernels.tile ? kernels.decode_tile : nullptr;
    if (packeds[i]) tiles[i] = packed_tile;
    bf16s[i] = bf16 && format == ActivationFormat::kFloat;
    if (bf16s[i]) problem.xu = prepared.bf16_x;
    f32s[i] = !bf16s[i] && format == ActivationFormat::kFloat && !decode_order && kernels.f32_panel_tile != nullptr &&
              n_tokens >= kPanelMinTokens;
    splits[i] = packeds[i] && (decode_order || n_tokens < kPanelMinTokens) ? packed_decode_split(w.rows, n_threads)
                : packeds[i]                     ? panel_split(w.rows, n_tokens, n_threads)
                : panels[i] || bf16s[i] || f32s[i] ? panel_split(w.rows, n_tokens, n_threads)
                : format == ActivationFormat::kFloat && !decode_order ? float_split(w.rows, n_tokens, n_threads)
                                                   : split_for(w.rows, decode_order ? 1 : n_tokens, n_threads);
    first_task[i + 1] = first_task[i] + (w.rows == 0 ? 0 : splits[i].tasks());
  }
  const size_t n_matrices = ws.size();

  // Task = first_task[i] + local: TaskSplit::row_task / token_task of local.
  auto run_tasks = [&](int64_t begin, int64_t end) {
    size_t i = 0;
    while (first_task[i + 1] <= begin) ++i;
    for (int64_t task = begin; task < end; ++task) {
      while (task >= first_task[i + 1]) ++i;
      const TaskSplit& sp = splits[i];
      const int64_t local = task - first_task[i];
      const int64_t r0 = sp.row_task(local) * sp.rows_per_task;
      const int64_t r1 = std::min(r0 + sp.rows_per_task, problems[i].rows);
      if (decode_order) {
        if (decode_tiles[i] != nullptr) {
          decode_tiles[i](problems[i], r0, r1, 0, n_tokens);
        } else {
          for (int64_t t = 0; t < n_tokens; ++t) tiles[i](problems[i], r0, r1, t, t + 1);
        }
        continue;
      }
      const int64_t t0 = sp.token_task(local) * sp.tokens_per_task;
      const int64_t t1 = std::min(t0 + sp.tokens_per_task, n_tokens);
      if (panels[i]) {
        kernels.panel_tile(problems[i], r0, r1, t0, t1,
                           grown(t_panel, cpu_kernels::panel_scratch_bytes(problems[i].cols)));
      } else if (f32s[i]) {
        kernels.f32_panel_tile(problems[i], r0, r1, t0, t1,
                               grown(t_panel, cpu_kernels::f32_scratch_bytes(problems[i].cols)));
      } else if (bf16s[i]) {
        cpu_kernels::bf16_panel_tile_avx512bf16(problems[i], r0, r1, t0, t1,
                                                grown(t_panel, cpu_kernels::bf16_scratch_bytes(problems[i].cols)));
      } else {
        tiles[i](problems[i], r0, r1, t0, t1);
      }
    }
  };
  const int64_t n_tasks = first_task[n_matrices];
  if (n_tasks == 0) return;
  if (pool != nullptr && n_threads > 1) {
    // Work claimed as the threads go: on a shared machine a thread that
    // wakes late or loses its core does less instead of holding up the
    // others at the end of every matmul. Decode: each thread streams its
    // half of the rows front to back (one weight stream, as the bandwidth
    // reader's), and a thread done early takes the back half of what the
    // other has left (parallel_for_stealing), so they end within a task (32
    // rows) of each other. Fixed chunks of half a thread's share (the
    // dynamic hand-out before; finer chunks each start a cold stream and
    // measured slower) left the thread that ends first waiting for up to a
    // chunk: on the Intel AVX-512 host, 2 threads, the pool's idle share of
    // a decode step's samples fell from ~7% to ~5% (perf), the weight
    // stream of BM_MatmulDecodeSequence rose 1-7% (2048 x 2048 most; 2
    // alternating runs of 3) and bench decode moved within its noise.
    // Prefill: 1/(2 n_threads) of the tasks left, down to single tasks (~15
    // us and up), so the threads end within a task of each other; fixed
    // chunks of 1/16 of the call left one thread idle for up to ~3%.
    // One token over packed Q4_0 only, on the kernel that loads ahead:
    // two streams a thread (set_packed_two_streams), the pairs of tasks
    // handed out as single tasks were; a pair whose tasks are not both
    // whole 32-row pairs of strips runs them one after the other.
    bool two_streams = n_tokens == 1 && level == SimdLevel::kAvx512 && packed_two_streams() && n_tasks >= 2;
    for (size_t i = 0; two_streams && i < n_matrices; ++i) {
      two_streams = packeds[i] && ws[i]->type == GgmlType::kQ4_0 && problems[i].packed_load_ahead &&
                    !problems[i].packed_far_prefetch;
    }
    if (two_streams) {
      const int64_t half = (n_tasks + 1) / 2;
      auto whole_pair = [&](int64_t task, size_t* matrix, int64_t* r0) {
        size_t i = 0;
        while (task >= first_task[i + 1]) ++i;
        const TaskSplit& sp = splits[i];
        *matrix = i;
        *r0 = sp.row_task(task - first_task[i]) * sp.rows_per_task;
        return sp.rows_per_task == 2 * cpu_kernels::kPackedStripRows && *r0 + sp.rows_per_task <= problems[i].rows;
      };
      auto run_pairs = [&](int64_t begin, int64_t end) {
        for (int64_t k = begin; k < end; ++k) {
          size_t ia = 0, ib = 0;
          int64_t ra = 0, rb = 0;
          if (k + half < n_tasks && whole_pair(k, &ia, &ra) && whole_pair(k + half, &ib, &rb)) {
            cpu_kernels::packed_two_pairs_avx512(problems[ia], ra, problems[ib], rb);
            continue;
          }
          run_tasks(k, k + 1);
          if (k + half < n_tasks) run_tasks(k + half, k + half + 1);
        }
      };
      pool->parallel_for_stealing(half, std::ref(run_pairs));
    } else if (decode_order || n_tokens < kPanelMinTokens) {
      pool->parallel_for_stealing(n_tasks, std::ref(run_tasks));  // std::ref: no std::function allocation
    } else {
      pool->parallel_for_guided(n_tasks, 1, std::ref(run_tasks));
    }
  } else {
    run_tasks(0, n_tasks);
  }
}

}  // namespace

void set_packed_near_blocks(int blocks) { g_packed_near_blocks.store(blocks, std::memory_order_relaxed); }
int packed_near_blocks() {
  const int blocks = g_packed_near_blocks.load(std::memory_order_relaxed);
  return blocks >= 0 ? blocks : vendor_near_blocks();
}
void set_packed_load_ahead(int ahead) { g_packed_load_ahead.store(ahead, std::memory_order_relaxed); }
bool packed_load_ahead() {
  const int ahead = g_packed_load_ahead.load(std::memory_order_relaxed);
  return switch_or_amd_default(ahead);
}
void set_packed_two_streams(int two) { g_packed_two_streams.store(two, std::memory_order_relaxed); }
bool packed_two_streams() { return switch_or_amd_default(g_packed_two_streams.load(std::memory_order_relaxed)); }
void set_packed_near_nta(int nta) { g_packed_near_nta.store(nta, std::memory_order_relaxed); }
bool packed_near_nta() {
  const int nta = g_packed_near_nta.load(std::memory_order_relaxed);
  return switch_or_amd_default(nta);
}

int64_t packed_weight_bytes(GgmlType type, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return 0;
  const int64_t strips = (rows + cpu_kernels::kPackedStripRows - 1) / cpu_kernels::kPackedStripRows;
  if (type == GgmlType::kQ4_0 && best_simd_level() >= SimdLevel::kAvx2 && cols % kQK8_0 == 0) {
    return strips * cpu_kernels::packed_strip_bytes(cols);
  }
  // Q8_0 and the K-quants: AVX2 only; the AVX-512 level keeps its VNNI panels
  // (prefill), its decode tile and its K-quant kernels over the GGUF rows.
  if (best_simd_level() != SimdLevel::kAvx2) return 0;
  if (type == GgmlType::kQ8_0 && cols % kQK8_0 == 0) return strips * cpu_kernels::packed_q8_0_strip_bytes(cols);
  if (cols % kQK_K != 0) return 0;
  switch (type) {
    case GgmlType::kQ4_K: return strips * cpu_kernels::packed_q4_k_strip_bytes(cols);
    case GgmlType::kQ5_K: return strips * cpu_kernels::packed_q5_k_strip_bytes(cols);
    case GgmlType::kQ6_K: return strips * cpu_kernels::packed_q6_k_strip_bytes(cols);
    default: return 0;
  }
}

void pack_weight_matrix(const WeightMatrix& w, uint8_t* out, ThreadPool* pool) {
  BATON_CHECK(packed_weight_bytes(w.type, w.rows, w.cols) > 0, "pack_weight_matrix: no packed layout for this type");
  BATON_CHECK(reinterpret_cast<uintptr_t>(out) % 64 == 0, "pack_weight_matrix: out must be 64-byte aligned");
  MatmulProblem p{};
  p.type = w.type;
  p.weights = static_cast<const uint8_t*>(w.data);
  p.row_bytes = ggml_row_bytes(w.type, w.cols);
  p.rows = w.rows;
  p.cols = w.cols;
  const int64_t strips = (w.rows + cpu_kernels::kPackedStripRows - 1) / cpu_kernels::kPackedStripRows;
  auto run = [&](int64_t begin, int64_t end) {
    switch (w.type) {
      case GgmlType::kQ4_K: return cpu_kernels::pack_q4_k_strips_avx2(p, begin, end, out);
      case GgmlType::kQ5_K: return cpu_kernels::pack_q5_k_strips_avx2(p, begin, end, out);
      case GgmlType::kQ6_K: return cpu_kernels::pack_q6_k_strips_avx2(p, begin, end, out);
      case GgmlType::kQ8_0: return cpu_kernels::pack_q8_0_strips_avx2(p, begin, end, out);
      default: return cpu_kernels::pack_q4_0_strips_avx2(p, begin, end, out);
    }
  };
  if (pool != nullptr) {
    pool->parallel_for(strips, std::ref(run));
  } else {
    run(0, strips);
  }
}

int64_t matmul_panel_scratch_bytes(int64_t cols) {
  return std::max({cpu_kernels::panel_scratch_bytes(cols), cpu_kernels::bf16_scratch_bytes(cols),
                   cpu_kernels::f32_scratch_bytes(cols)});
}

bool bf16_matmul_available() {
  return best_simd_level() == SimdLevel::kAvx512 && cpu_features().avx512bf16;
}

void matmul_with(SimdLevel level, const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
                 ThreadPool* pool, FloatMatmul float_matmul) {
  const WeightMatrix* ws[1] = {&w};
  float* ys[1] = {y};
  matmul_group(level, ws, x, n_tokens, ys, pool, /*decode_order=*/false, float_matmul);
}

void matmul_many_with(SimdLevel level, std::span<const WeightMatrix* const> ws, const float* x, int64_t n_tokens,
                      std::span<float* const> ys, ThreadPool* pool, FloatMatmul float_matmul) {
  BATON_CHECK(ws.size() == ys.size(), "matmul_many: one output per matrix");
  bool groupable = ws.size() <= kMaxGroupMatrices;
  for (const WeightMatrix* w : ws) groupable = groupable && w->cols == ws[0]->cols;
  // Mixed storage (Q4_K beside Q6_K, F16 V beside Q4_0 Q/K) groups too: each
  // activation format is prepared once.
  if (groupable && !ws.empty()) {
    return matmul_group(level, ws, x, n_tokens, ys, pool, /*decode_order=*/false, float_matmul);
  }
  // More than 8 matrices or different widths: one call per matrix.
  for (size_t i = 0; i < ws.size(); ++i) matmul_with(level, *ws[i], x, n_tokens, ys[i], pool, float_matmul);
}

void matmul_many(std::span<const WeightMatrix* const> ws, const float* x, int64_t n_tokens,
                 std::span<float* const> ys, ThreadPool* pool, FloatMatmul float_matmul) {
  matmul_many_with(active_simd_level(), ws, x, n_tokens, ys, pool, float_matmul);
}

void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool,
            FloatMatmul float_matmul) {
  matmul_with(active_simd_level(), w, x, n_tokens, y, pool, float_matmul);
}

void quantize_row_q8_0_fast(const float* x, BlockQ8_0* y, int64_t n) {
  BATON_CHECK(n % kQK8_0 == 0, "quantize_row_q8_0_fast: n must be a multiple of 32");
  kernels_for(active_simd_level()).quantize_blocks(x, y, n);
}

void quantize_row_q8_k_with(SimdLevel level, const float* x, BlockQ8_K* y, int64_t n) {
  BATON_CHECK(n % kQK_K == 0, "quantize_row_q8_k: n must be a multiple of 256");
  kernels_for(level).quantize_q8_k(x, y, n);
}

void quantize_row_q8_k_fast(const float* x, BlockQ8_K* y, int64_t n) {
  quantize_row_q8_k_with(active_simd_level(), x, y, n);
}

void matmul_decode_order(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool) {
  const WeightMatrix* ws[1] = {&w};
  float* ys[1] = {y};
  matmul_group(active_simd_level(), ws, x, n_tokens, ys, pool, /*decode_order=*/true, FloatMatmul::kExact);
}

void matmul_many_decode_order(std::span<const WeightMatrix* const> ws, const float* x, int64_t n_tokens,
                              std::span<float* const> ys, ThreadPool* pool) {
  BATON_CHECK(ws.size() == ys.size(), "matmul_many: one output per matrix");
  bool groupable = ws.size() <= kMaxGroupMatrices;
  for (const WeightMatrix* w : ws) groupable = groupable && w->cols == ws[0]->cols;
  if (groupable && !ws.empty()) {
    return matmul_group(active_simd_level(), ws, x, n_tokens, ys, pool, /*decode_order=*/true, FloatMatmul::kExact);
  }
  for (size_t i = 0; i < ws.size(); ++i) matmul_decode_order(*ws[i], x, n_tokens, ys[i], pool);
}

}  // namespace baton
