// What the AVX2 packed kernels (matmul_packed_avx2.cc: Q4_0,
// matmul_packed_kquant_avx2.cc: Q4_K) share: how a tile call is cut into
// passes, and their accumulators' stores.
// Include it from those *_avx2.cc files only: compiled with their flags, and
// the unnamed namespace gives each file its own copy, so no AVX2 code can
// reach a baseline caller through the linker (matmul_kernels.h's rule).
#pragma once

#include <immintrin.h>

#include "common/cpu/matmul_kernels.h"

namespace baton::cpu_kernels {
namespace {

constexpr int64_t kHalfRows = 8;  // rows per ymm: half a 16-row strip

// y for H halves (8 rows each) x T tokens: half h holds rows first_row + 8 h
// ..; the last half keeps last_rows of its 8 (a matrix's last rows).
template <int H, int T>
void store_halves(const MatmulProblem& p, const __m256 (&acc)[H][T], int64_t t0, int64_t first_row,
                  int64_t last_rows) {
  for (int h = 0; h < H; ++h) {
    const int64_t row = first_row + kHalfRows * h;
    const int64_t keep = h == H - 1 ? last_rows : kHalfRows;
    for (int t = 0; t < T; ++t) {
      float* out = p.y + (t0 + t) * p.rows + row;
      if (keep == kHalfRows) {
        _mm256_storeu_ps(out, acc[h][t]);
      } else {
        alignas(32) float lanes[kHalfRows];
        _mm256_store_ps(lanes, acc[h][t]);
        for (int64_t i = 0; i < keep; ++i) out[i] = lanes[i];
      }
    }
  }
}

// Cuts rows [row_begin, row_end) x tokens [tok_begin, tok_end) into passes
// of H halves (8 rows each) x T tokens, each run as
// run.template operator()<H, T>(strip, half0, r, last_rows, t): rows from r
// (a multiple of 8), i.e. from half half0 of strip `strip` (H >= 2: half0 is
// 0), the last half keeping last_rows of its 8; tokens from t.
//  - one token (decode): kDecodeHalves halves per pass from a strip's start
//    (two strips: two streams per thread), then single halves;
//  - several tokens: one half at a time (its weights stay in L1 from the
//    first group on) against groups of 4 tokens, then 2, then 1.
template <int kDecodeHalves, typename Run>
void for_each_pass(int64_t row_begin, int64_t row_end, int64_t tok_begin, int64_t tok_end, Run&& run) {
  auto pass = [&]<int H, int T>(int64_t r, int64_t rows, int64_t t) {
    run.template operator()<H, T>(r / kPackedStripRows, static_cast<int>(r % kPackedStripRows / kHalfRows), r,
                                  rows - kHalfRows * (H - 1), t);
  };
  if (tok_end - tok_begin == 1) {
    int64_t r = row_begin;
    for (; r + kDecodeHalves * kHalfRows <= row_end && r % kPackedStripRows == 0; r += kDecodeHalves * kHalfRows) {
      pass.template operator()<kDecodeHalves, 1>(r, kDecodeHalves * kHalfRows, tok_begin);
    }
    for (; r < row_end; r += kHalfRows) {
      pass.template operator()<1, 1>(r, row_end - r < kHalfRows ? row_end - r : kHalfRows, tok_begin);
    }
    return;
  }
  for (int64_t r = row_begin; r < row_end; r += kHalfRows) {
    const int64_t rows = row_end - r < kHalfRows ? row_end - r : kHalfRows;
    int64_t t = tok_begin;
    for (; t + 4 <= tok_end; t += 4) pass.template operator()<1, 4>(r, rows, t);
    if (tok_end - t >= 2) {
      pass.template operator()<1, 2>(r, rows, t);
      t += 2;
    }
    if (t < tok_end) pass.template operator()<1, 1>(r, rows, t);
  }
}

}  // namespace
}  // namespace baton::cpu_kernels
