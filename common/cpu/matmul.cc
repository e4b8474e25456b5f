#include "common/cpu/matmul.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "common/cpu/matmul_kernels.h"
#include "common/util/check.h"

namespace baton {
namespace {

using cpu_kernels::MatmulProblem;

struct MatmulKernels {
  cpu_kernels::MatmulTileFn tile;
  cpu_kernels::QuantizeBlocksFn quantize_blocks;
  cpu_kernels::QuantizeSplitFn quantize_split;
};

const MatmulKernels& kernels_for(SimdLevel level) {
  static const MatmulKernels kScalar{cpu_kernels::matmul_tile_scalar, cpu_kernels::quantize_q8_0_scalar,
                                     cpu_kernels::quantize_q8_0_split_scalar};
  static const MatmulKernels kAvx2{cpu_kernels::matmul_tile_avx2, cpu_kernels::quantize_q8_0_avx2,
                                   cpu_kernels::quantize_q8_0_split_avx2};
  static const MatmulKernels kAvx512{cpu_kernels::matmul_tile_avx512, cpu_kernels::quantize_q8_0_avx512,
                                     cpu_kernels::quantize_q8_0_split_avx512};
  BATON_CHECK(level <= best_simd_level(), "SIMD level not supported by this CPU");
  switch (level) {
    case SimdLevel::kAvx512: return kAvx512;
    case SimdLevel::kAvx2: return kAvx2;
    case SimdLevel::kScalar: break;
  }
  return kScalar;
}

bool is_quantized(GgmlType type) { return type == GgmlType::kQ4_0 || type == GgmlType::kQ8_0; }

// Quantized activations of the calling thread, reused across calls (grow only).
struct ActivationScratch {
  std::vector<int8_t> qs;  // [n_tokens, cols]
  std::vector<float> d;    // [n_tokens, cols/32]
};
thread_local ActivationScratch t_scratch;

// Rows per parallel task. Decode streams weights: a few KiB per task keeps the
// split even while rows stay contiguous per thread. Prefill tiles are 4 rows.
constexpr int64_t kDecodeRowsPerTask = 32;
constexpr int64_t kPrefillRowsPerTask = 16;
constexpr int64_t kPrefillTokensPerTask = 16;
// Dynamic hand-out granularity: chunks per thread per call.
constexpr int64_t kChunksPerThread = 8;
// Most matrices one grouped call takes (Q/K/V is three, gate/up two).
constexpr size_t kMaxGroupMatrices = 8;

// How one matrix's output is cut into parallel tasks.
struct TaskSplit {
  int64_t rows_per_task;
  int64_t tokens_per_task;
  int64_t row_tasks;
  int64_t token_tasks;
  int64_t tasks() const { return row_tasks * token_tasks; }
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

void check_matrix(const WeightMatrix& w, int64_t n_tokens) {
  BATON_CHECK(w.type == GgmlType::kF32 || w.type == GgmlType::kF16 || w.type == GgmlType::kBF16 ||
                  w.type == GgmlType::kQ8_0 || w.type == GgmlType::kQ4_0,
              "matmul: unsupported weight type");
  BATON_CHECK(w.rows >= 0 && w.cols >= 0 && n_tokens >= 0);
  BATON_CHECK(!is_quantized(w.type) || w.cols % kQK8_0 == 0, "matmul: Q4_0/Q8_0 cols must be a multiple of 32");
}

// Quantizes x [n_tokens, cols] to Q8_0 into the calling thread's scratch.
void quantize_activations(const MatmulKernels& kernels, const float* x, int64_t n_tokens, int64_t cols,
                          ThreadPool* pool, const int8_t** qs_out, const float** d_out) {
  ActivationScratch& scratch = t_scratch;
  const size_t n_quants = static_cast<size_t>(n_tokens * cols);
  if (scratch.qs.size() < n_quants) scratch.qs.resize(n_quants);
  if (scratch.d.size() < n_quants / kQK8_0) scratch.d.resize(n_quants / kQK8_0);
  int8_t* qs = scratch.qs.data();
  float* d = scratch.d.data();
  auto quantize_tokens = [&](int64_t t_begin, int64_t t_end) {
    for (int64_t t = t_begin; t < t_end; ++t)
      kernels.quantize_split(x + t * cols, qs + t * cols, d + t * cols / kQK8_0, cols);
  };
  if (pool != nullptr && n_tokens >= 8) {
    pool->parallel_for(n_tokens, std::ref(quantize_tokens));
  } else {
    quantize_tokens(0, n_tokens);
  }
  *qs_out = qs;
  *d_out = d;
}

// Runs matrices that share one input as one parallel loop: x is prepared
// once (Q8_0 for quantized weights) and the tasks of all matrices are
// concatenated, matrix after matrix, so each thread streams a contiguous run
// of rows and the pool is woken once.
void matmul_group(SimdLevel level, std::span<const WeightMatrix* const> ws, const float* x, int64_t n_tokens,
                  std::span<float* const> ys, ThreadPool* pool) {
  BATON_CHECK(ws.size() == ys.size() && !ws.empty() && ws.size() <= kMaxGroupMatrices,
              "matmul: one output per matrix, 1..8 matrices");
  for (const WeightMatrix* w : ws) {
    check_matrix(*w, n_tokens);
    BATON_CHECK(w->cols == ws[0]->cols && is_quantized(w->type) == is_quantized(ws[0]->type),
                "matmul: grouped matrices share the input width and its preparation");
  }
  int64_t total_rows = 0;
  for (const WeightMatrix* w : ws) total_rows += w->rows;
  if (n_tokens == 0 || total_rows == 0) return;
  const MatmulKernels& kernels = kernels_for(level);
  const int n_threads = pool != nullptr ? pool->size() : 1;

  const int8_t* xq = nullptr;
  const float* xd = nullptr;
  if (is_quantized(ws[0]->type)) quantize_activations(kernels, x, n_tokens, ws[0]->cols, pool, &xq, &xd);

  MatmulProblem problems[kMaxGroupMatrices];
  TaskSplit splits[kMaxGroupMatrices];
  int64_t first_task[kMaxGroupMatrices + 1];  // task index where matrix i starts
  first_task[0] = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    const WeightMatrix& w = *ws[i];
    MatmulProblem& problem = problems[i];
    problem = MatmulProblem{};
    problem.type = w.type;
    problem.weights = static_cast<const uint8_t*>(w.data);
    problem.row_bytes = ggml_row_bytes(w.type, w.cols);
    problem.rows = w.rows;
    problem.cols = w.cols;
    problem.y = ys[i];
    problem.x = x;
    problem.xq = xq;
    problem.xd = xd;
    splits[i] = split_for(w.rows, n_tokens, n_threads);
    first_task[i + 1] = first_task[i] + (w.rows == 0 ? 0 : splits[i].tasks());
  }
  const size_t n_matrices = ws.size();
  const auto tile = kernels.tile;

