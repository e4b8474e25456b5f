// The ISA-independent parts of the INT8-key attention step (kv_kernels.h,
// attend_tile_q8): query quantization, the support check, and the scalar
// kernel (the scalar and AVX2 sets; the AVX-512 set has its own, VNNI).
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "common/kv_codec/kv_kernels.h"
#include "common/util/fp16.h"

namespace baton::kv_kernels_impl {

void quantize_query_q8(const float* q, int head_dim, float scale, int8_t* codes, float* scales, int32_t* bias) {
  for (int b = 0; b * kQ8Block < head_dim; ++b) {
    const float* x = q + b * kQ8Block;
    float amax = 0.0f;
    for (int d = 0; d < kQ8Block; ++d) amax = std::max(amax, std::fabs(x[d]));
    const float s = amax / 127.0f;
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int d = 0; d < kQ8Block; ++d) {
      // |x * inv| <= 127 (up to rounding of inv): clamp so the code is a byte.
      const int code = std::clamp(static_cast<int>(std::lround(x[d] * inv)), -127, 127);
      codes[b * kQ8Block + d] = static_cast<int8_t>(code);
      sum += code;
    }
    scales[b] = s * scale;
    bias[b] = -128 * sum;
  }
}

bool q8_tile_supported(const KvHeadRows& k, const KvHeadRows& v, int head_dim) {
  return k.bits == 8 && v.bits == 8 && k.group > 0 && k.group % kQ8Block == 0 && v.group > 0 && v.group % 16 == 0 &&
         head_dim % kQ8Block == 0 && head_dim <= kQ8MaxHeadDim && head_dim % k.group == 0 && head_dim % v.group == 0;
}

void attend_tile_q8_scalar(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const QueryQ8& q, int n_q,
                           int head_dim, int lo, int hi, float* m, float* l, float* acc, float* scratch) {
  const int n_blocks = head_dim / kQ8Block;
  for (int i = 0; i < n_q; ++i) {
    const int8_t* qc = q.codes + int64_t{i} * head_dim;
    const float* qs = q.scales + int64_t{i} * n_blocks;
    const int32_t* qb = q.bias + int64_t{i} * n_blocks;
    float* s = scratch + int64_t{i} * kAttentionTileRows;  // [kAttentionTileRows], rows [lo, hi) used
    float tile_max = -INFINITY;
    for (int r = lo; r < hi; ++r) {
      const int64_t row = tile_row + r;
      const int8_t* kr = reinterpret_cast<const int8_t*>(k.codes + row * k.row_code_bytes);
      const uint16_t* ks = k.scales + row * k.row_groups;
      float dot = 0.0f;
      for (int b = 0; b < n_blocks; ++b) {
        int32_t sum = qb[b];
        for (int d = b * kQ8Block; d < (b + 1) * kQ8Block; ++d) sum += int32_t{qc[d]} * (int32_t{kr[d]} + 128);
        dot = std::fma(static_cast<float>(sum) * qs[b], fp16_to_fp32(ks[b * kQ8Block / k.group]), dot);
      }
      s[r] = dot;
      tile_max = std::max(tile_max, dot);
    }
    const float m_new = std::max(m[i], tile_max);
    // As attend_tile: alpha exactly 1 when the max holds (no rescale).
    const float alpha = m_new == m[i] ? 1.0f : std::exp(m[i] - m_new);
    float sum = 0.0f;
    for (int r = lo; r < hi; ++r) {
      s[r] = std::exp(s[r] - m_new);
      sum += s[r];
    }
    m[i] = m_new;
    l[i] = l[i] * alpha + sum;
    float* ai = acc + int64_t{i} * head_dim;
    if (alpha != 1.0f) {
      for (int d = 0; d < head_dim; ++d) ai[d] *= alpha;
    }
    for (int r = lo; r < hi; ++r) {
      const int64_t row = tile_row + r;
      const int8_t* vr = reinterpret_cast<const int8_t*>(v.codes + row * v.row_code_bytes);
      const uint16_t* vs = v.scales + row * v.row_groups;
      for (int g = 0; g * v.group < head_dim; ++g) {
        const float w = s[r] * fp16_to_fp32(vs[g]);
        for (int d = g * v.group; d < (g + 1) * v.group; ++d) ai[d] += w * static_cast<float>(vr[d]);
      }
    }
  }
}

}  // namespace baton::kv_kernels_impl
