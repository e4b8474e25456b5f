#include "common/kv_codec/kv_quant.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/kv_codec/kv_kernels.h"
#include "common/util/fp16.h"

namespace baton::kv_quant {
namespace {

// Round to nearest even for |x| < 2^22 without a libm call (vectorizes).
inline float round_nearest(float x) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (x + kMagic) - kMagic;
}

inline int8_t int8_code(float x, float inverse) {
  return static_cast<int8_t>(std::clamp(round_nearest(x * inverse), -127.0f, 127.0f));
}

inline uint8_t int4_code(float x, float min, float inverse) {
  return static_cast<uint8_t>(std::clamp(round_nearest((x - min) * inverse), 0.0f, 15.0f));
}

}  // namespace

void hadamard_inplace(float* x, int n) { kv_kernels_impl::kv_kernels().hadamard_rows(x, 1, n); }

void hadamard_rows(float* x, int64_t n_vectors, int n) { kv_kernels_impl::kv_kernels().hadamard_rows(x, n_vectors, n); }

void quantize_int8_groups(const float* x, int64_t n, int group, int8_t* codes, uint16_t* scales) {
  if (auto* kernel = kv_kernels_impl::kv_kernels().quantize_int8; kernel != nullptr && group % 16 == 0) {
    return kernel(x, n, group, codes, scales);
  }
  quantize_int8_groups_scalar(x, n, group, codes, scales);
}

void quantize_int8_groups_scalar(const float* x, int64_t n, int group, int8_t* codes, uint16_t* scales) {
  for (int64_t g = 0; g * group < n; ++g) {
    const float* xg = x + g * group;
    float amax = 0.0f;
    for (int i = 0; i < group; ++i) amax = std::max(amax, std::fabs(xg[i]));
    const Scale s = make_scale(amax / 127.0f);
    scales[g] = s.half;
    for (int i = 0; i < group; ++i) codes[g * group + i] = int8_code(xg[i], s.inverse);
  }
}

void quantize_int4_groups(const float* x, int64_t n, int group, uint8_t* codes, uint16_t* scales,
                          uint16_t* mins) {
  if (auto* kernel = kv_kernels_impl::kv_kernels().quantize_int4; kernel != nullptr && group % 16 == 0) {
    return kernel(x, n, group, codes, scales, mins);
  }
  quantize_int4_groups_scalar(x, n, group, codes, scales, mins);
}

void quantize_int4_groups_scalar(const float* x, int64_t n, int group, uint8_t* codes, uint16_t* scales,
                                 uint16_t* mins) {
  for (int64_t g = 0; g * group < n; ++g) {
    const float* xg = x + g * group;
    float lo = xg[0], hi = xg[0];
    for (int i = 1; i < group; ++i) {
      lo = std::min(lo, xg[i]);
      hi = std::max(hi, xg[i]);
    }
    const uint16_t min_half = fp32_to_fp16(lo);
    const float min = fp16_to_fp32(min_half);
    // Scale from the f16 minimum so the top code still reaches the maximum.
    const Scale s = make_scale((hi - min) / 15.0f);
    scales[g] = s.half;
    mins[g] = min_half;
    // Groups are even (KvCodecConfig::validate): a group starts on a byte.
    uint8_t* out = codes + g * group / 2;
    for (int i = 0; i < group; i += 2) {
      out[i / 2] = static_cast<uint8_t>(int4_code(xg[i], min, s.inverse) | (int4_code(xg[i + 1], min, s.inverse) << 4));
    }
  }
}

void dequantize_int8_groups(const int8_t* codes, const uint16_t* scales, int64_t n, int group, float* out) {
  kv_kernels_impl::kv_kernels().dequantize_int8(codes, scales, n, group, out);
}

void dequantize_int4_groups(const uint8_t* codes, const uint16_t* scales, const uint16_t* mins, int64_t n,
                            int group, float* out) {
  kv_kernels_impl::kv_kernels().dequantize_int4(codes, scales, mins, n, group, out);
}

