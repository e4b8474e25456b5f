// attend_heads (one call per GQA head group over a quantized store head)
// against the per-row scalar path that QuantizedKvCache::attend used: per
// query head, dot each K row, softmax, accumulate each V row; every kernel
// set this CPU runs, every store format.
//
// Tolerance: relative to the scale of the float error, sum_j p_j * |V_j[d]|
// (+ the score error through the softmax): 2e-5. The kernels differ from the
// reference only in summation order and a polynomial exp (~2e-7 relative).
#include "common/kv_codec/kv_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/kv_codec/kv_quant.h"
#include "common/util/cpu_features.h"
#include "common/util/fp16.h"

namespace baton::kv_kernels_impl {
namespace {

struct Case {
  int bits;      // 16, 8, 4
  int head_dim;
  int group;     // INT8 / INT4
  int n_q;       // query heads per KV head
  int64_t n_ctx;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return "bits" + std::to_string(c.bits) + "_hd" + std::to_string(c.head_dim) + "_g" + std::to_string(c.group) +
         "_q" + std::to_string(c.n_q) + "_ctx" + std::to_string(c.n_ctx);
}

// A store plane of n_ctx rows holding two KV heads; the kernels see head 1
// (so row strides are larger than one head).
struct Plane {
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales, mins;
  KvHeadRows head;
};

Plane make_plane(const Case& c, std::mt19937& rng) {
  constexpr int kHeads = 2;
  Plane p;
  const int64_t elements = int64_t{kHeads} * c.head_dim;  // per row
  const int64_t row_code_bytes = c.bits == 16 ? 2 * elements : c.bits == 8 ? elements : elements / 2;
  const int64_t row_groups = c.bits == 16 ? 0 : elements / c.group;
  p.codes.resize(static_cast<size_t>(row_code_bytes * c.n_ctx));
  p.scales.resize(static_cast<size_t>(row_groups * c.n_ctx));
  if (c.bits == 4) p.mins.resize(p.scales.size());
  std::uniform_real_distribution<float> value(-1.5f, 1.5f), scale(0.005f, 0.05f);
  if (c.bits == 16) {
    auto* halves = reinterpret_cast<uint16_t*>(p.codes.data());
    for (size_t i = 0; i < p.codes.size() / 2; ++i) halves[i] = fp32_to_fp16(value(rng));
  } else {
    for (auto& b : p.codes) b = static_cast<uint8_t>(rng());
    for (auto& s : p.scales) s = fp32_to_fp16(scale(rng));
    for (auto& m : p.mins) m = fp32_to_fp16(value(rng) * 0.3f);
  }
  const int64_t head_code_bytes = row_code_bytes / kHeads, head_groups = row_groups / kHeads;
  p.head.bits = c.bits;
  p.head.codes = p.codes.data() + head_code_bytes;
  p.head.row_code_bytes = row_code_bytes;
  p.head.scales = c.bits == 16 ? nullptr : p.scales.data() + head_groups;
  p.head.mins = c.bits == 4 ? p.mins.data() + head_groups : nullptr;
  p.head.row_groups = row_groups;
  p.head.group = c.group;
  return p;
}

// Each head's output acc / l (heads of head_dim, as many as l holds) into out.
void write_normalized(const std::vector<float>& acc, const std::vector<float>& l, int head_dim, float* out) {
  for (size_t h = 0; h < l.size(); ++h) {
    for (int d = 0; d < head_dim; ++d) out[h * head_dim + d] = acc[h * head_dim + d] / l[h];
  }
}

// The query positions of an attend_tile_q8_positions call: n positions,
// their query heads q_stride apart, their states s_stride apart, rows [lo[j], hi[j]).
TilePositions tile_positions(int n, int64_t q_stride, int64_t s_stride, const int* lo, const int* hi) {
  return TilePositions{n, q_stride, s_stride, lo, hi, TilePrefetch{}};
}

// Random query heads (uniform in [-2, 2)), quantized by quantize_query_q8.
struct RandomQueriesQ8 {
  std::vector<int8_t> codes;
  std::vector<float> scales;
  std::vector<int32_t> bias;
  QueryQ8 view() const { return QueryQ8{codes.data(), scales.data(), bias.data()}; }
};

RandomQueriesQ8 random_queries_q8(int64_t heads, int head_dim, float scale, std::mt19937& rng) {
  const int blocks = head_dim / kQ8Block;
  std::vector<float> q(static_cast<size_t>(heads * head_dim));
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (float& x : q) x = dist(rng);
  RandomQueriesQ8 out{std::vector<int8_t>(q.size()), std::vector<float>(static_cast<size_t>(heads * blocks)),
                      std::vector<int32_t>(static_cast<size_t>(heads * blocks))};
  for (int64_t h = 0; h < heads; ++h) {
    quantize_query_q8(q.data() + h * head_dim, head_dim, scale, out.codes.data() + h * head_dim,
                      out.scales.data() + h * blocks, out.bias.data() + h * blocks);
  }
  return out;
}

// The per-row path with the scalar kernels; double softmax.
std::vector<double> reference(const KvKernels& s, const Plane& k, const Plane& v, const std::vector<float>& q,
                              const Case& c, float scale, std::vector<double>* magnitude) {
  std::vector<double> out(static_cast<size_t>(c.n_q * c.head_dim), 0.0);
  magnitude->assign(out.size(), 0.0);
  std::vector<float> row(c.head_dim);
  for (int i = 0; i < c.n_q; ++i) {
    const float* qi = q.data() + i * c.head_dim;
    std::vector<double> scores(c.n_ctx);
    for (int64_t j = 0; j < c.n_ctx; ++j) {
      const KvHeadRows& h = k.head;
      const uint8_t* codes = h.codes + j * h.row_code_bytes;
      float dot = 0;
      if (c.bits == 16) {
        dot = s.dot_f16(qi, reinterpret_cast<const uint16_t*>(codes), c.head_dim);
      } else if (c.bits == 8) {
        dot = s.dot_int8(qi, reinterpret_cast<const int8_t*>(codes), h.scales + j * h.row_groups, c.head_dim, c.group);
      } else {
        dot = s.dot_int4(qi, codes, h.scales + j * h.row_groups, h.mins + j * h.row_groups, c.head_dim, c.group);
      }
      scores[j] = double{dot} * scale;
    }
    double max_score = -INFINITY, sum = 0;
    for (double x : scores) max_score = std::max(max_score, x);
    for (double& x : scores) sum += (x = std::exp(x - max_score));
    for (int64_t j = 0; j < c.n_ctx; ++j) {
      const KvHeadRows& h = v.head;
      const uint8_t* codes = h.codes + j * h.row_code_bytes;
      std::fill(row.begin(), row.end(), 0.0f);
      if (c.bits == 16) {
        s.axpy_f16(1.0f, reinterpret_cast<const uint16_t*>(codes), row.data(), c.head_dim);
      } else if (c.bits == 8) {
        s.axpy_int8(1.0f, reinterpret_cast<const int8_t*>(codes), h.scales + j * h.row_groups, row.data(), c.head_dim,
                    c.group);
      } else {
        s.axpy_int4(1.0f, codes, h.scales + j * h.row_groups, h.mins + j * h.row_groups, row.data(), c.head_dim,
                    c.group);
      }
      const double p = scores[j] / sum;
      for (int d = 0; d < c.head_dim; ++d) {
        out[i * c.head_dim + d] += p * row[d];
        (*magnitude)[i * c.head_dim + d] += p * std::fabs(row[d]);
      }
    }
  }
  return out;
}

class AttendHeads : public testing::TestWithParam<Case> {};

TEST_P(AttendHeads, EveryKernelSetMatchesThePerRowScalarPath) {
  const Case& c = GetParam();
  std::mt19937 rng(static_cast<unsigned>(c.bits * 1000 + c.head_dim + c.n_ctx));
  const Plane k = make_plane(c, rng), v = make_plane(c, rng);
  std::vector<float> q(static_cast<size_t>(c.n_q * c.head_dim));  // [n_q, head_dim]
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (float& x : q) x = dist(rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const KvKernels scalar = kv_kernels_scalar();
  std::vector<double> magnitude;
  const std::vector<double> want = reference(scalar, k, v, q, c, scale, &magnitude);

  std::vector<std::pair<std::string, KvKernels>> sets = {{"scalar", scalar}};
  if (best_simd_level() >= SimdLevel::kAvx2) sets.emplace_back("avx2", kv_kernels_avx2());
  sets.emplace_back("dispatched", kv_kernels());
  for (const auto& [name, kernels] : sets) {
    std::vector<float> scratch(attend_heads_scratch_floats(c.n_q, c.head_dim, c.n_ctx), -7.0f);
    std::vector<float> out(q.size(), -3.0f);
    kernels.attend_heads(k.head, v.head, q.data(), c.n_q, c.head_dim, scale, c.n_ctx, scratch.data(), out.data());
    for (size_t e = 0; e < out.size(); ++e) {
      ASSERT_NEAR(out[e], want[e], 2e-5 * magnitude[e] + 1e-6) << name << " element " << e;
    }
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (int bits : {16, 8, 4})
    for (int head_dim : {64, 128, 24})
      for (int n_q : {1, 4})
        for (int64_t n_ctx : {1, 7, 300}) {
          const int group = head_dim == 24 ? 8 : 32;
          cases.push_back({bits, head_dim, group, n_q, n_ctx});
        }
  cases.push_back({8, 64, 64, 8, 129});   // one group per head, 8 query heads
  cases.push_back({4, 128, 128, 2, 65});
  cases.push_back({8, 32, 8, 4, 37});     // groups of 8: two scales per 16 dequantized elements
  cases.push_back({4, 32, 8, 4, 37});
  cases.push_back({16, 256, 32, 2, 20});  // head_dim > 128: the AVX2 row-at-a-time score path
  cases.push_back({4, 256, 32, 2, 20});
  cases.push_back({8, 64, 32, 6, 50});    // 6 query heads: a block of 4, then 2
  cases.push_back({8, 20, 4, 3, 33});     // groups of 4 and head_dim % 8 != 0: the scalar fallbacks
  cases.push_back({4, 20, 4, 3, 33});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Stores, AttendHeads, testing::ValuesIn(all_cases()), case_name);

// The tiled attention's kernels (tiled_attention.h): dequantize_head_rows
// gives each row the set's own per-row dequantization bit for bit; a run of
// attend_tile steps over tiles of kAttentionTileRows, the first starting
// past its tile's row 0 (a window's edge), equals a double-precision softmax
// over the same rows (same tolerance as above), and a head's result is the
// same bits whether its query heads are stepped together or alone.
using AttendTile = AttendHeads;

TEST_P(AttendTile, DequantizedRowsAndTileStepsMatchTheReferenceInEverySet) {
  const Case& c = GetParam();
  std::mt19937 rng(static_cast<unsigned>(c.bits * 77 + c.head_dim + c.n_ctx));
  const Plane k = make_plane(c, rng), v = make_plane(c, rng);
  std::vector<float> q(static_cast<size_t>(c.n_q * c.head_dim));
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (float& x : q) x = dist(rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const int64_t first = std::min<int64_t>(3, c.n_ctx - 1);  // rows [first, n_ctx)
  std::vector<std::pair<std::string, KvKernels>> sets = {{"scalar", kv_kernels_scalar()}};
  if (best_simd_level() >= SimdLevel::kAvx2) sets.emplace_back("avx2", kv_kernels_avx2());
  sets.emplace_back("dispatched", kv_kernels());
  for (const auto& [name, kern] : sets) {
    // Rows dequantized, [n_ctx, head_dim] each, against the per-row kernels.
    std::vector<float> kf(static_cast<size_t>(c.n_ctx * c.head_dim)), vf(kf.size()), row(c.head_dim);
    kern.dequantize_head_rows(k.head, 0, c.n_ctx, c.head_dim, kf.data());
    kern.dequantize_head_rows(v.head, 0, c.n_ctx, c.head_dim, vf.data());
    for (int64_t j = 0; j < c.n_ctx; ++j) {
      const uint8_t* codes = k.head.codes + j * k.head.row_code_bytes;
      if (c.bits == 16) {
        kern.f16_to_f32(reinterpret_cast<const uint16_t*>(codes), row.data(), c.head_dim);
      } else if (c.bits == 8) {
        kern.dequantize_int8(reinterpret_cast<const int8_t*>(codes), k.head.scales + j * k.head.row_groups,
                             c.head_dim, c.group, row.data());
      } else {
        kern.dequantize_int4(codes, k.head.scales + j * k.head.row_groups, k.head.mins + j * k.head.row_groups,
                             c.head_dim, c.group, row.data());
      }
      ASSERT_EQ(std::memcmp(row.data(), kf.data() + j * c.head_dim, sizeof(float) * c.head_dim), 0)
          << name << " row " << j;
    }
    // Tile steps for all heads together, then for each head alone.
    // A lambda may not capture a structured binding before clang 16 (the TSan build's compiler).
    auto run = [&, &kernels = kern](int head0, int n_heads, float* out) {
      std::vector<float> m(n_heads, -INFINITY), l(n_heads, 0.0f), acc(static_cast<size_t>(n_heads * c.head_dim));
      std::vector<float> scratch(static_cast<size_t>(n_heads * kAttentionTileRows), -5.0f);
      for (int64_t t0 = 0; t0 < c.n_ctx; t0 += kAttentionTileRows) {
        const int lo = static_cast<int>(std::max<int64_t>(first - t0, 0));
        const int hi = static_cast<int>(std::min<int64_t>(c.n_ctx - t0, kAttentionTileRows));
        if (lo >= hi) continue;
        kernels.attend_tile(kf.data() + t0 * c.head_dim, c.head_dim, vf.data() + t0 * c.head_dim, c.head_dim,
                            q.data() + head0 * c.head_dim, n_heads, c.head_dim, scale, lo, hi, m.data(), l.data(),
                            acc.data(), scratch.data());
      }
      write_normalized(acc, l, c.head_dim, out);
    };
    std::vector<float> together(q.size()), alone(q.size());
    run(0, c.n_q, together.data());
    for (int h = 0; h < c.n_q; ++h) run(h, 1, alone.data() + h * c.head_dim);
    ASSERT_EQ(std::memcmp(together.data(), alone.data(), sizeof(float) * q.size()), 0) << name;
    for (int h = 0; h < c.n_q; ++h) {
      const float* qh = q.data() + h * c.head_dim;
      std::vector<double> s;
      double max_s = -INFINITY, sum = 0;
      for (int64_t j = first; j < c.n_ctx; ++j) {
        double dot = 0;
        for (int d = 0; d < c.head_dim; ++d) dot += double{qh[d]} * kf[j * c.head_dim + d];
        s.push_back(dot * scale);
        max_s = std::max(max_s, s.back());
      }
      for (double& x : s) sum += (x = std::exp(x - max_s));
      for (int d = 0; d < c.head_dim; ++d) {
        double want = 0, magnitude = 0;
        for (int64_t j = first; j < c.n_ctx; ++j) {
          const double p = s[static_cast<size_t>(j - first)] / sum;
          want += p * vf[j * c.head_dim + d];
          magnitude += p * std::fabs(vf[j * c.head_dim + d]);
        }
        ASSERT_NEAR(together[h * c.head_dim + d], want, 2e-5 * magnitude + 1e-6) << name << " head " << h << " d " << d;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Stores, AttendTile, testing::ValuesIn(all_cases()), case_name);

// The tile steps that read a store's rows in place (tiled_attention.h):
//   INT8 K and V (attend_tile_q8), every set: the heads' query quantized by
//   quantize_query_q8; equal to a double-precision softmax over the
//   dequantized rows with that quantized query (same tolerance as
//   AttendTile: the integer q.k is exact, the rest differs in summation
//   order and the polynomial exp; plus the bound of the integer value
//   product, weight_bound), tiles stepped from a window's edge.
//   F16 K and V (attend_tile_f16, sets that have it): the same bits as
//   dequantize_head_rows + attend_tile of that set.
// Both: a head's result is the same bits stepped with the others or alone.
using AttendTileInPlace = AttendHeads;

// What the integer value product of attend_tile_q8 (kv_kernels.h,
// kQ8WeightMax) may move output dim d of a head by: per tile t, the weights
// p_r vs_r[g] are quantized with step max_{r in t} p_r * max_{r in t}
// vs_r[g] / kQ8WeightMax, each off by at most half a step (0.51: float
// rounding), so the normalized output moves by at most
//   sum_t max_{r in t} pn_r * max_{r in t} vs_r[g] * 0.51 / kQ8WeightMax * sum_{r in t} |c_r[d]|
// with pn the softmax probabilities. e: exp(s - max) of rows [first, n_ctx), sum their sum.
double weight_bound(const KvHeadRows& v, const std::vector<double>& e, double sum, int64_t first, int64_t n_ctx,
                    int d) {
  if (v.bits != 8) return 0.0;
  const int g = d / v.group;
  double bound = 0;
  for (int64_t t0 = 0; t0 < n_ctx; t0 += kAttentionTileRows) {
    double p_max = 0, vs_max = 0, codes = 0;
    for (int64_t j = std::max(t0, first); j < std::min(n_ctx, t0 + kAttentionTileRows); ++j) {
      p_max = std::max(p_max, e[static_cast<size_t>(j - first)] / sum);
      vs_max = std::max(vs_max, double{fp16_to_fp32(v.scales[j * v.row_groups + g])});
      codes += std::abs(int{reinterpret_cast<const int8_t*>(v.codes + j * v.row_code_bytes)[d]});
    }
    bound += p_max * vs_max * 0.51 / kQ8WeightMax * codes;
  }
  return bound;
}

TEST_P(AttendTileInPlace, MatchesTheReferenceAndIsTheSameBitsForEachHeadAlone) {
  const Case& c = GetParam();
  std::mt19937 rng(static_cast<unsigned>(c.bits * 91 + c.head_dim + c.n_ctx));
  const Plane k = make_plane(c, rng), v = make_plane(c, rng);
  std::vector<float> q(static_cast<size_t>(c.n_q * c.head_dim));
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (float& x : q) x = dist(rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const int64_t first = std::min<int64_t>(5, c.n_ctx - 1);  // rows [first, n_ctx)
  const int blocks = c.head_dim / kQ8Block;
  // Quantized query heads and their values (times the scale) for the reference.
  std::vector<int8_t> codes(q.size());
  std::vector<float> q_scales(static_cast<size_t>(c.n_q * blocks)), q_used(q.size());
  std::vector<int32_t> q_bias(q_scales.size());
  if (c.bits == 8) {
    for (int h = 0; h < c.n_q; ++h) {
      quantize_query_q8(q.data() + h * c.head_dim, c.head_dim, scale, codes.data() + h * c.head_dim,
                        q_scales.data() + h * blocks, q_bias.data() + h * blocks);
      for (int d = 0; d < c.head_dim; ++d) {
        q_used[h * c.head_dim + d] = codes[h * c.head_dim + d] * q_scales[h * blocks + d / kQ8Block];
      }
    }
  } else {
    for (size_t e = 0; e < q.size(); ++e) q_used[e] = q[e] * scale;
  }
  std::vector<std::pair<std::string, KvKernels>> sets = {{"scalar", kv_kernels_scalar()}};
  if (best_simd_level() >= SimdLevel::kAvx2) sets.emplace_back("avx2", kv_kernels_avx2());
  sets.emplace_back("dispatched", kv_kernels());
  int sets_run = 0;
  double worst_ratio = 0;
  for (const auto& [name, kern] : sets) {
    if (c.bits == 16 && kern.attend_tile_f16 == nullptr) continue;
    if (c.bits == 8 && kern.attend_tile_q8 == nullptr) continue;  // (every set has it today)
    ++sets_run;
    std::vector<float> kf(static_cast<size_t>(c.n_ctx * c.head_dim)), vf(kf.size());
    kern.dequantize_head_rows(k.head, 0, c.n_ctx, c.head_dim, kf.data());
    kern.dequantize_head_rows(v.head, 0, c.n_ctx, c.head_dim, vf.data());
    // Tile steps of heads [head0, head0 + n_heads): in place, or (dequantized)
    // attend_tile on the f32 rows.
    // A lambda may not capture a structured binding before clang 16 (the TSan build's compiler).
    // `prefetch`: F16 calls take the next tile's rows to prefetch (what a
    // decode step passes), which must not change a bit.
    auto run = [&, &kernels = kern](int head0, int n_heads, bool in_place, float* out, bool prefetch = false) {
      std::vector<float> m(n_heads, -INFINITY), l(n_heads, 0.0f), acc(static_cast<size_t>(n_heads * c.head_dim));
      std::vector<float> scratch(static_cast<size_t>(attend_tile_q8_scratch_floats(n_heads, c.head_dim)), -5.0f);
      for (int64_t t0 = 0; t0 < c.n_ctx; t0 += kAttentionTileRows) {
        const int lo = static_cast<int>(std::max<int64_t>(first - t0, 0));
        const int hi = static_cast<int>(std::min<int64_t>(c.n_ctx - t0, kAttentionTileRows));
        if (lo >= hi) continue;
        if (!in_place) {
          kernels.attend_tile(kf.data() + t0 * c.head_dim, c.head_dim, vf.data() + t0 * c.head_dim, c.head_dim,
                              q.data() + head0 * c.head_dim, n_heads, c.head_dim, scale, lo, hi, m.data(), l.data(),
                              acc.data(), scratch.data());
        } else if (c.bits == 8) {
          const QueryQ8 qh{codes.data() + head0 * c.head_dim, q_scales.data() + head0 * blocks,
                           q_bias.data() + head0 * blocks};
          kernels.attend_tile_q8(k.head, v.head, t0, qh, n_heads, c.head_dim, lo, hi, m.data(), l.data(), acc.data(),
                                 scratch.data());
        } else {
          TilePrefetch next;
          const int64_t next_rows = std::min<int64_t>(c.n_ctx - t0 - kAttentionTileRows, kAttentionTileRows);
          if (prefetch && next_rows > 0) {
            next.k = k.head.codes + (t0 + kAttentionTileRows) * k.head.row_code_bytes;
            next.v = v.head.codes + (t0 + kAttentionTileRows) * v.head.row_code_bytes;
            next.stride = k.head.row_code_bytes;
            next.rows = static_cast<int>(next_rows);
            next.lines = static_cast<int>((c.head_dim * 2 + 63) / 64);
          }
          kernels.attend_tile_f16(k.head, v.head, t0, q.data() + head0 * c.head_dim, n_heads, c.head_dim, scale, lo,
                                  hi, m.data(), l.data(), acc.data(), scratch.data(), next);
        }
      }
      write_normalized(acc, l, c.head_dim, out);
    };
    std::vector<float> together(q.size()), alone(q.size());
    run(0, c.n_q, true, together.data(), /*prefetch=*/true);
    for (int h = 0; h < c.n_q; ++h) run(h, 1, true, alone.data() + h * c.head_dim);
    ASSERT_EQ(std::memcmp(together.data(), alone.data(), sizeof(float) * q.size()), 0) << name;
    if (c.bits == 16) {
      std::vector<float> dequantized(q.size());
      run(0, c.n_q, false, dequantized.data());
      ASSERT_EQ(std::memcmp(together.data(), dequantized.data(), sizeof(float) * q.size()), 0) << name;
      continue;
    }
    for (int h = 0; h < c.n_q; ++h) {
      const float* qh = q_used.data() + h * c.head_dim;
      std::vector<double> s;
      double max_s = -INFINITY, sum = 0;
      for (int64_t j = first; j < c.n_ctx; ++j) {
        double dot = 0;
        for (int d = 0; d < c.head_dim; ++d) dot += double{qh[d]} * kf[j * c.head_dim + d];
        s.push_back(dot);
        max_s = std::max(max_s, s.back());
      }
      for (double& x : s) sum += (x = std::exp(x - max_s));
      for (int d = 0; d < c.head_dim; ++d) {
        double want = 0, magnitude = 0;
        for (int64_t j = first; j < c.n_ctx; ++j) {
          const double p = s[static_cast<size_t>(j - first)] / sum;
          want += p * vf[j * c.head_dim + d];
          magnitude += p * std::fabs(vf[j * c.head_dim + d]);
        }
        const double bound = weight_bound(v.head, s, sum, first, c.n_ctx, d);
        const double err = std::fabs(double{together[h * c.head_dim + d]} - want);
        ASSERT_LE(err, 2e-5 * magnitude + 1e-6 + bound) << name << " head " << h << " d " << d;
        if (bound > 0) worst_ratio = std::max(worst_ratio, err / (2e-5 * magnitude + 1e-6 + bound));
      }
    }
  }
  ASSERT_GT(sets_run, 0) << "no set has the kernel";
  if (c.bits == 8) std::printf("  worst error / (float tolerance + weight bound) %.3f\n", worst_ratio);
}

// attend_tile_q8_positions: positions with their own rows of a tile (a
// causal diagonal, a window's edge) and their own queries, in one call and
// one position at a time through attend_tile_q8: the same bits (m, l, acc),
// with the rows of a next call to prefetch (TilePositions::next) or not.
TEST(AttendTileQ8Positions, EachPositionIsTheSameBitsAsAlone) {
  for (const int head_dim : {64, 128, 256}) {
    const Case c{8, head_dim, 32, 4, 3 * kAttentionTileRows};
    std::mt19937 rng(static_cast<unsigned>(head_dim));
    const Plane k = make_plane(c, rng), v = make_plane(c, rng);
    const int blocks = head_dim / kQ8Block;
    std::vector<std::pair<std::string, KvKernels>> sets = {{"scalar", kv_kernels_scalar()}, {"dispatched", kv_kernels()}};
    if (best_simd_level() >= SimdLevel::kAvx2) sets.emplace_back("avx2", kv_kernels_avx2());
    for (const auto& [name, kern] : sets) {
      if (kern.attend_tile_q8_positions == nullptr) continue;
      for (const int n_pos : {1, 3, kQ8MaxPositions}) {
        SCOPED_TRACE(name + " head_dim " + std::to_string(head_dim) + " positions " + std::to_string(n_pos));
        // Position j's queries: n_q heads, stride n_q + 2 heads (other KV heads' queries between).
        const int64_t q_stride = c.n_q + 2;
        std::vector<float> q(static_cast<size_t>(n_pos * q_stride * head_dim));
        std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
        for (float& x : q) x = dist(rng);
        std::vector<int8_t> codes(q.size());
        std::vector<float> q_scales(static_cast<size_t>(n_pos * q_stride * blocks));
        std::vector<int32_t> q_bias(q_scales.size());
        for (int64_t h = 0; h < n_pos * q_stride; ++h) {
          quantize_query_q8(q.data() + h * head_dim, head_dim, 0.125f, codes.data() + h * head_dim,
                            q_scales.data() + h * blocks, q_bias.data() + h * blocks);
        }
        int lo[kQ8MaxPositions], hi[kQ8MaxPositions];
        for (int j = 0; j < n_pos; ++j) {
          lo[j] = j == 1 ? 7 : j % 3;                      // a window's edge in the tile
          hi[j] = std::min(kAttentionTileRows, 33 + 4 * j);  // a causal diagonal
        }
        // States: stride n_q + 1 heads; from a first tile of plain steps so m, l, acc are not empty.
        const int64_t s_stride = c.n_q + 1, n_states = n_pos * s_stride;
        std::vector<float> m(n_states, -INFINITY), l(n_states, 0.0f), acc(static_cast<size_t>(n_states * head_dim), 0.0f);
        std::vector<float> scratch(
            static_cast<size_t>(attend_tile_q8_scratch_floats(kQ8MaxPositions * c.n_q, head_dim)), -5.0f);
        for (int j = 0; j < n_pos; ++j) {
          const int64_t qh = j * q_stride, sh = j * s_stride;
          const QueryQ8 qj{codes.data() + qh * head_dim, q_scales.data() + qh * blocks, q_bias.data() + qh * blocks};
          kern.attend_tile_q8(k.head, v.head, 0, qj, c.n_q, head_dim, 0, kAttentionTileRows, m.data() + sh,
                              l.data() + sh, acc.data() + sh * head_dim, scratch.data());
        }
        std::vector<float> m1 = m, l1 = l, acc1 = acc;
        const QueryQ8 q_all{codes.data(), q_scales.data(), q_bias.data()};
        TilePositions pos = tile_positions(n_pos, q_stride, s_stride, lo, hi);
        // The rows of a next call (the third tile), which the kernel only prefetches.
        pos.next = TilePrefetch{k.head.codes + 2 * kAttentionTileRows * k.head.row_code_bytes,
                                v.head.codes + 2 * kAttentionTileRows * v.head.row_code_bytes, k.head.row_code_bytes,
                                kAttentionTileRows, (head_dim + 63) / 64};
        kern.attend_tile_q8_positions(k.head, v.head, kAttentionTileRows, q_all, pos, c.n_q, head_dim, m.data(),
                                      l.data(), acc.data(), scratch.data());
        for (int j = 0; j < n_pos; ++j) {
          const int64_t qh = j * q_stride, sh = j * s_stride;
          const QueryQ8 qj{codes.data() + qh * head_dim, q_scales.data() + qh * blocks, q_bias.data() + qh * blocks};
          kern.attend_tile_q8(k.head, v.head, kAttentionTileRows, qj, c.n_q, head_dim, lo[j], hi[j], m1.data() + sh,
                              l1.data() + sh, acc1.data() + sh * head_dim, scratch.data());
        }
        ASSERT_EQ(std::memcmp(m.data(), m1.data(), sizeof(float) * m.size()), 0);
        ASSERT_EQ(std::memcmp(l.data(), l1.data(), sizeof(float) * l.size()), 0);
        ASSERT_EQ(std::memcmp(acc.data(), acc1.data(), sizeof(float) * acc.size()), 0);
      }
    }
  }
}

// The AVX-512 set's attend_tile_q8_positions with its products on AMX tiles
// (calls of kQ8AmxMinHeads heads or more) and on vpdpbusd / vpdpwssd: the
// same bits (m, l, acc), for every head_dim it takes, key and value groups
// of 32 and 64, 1 to 8 query heads per KV head, calls of 16 heads and more
// with a last step of fewer than 16, rows that start past the tile's first
// block (a window's edge) and end before its last (a causal diagonal), and
// states the softmax step rescales. Skipped, saying so, where AMX-INT8 is
// not usable (the CPU, the OS or BATON_AMX=0); the other tests then cover
// only the vector path.
TEST(AttendTileQ8Positions, AmxTilesGiveTheVectorBits) {
  if (best_simd_level() < SimdLevel::kAvx512) GTEST_SKIP() << "no AVX-512: the AMX path is part of the AVX-512 set";
  if (!q8_amx_active()) GTEST_SKIP() << "AMX-INT8 not usable here (CPU, OS or BATON_AMX=0): only the vector path runs";
  const KvKernels kern = kv_kernels_avx512();
  struct Shape {
    int head_dim, k_group, v_group, n_q, n_pos, row_offset;
  };
  const Shape shapes[] = {{64, 32, 32, 4, 64, 0},  {64, 64, 32, 4, 5, 17},  {64, 32, 64, 8, 2, 3},
                          {32, 32, 32, 4, 9, 40},  {128, 32, 32, 1, 33, 0}, {128, 64, 64, 4, 16, 20},
                          {256, 32, 32, 2, 11, 5}, {256, 64, 32, 8, 64, 0}, {64, 32, 32, 4, 3, 9}};
  int amx_calls = 0;
  for (const Shape& sh : shapes) {
    const int head_dim = sh.head_dim, blocks = head_dim / kQ8Block;
    SCOPED_TRACE("head_dim " + std::to_string(head_dim) + " k_group " + std::to_string(sh.k_group) + " v_group " +
                 std::to_string(sh.v_group) + " n_q " + std::to_string(sh.n_q) + " positions " +
                 std::to_string(sh.n_pos) + " rows from " + std::to_string(sh.row_offset));
    std::mt19937 rng(static_cast<unsigned>(head_dim * 31 + sh.n_pos));
    const Case kc{8, head_dim, sh.k_group, sh.n_q, 2 * kAttentionTileRows};
    const Case vc{8, head_dim, sh.v_group, sh.n_q, 2 * kAttentionTileRows};
    const Plane k = make_plane(kc, rng), v = make_plane(vc, rng);
    const int64_t q_stride = sh.n_q + 3;  // other KV heads' queries between positions
    const RandomQueriesQ8 queries = random_queries_q8(sh.n_pos * q_stride, head_dim, 0.125f, rng);
    const std::vector<int8_t>& codes = queries.codes;
    const std::vector<float>& q_scales = queries.scales;
    const std::vector<int32_t>& q_bias = queries.bias;
    int lo[kQ8MaxPositions], hi[kQ8MaxPositions];
    for (int j = 0; j < sh.n_pos; ++j) {
      lo[j] = std::min(sh.row_offset + j % 5, kAttentionTileRows - 2);
      hi[j] = std::max(lo[j] + 1, std::min(kAttentionTileRows, 30 + 3 * j));
    }
    // States from a first tile of plain steps, so the second tile's softmax step rescales some.
    const int64_t s_stride = sh.n_q + 1, n_states = sh.n_pos * s_stride;
    std::vector<float> m(n_states, -INFINITY), l(n_states, 0.0f), acc(static_cast<size_t>(n_states * head_dim), 0.0f);
    std::vector<float> scratch(static_cast<size_t>(attend_tile_q8_scratch_floats(kQ8MaxPositions * 8, head_dim)), -5.0f);
    for (int j = 0; j < sh.n_pos; ++j) {
      const int64_t qh = j * q_stride, st = j * s_stride;
      const QueryQ8 qj{codes.data() + qh * head_dim, q_scales.data() + qh * blocks, q_bias.data() + qh * blocks};
      kern.attend_tile_q8(k.head, v.head, 0, qj, sh.n_q, head_dim, 0, kAttentionTileRows, m.data() + st,
                          l.data() + st, acc.data() + st * head_dim, scratch.data());
    }
    const TilePositions pos = tile_positions(sh.n_pos, q_stride, s_stride, lo, hi);
    const QueryQ8 q_all = queries.view();
    const std::vector<float> acc_before = acc;
    std::vector<float> m_amx = m, l_amx = l, acc_amx = acc;
    set_q8_amx_allowed(false);
    kern.attend_tile_q8_positions(k.head, v.head, kAttentionTileRows, q_all, pos, sh.n_q, head_dim, m.data(),
                                  l.data(), acc.data(), scratch.data());
    set_q8_amx_allowed(true);
    kern.attend_tile_q8_positions(k.head, v.head, kAttentionTileRows, q_all, pos, sh.n_q, head_dim, m_amx.data(),
                                  l_amx.data(), acc_amx.data(), scratch.data());
    if (sh.n_pos * sh.n_q >= kQ8AmxMinHeads) ++amx_calls;
    ASSERT_EQ(std::memcmp(m.data(), m_amx.data(), sizeof(float) * m.size()), 0);
    ASSERT_EQ(std::memcmp(l.data(), l_amx.data(), sizeof(float) * l.size()), 0);
    for (size_t i = 0; i < acc.size(); ++i) ASSERT_EQ(std::memcmp(&acc[i], &acc_amx[i], sizeof(float)), 0) << "acc " << i;
    // The second tile moved the states (a comparison of untouched states proves nothing).
    ASSERT_NE(std::memcmp(acc.data(), acc_before.data(), sizeof(float) * acc.size()), 0);
  }
  EXPECT_EQ(amx_calls, 8) << "calls of kQ8AmxMinHeads heads or more, which take the tiles";
}

// The AVX-512 set's decode-shaped calls (one run of value products for
// every head: q8_tile_positions' fused) with the value product in 4-row
// quads on vpdpbusd (the weight codes split in bytes) and in int16 row pairs
// on vpdpwssd: the same bits (m, l, acc), tile after tile, for whole tiles
// (the softmax step's unmasked path) and rows that start or end inside a
// quad, a block or the tile, one row alone, value groups of 32, 64 and 128,
// rows of one head (consecutive, as the edge store keeps them) and rows that
// hold two heads, and a call of two positions. Skipped, saying so, where
// the CPU has no AVX-512 VBMI (q8_value_quads_active).
TEST(AttendTileQ8Positions, ValueQuadsGiveThePairBits) {
  if (best_simd_level() < SimdLevel::kAvx512) GTEST_SKIP() << "no AVX-512: the value quads are part of the AVX-512 set";
  if (!q8_value_quads_active()) GTEST_SKIP() << "no AVX-512 VBMI here: the decode value product runs in int16 pairs only";
  const KvKernels kern = kv_kernels_avx512();
  struct Shape {
    int head_dim, k_group, v_group, n_q, n_pos;
    bool one_head;  // rows of one head, head_dim bytes apart
  };
  const Shape shapes[] = {{64, 32, 32, 4, 1, true},   {64, 32, 32, 4, 1, false}, {64, 64, 64, 4, 1, true},
                          {64, 32, 64, 4, 1, false},  {32, 32, 32, 4, 1, true},  {128, 32, 64, 2, 1, true},
                          {128, 64, 64, 2, 1, false}, {64, 32, 32, 2, 2, true},  {256, 32, 128, 1, 1, true}};
  // Rows [lo, hi) of each tile (position 0; a second position's start 3 rows on, its end 5 before).
  const std::pair<int, int> ranges[] = {{0, kAttentionTileRows}, {0, 61}, {5, kAttentionTileRows}, {37, 38},
                                        {6, 99},                 {0, 4},  {16, 112},                 {1, 3}};
  for (const Shape& sh : shapes) {
    const int head_dim = sh.head_dim;
    SCOPED_TRACE("head_dim " + std::to_string(head_dim) + " k_group " + std::to_string(sh.k_group) + " v_group " +
                 std::to_string(sh.v_group) + " n_q " + std::to_string(sh.n_q) + " positions " +
                 std::to_string(sh.n_pos) + (sh.one_head ? " one head's rows" : " rows of two heads"));
    std::mt19937 rng(static_cast<unsigned>(head_dim * 13 + sh.v_group + sh.n_q));
    constexpr int kTiles = 4;
    const Plane k = make_plane({8, head_dim, sh.k_group, sh.n_q, kTiles * kAttentionTileRows}, rng);
    const Plane v = make_plane({8, head_dim, sh.v_group, sh.n_q, kTiles * kAttentionTileRows}, rng);
    KvHeadRows kh = k.head, vh = v.head;
    if (sh.one_head) {  // the planes' bytes as twice the rows of one head
      for (auto [h, plane] : {std::pair{&kh, &k}, std::pair{&vh, &v}}) {
        h->codes = plane->codes.data();
        h->row_code_bytes = head_dim;
        h->scales = plane->scales.data();
        h->row_groups = head_dim / h->group;
      }
    }
    const int64_t q_stride = sh.n_q + 2;
    const RandomQueriesQ8 queries = random_queries_q8(sh.n_pos * q_stride, head_dim, 0.125f, rng);
    const int64_t s_stride = sh.n_q + 1, n_states = sh.n_pos * s_stride;
    std::vector<float> scratch(static_cast<size_t>(attend_tile_q8_scratch_floats(kQ8MaxPositions * 8, head_dim)), -5.0f);
    for (const auto& [lo0, hi0] : ranges) {
      int lo[2] = {lo0, std::min(lo0 + 3, hi0 - 1)}, hi[2] = {hi0, std::max(hi0 - 5, lo0 + 4)};
      const TilePositions pos = tile_positions(sh.n_pos, q_stride, s_stride, lo, hi);
      const QueryQ8 q_all = queries.view();
      std::vector<float> m(n_states, -INFINITY), l(n_states, 0.0f), acc(static_cast<size_t>(n_states * head_dim), 0.0f);
      std::vector<float> m_pairs = m, l_pairs = l, acc_pairs = acc;
      for (int t = 0; t < kTiles; ++t) {  // the states of the tiles before: the softmax step rescales
        set_q8_value_quads_allowed(false);
        kern.attend_tile_q8_positions(kh, vh, t * kAttentionTileRows, q_all, pos, sh.n_q, head_dim, m_pairs.data(),
                                      l_pairs.data(), acc_pairs.data(), scratch.data());
        set_q8_value_quads_allowed(true);
        kern.attend_tile_q8_positions(kh, vh, t * kAttentionTileRows, q_all, pos, sh.n_q, head_dim, m.data(),
                                      l.data(), acc.data(), scratch.data());
      }
      SCOPED_TRACE("rows " + std::to_string(lo0) + " .. " + std::to_string(hi0));
      ASSERT_EQ(std::memcmp(m.data(), m_pairs.data(), sizeof(float) * m.size()), 0);
      ASSERT_EQ(std::memcmp(l.data(), l_pairs.data(), sizeof(float) * l.size()), 0);
      for (size_t i = 0; i < acc.size(); ++i) {
        ASSERT_EQ(std::memcmp(&acc[i], &acc_pairs[i], sizeof(float)), 0) << "acc " << i << ": " << acc[i] << " vs "
                                                                         << acc_pairs[i];
      }
      // The tiles moved the states (a comparison of untouched states proves nothing).
      ASSERT_NE(std::count(acc.begin(), acc.end(), 0.0f), static_cast<std::ptrdiff_t>(acc.size()));
    }
  }
  set_q8_value_quads_allowed(true);
}

// A blocked layout's two conversions (kv_kernels.h: key column blocks,
// value quads): rows of a head's INT8 codes go in at the bytes `byte` names
// (+ offset, as u8) and come back the same, whatever rows a call moves (a
// block's middle, across a block edge, one row); rows wider than a head (a
// store's row of every head).
using IntoLayout = void (*)(const int8_t*, int64_t, int64_t, int64_t, int, uint8_t*);
using OutOfLayout = void (*)(const uint8_t*, int64_t, int64_t, int, int8_t*, int64_t);
void expect_rows_go_in_and_come_back(IntoLayout into, OutOfLayout out_of, int64_t (*byte)(int64_t, int, int),
                                     int offset, int block_rows) {
  const int n_rows = 3 * block_rows;
  for (const int head_dim : {32, 64, 96, 256}) {
    SCOPED_TRACE("head_dim " + std::to_string(head_dim));
    std::mt19937 rng(static_cast<unsigned>(head_dim + block_rows));
    const int64_t stride = head_dim + 8;
    std::vector<int8_t> rows(static_cast<size_t>(n_rows * stride));
    for (auto& c : rows) c = static_cast<int8_t>(rng());
    std::vector<uint8_t> blocks(static_cast<size_t>(n_rows * head_dim), 0);
    const int b = block_rows;
    for (const auto& [first, n] : {std::pair{0, b / 2 + 1}, std::pair{b / 2 + 1, 2 * b - 2}, std::pair{5 * b / 2 - 1, 1},
                                   std::pair{5 * b / 2, n_rows - 5 * b / 2}}) {
      into(rows.data() + first * stride, stride, first, n, head_dim, blocks.data());
    }
    for (int r = 0; r < n_rows; ++r) {
      for (int d = 0; d < head_dim; ++d) {
        ASSERT_EQ(blocks[static_cast<size_t>(byte(r, d, head_dim))],
                  static_cast<uint8_t>(rows[static_cast<size_t>(r * stride + d)] + offset))
            << "row " << r << " dim " << d;
      }
    }
    std::vector<int8_t> back(rows.size(), 0);
    out_of(blocks.data(), 0, b + 3, head_dim, back.data(), stride);
    out_of(blocks.data(), b + 3, n_rows - b - 3, head_dim, back.data() + (b + 3) * stride, stride);
    for (int r = 0; r < n_rows; ++r) {
      ASSERT_EQ(std::memcmp(back.data() + r * stride, rows.data() + r * stride, static_cast<size_t>(head_dim)), 0)
          << "row " << r;
    }
  }
}

TEST(KeyBlocks, RowsGoInAndComeBack) {
  expect_rows_go_in_and_come_back(key_blocks_from_rows, key_rows_from_blocks, key_block_byte, 128, kKeyBlockRows);
  // Vector j of a block, lane r: dims 4j .. 4j + 3 of the block's row r.
  EXPECT_EQ(key_block_byte(kKeyBlockRows + 3, 9, 64), kKeyBlockRows * 64 + 2 * 64 + 3 * 4 + 1);
}

TEST(ValueQuads, RowsGoInAndComeBack) {
  expect_rows_go_in_and_come_back(value_quads_from_rows, value_rows_from_quads, value_quad_byte, 0, kValueQuadRows);
  // A quad's dword per dim: dim 17 of its row 2.
  EXPECT_EQ(value_quad_byte(kValueQuadRows + 2, 17, 64), kValueQuadRows * 64 + 17 * 4 + 2);
}

// The AVX-512 set's attend_tile_q8_positions over keys in key column blocks
// (KvHeadRows::key_blocks, read in place) and values in value quads (read
// in place by a decode step's quads, else turned into rows by the call)
// gives the bits it gives over the same keys and values in rows: tile after
// tile (m, l, acc byte for byte), whole tiles and rows that start or end
// inside a quad, a block or the tile, one row alone, head_dim 32 / 64 / 128
// / 256, key groups of 32 and 64, value groups of 32 and 64, a decode step's
// call (one position) and calls of 2 and 16 positions (a prefill's: the
// value pairs, and AMX where the CPU has it); keys in blocks alone, values
// in quads alone, both; the value quads' path allowed and not. Skipped,
// saying so, without AVX-512.
TEST(AttendTileQ8Positions, KeyBlocksAndValueQuadsGiveTheRowsBits) {
  if (best_simd_level() < SimdLevel::kAvx512) GTEST_SKIP() << "no AVX-512: only its set reads key column blocks";
  const KvKernels kern = kv_kernels_avx512();
  ASSERT_TRUE(kern.q8_reads_key_blocks && kern.q8_reads_value_quads);
  struct Shape {
    int head_dim, k_group, v_group, n_q, n_pos;
  };
  const Shape shapes[] = {{64, 32, 32, 4, 1}, {64, 64, 32, 4, 1},  {32, 32, 32, 4, 1}, {128, 32, 64, 2, 1},
                          {256, 64, 32, 1, 1}, {64, 32, 32, 4, 2}, {64, 32, 32, 4, 16}};
  const std::pair<int, int> ranges[] = {{0, kAttentionTileRows}, {0, 61}, {5, kAttentionTileRows}, {37, 38},
                                        {6, 99},                 {16, 112}};
  for (const Shape& sh : shapes) {
    const int head_dim = sh.head_dim;
    SCOPED_TRACE("head_dim " + std::to_string(head_dim) + " k_group " + std::to_string(sh.k_group) + " n_q " +
                 std::to_string(sh.n_q) + " positions " + std::to_string(sh.n_pos));
    std::mt19937 rng(static_cast<unsigned>(head_dim * 11 + sh.k_group + sh.n_pos));
    constexpr int kTiles = 3;
    constexpr int64_t kRows = kTiles * kAttentionTileRows;
    const Plane k = make_plane({8, head_dim, sh.k_group, sh.n_q, kRows}, rng);
    const Plane v = make_plane({8, head_dim, sh.v_group, sh.n_q, kRows}, rng);
    // One head's rows (head_dim bytes apart, as the store keeps them): the
    // planes' bytes as twice the rows of one head; the keys also in blocks
    // (64-byte aligned, as the store's).
    KvHeadRows kh = k.head, vh = v.head;
    for (auto [h, plane] : {std::pair{&kh, &k}, std::pair{&vh, &v}}) {
      h->codes = plane->codes.data();
      h->row_code_bytes = head_dim;
      h->scales = plane->scales.data();
      h->row_groups = head_dim / h->group;
    }
    auto aligned = [](std::vector<uint8_t>& bytes) {
      return bytes.data() + (64 - reinterpret_cast<uintptr_t>(bytes.data()) % 64) % 64;
    };
    std::vector<uint8_t> block_bytes(static_cast<size_t>(kRows * head_dim + 64)), quad_bytes(block_bytes.size());
    KvHeadRows kb = kh, vq = vh;
    kb.codes = aligned(block_bytes);
    kb.key_blocks = true;
    key_blocks_from_rows(reinterpret_cast<const int8_t*>(kh.codes), head_dim, 0, kRows, head_dim, aligned(block_bytes));
    vq.codes = aligned(quad_bytes);
    vq.value_quads = true;
    value_quads_from_rows(reinterpret_cast<const int8_t*>(vh.codes), head_dim, 0, kRows, head_dim, aligned(quad_bytes));
    const int64_t q_stride = sh.n_q + 2;
    const RandomQueriesQ8 queries = random_queries_q8(sh.n_pos * q_stride, head_dim, 0.125f, rng);
    const int64_t s_stride = sh.n_q + 1, n_states = sh.n_pos * s_stride;
    std::vector<float> scratch(static_cast<size_t>(attend_tile_q8_scratch_floats(kQ8MaxPositions * 8, head_dim)), -5.0f);
    for (const auto& [lo0, hi0] : ranges) {
      // Position j's rows: a step later and 2 earlier than the one before, inside [lo0, hi0).
      int lo[kQ8MaxPositions], hi[kQ8MaxPositions];
      for (int j = 0; j < sh.n_pos; ++j) {
        lo[j] = std::min(lo0 + j, hi0 - 1);
        hi[j] = std::max(hi0 - 2 * j, lo[j] + 1);
      }
      const TilePositions pos = tile_positions(sh.n_pos, q_stride, s_stride, lo, hi);
      const std::vector<float> m0(n_states, -INFINITY), l0(n_states, 0.0f), acc0(static_cast<size_t>(n_states * head_dim));
      std::vector<float> m_rows = m0, l_rows = l0, acc_rows = acc0;
      for (int t = 0; t < kTiles; ++t) {
        kern.attend_tile_q8_positions(kh, vh, t * kAttentionTileRows, queries.view(), pos, sh.n_q, head_dim,
                                      m_rows.data(), l_rows.data(), acc_rows.data(), scratch.data());
      }
      ASSERT_NE(std::count(acc_rows.begin(), acc_rows.end(), 0.0f), static_cast<std::ptrdiff_t>(acc_rows.size()));
      for (const auto& [k_in, v_in, what] : {std::tuple{kb, vh, "key blocks"}, std::tuple{kh, vq, "value quads"},
                                             std::tuple{kb, vq, "both"}}) {
        for (const bool quads_allowed : {true, false}) {
          SCOPED_TRACE(std::string(what) + ", rows " + std::to_string(lo0) + " .. " + std::to_string(hi0) +
                       (quads_allowed ? "" : ", the value quads' path off"));
          set_q8_value_quads_allowed(quads_allowed);
          std::vector<float> m = m0, l = l0, acc = acc0;
          for (int t = 0; t < kTiles; ++t) {
            kern.attend_tile_q8_positions(k_in, v_in, t * kAttentionTileRows, queries.view(), pos, sh.n_q, head_dim,
                                          m.data(), l.data(), acc.data(), scratch.data());
          }
          set_q8_value_quads_allowed(true);
          ASSERT_EQ(std::memcmp(m.data(), m_rows.data(), sizeof(float) * m.size()), 0);
          ASSERT_EQ(std::memcmp(l.data(), l_rows.data(), sizeof(float) * l.size()), 0);
          ASSERT_EQ(std::memcmp(acc.data(), acc_rows.data(), sizeof(float) * acc.size()), 0);
        }
      }
    }
  }
}

// The AVX2 set's attend_tile_q8 against the scalar one that defines its
// arithmetic, tile by tile over a window's edge and partial tiles, for every
// head_dim and group it takes: the scores are the scalar's bits (the integer
// q . k exact, the same float steps in the same order), so m is too; l and
// acc differ only by the polynomial exp of the weights (~2e-7 relative),
// which may move a weight code by one: at most one step per row.
TEST(AttendTileQ8Avx2, ScoresAreTheScalarBitsAndTheStateIsClose) {
  if (best_simd_level() < SimdLevel::kAvx2) GTEST_SKIP() << "no AVX2";
  const KvKernels avx2 = kv_kernels_avx2(), scalar = kv_kernels_scalar();
  ASSERT_NE(avx2.attend_tile_q8, nullptr);
  for (const auto& [head_dim, k_group, v_group] :
       {std::tuple{32, 32, 32}, std::tuple{64, 32, 32}, std::tuple{96, 32, 96}, std::tuple{128, 64, 32},
        std::tuple{160, 32, 32}, std::tuple{256, 32, 64}}) {
    SCOPED_TRACE("head_dim " + std::to_string(head_dim) + " groups " + std::to_string(k_group) + " / " +
                 std::to_string(v_group));
    constexpr int kQ = 3;
    const int64_t n_ctx = 3 * kAttentionTileRows - 9;
    std::mt19937 rng(static_cast<unsigned>(head_dim * 7 + v_group));
    const Plane k = make_plane({8, head_dim, k_group, kQ, n_ctx}, rng);
    const Plane v = make_plane({8, head_dim, v_group, kQ, n_ctx}, rng);
    ASSERT_TRUE(q8_tile_supported(k.head, v.head, head_dim));
    const int blocks = head_dim / kQ8Block;
    std::vector<float> q(static_cast<size_t>(kQ * head_dim));
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    for (float& x : q) x = dist(rng);
    std::vector<int8_t> codes(q.size());
    std::vector<float> q_scales(static_cast<size_t>(kQ * blocks));
    std::vector<int32_t> q_bias(q_scales.size());
    for (int h = 0; h < kQ; ++h) {
      quantize_query_q8(q.data() + h * head_dim, head_dim, 0.2f, codes.data() + h * head_dim,
                        q_scales.data() + h * blocks, q_bias.data() + h * blocks);
    }
    const QueryQ8 qq{codes.data(), q_scales.data(), q_bias.data()};
    std::vector<float> m(kQ, -INFINITY), l(kQ, 0.0f), acc(q.size(), 0.0f), m1 = m, l1 = l, acc1 = acc;
    std::vector<float> scratch(static_cast<size_t>(attend_tile_q8_scratch_floats(kQ, head_dim)));
    // acc's difference per dim: one weight code per row, a step (<= vs_max / kQ8WeightMax, scales
    // <= 0.05) x |v code| <= 128 (the rescales by alpha <= 1 only shrink it).
    double step_bound = 0;
    for (int64_t t0 = 0; t0 < n_ctx; t0 += kAttentionTileRows) {
      const int lo = t0 == 0 ? 11 : 0;  // a window's edge in the first tile
      const int hi = static_cast<int>(std::min<int64_t>(n_ctx - t0, kAttentionTileRows));
      avx2.attend_tile_q8(k.head, v.head, t0, qq, kQ, head_dim, lo, hi, m.data(), l.data(), acc.data(),
                          scratch.data());
      scalar.attend_tile_q8(k.head, v.head, t0, qq, kQ, head_dim, lo, hi, m1.data(), l1.data(), acc1.data(),
                            scratch.data());
      ASSERT_EQ(std::memcmp(m.data(), m1.data(), sizeof(float) * kQ), 0) << "tile " << t0;
      for (int h = 0; h < kQ; ++h) ASSERT_NEAR(l[h], l1[h], 1e-5 * l1[h]) << "tile " << t0 << " head " << h;
      step_bound += 128.0 * (hi - lo) * 0.05 / kQ8WeightMax;
      for (size_t e = 0; e < acc.size(); ++e) {
        ASSERT_NEAR(acc[e], acc1[e], 1e-5 * std::fabs(acc1[e]) + step_bound) << "tile " << t0 << " element " << e;
      }
    }
  }
}

// INT8 cases attend_tile_q8 takes, and F16 cases attend_tile_f16 takes (on
// a CPU whose dispatched set has it).
std::vector<Case> in_place_cases() {
  std::vector<Case> cases;
  for (const Case& c : all_cases()) {
    KvHeadRows rows;
    rows.bits = c.bits;
    rows.group = c.group;
    if (c.bits == 8 && q8_tile_supported(rows, rows, c.head_dim)) cases.push_back(c);
    if (c.bits == 16 && kv_kernels().attend_tile_f16 != nullptr && f16_tile_supported(rows, rows, c.head_dim)) {
      cases.push_back(c);
    }
  }
  cases.push_back({8, 128, 64, 8, 200});  // key and value groups of 64: two query blocks per group
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Stores, AttendTileInPlace, testing::ValuesIn(in_place_cases()), case_name);

// INT4 K and V read in place (attend_tile_q4_positions), every set that has
// it (AVX2; AVX-512 with VBMI): the query quantized by quantize_query_q8 and
// handed over in nibble order (q4_query_order), two tiles stepped from a
// window's edge (a part tile, then a whole one). Equal to a double-precision
// softmax over the dequantized rows with that quantized query within 2e-5
// of the output's magnitude plus the integer value product's bound (per
// tile: max p_r x max vs_r x 0.51 / kQ8WeightMax x sum |c_r - 8|); a head's
// result the same bits stepped with the others or alone.
TEST(AttendTileQ4, EverySetMatchesTheReferenceWithinItsBounds) {
  std::vector<std::pair<std::string, KvKernels>> sets;
  if (best_simd_level() >= SimdLevel::kAvx2) sets.emplace_back("avx2", kv_kernels_avx2());
  if (kv_kernels().attend_tile_q4_positions != nullptr) sets.emplace_back("dispatched", kv_kernels());
  if (sets.empty()) GTEST_SKIP() << "no AVX2: INT4 tiles are dequantized (no in-place kernel)";
  for (const Case& c : {Case{4, 64, 32, 4, 200}, Case{4, 128, 32, 2, 256}, Case{4, 128, 64, 4, 150},
                        Case{4, 256, 32, 2, 140}, Case{4, 96, 32, 4, 180}})
  for (const bool k8 : {false, true}) {  // k8: INT8 keys in rows (int4-k8)
    SCOPED_TRACE(case_name(testing::TestParamInfo<Case>(c, 0)) + (k8 ? " int8 keys" : ""));
    std::mt19937 rng(static_cast<unsigned>(c.head_dim + c.group + c.n_ctx));
    Case key_case = c;
    if (k8) key_case.bits = 8;
    const Plane k = make_plane(key_case, rng), v = make_plane(c, rng);
    ASSERT_TRUE(q4_tile_supported(k.head, v.head, c.head_dim));
    const int blocks = c.head_dim / kQ8Block;
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    std::vector<float> q(static_cast<size_t>(c.n_q * c.head_dim));
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    for (float& x : q) x = dist(rng);
    std::vector<int8_t> codes(q.size());
    std::vector<float> q_scales(static_cast<size_t>(c.n_q * blocks)), q_used(q.size());
    std::vector<int32_t> q_bias(q_scales.size());
    for (int h = 0; h < c.n_q; ++h) {
      quantize_query_q8(q.data() + h * c.head_dim, c.head_dim, scale, codes.data() + h * c.head_dim,
                        q_scales.data() + h * blocks, q_bias.data() + h * blocks);
      for (int d = 0; d < c.head_dim; ++d) {
        q_used[h * c.head_dim + d] = codes[h * c.head_dim + d] * q_scales[h * blocks + d / kQ8Block];
      }
    }
    if (!k8) q4_query_order(codes.data(), static_cast<int64_t>(codes.size()));
    const KvKernels scalar = kv_kernels_scalar();
    std::vector<float> kf(static_cast<size_t>(c.n_ctx * c.head_dim)), vf(kf.size());
    scalar.dequantize_head_rows(k.head, 0, c.n_ctx, c.head_dim, kf.data());
    scalar.dequantize_head_rows(v.head, 0, c.n_ctx, c.head_dim, vf.data());
    const int64_t first = 40;  // rows [first, n_ctx): the first tile in part
    for (const auto& [name, kern] : sets) {
      SCOPED_TRACE(name);
      auto run = [&, &kernels = kern](int head0, int n_heads, float* out, const KvHeadRows* keys = nullptr) {
        const KvHeadRows& k_rows = keys != nullptr ? *keys : k.head;
        std::vector<float> m(n_heads, -INFINITY), l(n_heads, 0.0f), acc(static_cast<size_t>(n_heads * c.head_dim));
        std::vector<float> scratch(static_cast<size_t>(attend_tile_q4_scratch_floats(n_heads, c.head_dim)), -5.0f);
        for (int64_t t0 = 0; t0 < c.n_ctx; t0 += kAttentionTileRows) {
          const int lo = static_cast<int>(std::max<int64_t>(first - t0, 0));
          const int hi = static_cast<int>(std::min<int64_t>(c.n_ctx - t0, kAttentionTileRows));
          const QueryQ8 qh{codes.data() + head0 * c.head_dim, q_scales.data() + head0 * blocks,
                           q_bias.data() + head0 * blocks};
          const TilePositions pos = tile_positions(1, 0, 0, &lo, &hi);
          kernels.attend_tile_q4_positions(k_rows, v.head, t0, qh, pos, n_heads, c.head_dim, m.data(), l.data(),
                                           acc.data(), scratch.data());
        }
        write_normalized(acc, l, c.head_dim, out);
      };
      std::vector<float> together(q.size()), alone(q.size());
      run(0, c.n_q, together.data());
      for (int h = 0; h < c.n_q; ++h) run(h, 1, alone.data() + h * c.head_dim);
      ASSERT_EQ(std::memcmp(together.data(), alone.data(), sizeof(float) * q.size()), 0);
      if (k8 && kern.q8_reads_key_blocks && q8_key_blocks_active() && c.head_dim % 64 == 0) {
        // INT8 keys in key column blocks (the store's layout where the set
        // reads them, a whole number of blocks): the rows' bits.
        const int64_t rows = (c.n_ctx + kKeyBlockRows - 1) / kKeyBlockRows * kKeyBlockRows;
        struct alignas(64) Line {  // the kernel loads whole aligned vectors, as from the store's planes
          uint8_t bytes[64];
        };
        std::vector<Line> key_columns(static_cast<size_t>(rows * c.head_dim / 64));
        auto* columns = reinterpret_cast<uint8_t*>(key_columns.data());
        key_blocks_from_rows(reinterpret_cast<const int8_t*>(k.head.codes), k.head.row_code_bytes, 0, c.n_ctx,
                             c.head_dim, columns);
        KvHeadRows blocked = k.head;
        blocked.codes = columns;
        blocked.row_code_bytes = c.head_dim;
        blocked.key_blocks = true;
        std::vector<float> from_blocks(q.size());
        run(0, c.n_q, from_blocks.data(), &blocked);
        ASSERT_EQ(std::memcmp(together.data(), from_blocks.data(), sizeof(float) * q.size()), 0) << "key blocks";
      }
      for (int h = 0; h < c.n_q; ++h) {
        std::vector<double> e;
        double max_s = -INFINITY, sum = 0;
        for (int64_t j = first; j < c.n_ctx; ++j) {
          double dot = 0;
          for (int d = 0; d < c.head_dim; ++d) dot += double{q_used[h * c.head_dim + d]} * kf[j * c.head_dim + d];
          e.push_back(dot);
          max_s = std::max(max_s, dot);
        }
        for (double& x : e) sum += (x = std::exp(x - max_s));
        for (int d = 0; d < c.head_dim; ++d) {
          double want = 0, magnitude = 0, bound = 0;
          for (int64_t j = first; j < c.n_ctx; ++j) {
            const double p = e[static_cast<size_t>(j - first)] / sum;
            want += p * vf[j * c.head_dim + d];
            magnitude += p * std::fabs(vf[j * c.head_dim + d]);
          }
          const int g = d / c.group;
          for (int64_t t0 = 0; t0 < c.n_ctx; t0 += kAttentionTileRows) {
            double p_max = 0, vs_max = 0, reach = 0;
            for (int64_t j = std::max(t0, first); j < std::min(c.n_ctx, t0 + kAttentionTileRows); ++j) {
              p_max = std::max(p_max, e[static_cast<size_t>(j - first)] / sum);
              vs_max = std::max(vs_max, double{fp16_to_fp32(v.head.scales[j * v.head.row_groups + g])});
              const uint8_t byte = v.head.codes[j * v.head.row_code_bytes + d / 2];
              reach += std::abs((d % 2 == 0 ? byte & 15 : byte >> 4) - 8);
            }
            bound += p_max * vs_max * 0.51 / kQ8WeightMax * reach;
          }
          ASSERT_NEAR(together[h * c.head_dim + d], want, 2e-5 * magnitude + 1e-6 + bound) << "head " << h << " d " << d;
        }
      }
    }
  }
}

}  // namespace
}  // namespace baton::kv_kernels_impl

namespace baton::kv_kernels_impl {
namespace {

// A spread issues L lines over S steps evenly: after step k exactly
// floor(k L / S) (the remainder's extra lines one at a time, never two steps
// apart by more than one line), all of them by step S; steps past S issue
// nothing, finish() the rest. (Prefetches have no visible effect: the count
// is what can be checked.)
TEST(TilePrefetchSpread, IssuesTheLinesEvenlyOverItsSteps) {
  alignas(64) static uint8_t rows[16 * 512];
  for (const auto& [n_rows, lines, steps] : {std::tuple{8, 8, 60}, std::tuple{8, 8, 64}, std::tuple{3, 2, 4},
                                            std::tuple{16, 8, 7}, std::tuple{1, 1, 3}, std::tuple{0, 8, 5}}) {
    TilePrefetch p{rows, rows, 512, n_rows, lines};
    TilePrefetchSpread spread(p, steps);
    const int total = n_rows * lines;
    ASSERT_EQ(spread.left(), total);
    int before = total;
    for (int k = 1; k <= steps + 2; ++k) {
      spread.step();
      const int issued = total - spread.left();
      EXPECT_EQ(issued, std::min(k, steps) * total / steps)
          << n_rows << "x" << lines << " over " << steps << ", step " << k;
      EXPECT_LE(before - spread.left(), (total + steps - 1) / steps);
      before = spread.left();
    }
    EXPECT_EQ(spread.left(), 0);
  }
  TilePrefetchSpread partial(TilePrefetch{rows, rows, 512, 4, 8}, 64);
  partial.step();
  partial.finish();
  EXPECT_EQ(partial.left(), 0);
}

// Query codes round as std::lround (halves away from zero): a block whose
// largest |x| is 127 has inverse scale 1, so its codes are lround(x) of
// values placed on halves, near them and across the range; the bias is -128
// x their sum and the scale amax / 127 x the softmax scale.
TEST(QuantizeQueryQ8, CodesAreLroundOfTheScaledValuesHalvesAwayFromZero) {
  std::vector<float> q(kQ8Block);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-127.0f, 127.0f);
  for (int trial = 0; trial < 64; ++trial) {
    q[0] = trial % 2 == 0 ? 127.0f : -127.0f;
    for (int d = 1; d < kQ8Block; ++d) {
      const float base = std::floor(dist(rng));
      switch ((trial + d) % 4) {
        case 0: q[d] = base + 0.5f; break;                                      // a half
        case 1: q[d] = std::nextafter(base + 0.5f, 0.0f); break;               // just below one's magnitude
        case 2: q[d] = std::nextafter(base + 0.5f, base + 0.5f > 0 ? 200.0f : -200.0f); break;  // just above
        default: q[d] = dist(rng); break;
      }
      q[d] = std::clamp(q[d], -127.0f, 127.0f);
    }
    int8_t codes[kQ8Block];
    float scale = 0.0f;
    int32_t bias = 0;
    quantize_query_q8(q.data(), kQ8Block, 0.25f, codes, &scale, &bias);
    int32_t sum = 0;
    for (int d = 0; d < kQ8Block; ++d) {
      ASSERT_EQ(codes[d], static_cast<int8_t>(std::lround(q[d]))) << "trial " << trial << " x " << q[d];
      sum += codes[d];
    }
    EXPECT_EQ(bias, -128 * sum);
    EXPECT_EQ(scale, 127.0f / 127.0f * 0.25f);
  }
}

// The AVX-512 set's quantize_queries_q8 gives the scalar quantize_query_q8's
// codes, scales and biases head by head (bits compared): heads of 32..256
// dims with halves and their neighbours (amax 127: y = q exactly), random
// magnitudes, all-zero blocks, one-element blocks, f32 extremes.
TEST(QuantizeQueryQ8, TheVectorKernelGivesTheScalarBytes) {
  if (best_simd_level() < SimdLevel::kAvx512) GTEST_SKIP() << "no AVX-512: the scalar function is the only one";
  const KvKernels set = kv_kernels_avx512();
  ASSERT_NE(set.quantize_queries_q8, nullptr);
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> dist(-127.0f, 127.0f);
  std::normal_distribution<float> normal;
  for (const int head_dim : {32, 64, 128, 256}) {
    const int blocks = head_dim / kQ8Block, n_heads = 6;
    std::vector<float> q(static_cast<size_t>(n_heads * head_dim));
    for (int b = 0; b < n_heads * blocks; ++b) {
      float* x = q.data() + b * kQ8Block;
      const int kind = b % 6;
      for (int d = 0; d < kQ8Block; ++d) {
        const float half = std::floor(dist(rng)) + 0.5f;  // and the floats beside it
        const float tie = d % 3 == 0 ? half : std::nextafter(half, d % 3 == 1 ? 0.0f : 200.0f);
        switch (kind) {
          case 0: x[d] = std::clamp(tie, -127.0f, 127.0f); break;
          case 1: x[d] = 0.0f; break;
          case 2: x[d] = d == 5 ? -3e-30f : 0.0f; break;
          case 3: x[d] = normal(rng) * 1e30f; break;
          default: x[d] = normal(rng) * std::exp(normal(rng) * 4); break;
        }
      }
      if (kind == 0) x[0] = b % 2 == 0 ? 127.0f : -127.0f;
    }
    std::vector<int8_t> codes(q.size()), want_codes(q.size());
    std::vector<float> scales(static_cast<size_t>(n_heads * blocks)), want_scales(scales.size());
    std::vector<int32_t> bias(scales.size()), want_bias(scales.size());
    set.quantize_queries_q8(q.data(), n_heads, head_dim, 0.125f, codes.data(), scales.data(), bias.data());
    for (int h = 0; h < n_heads; ++h) {
      quantize_query_q8(q.data() + h * head_dim, head_dim, 0.125f, want_codes.data() + h * head_dim,
                        want_scales.data() + h * blocks, want_bias.data() + h * blocks);
    }
    EXPECT_EQ(codes, want_codes) << "head_dim " << head_dim;
    EXPECT_EQ(bias, want_bias) << "head_dim " << head_dim;
    ASSERT_EQ(std::memcmp(scales.data(), want_scales.data(), sizeof(float) * scales.size()), 0)
        << "head_dim " << head_dim;
  }
}

// The vector group quantizers give kv_quant's scalar bytes: codes, scales
// and minimums, for groups of 16..128, over values that hit the rounding
// ties exactly (k + 0.5 steps of the group's scale) and just beside them,
// all-zero and constant groups, f16-denormal scales and the f16 range's ends.
TEST(QuantizeGroups, TheVectorKernelsGiveTheScalarBytes) {
  if (best_simd_level() < SimdLevel::kAvx512) GTEST_SKIP() << "no AVX-512: the scalar code is the only one";
  const KvKernels set = kv_kernels_avx512();
  ASSERT_NE(set.quantize_int8, nullptr);
  ASSERT_NE(set.quantize_int4, nullptr);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> pick(0, 7);
  for (int group : {16, 32, 64, 128}) {
    const int64_t n = int64_t{group} * 96;
    std::vector<float> x(n);
    for (int64_t g = 0; g * group < n; ++g) {
      float* xg = x.data() + g * group;
      const int kind = static_cast<int>(g % 8);
      const float magnitude = kind == 0 ? 0.0f : kind == 1 ? 3e-6f : kind == 2 ? 65504.0f : std::exp(normal(rng) * 3);
      for (int i = 0; i < group; ++i) xg[i] = magnitude * normal(rng);
      if (kind == 3) std::fill(xg, xg + group, magnitude);      // constant group
      if (kind == 2) xg[pick(rng)] = -65504.0f;                  // the range's end
      if (kind >= 4) {
        // Ties: amax = 127 steps of the f16 scale, others k + 0.5 steps (and
        // the floats just beside them).
        const float step = fp16_to_fp32(fp32_to_fp16(magnitude / 127.0f));
        xg[0] = 127.0f * step;
        for (int i = 1; i < group; ++i) {
          const float tie = (static_cast<float>(static_cast<int>(normal(rng) * 30)) + 0.5f) * step;
          xg[i] = pick(rng) < 4 ? tie : std::nextafter(tie, pick(rng) < 6 ? 0.0f : 1e9f);
        }
      }
    }
    std::vector<int8_t> codes8(n), want8(n);
    std::vector<uint16_t> scales(n / group), want_scales(n / group), mins(n / group), want_mins(n / group);
    set.quantize_int8(x.data(), n, group, codes8.data(), scales.data());
    kv_quant::quantize_int8_groups_scalar(x.data(), n, group, want8.data(), want_scales.data());
    EXPECT_EQ(codes8, want8) << "int8, group " << group;
    EXPECT_EQ(scales, want_scales) << "int8, group " << group;

    std::vector<uint8_t> codes4(n / 2), want4(n / 2);
    set.quantize_int4(x.data(), n, group, codes4.data(), scales.data(), mins.data());
    kv_quant::quantize_int4_groups_scalar(x.data(), n, group, want4.data(), want_scales.data(), want_mins.data());
    EXPECT_EQ(codes4, want4) << "int4, group " << group;
    EXPECT_EQ(scales, want_scales) << "int4, group " << group;
    EXPECT_EQ(mins, want_mins) << "int4, group " << group;
  }
}

// affine_rows (the transform codec's projection and reconstruction): every
// ISA set against a double-precision reference, over tile edges (rows not a
// multiple of 4, widths not a multiple of 8 or 32) and row strides.
TEST(AffineRows, EveryKernelSetMatchesTheReference) {
  std::vector<std::pair<std::string, KvKernels>> sets = {{"scalar", kv_kernels_scalar()}};
  if (best_simd_level() >= SimdLevel::kAvx2) sets.emplace_back("avx2", kv_kernels_avx2());
  if (best_simd_level() >= SimdLevel::kAvx512) sets.emplace_back("avx512", kv_kernels_avx512());
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (const auto& [n, k, m] : {std::tuple{1, 1, 1}, std::tuple{5, 7, 33}, std::tuple{8, 64, 40},
                                std::tuple{13, 20, 64}, std::tuple{4, 3, 100}, std::tuple{0, 4, 8},
                                std::tuple{9, 33, 129}}) {
    const int64_t lda = k + 3, ldc = m + 5;
    std::vector<float> a(static_cast<size_t>(std::max(1, n) * lda)), b(static_cast<size_t>(k * m)), bias(m);
    for (float& v : a) v = normal(rng);
    for (float& v : b) v = normal(rng);
    for (float& v : bias) v = normal(rng);
    for (const auto& [name, set] : sets) {
      std::vector<float> c(static_cast<size_t>(std::max(1, n) * ldc), 1234.5f);
      set.affine_rows(a.data(), lda, n, k, b.data(), m, bias.data(), c.data(), ldc);
      for (int t = 0; t < n; ++t) {
        for (int j = 0; j < ldc; ++j) {
          if (j >= m) {
            EXPECT_EQ(c[t * ldc + j], 1234.5f) << name << ": wrote past column " << m;
            continue;
          }
          double want = bias[j];
          for (int i = 0; i < k; ++i) want += double{a[t * lda + i]} * b[i * m + j];
          EXPECT_NEAR(c[t * ldc + j], want, 1e-4 * (1 + std::fabs(want))) << name << " " << n << "x" << k << "x" << m;
        }
      }
    }
  }
}

// affine_u8_rows (the transform codec's INT8 reconstruction): the scalar set
// against an independent int64 sum, and every ISA set bit for bit against
// the scalar one, over tile edges (rows not a multiple of 4, components not a
// multiple of 4, widths not a multiple of 8 or 16, more than 64 columns),
// row strides, the extreme symbols (0, 255) and weights (-127, 127).
TEST(AffineU8Rows, EveryKernelSetGivesTheScalarBits) {
  std::vector<std::pair<std::string, KvKernels>> sets;
  if (best_simd_level() >= SimdLevel::kAvx2) sets.emplace_back("avx2", kv_kernels_avx2());
  if (best_simd_level() >= SimdLevel::kAvx512) sets.emplace_back("avx512", kv_kernels_avx512());
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> symbol(0, 255), weight(-127, 127);
  std::normal_distribution<float> normal;
  for (const auto& [n, k, m] : {std::tuple{1, 1, 1}, std::tuple{5, 7, 33}, std::tuple{8, 64, 64},
                                std::tuple{13, 22, 32}, std::tuple{4, 3, 100}, std::tuple{0, 4, 8},
                                std::tuple{9, 128, 129}, std::tuple{6, 256, 16}}) {
    const int64_t lda = k + 5, ldc = m + 3;
    // The last row's k bytes end the buffer but for the 3 the kernels may read.
    std::vector<uint8_t> a(static_cast<size_t>(std::max(1, n) * lda) + 3);
    std::vector<int8_t> b(static_cast<size_t>((k + 3) / 4) * m * 4, 0);
    std::vector<float> scale(m), bias(m);
    for (uint8_t& v : a) v = static_cast<uint8_t>(symbol(rng));
    if (n > 0) a[0] = 255;
    for (int i = 0; i < k; ++i) {
      for (int j = 0; j < m; ++j) b[(static_cast<size_t>(i / 4) * m + j) * 4 + i % 4] = static_cast<int8_t>(weight(rng));
    }
    b[0] = -127;
    for (float& v : scale) v = std::fabs(normal(rng)) * 1e-3f;
    for (float& v : bias) v = normal(rng);
    std::vector<float> want(static_cast<size_t>(std::max(1, n) * ldc), 1234.5f);
    kv_kernels_scalar().affine_u8_rows(a.data(), lda, n, k, b.data(), m, scale.data(), bias.data(), want.data(), ldc);
    for (int t = 0; t < n; ++t) {
      for (int j = 0; j < m; ++j) {
        int64_t sum = 0;
        for (int i = 0; i < k; ++i) sum += int64_t{a[t * lda + i]} * b[(static_cast<size_t>(i / 4) * m + j) * 4 + i % 4];
        ASSERT_EQ(want[t * ldc + j], std::fma(scale[j], static_cast<float>(sum), bias[j])) << n << "x" << k << "x" << m;
      }
    }
    for (const auto& [name, set] : sets) {
      std::vector<float> c(want.size(), 1234.5f);
      set.affine_u8_rows(a.data(), lda, n, k, b.data(), m, scale.data(), bias.data(), c.data(), ldc);
      for (size_t x = 0; x < c.size(); ++x) {
        ASSERT_EQ(c[x], want[x]) << name << " " << n << "x" << k << "x" << m << " at row " << x / ldc << " column "
                                 << x % ldc;
      }
    }
  }
}

}  // namespace
}  // namespace baton::kv_kernels_impl
