// Tiled attention (tiled_attention.h) through both stores: equal to a
// double-precision reference on the store's own (dequantized) K/V and on the
// query as the store uses it (INT8 K and V: quantized like Q8_0 activations,
// attend_tile_q8) within a tight tolerance, and within the bound the query's
// quantization implies of the reference on the f32 query, for F32 and quantized stores (INT8, INT4, INT4 values with
// INT8 keys, Hadamard on and off), GQA ratios 1/4/8, head_dim 64/128,
// contexts on both sides of the tile and segment boundaries, and a
// sliding-window layer; and a query's output bit for bit the same alone, in
// a batch of any size, and with 1 or 2 threads (KvCache::attend's contract).
#include "common/kv_cache/tiled_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/kv_codec/kv_codec.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_codec/kv_kernels.h"
#include "common/kv_codec/kv_quant.h"
#include "common/util/thread_pool.h"

namespace baton {
namespace {

constexpr int kHeadsKv = 2;
constexpr int32_t kWindow = 100;  // layer 1; layer 0 is full attention

struct AttentionCase {
  std::string store;  // "f32" or a codec name for QuantizedKvCache
  int gqa;            // query heads per KV head
  int head_dim;
  int heads_kv = kHeadsKv;  // 1: one KV head, attention_segment_rows' short segments
};

void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << c.store << "/gqa" << c.gqa << "/d" << c.head_dim << "/kv" << c.heads_kv;
}

std::string case_name(const ::testing::TestParamInfo<AttentionCase>& info) {
  std::string name = info.param.store + "_gqa" + std::to_string(info.param.gqa) + "_d" +
                     std::to_string(info.param.head_dim) +
                     (info.param.heads_kv == kHeadsKv ? "" : "_kv" + std::to_string(info.param.heads_kv));
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

std::vector<float> random_rows(std::mt19937& rng, int64_t n, int64_t width, float sigma) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> x(static_cast<size_t>(n * width));
  for (float& v : x) v = normal(rng);
  return x;
}

class TiledAttention : public ::testing::TestWithParam<AttentionCase> {
 protected:
  KvGeometry geometry() const {
    const AttentionCase& c = GetParam();
    return KvGeometry{2, c.heads_kv * c.gqa, c.heads_kv, c.head_dim, {0, kWindow}};
  }

  // A store of `context` tokens of random K/V in both layers.
  std::unique_ptr<KvCache> make_store(int64_t context) {
    const KvGeometry g = geometry();
    std::unique_ptr<KvCache> kv;
    f32_ = nullptr;
    quantized_ = nullptr;
    if (GetParam().store == "f32") {
      auto store = std::make_unique<F32KvCache>(g, context);
      f32_ = store.get();
      kv = std::move(store);
    } else {
      auto config = parse_kv_codec_config(GetParam().store);
      EXPECT_TRUE(config.ok()) << config.status();
      auto store = QuantizedKvCache::Create(g, context, *config);
      EXPECT_TRUE(store.ok()) << store.status();
      quantized_ = store->get();
      kv = std::move(*store);
    }
    std::mt19937 rng(static_cast<uint32_t>(context));
    for (int layer = 0; layer < g.n_layer; ++layer) {
      const std::vector<float> k = random_rows(rng, context, g.kv_dim(), 1.0f);
      const std::vector<float> v = random_rows(rng, context, g.kv_dim(), 1.0f);
      EXPECT_TRUE(kv->store(layer, 0, context, k.data(), v.data()).ok());
      original_v_[layer] = v;
    }
    kv->set_size(context);
    return kv;
  }

