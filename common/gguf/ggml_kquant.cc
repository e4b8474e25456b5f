#include "common/gguf/ggml_kquant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/util/check.h"
#include "common/util/fp16.h"

// Every float expression below keeps ggml's operand order: the reference bytes
// depend on each rounding step (ggml-base is built without FMA as well).
namespace baton {
namespace {

constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS: below it a group counts as zero

// Round to nearest, ties to even, for |f| < 2^22: ggml's nearest_int (adding
// 1.5 * 2^23 leaves the rounded integer in the low mantissa bits).
int nearest_int(float f) {
  const float v = f + 12582912.f;
  int32_t i;
  std::memcpy(&i, &v, sizeof(i));
  return (i & 0x007fffff) - 0x00400000;
}

// Fits x[i] ~ scale * L[i] - the_min (L in 0..nmax) minimizing the weighted
// squared error: start from the min/max grid, then try nstep + 1 grids of
// (nmax + rmin + rdelta * is) levels and keep the least-squares fit of the
// best one. Returns scale; *the_min is the (positive) offset. ggml's
// make_qkx2_quants with use_mad = false.
float fit_scale_min(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min, uint8_t* Laux,
                    float rmin, float rdelta, int nstep) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = diff * diff;
    best_error += weights[i] * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Symmetric fit x[i] ~ scale * (L[i] - nmax), L in 0..2*nmax-1, weights x^2:
// the max-magnitude grid and 18 neighbours (nmax +- 0.1 * is), keeping the
// least-squares scale of the best. ggml's make_qx_quants with rmse_type 1 and
// no importance weights.
float fit_scale_symmetric(int n, int nmax, const float* x, int8_t* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Shared by Q4_K (nmax 15) and Q5_K (nmax 31): fits the 8 sub-blocks of 32,
// stores d, dmin and the packed 6-bit scales/mins, and leaves the final
// levels of x in L[256].
template <typename Block>
void quantize_superblock_scale_min(const float* x, Block* y, int nmax, float rmin, float rdelta, int nstep,
                                   uint8_t* L) {
  uint8_t Laux[32];
  float weights[32];
  float mins[kQK_K / 32];
  float scales[kQK_K / 32];
  float max_scale = 0;  // the min is subtracted, so scales are positive
  float max_min = 0;
  for (int j = 0; j < kQK_K / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = fit_scale_min(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < kQK_K / 32; ++j) {
    // uint8_t first, then clamp: ggml's order (a negative fit wraps).
    uint8_t ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
    ls = std::min<uint8_t>(63, ls);
    lm = std::min<uint8_t>(63, lm);
    if (j < 4) {
      y->scales[j] = ls;
      y->scales[j + 4] = lm;
    } else {
      y->scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      y->scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      y->scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  y->d = fp32_to_fp16(max_scale / 63.f);
  y->dmin = fp32_to_fp16(max_min / 63.f);
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t sc, m;
    kquant_scale_min(j, y->scales, &sc, &m);
    const float d = fp16_to_fp32(y->d) * sc;
    if (d == 0.0f) continue;  // keeps the fit's levels, as ggml does
    const float dm = fp16_to_fp32(y->dmin) * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

}  // namespace

void kquant_scale_min(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void quantize_row_q4_k(const float* x, BlockQ4_K* y, int64_t n) {
  BATON_CHECK(n % kQK_K == 0, "q4_K row length must be a multiple of 256");
  uint8_t L[kQK_K];
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    quantize_superblock_scale_min(x, &y[b], 15, -1.f, 0.1f, 20, L);
    // qs[32 * (j / 64) + l]: low nibble element j + l, high nibble j + l + 32.
    uint8_t* q = y[b].qs;
    for (int j = 0; j < kQK_K; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
  }
}

void quantize_row_q5_k(const float* x, BlockQ5_K* y, int64_t n) {
  BATON_CHECK(n % kQK_K == 0, "q5_K row length must be a multiple of 256");
  uint8_t L[kQK_K];
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    quantize_superblock_scale_min(x, &y[b], 31, -0.5f, 0.1f, 15, L);
    // Low 4 bits as Q4_K; bit 4 of elements j + l / j + l + 32 in bits
    // 2 * (j / 64) and 2 * (j / 64) + 1 of qh[l].
    uint8_t* qh = y[b].qh;
    uint8_t* ql = y[b].qs;
    std::memset(qh, 0, kQK_K / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int j = 0; j < kQK_K; j += 64, ql += 32) {
      for (int l = 0; l < 32; ++l) {
        int l1 = L[j + l];
        if (l1 > 15) {
          l1 -= 16;
          qh[l] |= m1;
        }
        int l2 = L[j + l + 32];
        if (l2 > 15) {
          l2 -= 16;
          qh[l] |= m2;
        }
        ql[l] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

void quantize_row_q6_k(const float* x, BlockQ6_K* y, int64_t n) {
  BATON_CHECK(n % kQK_K == 0, "q6_K row length must be a multiple of 256");
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    float max_scale = 0;
    float max_abs_scale = 0;
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      const float scale = fit_scale_symmetric(16, 32, x + 16 * ib, L + 16 * ib);
      scales[ib] = scale;
      const float abs_scale = std::fabs(scale);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[b], 0, sizeof(BlockQ6_K));
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[b].d = fp32_to_fp16(1 / iscale);
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      y[b].scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = fp16_to_fp32(y[b].d) * y[b].scales[j];
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        int l = nearest_int(x[16 * j + ii] / d);
        l = std::max(-32, std::min(31, l));
        L[16 * j + ii] = static_cast<int8_t>(l + 32);
      }
    }
    // Per 128 elements: ql[l] = e(l) | e(l + 64) << 4, ql[l + 32] = e(l + 32) |
    // e(l + 96) << 4; qh[l] holds the top 2 bits of e(l), e(l+32), e(l+64), e(l+96).
    uint8_t* ql = y[b].ql;
    uint8_t* qh = y[b].qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l + 0] & 0xF;
        const uint8_t q2 = L[j + l + 32] & 0xF;
        const uint8_t q3 = L[j + l + 64] & 0xF;
        const uint8_t q4 = L[j + l + 96] & 0xF;
        ql[l + 0] = static_cast<uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                     ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

void dequantize_row_q4_k(const BlockQ4_K* x, float* y, int64_t n) {
  BATON_CHECK(n % kQK_K == 0, "q4_K row length must be a multiple of 256");
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const uint8_t* q = x[b].qs;
    const float d = fp16_to_fp32(x[b].d);
    const float min = fp16_to_fp32(x[b].dmin);
    for (int j = 0, is = 0; j < kQK_K; j += 64, q += 32, is += 2) {
      uint8_t sc, m;
      kquant_scale_min(is + 0, x[b].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      kquant_scale_min(is + 1, x[b].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

void dequantize_row_q5_k(const BlockQ5_K* x, float* y, int64_t n) {
  BATON_CHECK(n % kQK_K == 0, "q5_K row length must be a multiple of 256");
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const uint8_t* ql = x[b].qs;
    const uint8_t* qh = x[b].qh;
    const float d = fp16_to_fp32(x[b].d);
    const float min = fp16_to_fp32(x[b].dmin);
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < kQK_K; j += 64, ql += 32, is += 2) {
      uint8_t sc, m;
      kquant_scale_min(is + 0, x[b].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      kquant_scale_min(is + 1, x[b].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

void dequantize_row_q6_k(const BlockQ6_K* x, float* y, int64_t n) {
  BATON_CHECK(n % kQK_K == 0, "q6_K row length must be a multiple of 256");
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    const uint8_t* ql = x[b].ql;
    const uint8_t* qh = x[b].qh;
    const int8_t* sc = x[b].scales;
    for (int j = 0; j < kQK_K; j += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

}  // namespace baton
