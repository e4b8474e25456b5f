#include "common/gguf/ggml_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/gguf/ggml_kquant.h"
#include "common/gguf/ggml_quant_fallback.h"
#include "common/util/check.h"
#include "common/util/fp16.h"

namespace baton {

void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n) {
  BATON_CHECK(n % kQK4_0 == 0, "q4_0 row length must be a multiple of 32");
  const int64_t n_blocks = n / kQK4_0;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* xb = x + b * kQK4_0;  // [32]
    float amax = 0.0f;
    float max = 0.0f;  // signed value with the largest magnitude
    for (int j = 0; j < kQK4_0; ++j) {
      if (amax < std::fabs(xb[j])) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    // Signed scale: `max` maps to q = 0 (-8); the opposite extreme maps to
    // 16, clamped to 15.
    const float d = max / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const float x0 = xb[j] * id;
      const float x1 = xb[kQK4_0 / 2 + j] * id;
      const uint8_t q0 = static_cast<uint8_t>(std::min<int>(15, static_cast<int8_t>(x0 + 8.5f)));
      const uint8_t q1 = static_cast<uint8_t>(std::min<int>(15, static_cast<int8_t>(x1 + 8.5f)));
      y[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n) {
  BATON_CHECK(n % kQK4_0 == 0, "q4_0 row length must be a multiple of 32");
  const int64_t n_blocks = n / kQK4_0;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    float* yb = y + b * kQK4_0;  // [32]
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const int q0 = (x[b].qs[j] & 0x0F) - 8;
      const int q1 = (x[b].qs[j] >> 4) - 8;
      yb[j] = static_cast<float>(q0) * d;
      yb[kQK4_0 / 2 + j] = static_cast<float>(q1) * d;
    }
  }
}

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  BATON_CHECK(n % kQK8_0 == 0, "q8_0 row length must be a multiple of 32");
  const int64_t n_blocks = n / kQK8_0;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* xb = x + b * kQK8_0;  // [32]
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK8_0; ++j) y[b].qs[j] = static_cast<int8_t>(std::roundf(xb[j] * id));
  }
}

void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n) {
  BATON_CHECK(n % kQK8_0 == 0, "q8_0 row length must be a multiple of 32");
  const int64_t n_blocks = n / kQK8_0;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < kQK8_0; ++j) y[b * kQK8_0 + j] = static_cast<float>(x[b].qs[j]) * d;
  }
}

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::kF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
      return;
    }
    case GgmlType::kBF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
      return;
    }
    case GgmlType::kQ4_0: dequantize_row_q4_0(static_cast<const BlockQ4_0*>(src), dst, n); return;
    case GgmlType::kQ8_0: dequantize_row_q8_0(static_cast<const BlockQ8_0*>(src), dst, n); return;
    case GgmlType::kQ4_1: dequantize_row_q4_1(static_cast<const BlockQ4_1*>(src), dst, n); return;
    case GgmlType::kQ5_0: dequantize_row_q5_0(static_cast<const BlockQ5_0*>(src), dst, n); return;
    case GgmlType::kQ5_1: dequantize_row_q5_1(static_cast<const BlockQ5_1*>(src), dst, n); return;
    case GgmlType::kQ4_K: dequantize_row_q4_k(static_cast<const BlockQ4_K*>(src), dst, n); return;
    case GgmlType::kQ5_K: dequantize_row_q5_k(static_cast<const BlockQ5_K*>(src), dst, n); return;
    case GgmlType::kQ6_K: dequantize_row_q6_k(static_cast<const BlockQ6_K*>(src), dst, n); return;
    default: break;  // not (yet) supported: handled below
  }
  BATON_CHECK(false, "dequantize_row: unsupported GgmlType");
}

void quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::kF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
      return;
    }
    case GgmlType::kBF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
      return;
    }
    case GgmlType::kQ4_0: quantize_row_q4_0(src, static_cast<BlockQ4_0*>(dst), n); return;
    case GgmlType::kQ8_0: quantize_row_q8_0(src, static_cast<BlockQ8_0*>(dst), n); return;
    case GgmlType::kQ4_1: quantize_row_q4_1(src, static_cast<BlockQ4_1*>(dst), n); return;
    case GgmlType::kQ5_0: quantize_row_q5_0(src, static_cast<BlockQ5_0*>(dst), n); return;
    case GgmlType::kQ5_1: quantize_row_q5_1(src, static_cast<BlockQ5_1*>(dst), n); return;
    case GgmlType::kQ4_K: quantize_row_q4_k(src, static_cast<BlockQ4_K*>(dst), n); return;
    case GgmlType::kQ5_K: quantize_row_q5_k(src, static_cast<BlockQ5_K*>(dst), n); return;
    case GgmlType::kQ6_K: quantize_row_q6_k(src, static_cast<BlockQ6_K*>(dst), n); return;
    default: break;  // not (yet) supported: handled below
  }
  BATON_CHECK(false, "quantize_row: unsupported GgmlType");
}

}  // namespace baton