  // K (is_key) or V of positions [first, end) of `layer` as the last
  // make_store's store holds them, in the model's domain: f32 [end - first, kv_dim].
  std::vector<float> held_rows(int layer, bool is_key, int64_t first, int64_t end) const {
    const KvGeometry g = geometry();
    std::vector<float> rows(static_cast<size_t>((end - first) * g.kv_dim()));
    if (f32_ != nullptr) {
      for (int64_t p = first; p < end; ++p) {
        const float* row = is_key ? f32_->k_row(layer, p) : f32_->v_row(layer, p);
        std::memcpy(rows.data() + (p - first) * g.kv_dim(), row, sizeof(float) * g.kv_dim());
      }
      return rows;
    }
    const QuantizedKvCache& store = *quantized_;
    auto block = store.export_block(layer, is_key, first, end - first);
    EXPECT_TRUE(block.ok()) << block.status();
    EXPECT_TRUE(dequantize_kv_block(store.config(), g, is_key, *block, rows.data()).ok());
    if (is_key ? store.config().hadamard_keys : store.config().hadamard_values) {
      kv_quant::hadamard_rows(rows.data(), (end - first) * g.n_head_kv, g.head_dim);
    }
    return rows;
  }

  // True when the store attends with quantized queries (attend_tile_q8).
  // INT4 K and V where the set reads them in place (attend_tile_q4_positions).
  bool quantizes_queries() const {
    if (quantized_ == nullptr) return false;
    const KvCodecConfig& c = quantized_->config();
    if (int4_in_place()) return true;
    return kv_kernels_impl::kv_kernels().attend_tile_q8 != nullptr && c.bits_for(true) == KvCodecConfig::Bits::kInt8 &&
           c.bits_for(false) == KvCodecConfig::Bits::kInt8;
  }

  // INT4 values read in place (the store's own answer, QuantizedKvCache::int4_in_place).
  bool int4_in_place() const { return quantized_ != nullptr && quantized_->int4_in_place(); }

  // The queries as the store multiplies them with its keys, in the model's
  // domain: q itself, or (INT8 K and V) each head rotated as the stored keys
  // are, quantized by quantize_query_q8, dequantized and rotated back.
  std::vector<float> attended_queries(const std::vector<float>& q) const {
    if (!quantizes_queries()) return q;
    const int head_dim = geometry().head_dim;
    const int64_t heads = static_cast<int64_t>(q.size()) / head_dim;
    const bool hadamard = quantized_->config().hadamard_keys;
    std::vector<float> x = q;
    if (hadamard) kv_quant::hadamard_rows(x.data(), heads, head_dim);
    std::vector<int8_t> codes(static_cast<size_t>(head_dim));
    std::vector<float> scales(static_cast<size_t>(head_dim / kv_kernels_impl::kQ8Block));
    std::vector<int32_t> bias(scales.size());
    for (int64_t h = 0; h < heads; ++h) {
      float* xh = x.data() + h * head_dim;
      kv_kernels_impl::quantize_query_q8(xh, head_dim, 1.0f, codes.data(), scales.data(), bias.data());
      for (int d = 0; d < head_dim; ++d) xh[d] = codes[d] * scales[d / kv_kernels_impl::kQ8Block];
    }
    if (hadamard) kv_quant::hadamard_rows(x.data(), heads, head_dim);
    return x;
  }

  // The bound of the integer value product (kv_kernels.h, kQ8WeightMax) on
  // one output of query head h, e = exp(s - max) of its keys [first, end),
  // sum their sum, v its rows [first_all, ...) in the model's domain: per
  // tile t of the keys, n_t rows each off by at most 0.51 weight steps of
  // max_{r in t} pn_r max_{r in t} vs_r[g] / kQ8WeightMax times |code| <=
  // 127, that is
  //   sum_t n_t max_{r in t} pn_r max_{r in t} amax_r * 0.51 / kQ8WeightMax
  // (amax_r = 127 vs_r: the row's largest magnitude in the stored domain;
  // taken over the head's dims here). Hadamard-rotated values: the error
  // vector is rotated back, so one dim may gather sqrt(head_dim) times it.
  double value_bound(const std::vector<double>& e, double sum, int64_t first, int64_t first_all, int64_t end,
                     const std::vector<float>& v, int64_t kv_off) const {
    const KvGeometry g = geometry();
    const bool hadamard = quantized_->config().hadamard_values;
    std::vector<float> row(static_cast<size_t>(g.head_dim));
    double bound = 0;
    for (int64_t t0 = first / kv_kernels_impl::kAttentionTileRows * kv_kernels_impl::kAttentionTileRows; t0 < end;
         t0 += kv_kernels_impl::kAttentionTileRows) {
      const int64_t lo = std::max(first, t0), hi = std::min(end, t0 + kv_kernels_impl::kAttentionTileRows);
      double p_max = 0, amax = 0;
      for (int64_t p = lo; p < hi; ++p) {
        std::memcpy(row.data(), v.data() + (p - first_all) * g.kv_dim() + kv_off, sizeof(float) * g.head_dim);
        if (hadamard) kv_quant::hadamard_rows(row.data(), 1, g.head_dim);
        for (float x : row) amax = std::max(amax, std::fabs(double{x}));
        p_max = std::max(p_max, e[static_cast<size_t>(p - first)] / sum);
      }
      bound += static_cast<double>(hi - lo) * p_max * amax * 0.51 / kv_kernels_impl::kQ8WeightMax;
    }
    // INT4 values: codes - 8 reach 8 steps, a row's largest magnitude at
    // least 7.5 (its group's range is 15 steps).
    if (int4_in_place()) bound *= 8.0 / 7.5;
    return hadamard ? bound * std::sqrt(static_cast<double>(g.head_dim)) : bound;
  }