  // Task = first_task[i] + row_task * token_tasks + token_task.
  auto run_tasks = [&](int64_t begin, int64_t end) {
    size_t i = 0;
    while (first_task[i + 1] <= begin) ++i;
    for (int64_t task = begin; task < end; ++task) {
      while (task >= first_task[i + 1]) ++i;
      const TaskSplit& sp = splits[i];
      const int64_t local = task - first_task[i];
      const int64_t r0 = local / sp.token_tasks * sp.rows_per_task;
      const int64_t t0 = local % sp.token_tasks * sp.tokens_per_task;
      tile(problems[i], r0, std::min(r0 + sp.rows_per_task, problems[i].rows), t0,
           std::min(t0 + sp.tokens_per_task, n_tokens));
    }
  };
  const int64_t n_tasks = first_task[n_matrices];
  if (n_tasks == 0) return;
  if (pool != nullptr && n_threads > 1) {
    // Chunks of ~1/8 of a thread's share, claimed dynamically: on a shared
    // machine a thread that wakes late or loses its core does fewer chunks
    // instead of holding up the others at the end of every matmul. A chunk
    // is still a run of consecutive rows (one weight stream).
    const int64_t grain = std::max<int64_t>(1, n_tasks / (int64_t{n_threads} * kChunksPerThread));
    pool->parallel_for_dynamic(n_tasks, grain, std::ref(run_tasks));  // std::ref: no std::function allocation
  } else {
    run_tasks(0, n_tasks);
  }
}

}  // namespace

void matmul_with(SimdLevel level, const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
                 ThreadPool* pool) {
  const WeightMatrix* ws[1] = {&w};
  float* ys[1] = {y};
  matmul_group(level, ws, x, n_tokens, ys, pool);
}

void matmul_many_with(SimdLevel level, std::span<const WeightMatrix* const> ws, const float* x, int64_t n_tokens,
                      std::span<float* const> ys, ThreadPool* pool) {
  BATON_CHECK(ws.size() == ys.size(), "matmul_many: one output per matrix");
  bool groupable = ws.size() <= kMaxGroupMatrices;
  for (const WeightMatrix* w : ws) {
    groupable = groupable && w->cols == ws[0]->cols && is_quantized(w->type) == is_quantized(ws[0]->type);
  }
  if (groupable && !ws.empty()) return matmul_group(level, ws, x, n_tokens, ys, pool);
  // Mixed storage (e.g. F16 V beside Q4_0 Q/K): one call per matrix.
  for (size_t i = 0; i < ws.size(); ++i) matmul_with(level, *ws[i], x, n_tokens, ys[i], pool);
}

void matmul_many(std::span<const WeightMatrix* const> ws, const float* x, int64_t n_tokens,
                 std::span<float* const> ys, ThreadPool* pool) {
  matmul_many_with(active_simd_level(), ws, x, n_tokens, ys, pool);
}

void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool) {
  matmul_with(active_simd_level(), w, x, n_tokens, y, pool);
}

void quantize_row_q8_0_fast(const float* x, BlockQ8_0* y, int64_t n) {
  BATON_CHECK(n % kQK8_0 == 0, "quantize_row_q8_0_fast: n must be a multiple of 32");
  kernels_for(active_simd_level()).quantize_blocks(x, y, n);
}

}  // namespace baton