void quantize_int8_channels(const float* x, int64_t n_tokens, int64_t width, int8_t* codes, uint16_t* scales) {
  std::vector<float> amax(static_cast<size_t>(width), 0.0f);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* row = x + t * width;
    for (int64_t c = 0; c < width; ++c) amax[c] = std::max(amax[c], std::fabs(row[c]));
  }
  std::vector<float> inverse(static_cast<size_t>(width));
  for (int64_t c = 0; c < width; ++c) {
    const Scale s = make_scale(amax[c] / 127.0f);
    scales[c] = s.half;
    inverse[c] = s.inverse;
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* row = x + t * width;
    int8_t* out = codes + t * width;
    for (int64_t c = 0; c < width; ++c) out[c] = int8_code(row[c], inverse[c]);
  }
}

void quantize_int4_channels(const float* x, int64_t n_tokens, int64_t width, uint8_t* codes, uint16_t* scales,
                            uint16_t* mins) {
  std::vector<float> lo(x, x + width), hi(x, x + width);
  for (int64_t t = 1; t < n_tokens; ++t) {
    const float* row = x + t * width;
    for (int64_t c = 0; c < width; ++c) {
      lo[c] = std::min(lo[c], row[c]);
      hi[c] = std::max(hi[c], row[c]);
    }
  }
  std::vector<float> inverse(static_cast<size_t>(width));
  for (int64_t c = 0; c < width; ++c) {
    mins[c] = fp32_to_fp16(lo[c]);
    lo[c] = fp16_to_fp32(mins[c]);
    const Scale s = make_scale((hi[c] - lo[c]) / 15.0f);
    scales[c] = s.half;
    inverse[c] = s.inverse;
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* row = x + t * width;
    uint8_t* out = codes + t * (width / 2);
    for (int64_t c = 0; c < width; c += 2) {
      out[c / 2] = static_cast<uint8_t>(int4_code(row[c], lo[c], inverse[c]) |
                                        (int4_code(row[c + 1], lo[c + 1], inverse[c + 1]) << 4));
    }
  }
}

void dequantize_int8_channels(const int8_t* codes, const uint16_t* scales, int64_t n_tokens, int64_t width,
                              float* out) {
  std::vector<float> s(static_cast<size_t>(width));
  f16_to_f32(scales, s.data(), width);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int8_t* row = codes + t * width;
    float* o = out + t * width;
    for (int64_t c = 0; c < width; ++c) o[c] = s[c] * static_cast<float>(row[c]);
  }
}

void dequantize_int4_channels(const uint8_t* codes, const uint16_t* scales, const uint16_t* mins,
                              int64_t n_tokens, int64_t width, float* out) {
  std::vector<float> s(static_cast<size_t>(width)), m(static_cast<size_t>(width));
  f16_to_f32(scales, s.data(), width);
  f16_to_f32(mins, m.data(), width);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const uint8_t* row = codes + t * (width / 2);
    float* o = out + t * width;
    for (int64_t c = 0; c < width; c += 2) {
      o[c] = s[c] * static_cast<float>(row[c / 2] & 15) + m[c];
      o[c + 1] = s[c + 1] * static_cast<float>(row[c / 2] >> 4) + m[c + 1];
    }
  }
}

void f32_to_f16(const float* x, uint16_t* out, int64_t n) { kv_kernels_impl::kv_kernels().f32_to_f16(x, out, n); }

void f16_to_f32(const uint16_t* x, float* out, int64_t n) { kv_kernels_impl::kv_kernels().f16_to_f32(x, out, n); }

bool all_f16_finite(const uint16_t* x, int64_t n) {
  uint16_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= static_cast<uint16_t>((x[i] & 0x7c00u) == 0x7c00u);
  return bad == 0;
}

}  // namespace baton::kv_quant