  // Double-precision attention of queries [pos, pos + n) with the causal and
  // window masks: [n, q_dim]. bound (INT8 K and V stores): [n, n_head] the
  // value_bound of each query head. values: V rows [first_all, pos + n)
  // to use instead of the store's.
  std::vector<float> reference(int layer, int64_t pos, int64_t n, const float* q,
                               std::vector<double>* bound = nullptr, const std::vector<float>* values = nullptr) const {
    const KvGeometry g = geometry();
    const int64_t first_all = g.window(layer) > 0 ? std::max<int64_t>(0, pos - g.window(layer) + 1) : 0;
    const std::vector<float> k = held_rows(layer, true, first_all, pos + n);
    const std::vector<float> v = values != nullptr ? *values : held_rows(layer, false, first_all, pos + n);
    if (bound != nullptr) bound->assign(static_cast<size_t>(n * g.n_head), 0.0);
    const int group = g.n_head / g.n_head_kv;
    const double scale = 1.0 / std::sqrt(static_cast<double>(g.head_dim));
    std::vector<float> out(static_cast<size_t>(n * g.q_dim()));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t first = g.window(layer) > 0 ? std::max<int64_t>(0, pos + i - g.window(layer) + 1) : 0;
      for (int h = 0; h < g.n_head; ++h) {
        const float* qh = q + i * g.q_dim() + int64_t{h} * g.head_dim;
        const int64_t kv_off = int64_t{h / group} * g.head_dim;
        std::vector<double> s;
        double max_s = -INFINITY;
        for (int64_t p = first; p <= pos + i; ++p) {
          const float* kr = k.data() + (p - first_all) * g.kv_dim() + kv_off;
          double dot = 0;
          for (int d = 0; d < g.head_dim; ++d) dot += double{qh[d]} * kr[d];
          s.push_back(dot * scale);
          max_s = std::max(max_s, s.back());
        }
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - max_s));
        if (bound != nullptr) (*bound)[i * g.n_head + h] = value_bound(s, sum, first, first_all, pos + i + 1, v, kv_off);
        for (int d = 0; d < g.head_dim; ++d) {
          double o = 0;
          for (int64_t p = first; p <= pos + i; ++p) {
            o += s[static_cast<size_t>(p - first)] * v[(p - first_all) * g.kv_dim() + kv_off + d];
          }
          out[i * g.q_dim() + int64_t{h} * g.head_dim + d] = static_cast<float>(o / sum);
        }
      }
    }
    return out;
  }

 protected:
  const F32KvCache* f32_ = nullptr;
  const QuantizedKvCache* quantized_ = nullptr;
  std::vector<float> original_v_[2];  // each layer's f32 values as stored, [context, kv_dim]
};

