// The ISA-independent parts of the INT8 in-place attention step (kv_kernels.h,
// attend_tile_q8): query quantization, the support check, and the scalar
// kernels, which define the arithmetic (the integer q . k, the quantized
// weights and the integer p . V) that the AVX-512 set computes with VNNI.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "common/kv_codec/kv_kernels.h"
#include "common/util/fp16.h"

namespace baton::kv_kernels_impl {

namespace {

// std::lround for |y| < 2^24 (a query code's range is +-127): the nearest
// integer, halves away from zero, inline (lround is a libm call per code).
// y - trunc(y) is exact there, so the comparison with 0.5 decides as lround.
inline int round_half_away(float y) {
  const int t = static_cast<int>(y);  // toward zero
  const float frac = y - static_cast<float>(t);
  return t + (frac >= 0.5f ? 1 : 0) - (frac <= -0.5f ? 1 : 0);
}

}  // namespace

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
      const int code = std::clamp(round_half_away(x[d] * inv), -127, 127);
      codes[b * kQ8Block + d] = static_cast<int8_t>(code);
      sum += code;
    }
    scales[b] = s * scale;
    bias[b] = -128 * sum;
  }
}

bool q8_tile_supported(const KvHeadRows& k, const KvHeadRows& v, int head_dim) {
  return k.bits == 8 && v.bits == 8 && k.group > 0 && k.group % kQ8Block == 0 && v.group > 0 && v.group % 32 == 0 &&
         head_dim % kQ8Block == 0 && head_dim <= kQ8MaxHeadDim && head_dim % k.group == 0 && head_dim % v.group == 0;
}

namespace {

// The value product of one head over tile rows [lo, hi) (kv_kernels.h,
// kQ8WeightMax): p [kAttentionTileRows] the weights exp(s - m'), p_ref =
// exp(t - m'), acc [head_dim].
void values_q8_scalar(const KvHeadRows& v, int64_t tile_row, const float* p, float p_ref, int lo, int hi, float* acc,
                      int head_dim) {
  const float c = p_ref > kQ8WeightTiny ? 1.0f / p_ref : 0.0f;
  int32_t sum[kQ8MaxHeadDim];
  for (int g = 0; g * v.group < head_dim; ++g) {
    auto scale = [&](int r) { return fp16_to_fp32(v.scales[(tile_row + r) * v.row_groups + g]); };
    float vs_max = 0.0f;
    for (int r = lo; r < hi; ++r) vs_max = std::max(vs_max, scale(r));
    const float ratio = vs_max > 0.0f ? static_cast<float>(kQ8WeightMax) / vs_max : 0.0f;
    const float step = p_ref * (vs_max / static_cast<float>(kQ8WeightMax));
    std::fill(sum, sum + v.group, 0);
    for (int r = lo; r < hi; ++r) {
      const float w = (p[r] * c) * (scale(r) * ratio);
      const int32_t code = std::min(static_cast<int32_t>(std::lrint(w)), int32_t{kQ8WeightMax});
      const int8_t* vr = reinterpret_cast<const int8_t*>(v.codes + (tile_row + r) * v.row_code_bytes) + g * v.group;
      for (int d = 0; d < v.group; ++d) sum[d] += code * int32_t{vr[d]};
    }
    float* ag = acc + g * v.group;
    for (int d = 0; d < v.group; ++d) ag[d] = std::fma(static_cast<float>(sum[d]), step, ag[d]);
  }
}

}  // namespace

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
    float* ai = acc + int64_t{i} * head_dim;
    online_softmax_step(s, lo, hi, tile_max, m + i, l + i, ai, head_dim);
    const float p_ref = tile_max == m[i] ? 1.0f : std::exp(tile_max - m[i]);
    values_q8_scalar(v, tile_row, s, p_ref, lo, hi, ai, head_dim);
  }
}

// Each position on its own: the arithmetic of a head never depends on the
// others, so this is the reference the AVX-512 kernel's shared reads must match.
void attend_tile_q8_positions_scalar(const KvHeadRows& k, const KvHeadRows& v, int64_t tile_row, const QueryQ8& q,
                                     const TilePositions& pos, int n_q, int head_dim, float* m, float* l, float* acc,
                                     float* scratch) {
  const int64_t n_blocks = head_dim / kQ8Block;
  for (int j = 0; j < pos.n; ++j) {
    const int64_t qh = j * pos.q_heads_stride, sh = j * pos.state_stride;
    const QueryQ8 qj{q.codes + qh * head_dim, q.scales + qh * n_blocks, q.bias + qh * n_blocks};
    attend_tile_q8_scalar(k, v, tile_row, qj, n_q, head_dim, pos.lo[j], pos.hi[j], m + sh, l + sh,
                          acc + sh * head_dim, scratch);
  }
}

}  // namespace baton::kv_kernels_impl
