// Plain-loop matmul and Q8_0 quantization: the reference the SIMD levels are
// tested against, and the fallback for CPUs without AVX2.
#include <cmath>

#include "common/cpu/matmul_kernels.h"
#include "common/util/fp16.h"

namespace baton::cpu_kernels {
namespace {

// One block of 32: writes quants and returns the fp16 scale.
uint16_t quantize_block(const float* x, int8_t* qs) {
  float amax = 0.0f;
  for (int i = 0; i < kQK8_0; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < kQK8_0; ++i) qs[i] = static_cast<int8_t>(std::roundf(x[i] * id));
  return fp32_to_fp16(d);
}

float weight_at(GgmlType type, const uint8_t* row, int64_t c) {
  switch (type) {
    case GgmlType::kF32: return reinterpret_cast<const float*>(row)[c];
    case GgmlType::kF16: return fp16_to_fp32(reinterpret_cast<const uint16_t*>(row)[c]);
    case GgmlType::kBF16: return bf16_to_fp32(reinterpret_cast<const uint16_t*>(row)[c]);
    default: return 0.0f;
  }
}

float dot_float_row(const MatmulProblem& p, const uint8_t* row, const float* x) {
  float sum = 0.0f;
  for (int64_t c = 0; c < p.cols; ++c) sum += weight_at(p.type, row, c) * x[c];
  return sum;
}

// sum over blocks of (d_w * d_x) * integer dot(q_w, q_x).
float dot_q4_0_row(const BlockQ4_0* w, const int8_t* xq, const float* xd, int64_t n_blocks) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int8_t* q = xq + b * kQK8_0;
    int32_t sumi = 0;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      sumi += ((w[b].qs[j] & 0x0f) - 8) * q[j];
      sumi += ((w[b].qs[j] >> 4) - 8) * q[j + kQK4_0 / 2];
    }
    sum += static_cast<float>(sumi) * (fp16_to_fp32(w[b].d) * xd[b]);
  }
  return sum;
}

float dot_q8_0_row(const BlockQ8_0* w, const int8_t* xq, const float* xd, int64_t n_blocks) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int8_t* q = xq + b * kQK8_0;
    int32_t sumi = 0;
    for (int j = 0; j < kQK8_0; ++j) sumi += w[b].qs[j] * q[j];
    sum += static_cast<float>(sumi) * (fp16_to_fp32(w[b].d) * xd[b]);
  }
  return sum;
}

}  // namespace

void matmul_tile_scalar(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                        int64_t tok_end) {
  const int64_t n_blocks = p.cols / kQK8_0;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = p.weights + r * p.row_bytes;
    for (int64_t t = tok_begin; t < tok_end; ++t) {
      float value;
      if (p.type == GgmlType::kQ4_0) {
        value = dot_q4_0_row(reinterpret_cast<const BlockQ4_0*>(row), p.xq + t * p.cols,
                             p.xd + t * n_blocks, n_blocks);
      } else if (p.type == GgmlType::kQ8_0) {
        value = dot_q8_0_row(reinterpret_cast<const BlockQ8_0*>(row), p.xq + t * p.cols,
                             p.xd + t * n_blocks, n_blocks);
      } else {
        value = dot_float_row(p, row, p.x + t * p.cols);
      }
      p.y[t * p.rows + r] = value;
    }
  }
}

void quantize_q8_0_scalar(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK8_0; ++b) y[b].d = quantize_block(x + b * kQK8_0, y[b].qs);
}

void quantize_q8_0_split_scalar(const float* x, int8_t* qs, float* d, int64_t n) {
  for (int64_t b = 0; b < n / kQK8_0; ++b)
    d[b] = fp16_to_fp32(quantize_block(x + b * kQK8_0, qs + b * kQK8_0));
}

}  // namespace baton::cpu_kernels