// Contexts on both sides of the 128-position tiles and past one and two
// segment boundaries (kAttentionSegmentRows: 1, 127, 128, 129, 1000, 4097,
// 8200; with one KV head 256-row segments, which every context past 256
// crosses, 1000 four times).
TEST_P(TiledAttention, EqualsDoublePrecisionReferenceAcrossTileBoundariesAndWindows) {
  const KvGeometry g = geometry();
  double worst = 0;
  static_assert(kAttentionSegmentRows == 4096 && kAttentionSegmentRowsOneKvHead == 256,
                "the contexts below straddle its boundaries");
  static_assert(kv_kernels_impl::kAttentionTileRows == 128, "the contexts below straddle its boundaries");
  for (int64_t context : {1, 127, 128, 129, 1000, 4097, 8200}) {
    SCOPED_TRACE("context " + std::to_string(context));
    const std::unique_ptr<KvCache> kv = make_store(context);
    std::mt19937 rng(11);
    // The last query alone (a decode step) and the last five in one call
    // (a draft, or the end of a prefill micro-batch).
    for (int64_t n : {int64_t{1}, std::min<int64_t>(5, context)}) {
      const int64_t pos = context - n;
      const std::vector<float> q = random_rows(rng, n, g.q_dim(), 2.0f);
      for (int layer = 0; layer < g.n_layer; ++layer) {
        std::vector<float> got(q.size());
        kv->attend(layer, pos, n, q.data(), got.data(), nullptr);
        std::vector<double> bound;  // INT8 K and V: the integer value product's
        const std::vector<float> want =
            reference(layer, pos, n, attended_queries(q).data(), quantizes_queries() ? &bound : nullptr);
        for (size_t e = 0; e < got.size(); ++e) {
          const double tolerance = 3e-5 + (bound.empty() ? 0.0 : bound[e / g.head_dim]);
          ASSERT_NEAR(got[e], want[e], tolerance) << "layer " << layer << " n " << n << " element " << e;
          worst = std::max(worst, std::fabs(double{got[e]} - want[e]));
        }
      }
    }
  }
  std::printf("  %s: max |tiled - reference| %.2e\n", GetParam().store.c_str(), worst);
}

// INT8 K and V (attend_tile_q8): against the reference on the f32 query, the
// output moves by at most what the query's quantization implies. Per block of
// kQ8Block dims a code is off by at most half a step s_b / 2, so score r moves
// by at most ds_r = scale * sum_b s_b / 2 * sum_{d in b} |k_r[d]|; a softmax
// moves its weights by at most 2 max_r ds_r in L1 (to first order), so each
// output by at most 2 max_r ds_r max_r |v_r[d]|. Asserted with 1.5x that
// (second-order terms), per query and head; measured worst ratio printed.
using TiledAttentionQ8 = TiledAttention;

