#include "common/gguf/ggml_quant_fallback.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "common/util/check.h"
#include "common/util/fp16.h"

namespace baton {
namespace {

// Smallest and largest element of x[0, n).
void min_max(const float* x, int n, float* min, float* max) {
  *min = FLT_MAX;
  *max = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < *min) *min = x[j];
    if (x[j] > *max) *max = x[j];
  }
}

// The 5th bits of 32 five-bit levels as Q5_0/Q5_1 store them: bit j of qh
// for element j.
void store_high_bits(const uint8_t* levels, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>((levels[j] & 0x10u) >> 4) << j;
  std::memcpy(qh_bytes, &qh, sizeof(qh));
}

}  // namespace

void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n) {
  BATON_CHECK(n % kQK4_1 == 0, "q4_1 row length must be a multiple of 32");
  for (int64_t b = 0; b < n / kQK4_1; ++b) {
    const float* xb = x + b * kQK4_1;  // [32]
    float min, max;
    min_max(xb, kQK4_1, &min, &max);
    const float d = (max - min) / ((1 << 4) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    y[b].m = fp32_to_fp16(min);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      const float x0 = (xb[j] - min) * id;
      const float x1 = (xb[kQK4_1 / 2 + j] - min) * id;
      const uint8_t q0 = static_cast<uint8_t>(std::min<int>(15, static_cast<int8_t>(x0 + 0.5f)));
      const uint8_t q1 = static_cast<uint8_t>(std::min<int>(15, static_cast<int8_t>(x1 + 0.5f)));
      y[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n) {
  BATON_CHECK(n % kQK5_0 == 0, "q5_0 row length must be a multiple of 32");
  for (int64_t b = 0; b < n / kQK5_0; ++b) {
    const float* xb = x + b * kQK5_0;  // [32]
    float amax = 0.0f;
    float max = 0.0f;  // signed value with the largest magnitude
    for (int j = 0; j < kQK5_0; ++j) {
      if (amax < std::fabs(xb[j])) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    const float d = max / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    uint8_t levels[kQK5_0];
    for (int j = 0; j < kQK5_0; ++j) {
      levels[j] = static_cast<uint8_t>(std::min<int>(31, static_cast<int8_t>(xb[j] * id + 16.5f)));
    }
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      y[b].qs[j] = static_cast<uint8_t>((levels[j] & 0x0F) | ((levels[j + kQK5_0 / 2] & 0x0F) << 4));
    }
    store_high_bits(levels, y[b].qh);
  }
}

void quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t n) {
  BATON_CHECK(n % kQK5_1 == 0, "q5_1 row length must be a multiple of 32");
  for (int64_t b = 0; b < n / kQK5_1; ++b) {
    const float* xb = x + b * kQK5_1;  // [32]
    float min, max;
    min_max(xb, kQK5_1, &min, &max);
    const float d = (max - min) / ((1 << 5) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    y[b].m = fp32_to_fp16(min);
    uint8_t levels[kQK5_1];
    for (int j = 0; j < kQK5_1; ++j) levels[j] = static_cast<uint8_t>((xb[j] - min) * id + 0.5f);
    for (int j = 0; j < kQK5_1 / 2; ++j) {
      y[b].qs[j] = static_cast<uint8_t>((levels[j] & 0x0F) | ((levels[j + kQK5_1 / 2] & 0x0F) << 4));
    }
    store_high_bits(levels, y[b].qh);
  }
}

void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t n) {
  BATON_CHECK(n % kQK4_1 == 0, "q4_1 row length must be a multiple of 32");
  for (int64_t b = 0; b < n / kQK4_1; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    const float m = fp16_to_fp32(x[b].m);
    float* yb = y + b * kQK4_1;  // [32]
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      yb[j] = (x[b].qs[j] & 0x0F) * d + m;
      yb[kQK4_1 / 2 + j] = (x[b].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t n) {
  BATON_CHECK(n % kQK5_0 == 0, "q5_0 row length must be a multiple of 32");
  for (int64_t b = 0; b < n / kQK5_0; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    uint32_t qh;
    std::memcpy(&qh, x[b].qh, sizeof(qh));
    float* yb = y + b * kQK5_0;  // [32]
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      const int h0 = ((qh >> j) << 4) & 0x10;
      const int h1 = (qh >> (j + 12)) & 0x10;
      yb[j] = (((x[b].qs[j] & 0x0F) | h0) - 16) * d;
      yb[kQK5_0 / 2 + j] = (((x[b].qs[j] >> 4) | h1) - 16) * d;
    }
  }
}

void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t n) {
  BATON_CHECK(n % kQK5_1 == 0, "q5_1 row length must be a multiple of 32");
  for (int64_t b = 0; b < n / kQK5_1; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    const float m = fp16_to_fp32(x[b].m);
    uint32_t qh;
    std::memcpy(&qh, x[b].qh, sizeof(qh));
    float* yb = y + b * kQK5_1;  // [32]
    for (int j = 0; j < kQK5_1 / 2; ++j) {
      const int h0 = ((qh >> j) << 4) & 0x10;
      const int h1 = (qh >> (j + 12)) & 0x10;
      yb[j] = ((x[b].qs[j] & 0x0F) | h0) * d + m;
      yb[kQK5_1 / 2 + j] = ((x[b].qs[j] >> 4) | h1) * d + m;
    }
  }
}

}  // namespace baton
