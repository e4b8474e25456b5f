// Plain-loop K-quant matmul (Q4_K, Q5_K, Q6_K weights x Q8_K activations) and
// Q8_K quantization: the reference the SIMD levels are tested against, and the
// fallback for CPUs without AVX2. Same integer math as ggml's
// vec_dot_q{4,5,6}_K_q8_K: per super-block of 256, integer dot products
// weighted by the sub-block scales, the mins (Q4_K/Q5_K) or the -32 offset
// (Q6_K) through the per-16 sums of the activation quants (bsums); floats only
// for the per-super-block scaling and the sum over super-blocks.
#include <cmath>
#include <cstring>

#include "common/cpu/matmul_kernels.h"
#include "common/util/fp16.h"

namespace baton::cpu_kernels {
namespace {

// ggml's nearest_int: round half to even through the float adder (exact for
// |v| < 2^22; Q8_K values are within 127.x).
int nearest_int(float v) {
  const float shifted = v + 12582912.0f;  // 1.5 * 2^23
  int32_t bits;
  std::memcpy(&bits, &shifted, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

// One super-block of 256: quants, returns d, writes the 16 bsums.
float quantize_q8_k_block(const float* x, int8_t* qs, int16_t* bsums) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQK_K; ++j) {
    const float ax = std::fabs(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  if (amax == 0.0f) {
    std::memset(qs, 0, kQK_K);
    std::memset(bsums, 0, kQK_K / 16 * sizeof(int16_t));
    return 0.0f;
  }
  const float iscale = -127.0f / max;
  for (int j = 0; j < kQK_K; ++j) {
    const int v = nearest_int(iscale * x[j]);
    qs[j] = static_cast<int8_t>(v < 127 ? v : 127);
  }
  for (int g = 0; g < kQK_K / 16; ++g) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += qs[16 * g + i];
    bsums[g] = static_cast<int16_t>(sum);
  }
  return 1.0f / iscale;
}

// Q4_K (kHighBits false) or Q5_K (true) row . one token's Q8_K quants.
// Sub-block 2j is the low nibbles of qs[32j..32j+31], 2j+1 the high nibbles;
// Q5_K's 5th bit of element 64j+l (+32) is bit 2j (2j+1) of qh[l].
template <bool kHighBits>
float dot_q45_k_row(const uint8_t* row, const int8_t* xq, const float* xd, const int16_t* bsums,
                    int64_t n_super) {
  float sum = 0.0f;
  for (int64_t s = 0; s < n_super; ++s) {
    const uint16_t* header = reinterpret_cast<const uint16_t*>(row);
    const uint8_t* scales = row + 4;
    const uint8_t* qh = kHighBits ? reinterpret_cast<const BlockQ5_K*>(row)->qh : nullptr;
    const uint8_t* qs = kHighBits ? reinterpret_cast<const BlockQ5_K*>(row)->qs
                                  : reinterpret_cast<const BlockQ4_K*>(row)->qs;
    int sc[8], m[8];
    unpack_scales_mins_k4(scales, sc, m);
    const int8_t* q = xq + s * kQK_K;
    int32_t dot = 0;
    for (int j = 0; j < 4; ++j) {
      int32_t lo = 0, hi = 0;
      for (int l = 0; l < 32; ++l) {
        int w_lo = qs[32 * j + l] & 0x0f;
        int w_hi = qs[32 * j + l] >> 4;
        if (kHighBits) {
          w_lo |= ((qh[l] >> (2 * j)) & 1) << 4;
          w_hi |= ((qh[l] >> (2 * j + 1)) & 1) << 4;
        }
        lo += w_lo * q[64 * j + l];
        hi += w_hi * q[64 * j + 32 + l];
      }
      dot += sc[2 * j] * lo + sc[2 * j + 1] * hi;
    }
    const int16_t* bs = bsums + s * (kQK_K / 16);
    int32_t mins = 0;
    for (int j = 0; j < 8; ++j) mins += m[j] * (bs[2 * j] + bs[2 * j + 1]);
    sum += fp16_to_fp32(header[0]) * xd[s] * static_cast<float>(dot) -
           fp16_to_fp32(header[1]) * xd[s] * static_cast<float>(mins);
    row += kHighBits ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  }
  return sum;
}

// Q6_K row . one token's Q8_K quants. In each half of 128 (ql 64 bytes, qh 32):
// element l (l < 32) is ql[l] low | qh[l] bits 0-1, l+32 is ql[l+32] low |
// bits 2-3, l+64 is ql[l] high | bits 4-5, l+96 is ql[l+32] high | bits 6-7;
// minus 32. Sub-block of 16 k has scale scales[k].
float dot_q6_k_row(const BlockQ6_K* w, const int8_t* xq, const float* xd, int64_t n_super) {
  float sum = 0.0f;
  for (int64_t s = 0; s < n_super; ++s) {
    const BlockQ6_K& b = w[s];
    const int8_t* q = xq + s * kQK_K;
    int weights[kQK_K];
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = b.ql + 64 * half;
      const uint8_t* qh = b.qh + 32 * half;
      int* out = weights + 128 * half;
      for (int l = 0; l < 32; ++l) {
        out[l] = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        out[l + 32] = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        out[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        out[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      }
    }
    int32_t dot = 0;
    for (int k = 0; k < kQK_K / 16; ++k) {
      int32_t part = 0;
      for (int i = 0; i < 16; ++i) part += weights[16 * k + i] * q[16 * k + i];
      dot += b.scales[k] * part;
    }
    sum += fp16_to_fp32(b.d) * xd[s] * static_cast<float>(dot);
  }
  return sum;
}

}  // namespace

void kquant_tile_scalar(const MatmulProblem& p, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                        int64_t tok_end) {
  const int64_t n_super = p.cols / kQK_K;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = p.weights + r * p.row_bytes;
    for (int64_t t = tok_begin; t < tok_end; ++t) {
      const int8_t* xq = p.xq + t * p.cols;
      const float* xd = p.xd + t * n_super;
      const int16_t* bsums = p.xsums + t * (p.cols / 16);
      float value = 0.0f;
      switch (p.type) {
        case GgmlType::kQ4_K: value = dot_q45_k_row<false>(row, xq, xd, bsums, n_super); break;
        case GgmlType::kQ5_K: value = dot_q45_k_row<true>(row, xq, xd, bsums, n_super); break;
        case GgmlType::kQ6_K:
          value = dot_q6_k_row(reinterpret_cast<const BlockQ6_K*>(row), xq, xd, n_super);
          break;
        default: break;  // matmul.cc routes only K-quants here
      }
      p.y[t * p.rows + r] = value;
    }
  }
}

void quantize_q8_k_scalar(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) y[b].d = quantize_q8_k_block(x + b * kQK_K, y[b].qs, y[b].bsums);
}

void quantize_q8_k_split_scalar(const float* x, int8_t* qs, float* d, int16_t* bsums, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b)
    d[b] = quantize_q8_k_block(x + b * kQK_K, qs + b * kQK_K, bsums + b * (kQK_K / 16));
}

void unpack_scales_mins_k4(const uint8_t* s, int* sc, int* m) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    m[j] = s[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    m[j] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

}  // namespace baton::cpu_kernels