TEST_P(TiledAttentionQ8, QuantizedQueriesStayWithinTheBoundTheirQuantizationImplies) {
  const KvGeometry g = geometry();
  const int64_t context = 1000;
  const std::unique_ptr<KvCache> kv = make_store(context);
  if (!quantizes_queries()) GTEST_SKIP() << "INT4 K and V are dequantized here (a set without attend_tile_q4_positions: no AVX2): no quantized query";
  std::mt19937 rng(12);
  const std::vector<float> q = random_rows(rng, 1, g.q_dim(), 2.0f);
  const int gqa = g.n_head / g.n_head_kv, blocks = g.head_dim / kv_kernels_impl::kQ8Block;
  const double scale = 1.0 / std::sqrt(static_cast<double>(g.head_dim));
  const bool hadamard = quantized_->config().hadamard_keys;
  double worst_ratio = 0;
  for (int layer = 0; layer < g.n_layer; ++layer) {
    std::vector<float> got(q.size());
    kv->attend(layer, context - 1, 1, q.data(), got.data(), nullptr);
    const std::vector<float> want = reference(layer, context - 1, 1, q.data());
    const int64_t first = g.window(layer) > 0 ? std::max<int64_t>(0, context - g.window(layer)) : 0;
    // Keys in the domain the queries are quantized in (rotated when the store rotates them).
    std::vector<float> k = held_rows(layer, true, first, context);
    const std::vector<float> v = held_rows(layer, false, first, context);
    if (hadamard) kv_quant::hadamard_rows(k.data(), (context - first) * g.n_head_kv, g.head_dim);
    std::vector<float> qh = q;
    if (hadamard) kv_quant::hadamard_rows(qh.data(), g.n_head, g.head_dim);
    for (int h = 0; h < g.n_head; ++h) {
      const int64_t kv_off = int64_t{h / gqa} * g.head_dim;
      double ds_max = 0, v_max = 0;
      for (int64_t p = 0; p < context - first; ++p) {
        double ds = 0;
        for (int b = 0; b < blocks; ++b) {
          double amax = 0, k_abs = 0;
          for (int d = b * kv_kernels_impl::kQ8Block; d < (b + 1) * kv_kernels_impl::kQ8Block; ++d) {
            amax = std::max(amax, std::fabs(double{qh[h * g.head_dim + d]}));
            k_abs += std::fabs(double{k[p * g.kv_dim() + kv_off + d]});
          }
          ds += amax / 127.0 / 2.0 * k_abs;
        }
        ds_max = std::max(ds_max, ds * scale);
        for (int d = 0; d < g.head_dim; ++d) v_max = std::max(v_max, std::fabs(double{v[p * g.kv_dim() + kv_off + d]}));
      }
      const double bound = 2 * ds_max * v_max;
      for (int d = 0; d < g.head_dim; ++d) {
        const double err = std::fabs(double{got[h * g.head_dim + d]} - want[h * g.head_dim + d]);
        ASSERT_LE(err, 1.5 * bound + 3e-5) << "layer " << layer << " head " << h << " dim " << d;
        worst_ratio = std::max(worst_ratio, err / bound);
      }
    }
  }
  std::printf("  %s: worst |q8 - f32 reference| / bound %.3f\n", GetParam().store.c_str(), worst_ratio);
}

// INT8 K and V: the integer value product (weights quantized to 15 bits per
// head, tile and value group; kv_kernels.h, kQ8WeightMax) against the
// double-precision reference on the same quantized query and the store's
// values: within value_bound (plus 3e-5 of float rounding), for a spread
// softmax (queries of sigma 2) and a peaked one (sigma 8: a few rows carry
// the weight, where the bound is tightest). Printed beside it: the error the
// INT8 value codes themselves carry (the reference on the stored values
// against the reference on the f32 values), which the new error should not
// exceed.
TEST_P(TiledAttentionQ8, IntegerValueProductStaysWithinItsBound) {
  const KvGeometry g = geometry();
  const int64_t context = 1000;
  const std::unique_ptr<KvCache> kv = make_store(context);
  if (!quantizes_queries()) GTEST_SKIP() << "INT4 K and V are dequantized here (a set without attend_tile_q4_positions: no AVX2): no quantized query";
  double worst_err = 0, worst_ratio = 0, worst_codes = 0;
  for (const float sigma : {2.0f, 8.0f}) {
    std::mt19937 rng(13);
    const std::vector<float> q = random_rows(rng, 1, g.q_dim(), sigma);
    const std::vector<float> q_used = attended_queries(q);
    for (int layer = 0; layer < g.n_layer; ++layer) {
      std::vector<float> got(q.size());
      kv->attend(layer, context - 1, 1, q.data(), got.data(), nullptr);
      std::vector<double> bound;
      const std::vector<float> want = reference(layer, context - 1, 1, q_used.data(), &bound);
      const int64_t first_all = g.window(layer) > 0 ? std::max<int64_t>(0, context - g.window(layer)) : 0;
      const std::vector<float> original(original_v_[layer].begin() + first_all * g.kv_dim(),
                                        original_v_[layer].end());
      const std::vector<float> exact_values = reference(layer, context - 1, 1, q_used.data(), nullptr, &original);
      for (size_t e = 0; e < got.size(); ++e) {
        const double err = std::fabs(double{got[e]} - want[e]);
        const double b = bound[e / g.head_dim];
        ASSERT_LE(err, b + 3e-5) << "sigma " << sigma << " layer " << layer << " element " << e;
        worst_err = std::max(worst_err, err);
        worst_ratio = std::max(worst_ratio, err / (b + 3e-5));
        worst_codes = std::max(worst_codes, std::fabs(double{want[e]} - exact_values[e]));
      }
    }
  }
  std::printf("  %s: worst |q8 - reference| %.2e (/ bound %.3f); the value codes' own error %.2e\n",
              GetParam().store.c_str(), worst_err, worst_ratio, worst_codes);
}

