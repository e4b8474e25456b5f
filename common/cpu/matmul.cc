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

}  // namespace

void matmul_with(SimdLevel level, const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
                 ThreadPool* pool) {
  BATON_CHECK(w.type == GgmlType::kF32 || w.type == GgmlType::kF16 || w.type == GgmlType::kBF16 ||
                  w.type == GgmlType::kQ8_0 || w.type == GgmlType::kQ4_0,
              "matmul: unsupported weight type");
  BATON_CHECK(w.rows >= 0 && w.cols >= 0 && n_tokens >= 0);
  const bool quantized = is_quantized(w.type);
  BATON_CHECK(!quantized || w.cols % kQK8_0 == 0, "matmul: Q4_0/Q8_0 cols must be a multiple of 32");
  if (w.rows == 0 || n_tokens == 0) return;
  const MatmulKernels& kernels = kernels_for(level);

  MatmulProblem problem{};
  problem.type = w.type;
  problem.weights = static_cast<const uint8_t*>(w.data);
  problem.row_bytes = ggml_row_bytes(w.type, w.cols);
  problem.rows = w.rows;
  problem.cols = w.cols;
  problem.y = y;
  if (quantized) {
    ActivationScratch& scratch = t_scratch;
    const size_t n_quants = static_cast<size_t>(n_tokens * w.cols);
    if (scratch.qs.size() < n_quants) scratch.qs.resize(n_quants);
    if (scratch.d.size() < n_quants / kQK8_0) scratch.d.resize(n_quants / kQK8_0);
    int8_t* qs = scratch.qs.data();
    float* d = scratch.d.data();
    const int64_t cols = w.cols;
    auto quantize_tokens = [&](int64_t t_begin, int64_t t_end) {
      for (int64_t t = t_begin; t < t_end; ++t)
        kernels.quantize_split(x + t * cols, qs + t * cols, d + t * cols / kQK8_0, cols);
    };
    if (pool != nullptr && n_tokens >= 8) {
      pool->parallel_for(n_tokens, std::ref(quantize_tokens));
    } else {
      quantize_tokens(0, n_tokens);
    }
    problem.xq = qs;
    problem.xd = d;
  } else {
    problem.x = x;
  }

  const int n_threads = pool != nullptr ? pool->size() : 1;
  int64_t rows_per_task = n_tokens == 1 ? kDecodeRowsPerTask : kPrefillRowsPerTask;
  int64_t row_tasks = (w.rows + rows_per_task - 1) / rows_per_task;
  int64_t tokens_per_task = n_tokens;
  // Few rows, many tokens (e.g. a small projection during prefill): split tokens too.
  if (row_tasks < 2 * n_threads && n_tokens > kPrefillTokensPerTask) tokens_per_task = kPrefillTokensPerTask;
  // Small decode matrices: smaller row chunks so every thread gets work.
  if (n_tokens == 1 && row_tasks < n_threads) {
    rows_per_task = std::max<int64_t>(4, (w.rows + n_threads - 1) / n_threads);
    row_tasks = (w.rows + rows_per_task - 1) / rows_per_task;
  }
  const int64_t token_tasks = (n_tokens + tokens_per_task - 1) / tokens_per_task;
  const auto tile = kernels.tile;

  // Task = row_task * token_tasks + token_task: a thread's contiguous range of
  // tasks covers contiguous rows, so it streams its weights once.
  auto run_tasks = [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t r0 = task / token_tasks * rows_per_task;
      const int64_t t0 = task % token_tasks * tokens_per_task;
      tile(problem, r0, std::min(r0 + rows_per_task, w.rows), t0, std::min(t0 + tokens_per_task, n_tokens));
    }
  };
  const int64_t n_tasks = row_tasks * token_tasks;
  if (pool != nullptr && n_threads > 1) {
    pool->parallel_for(n_tasks, std::ref(run_tasks));  // std::ref: no std::function allocation
  } else {
    run_tasks(0, n_tasks);
  }
}

void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool) {
  matmul_with(active_simd_level(), w, x, n_tokens, y, pool);
}

void quantize_row_q8_0_fast(const float* x, BlockQ8_0* y, int64_t n) {
  BATON_CHECK(n % kQK8_0 == 0, "quantize_row_q8_0_fast: n must be a multiple of 32");
  kernels_for(active_simd_level()).quantize_blocks(x, y, n);
}

}  // namespace baton
