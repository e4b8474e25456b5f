// Plain-loop matmul for the older ggml block types Q5_0, Q4_1 and Q5_1 times
// Q8_0 activations: the reference for matmul_legacy_avx2.cc. The integer math is ggml's vec_dot_q5_0_q8_0 / q4_1_q8_1 / q5_1_q8_1, except
// that the Q4_1/Q5_1 minimum term uses the exact integer sum of the x quants
// (ggml's Q8_1 stores d * sum rounded to fp16).
#include <cstring>

#include "common/cpu/matmul_kernels.h"
#include "common/util/fp16.h"

namespace baton::cpu_kernels {
namespace {

// Element j (j < 16) of a block is the low nibble of qs[j], element j + 16 the
// high nibble; Q5 types add bit j (j + 16) of the little-endian qh as bit 4.
template <typename Block, bool kFifthBit>
int32_t block_dot(const Block& b, const int8_t* q) {
  uint32_t qh = 0;
  if constexpr (kFifthBit) std::memcpy(&qh, b.qh, 4);
  int32_t sumi = 0;
  for (int j = 0; j < 16; ++j) {
    int lo = b.qs[j] & 0x0f;
    int hi = b.qs[j] >> 4;
    if constexpr (kFifthBit) {
      lo |= static_cast<int>((qh >> j) & 1) << 4;
      hi |= static_cast<int>((qh >> (j + 16)) & 1) << 4;
    }
    sumi += lo * q[j] + hi * q[j + 16];
  }
  return sumi;
}

// Q5_0: x = d * (q - 16), so sum = d * dx * (dot(q, xq) - 16 * sum(xq)).
float dot_q5_0_row(const BlockQ5_0* w, const int8_t* xq, const float* xd, const int16_t* xsums,
                   int64_t n_blocks) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int32_t sumi = block_dot<BlockQ5_0, true>(w[b], xq + b * 32) - 16 * xsums[b];
    sum += fp16_to_fp32(w[b].d) * xd[b] * static_cast<float>(sumi);
  }
  return sum;
}

// Q4_1 / Q5_1: x = d * q + m, so sum = d * dx * dot(q, xq) + m * dx * sum(xq).
template <typename Block, bool kFifthBit>
float dot_q_1_row(const Block* w, const int8_t* xq, const float* xd, const int16_t* xsums, int64_t n_blocks) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int32_t sumi = block_dot<Block, kFifthBit>(w[b], xq + b * 32);
    sum += fp16_to_fp32(w[b].d) * xd[b] * static_cast<float>(sumi) +
           fp16_to_fp32(w[b].m) * xd[b] * static_cast<float>(xsums[b]);
  }
  return sum;
}

}  // namespace

void legacy_tile_scalar(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                        int64_t tok_end) {
  const int64_t n_blocks = p.cols / 32;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = p.weights + r * p.row_bytes;
    for (int64_t t = tok_begin; t < tok_end; ++t) {
      const int8_t* xq = p.xq + t * p.cols;
      const float* xd = p.xd + t * n_blocks;
      const int16_t* xsums = p.xsums + t * n_blocks;
      float value = 0.0f;
      switch (p.type) {
        case GgmlType::kQ5_0:
          value = dot_q5_0_row(reinterpret_cast<const BlockQ5_0*>(row), xq, xd, xsums, n_blocks);
          break;
        case GgmlType::kQ4_1:
          value = dot_q_1_row<BlockQ4_1, false>(reinterpret_cast<const BlockQ4_1*>(row), xq, xd, xsums, n_blocks);
          break;
        case GgmlType::kQ5_1:
          value = dot_q_1_row<BlockQ5_1, true>(reinterpret_cast<const BlockQ5_1*>(row), xq, xd, xsums, n_blocks);
          break;
        default: break;  // matmul.cc routes only these three types here
      }
      p.y[t * p.rows + r] = value;
    }
  }
}

}  // namespace baton::cpu_kernels