// set_attention_prefetch_nta(nta) while it lives, then the vendor default.
class PrefetchNta {
 public:
  explicit PrefetchNta(int nta) { kv_kernels_impl::set_attention_prefetch_nta(nta); }
  ~PrefetchNta() { kv_kernels_impl::set_attention_prefetch_nta(-1); }
  PrefetchNta(const PrefetchNta&) = delete;
  PrefetchNta& operator=(const PrefetchNta&) = delete;
};

// Queries attended alone, in one call of many (both the split and the
// query-block schedules), and with 0, 1, 2 or 3 threads (decode tasks take
// blocks of KV heads, then runs of segments where a pool wants more tasks
// than there are KV heads, as it does here: 2 KV heads): the same bits.
TEST_P(TiledAttention, EachQueryIsTheSameBitsAloneBatchedAndOnAnyThreadCount) {
  const KvGeometry g = geometry();
  ThreadPool one(1), two(2), three(3);
  // [pos, pos + n): crossing a tile boundary (64), a segment boundary, a
  // prefill micro-batch past both, and decode over 4 segments.
  struct Run {
    int64_t pos, n;
  };
  const int64_t kSeg = attention_segment_rows(g.n_head_kv);
  for (const Run run : {Run{60, 3}, Run{kSeg - 3, 4}, Run{kSeg - 12, 37}, Run{1000, 64}, Run{3 * kSeg + 10, 2}}) {
    SCOPED_TRACE("pos " + std::to_string(run.pos) + " n " + std::to_string(run.n));
    const std::unique_ptr<KvCache> kv = make_store(run.pos + run.n);
    std::mt19937 rng(static_cast<uint32_t>(run.pos));
    const std::vector<float> q = random_rows(rng, run.n, g.q_dim(), 2.0f);
    for (int layer = 0; layer < g.n_layer; ++layer) {
      std::vector<float> batched(q.size()), batched_one(q.size()), batched_two(q.size()), batched_three(q.size());
      kv->attend(layer, run.pos, run.n, q.data(), batched.data(), nullptr);
      kv->attend(layer, run.pos, run.n, q.data(), batched_one.data(), &one);
      kv->attend(layer, run.pos, run.n, q.data(), batched_two.data(), &two);
      kv->attend(layer, run.pos, run.n, q.data(), batched_three.data(), &three);
      ASSERT_EQ(std::memcmp(batched.data(), batched_one.data(), sizeof(float) * q.size()), 0) << "layer " << layer;
      ASSERT_EQ(std::memcmp(batched.data(), batched_two.data(), sizeof(float) * q.size()), 0) << "layer " << layer;
      ASSERT_EQ(std::memcmp(batched.data(), batched_three.data(), sizeof(float) * q.size()), 0) << "layer " << layer;
      // A query alone (a decode step), its next tiles prefetched to L2 and
      // to L1 as non-temporal (kv_kernels.h, set_attention_prefetch_nta).
      for (int64_t i = 0; i < run.n; ++i) {
        for (const int nta : {0, 1}) {
          const PrefetchNta where(nta);
          std::vector<float> alone(static_cast<size_t>(g.q_dim()));
          kv->attend(layer, run.pos + i, 1, q.data() + i * g.q_dim(), alone.data(), &two);
          ASSERT_EQ(std::memcmp(alone.data(), batched.data() + i * g.q_dim(), sizeof(float) * g.q_dim()), 0)
              << "layer " << layer << " query " << i << " nta " << nta;
        }
      }
    }
  }
}

// Decode over a long context with 8 KV heads: without a pool the call's
// tasks are blocks of 2 heads; on two threads, from 12288 rows (here 12300) blocks of one
// head (attend_split's kOneHeadTaskRows), below them (8000) blocks of 2: every
// split the same bits (each head's segments fold and merge in the same
// order whichever heads share its task).
TEST(TiledAttentionSplit, LongContextDecodeIsTheSameBitsWhateverHeadsShareATask) {
  const KvGeometry g{1, 32, 8, 64, {0}};
  ThreadPool two(2), three(3);
  for (const char* store_name : {"f32", "int8-g32", "int4-g32"}) {
    for (const int64_t context : {int64_t{8000}, int64_t{12300}}) {
      SCOPED_TRACE(std::string(store_name) + " context " + std::to_string(context));
      auto config = parse_kv_codec_config(store_name);
      std::unique_ptr<KvCache> kv;
      if (std::string(store_name) == "f32") {
        kv = std::make_unique<F32KvCache>(g, context);
      } else {
        ASSERT_TRUE(config.ok()) << config.status();
        auto store = QuantizedKvCache::Create(g, context, *config);
        ASSERT_TRUE(store.ok()) << store.status();
        kv = std::move(*store);
      }
      std::mt19937 rng(static_cast<uint32_t>(context));
      const std::vector<float> k = random_rows(rng, context, g.kv_dim(), 1.0f);
      const std::vector<float> v = random_rows(rng, context, g.kv_dim(), 1.0f);
      ASSERT_TRUE(kv->store(0, 0, context, k.data(), v.data()).ok());
      kv->set_size(context);
      const std::vector<float> q = random_rows(rng, 1, g.q_dim(), 2.0f);
      std::vector<float> alone(q.size()), on_two(q.size()), on_three(q.size());
      kv->attend(0, context - 1, 1, q.data(), alone.data(), nullptr);
      kv->attend(0, context - 1, 1, q.data(), on_two.data(), &two);
      kv->attend(0, context - 1, 1, q.data(), on_three.data(), &three);
      EXPECT_EQ(std::memcmp(alone.data(), on_two.data(), sizeof(float) * q.size()), 0);
      EXPECT_EQ(std::memcmp(alone.data(), on_three.data(), sizeof(float) * q.size()), 0);
      EXPECT_NE(alone[0], 0.0f);
    }
  }
}

std::vector<AttentionCase> all_cases() {
  std::vector<AttentionCase> cases;
  for (const char* store :
       {"f32", "f16", "int8-g32", "int8-g32-had", "int4-g32", "int4-g32-had", "int4-g64", "int4-k8-g32-hk"}) {
    for (int gqa : {1, 4, 8}) {
      for (int head_dim : {64, 128}) cases.push_back(AttentionCase{store, gqa, head_dim});
    }
  }
  // The in-place INT4 kernel's other head sizes (8, 6 and 3 blocks of 32: 8,
  // 3 and 3 value groups).
  cases.push_back(AttentionCase{"int4-g32", 2, 256});
  cases.push_back(AttentionCase{"int4-g64", 4, 192});
  // Phi-3's head: 3 blocks (a last 32 dims unpacked on their own on AVX-512), and its
  // one query head per KV head, with INT4 and INT8 keys.
  cases.push_back(AttentionCase{"int4-g32", 4, 96});
  cases.push_back(AttentionCase{"int4-g32", 1, 96});
  cases.push_back(AttentionCase{"int4-k8-g32", 1, 96});
  // One KV head (Gemma 3 1B: 4 query heads, head_dim 256): 256-row segments.
  for (const char* store : {"f32", "f16", "int8-g32", "int4-g32", "int4-k8-g32-hk"}) {
    cases.push_back(AttentionCase{store, 4, 64, 1});
  }
  cases.push_back(AttentionCase{"int8-g32", 4, 256, 1});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Stores, TiledAttention, ::testing::ValuesIn(all_cases()), case_name);

// The stores whose keys and values are INT8 (attend_tile_q8) or whose values
// are INT4 (attend_tile_q4_positions, INT4 or INT8 keys, where the set has
// it; the tests skip where it does not).
std::vector<AttentionCase> q8_cases() {
  std::vector<AttentionCase> cases;
  for (const AttentionCase& c : all_cases()) {
    if (c.store.rfind("int8", 0) == 0 || c.store.rfind("int4", 0) == 0) cases.push_back(c);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Int8Stores, TiledAttentionQ8, ::testing::ValuesIn(q8_cases()), case_name);

}  // namespace
}  // namespace baton
