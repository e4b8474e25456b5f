// QuantizedKvCache: attention over quantized K/V equals F32 attention over the
// dequantized K/V (tight tolerance), ingest equals store, and the engine with
// it matches the engine with F32 KV within a stated bound per codec.
#include "common/kv_cache/quantized_kv_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/engine/engine.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/engine/sampler.h"
#include "common/kv_codec/kv_kernels.h"
#include "common/kv_codec/kv_quant.h"
#include "common/model/model.h"
#include "common/util/thread_pool.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

// 2 layers, 4 query heads, 2 KV heads, head_dim 32.
KvGeometry test_geometry() { return KvGeometry{2, 4, 2, 32, {}}; }

std::vector<float> random_rows(int64_t n, int64_t width, uint32_t seed, float outlier = 6.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * width));
  for (int64_t i = 0; i < n * width; ++i) x[i] = normal(rng) + ((i % width) % 11 == 5 ? outlier : 0.0f);
  return x;
}

KvCodecConfig parse(const std::string& name) {
  auto c = parse_kv_codec_config(name);
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

// Fills an F32 cache with the quantized cache's contents, dequantized and
// rotated back to the model's domain.
void copy_dequantized(const QuantizedKvCache& q, F32KvCache& f, int64_t n_tokens) {
  const KvGeometry& g = q.geometry();
  for (int layer = 0; layer < g.n_layer; ++layer) {
    std::vector<float> kv[2];
    for (int kind = 0; kind < 2; ++kind) {
      const bool is_key = kind == 0;
      auto block = q.export_block(layer, is_key, 0, n_tokens);
      ASSERT_TRUE(block.ok()) << block.status();
      kv[kind].resize(static_cast<size_t>(n_tokens * g.kv_dim()));
      ASSERT_TRUE(dequantize_kv_block(q.config(), g, is_key, *block, kv[kind].data()).ok());
      if (is_key ? q.config().hadamard_keys : q.config().hadamard_values) {
        kv_quant::hadamard_rows(kv[kind].data(), n_tokens * g.n_head_kv, g.head_dim);
      }
    }
    ASSERT_TRUE(f.store(layer, 0, n_tokens, kv[0].data(), kv[1].data()).ok());
  }
}

// Whether the store reads its tiles in place on quantized queries: INT8 K
// and V (attend_tile_q8), or INT4 values (the store's own answer,
// QuantizedKvCache::int4_in_place).
bool quantizes_queries(const QuantizedKvCache& store) {
  if (store.int4_in_place()) return true;
  const KvCodecConfig& c = store.config();
  kv_kernels_impl::KvHeadRows k, v;  // what q8_tile_supported looks at: bits and groups
  k.bits = c.bits_for(true) == KvCodecConfig::Bits::kInt8 ? 8 : 0;
  v.bits = c.bits_for(false) == KvCodecConfig::Bits::kInt8 ? 8 : 0;
  k.group = c.key_group_size > 0 ? c.key_group_size : c.group_size;
  v.group = c.group_size;
  return kv_kernels_impl::kv_kernels().attend_tile_q8 != nullptr &&
         kv_kernels_impl::q8_tile_supported(k, v, store.geometry().head_dim);
}

// The queries as such a store multiplies them with its keys: each head in
// the keys' domain (Hadamard-rotated when the keys are), quantized like a
// Q8_0 activation, dequantized and rotated back. Other stores: q itself.
std::vector<float> attended_queries(const QuantizedKvCache& store, const std::vector<float>& q) {
  if (!quantizes_queries(store)) return q;
  const KvCodecConfig& c = store.config();
  const KvGeometry& g = store.geometry();
  const int64_t heads = static_cast<int64_t>(q.size()) / g.head_dim;
  std::vector<float> x = q;
  if (c.hadamard_keys) kv_quant::hadamard_rows(x.data(), heads, g.head_dim);
  std::vector<int8_t> codes(static_cast<size_t>(g.head_dim));
  std::vector<float> scales(static_cast<size_t>(g.head_dim / kv_kernels_impl::kQ8Block));
  std::vector<int32_t> bias(scales.size());
  for (int64_t h = 0; h < heads; ++h) {
    float* xh = x.data() + h * g.head_dim;
    kv_kernels_impl::quantize_query_q8(xh, g.head_dim, 1.0f, codes.data(), scales.data(), bias.data());
    for (int d = 0; d < g.head_dim; ++d) xh[d] = codes[d] * scales[d / kv_kernels_impl::kQ8Block];
  }
  if (c.hadamard_keys) kv_quant::hadamard_rows(x.data(), heads, g.head_dim);
  return x;
}

// Where the store takes the INT8 in-place path (attended_queries changes q):
// the bound of its integer value product (kv_kernels.h, kQ8WeightMax) on
// each output of queries [pos, pos + n) (no window), [n, n_head]: per tile
// of keys, n_t rows off by at most 0.51 weight steps of max_r pn_r max_r
// amax_r / kQ8WeightMax (pn the softmax probabilities from f's keys and the
// queries as multiplied, amax_r the row's largest magnitude in the stored domain);
// rotated values gather up to sqrt(head_dim) of it in one dim. Otherwise 0.
std::vector<double> value_product_bound(const KvCodecConfig& c, const KvGeometry& g, const F32KvCache& f, int layer,
                                        int64_t pos, int64_t n, const std::vector<float>& as_multiplied, bool q8) {
  std::vector<double> bound(static_cast<size_t>(n * g.n_head), 0.0);
  if (!q8) return bound;
  const int gqa = g.n_head / g.n_head_kv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(g.head_dim));
  std::vector<float> row(static_cast<size_t>(g.head_dim));
  for (int64_t i = 0; i < n; ++i) {
    for (int h = 0; h < g.n_head; ++h) {
      const float* q = as_multiplied.data() + i * g.q_dim() + int64_t{h} * g.head_dim;
      const int64_t kv_off = int64_t{h / gqa} * g.head_dim, end = pos + i + 1;
      std::vector<double> e(static_cast<size_t>(end));
      double max_s = -INFINITY, sum = 0;
      for (int64_t p = 0; p < end; ++p) {
        double dot = 0;
        for (int d = 0; d < g.head_dim; ++d) dot += double{q[d]} * f.k_row(layer, p)[kv_off + d];
        max_s = std::max(max_s, e[p] = dot * scale);
      }
      for (double& x : e) sum += (x = std::exp(x - max_s));
      double b = 0;
      for (int64_t t0 = 0; t0 < end; t0 += kv_kernels_impl::kAttentionTileRows) {
        const int64_t t1 = std::min(end, t0 + kv_kernels_impl::kAttentionTileRows);
        double p_max = 0, amax = 0;
        for (int64_t p = t0; p < t1; ++p) {
          std::copy(f.v_row(layer, p) + kv_off, f.v_row(layer, p) + kv_off + g.head_dim, row.begin());
          if (c.hadamard_values) kv_quant::hadamard_rows(row.data(), 1, g.head_dim);
          for (float x : row) amax = std::max(amax, std::fabs(double{x}));
          p_max = std::max(p_max, e[p] / sum);
        }
        b += static_cast<double>(t1 - t0) * p_max * amax * 0.51 / kv_kernels_impl::kQ8WeightMax;
      }
      // INT4 values: codes - 8 reach 8 steps, a row's largest magnitude at least 7.5.
      if (c.bits_for(false) == KvCodecConfig::Bits::kInt4) b *= 8.0 / 7.5;
      bound[i * g.n_head + h] = c.hadamard_values ? b * std::sqrt(static_cast<double>(g.head_dim)) : b;
    }
  }
  return bound;
}

class QuantizedAttend : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantizedAttend, EqualsF32AttendOnTheDequantizedData) {
  const KvGeometry g = test_geometry();
  const KvCodecConfig c = parse(GetParam());
  const int64_t n_ctx = 45, pos = 40, n_q = n_ctx - pos;
  auto cache = QuantizedKvCache::Create(g, 64, c);
  ASSERT_TRUE(cache.ok()) << cache.status();
  QuantizedKvCache& q = **cache;
  for (int layer = 0; layer < g.n_layer; ++layer) {
    const auto k = random_rows(n_ctx, g.kv_dim(), 10 + layer);
    const auto v = random_rows(n_ctx, g.kv_dim(), 20 + layer);
    // Prefill-style block, then decode-style single tokens.
    ASSERT_TRUE(q.store(layer, 0, 30, k.data(), v.data()).ok());
    for (int64_t t = 30; t < n_ctx; ++t) {
      ASSERT_TRUE(q.store(layer, t, 1, k.data() + t * g.kv_dim(), v.data() + t * g.kv_dim()).ok());
    }
  }
  q.set_size(n_ctx);
  F32KvCache f(g, 64);
  copy_dequantized(q, f, n_ctx);
  f.set_size(n_ctx);

  const auto queries = random_rows(n_q, g.q_dim(), 77, 0.0f);
  ThreadPool pool(2);
  for (int layer = 0; layer < g.n_layer; ++layer) {
    std::vector<float> expected(queries.size()), got(queries.size()), got_pool(queries.size());
    // INT8 K and V, INT4 values: the F32 cache gets the queries as the store quantizes them.
    const std::vector<float> as_multiplied = attended_queries(q, queries);
    f.attend(layer, pos, n_q, as_multiplied.data(), expected.data(), nullptr);
    q.attend(layer, pos, n_q, queries.data(), got.data(), nullptr);
    q.attend(layer, pos, n_q, queries.data(), got_pool.data(), &pool);
    const std::vector<double> bound =
        value_product_bound(c, g, f, layer, pos, n_q, as_multiplied, as_multiplied != queries);
    for (size_t i = 0; i < expected.size(); ++i) {
      ASSERT_NEAR(got[i], expected[i], 2e-5f * (1 + std::fabs(expected[i])) + bound[i / g.head_dim])
          << "layer " << layer << " i " << i;
      ASSERT_EQ(got_pool[i], got[i]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, QuantizedAttend,
                         ::testing::Values("f16", "f16-had", "int8-g32", "int8-g16", "int8-g8", "int8-g4",
                                           "int8-g32-had", "int4-g32", "int4-g16", "int4-g8", "int4-g4",
                                           "int4-g32-hk", "int4-g16-hv", "int4-k8-g32", "int4-k8-g16-had",
                                           "int4-kg16-g32", "int4-k8-kg8-g32-hk", "int8-kg4-g32"),
                         param_name);

TEST(QuantizedKvCache, CreateRejectsWireOnlyLayouts) {
  const KvGeometry g = test_geometry();
  auto pc = QuantizedKvCache::Create(g, 8, parse("int4-pc-g32"));
  ASSERT_FALSE(pc.ok());
  EXPECT_THAT(std::string(pc.status().message()), HasSubstr("per-token"));
  EXPECT_THAT(std::string(pc.status().message()), HasSubstr("use int4-g32"));
  auto pre = QuantizedKvCache::Create(g, 8, parse("int8-g32-pre"));
  ASSERT_FALSE(pre.ok());
  EXPECT_THAT(std::string(pre.status().message()), HasSubstr("post-RoPE"));
  EXPECT_FALSE(QuantizedKvCache::Create(g, 8, parse("int8-g64")).ok());  // 64 does not divide 32
  EXPECT_EQ(QuantizedKvCache::store_config_for(parse("int4-pc-g32-pre-had-rows-z3")).to_string(), "int4-g32-had");
  // Key bits carry over; a per-channel key group (tokens) does not.
  EXPECT_EQ(QuantizedKvCache::store_config_for(parse("int4-k8-pc-kg128-g32-pre-z3")).to_string(), "int4-k8-g32");
  EXPECT_EQ(QuantizedKvCache::store_config_for(parse("int4-k8-kg16-g32-z3")).to_string(), "int4-k8-kg16-g32");
}

TEST(QuantizedKvCache, BytesPerTokenCountCodesAndScales) {
  const KvGeometry g = test_geometry();  // 2 layers, kv_dim 64
  EXPECT_EQ(QuantizedKvCache::bytes_per_token(parse("f16"), g), 2 * 2 * 64 * 2);
  EXPECT_EQ(QuantizedKvCache::bytes_per_token(parse("int8-g32"), g), 2 * 2 * (64 + 2 * 2));
  EXPECT_EQ(QuantizedKvCache::bytes_per_token(parse("int4-g32"), g), 2 * 2 * (32 + 4 * 2));
  auto cache = QuantizedKvCache::Create(g, 100, parse("int4-g32"));
  ASSERT_TRUE(cache.ok());
  EXPECT_EQ((*cache)->memory_bytes(), 100 * 2 * 2 * (32 + 4 * 2));
  // The store agrees with the codec's raw size per token for per-token codecs.
  EXPECT_DOUBLE_EQ(kv_raw_bytes_per_token(parse("int4-g32"), g), (*cache)->bytes_per_token());
  // Mixed: INT8 keys (64 codes + 2 scales), INT4 values (32 bytes + 2 scales + 2 mins).
  EXPECT_EQ(QuantizedKvCache::bytes_per_token(parse("int4-k8-g32"), g), 2 * ((64 + 2 * 2) + (32 + 4 * 2)));
  EXPECT_DOUBLE_EQ(kv_raw_bytes_per_token(parse("int4-k8-kg16-g32"), g),
                   QuantizedKvCache::bytes_per_token(parse("int4-k8-kg16-g32"), g));
}

// (head_dim 64 too: the INT4 store layouts where the kernels read them,
// KeyBlocksAndValueQuadsKeepTheRowsBits; ingested rows start and end inside
// their blocks.)
TEST(QuantizedKvCache, IngestedWireBlocksEqualStoredRows) {
  for (const auto& [wire_name, head_dim] :
       {std::pair{"int4-g32-z3", 32}, std::pair{"int8-g16-had-rows", 32}, std::pair{"f16-z1", 32},
        std::pair{"int4-k8-g32-z3", 32}, std::pair{"int4-k8-kg16-g32-hk", 32}, std::pair{"int4-g32-z3", 64},
        std::pair{"int4-k8-g32-z3", 64}, std::pair{"int8-g32-z3", 64}}) {
    SCOPED_TRACE(std::string(wire_name) + " head_dim " + std::to_string(head_dim));
    KvGeometry g = test_geometry();
    g.head_dim = head_dim;
    const KvCodecConfig wire = parse(wire_name);
    auto a = QuantizedKvCache::Create(g, 32, QuantizedKvCache::store_config_for(wire));
    auto b = QuantizedKvCache::Create(g, 32, QuantizedKvCache::store_config_for(wire));
    ASSERT_TRUE(a.ok() && b.ok());
    const int64_t n = 20, begin = 4;
    const auto k = random_rows(n, g.kv_dim(), 1), v = random_rows(n, g.kv_dim(), 2);
    for (bool is_key : {true, false}) {
      ASSERT_TRUE((*a)->can_ingest(wire, is_key));
      auto enc = encode_kv_block(wire, g, is_key, is_key ? k.data() : v.data(), n);
      ASSERT_TRUE(enc.ok());
      auto block = decode_kv_block_quantized(wire, g, is_key, enc->payload, enc->raw_size, n);
      ASSERT_TRUE(block.ok()) << block.status();
      ASSERT_TRUE((*a)->ingest_block(1, is_key, begin, *block).ok());
    }
    ASSERT_TRUE((*b)->store(1, begin, n, k.data(), v.data()).ok());
    for (bool is_key : {true, false}) {
      auto ea = (*a)->export_block(1, is_key, begin, n);
      auto eb = (*b)->export_block(1, is_key, begin, n);
      ASSERT_TRUE(ea.ok() && eb.ok());
      EXPECT_EQ(ea->codes, eb->codes);
      EXPECT_EQ(ea->scales, eb->scales);
      EXPECT_EQ(ea->mins, eb->mins);
    }
  }
}

// The switches that turn the blocked layouts (key column blocks, value
// quads) on and off; a store takes them when it is made.
void allow_blocked_layouts(bool allowed) {
  kv_kernels_impl::set_q8_key_blocks_allowed(allowed);
  kv_kernels_impl::set_q8_value_quads_allowed(allowed);
}

// A store that keeps rows and one that holds the blocked layouts, of one
// geometry and codec (the switches left on).
struct RowsAndBlocks {
  std::unique_ptr<QuantizedKvCache> rows, blocks;
};
RowsAndBlocks rows_and_blocks(const KvGeometry& g, int64_t capacity, const KvCodecConfig& c) {
  allow_blocked_layouts(false);
  auto rows = QuantizedKvCache::Create(g, capacity, c);
  allow_blocked_layouts(true);
  auto blocks = QuantizedKvCache::Create(g, capacity, c);
  EXPECT_TRUE(rows.ok() && blocks.ok());
  if (!rows.ok() || !blocks.ok()) return {};
  EXPECT_FALSE((*rows)->key_blocks() || (*rows)->value_quads());
  return {std::move(*rows), std::move(*blocks)};
}

// Layer `layer` of a rows store and a blocked one: the same rows exported
// over [first, end), and the same attention bits for a decode step at end - 1
// and a block of queries [block_first, end); through_rows: the blocked store
// again with the switches off (each tile turned back into rows).
void expect_same_layer(QuantizedKvCache& rows, QuantizedKvCache& blocks, const KvGeometry& g, int layer,
                       int64_t first, int64_t end, int64_t block_first, bool through_rows) {
  for (const bool is_key : {true, false}) {
    auto a = rows.export_block(layer, is_key, first, end - first);
    auto b = blocks.export_block(layer, is_key, first, end - first);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << " " << b.status();
    ASSERT_EQ(a->codes, b->codes) << "layer " << layer << (is_key ? " keys" : " values");
    ASSERT_EQ(a->scales, b->scales);
    ASSERT_EQ(a->mins, b->mins);
  }
  for (const auto& [pos, n] : {std::pair<int64_t, int64_t>{end - 1, 1}, std::pair<int64_t, int64_t>{block_first, end - block_first}}) {
    const auto q = random_rows(n, g.q_dim(), static_cast<uint32_t>(pos + layer), 0.0f);
    std::vector<float> out_rows(q.size()), out_blocks(q.size(), 1.0f);
    rows.attend(layer, pos, n, q.data(), out_rows.data(), nullptr);
    blocks.attend(layer, pos, n, q.data(), out_blocks.data(), nullptr);
    ASSERT_EQ(std::memcmp(out_rows.data(), out_blocks.data(), sizeof(float) * q.size()), 0)
        << "layer " << layer << " queries at " << pos << " .. " << pos + n;
    if (!through_rows) continue;
    allow_blocked_layouts(false);
    blocks.attend(layer, pos, n, q.data(), out_blocks.data(), nullptr);
    allow_blocked_layouts(true);
    ASSERT_EQ(std::memcmp(out_rows.data(), out_blocks.data(), sizeof(float) * q.size()), 0)
        << "through rows: layer " << layer << " queries at " << pos << " .. " << pos + n;
  }
}

// A store that keeps its INT8 keys in key column blocks and its INT8 values
// in value quads (where the kernels read them in place: AVX-512, quads with
// VBMI) against one made with them disallowed (rows): the same rows
// exported, the same attention bits for a decode step and a prefill block,
// read in place and (blocks and quads disallowed after the store was made)
// through rows; after a reserve and a shrink too; and its memory counts each
// layer's rows up to whole blocks. Values INT8 (the in-place kernel) and
// INT4 (keys dequantized), keys in groups of 16 (both dequantized),
// Hadamard keys. INT4 keys and values in their layouts (nibble key blocks,
// nibble quads) where the INT4 kernel reads them in place (q4_reads_blocks),
// with INT8 keys too (int4-k8), at head_dim 64 and 128; INT8 and INT4 at
// head_dim 128, 192 and 256 in groups of 32 (4, 6 and 8 value groups: the
// quads' value product since the forty-fourth session for INT8 too), INT8
// at 96 (3 groups, 2 heads a value run).
TEST(QuantizedKvCache, KeyBlocksAndValueQuadsKeepTheRowsBits) {
  if (!kv_kernels_impl::q8_key_blocks_active()) {
    GTEST_SKIP() << "the active kernels read no key column blocks (AVX-512 only): every store keeps rows";
  }
  constexpr int64_t kCapacity = 300, kStored = 250;
  const bool q4_blocks = kv_kernels_impl::kv_kernels().q4_reads_blocks && kv_kernels_impl::q4_in_place_allowed();
  using Bits = KvCodecConfig::Bits;
  for (const auto& [name, head_dim] : {std::pair{"int8-g32", 64}, std::pair{"int8-g32-had", 64},
                                       std::pair{"int4-k8-g32", 64}, std::pair{"int8-kg64-g32", 64},
                                       std::pair{"int8-kg16-g32", 64}, std::pair{"int4-g32", 64},
                                       std::pair{"int4-g64", 64}, std::pair{"int4-g32-had", 64},
                                       std::pair{"int4-g32", 128}, std::pair{"int4-k8-g32", 128},
                                       std::pair{"int8-g32", 128}, std::pair{"int8-g32", 256},
                                       std::pair{"int4-g32", 256}, std::pair{"int8-g32", 96},
                                       std::pair{"int8-g32", 192}, std::pair{"int4-g32", 192}}) {
    SCOPED_TRACE(std::string(name) + " head_dim " + std::to_string(head_dim));
    const KvGeometry g{2, 8, 2, head_dim, {}};
    const KvCodecConfig c = parse(name);
    const bool int4_keys = c.bits_for(/*is_key=*/true) == Bits::kInt4;
    if (int4_keys && !q4_blocks) continue;  // (INT4 keys stay in rows)
    auto [rows, blocks] = rows_and_blocks(g, kCapacity, c);
    ASSERT_TRUE(rows != nullptr && blocks != nullptr);
    ASSERT_TRUE(blocks->key_blocks());
    EXPECT_TRUE(QuantizedKvCache::uses_key_blocks(c, g));
    const Bits value_bits = c.bits_for(/*is_key=*/false);
    EXPECT_EQ(blocks->value_quads(), (value_bits == Bits::kInt8 || (value_bits == Bits::kInt4 && q4_blocks)) &&
                                            kv_kernels_impl::q8_value_quads_active());
    // INT4 values in nibble quads: attention reads them in place.
    if (value_bits == Bits::kInt4 && q4_blocks) {
      EXPECT_TRUE(blocks->int4_in_place());
    }
    // Each layer's 300 rows run to 304 (19 blocks).
    const int64_t row_bytes = QuantizedKvCache::bytes_per_token(c, g) / g.n_layer;
    EXPECT_EQ(rows->memory_bytes(), g.n_layer * kCapacity * row_bytes);
    EXPECT_EQ(blocks->memory_bytes(), g.n_layer * 304 * row_bytes);
    EXPECT_EQ(QuantizedKvCache::memory_bytes_for(c, g, kCapacity), blocks->memory_bytes());
    const auto k = random_rows(kStored, g.kv_dim(), 7), v = random_rows(kStored, g.kv_dim(), 8);
    for (QuantizedKvCache* store : {rows.get(), blocks.get()}) {
      for (int layer = 0; layer < g.n_layer; ++layer) {
        // Rows that start and end inside blocks; one row alone.
        for (const auto& [first, n] : {std::pair{0, 100}, std::pair{100, 1}, std::pair{101, 149}}) {
          ASSERT_TRUE(store->store(layer, first, n, k.data() + first * g.kv_dim(), v.data() + first * g.kv_dim()).ok());
        }
      }
      store->set_size(kStored);
    }
    // A decode step at the last row, a prefill block's 50 queries; in place and through rows.
    auto expect_same = [&](const std::string& what) {
      SCOPED_TRACE(what);
      for (int layer = 0; layer < g.n_layer; ++layer) expect_same_layer(*rows, *blocks, g, layer, 0, kStored, 200, true);
    };
    expect_same("as stored");
    ASSERT_TRUE(blocks->reserve(517).ok());
    expect_same("after a reserve");
    ASSERT_TRUE(blocks->shrink_to(kStored + 3).ok());
    EXPECT_EQ(blocks->memory_bytes(), g.n_layer * 256 * row_bytes);
    expect_same("after a shrink");
  }
  allow_blocked_layouts(true);
}

// A model with sliding-window layers (Gemma 3): its full layers hold the
// blocked layouts, its windowed layers rows (a window moves rows off block
// edges). Through writes that slide the window, a rollback that gathers the
// rows kept aside back, a reserve and a shrink, every layer exports the same
// rows and attends to the same bits as a store that keeps rows everywhere.
TEST(QuantizedKvCache, WindowedLayersKeepRowsBesideBlockedFullLayersWithTheRowsBits) {
  if (!kv_kernels_impl::q8_key_blocks_active()) {
    GTEST_SKIP() << "the active kernels read no key column blocks (AVX-512 only): every store keeps rows";
  }
  constexpr int64_t kCapacity = 300, kStored = 250, kTurn = 200;
  constexpr int32_t kWindow = 100;
  const KvGeometry g{3, 8, 2, 64, {0, kWindow, 0}};
  const bool q4_blocks = kv_kernels_impl::kv_kernels().q4_reads_blocks && kv_kernels_impl::q4_in_place_allowed();
  for (const char* name : {"int8-g32", "int4-g32", "int4-k8-g32"}) {
    SCOPED_TRACE(name);
    const KvCodecConfig c = parse(name);
    if (c.bits_for(/*is_key=*/false) == KvCodecConfig::Bits::kInt4 && !q4_blocks) continue;
    auto [rows, blocks] = rows_and_blocks(g, kCapacity, c);
    ASSERT_TRUE(rows != nullptr && blocks != nullptr);
    ASSERT_TRUE(blocks->key_blocks() && blocks->value_quads());
    // Full layers run to 304 rows (19 blocks); the windowed one keeps 164
    // rows, and 99 aside for a rollback, in either store.
    const int64_t row_bytes = QuantizedKvCache::bytes_per_token(c, g) / g.n_layer;
    const int64_t windowed_rows = QuantizedKvCache::layer_rows(kWindow, kCapacity) + kWindow - 1;
    EXPECT_EQ(rows->memory_bytes(), (2 * kCapacity + windowed_rows) * row_bytes);
    EXPECT_EQ(blocks->memory_bytes(), (2 * 304 + windowed_rows) * row_bytes);
    const auto k = random_rows(kStored, g.kv_dim(), 17), v = random_rows(kStored, g.kv_dim(), 18);
    for (QuantizedKvCache* store : {rows.get(), blocks.get()}) {
      // A turn, then the next one's rows (the window slides past the pinned
      // point: rows kept aside), in pieces that start and end inside blocks.
      for (const auto& [first, n] : {std::pair{0, 120}, std::pair{120, 80}}) {
        for (int layer = 0; layer < g.n_layer; ++layer) {
          ASSERT_TRUE(store->store(layer, first, n, k.data() + first * g.kv_dim(), v.data() + first * g.kv_dim()).ok());
        }
        store->set_size(first + n);
      }
      store->pin_rollback_point();
      for (const auto& [first, n] : {std::pair{kTurn, 1}, std::pair{kTurn + 1, 49}}) {
        for (int layer = 0; layer < g.n_layer; ++layer) {
          ASSERT_TRUE(store->store(layer, first, n, k.data() + first * g.kv_dim(), v.data() + first * g.kv_dim()).ok());
        }
      }
      store->set_size(kStored);
    }
    auto expect_same = [&](const std::string& what, int64_t size) {
      SCOPED_TRACE(what);
      for (int layer = 0; layer < g.n_layer; ++layer) {
        // The windowed layer's window; a block of queries (there those whose
        // windows it holds: after the rollback only the last one's).
        const int64_t first = g.window(layer) > 0 ? size - kWindow : 0;
        const int64_t block_first = std::max(size - 40, rows->held_positions(layer).first + g.window(layer) - 1);
        expect_same_layer(*rows, *blocks, g, layer, first, size, block_first, false);
      }
    };
    expect_same("as stored", kStored);
    ASSERT_TRUE(blocks->reserve(517).ok());
    ASSERT_TRUE(rows->reserve(517).ok());
    expect_same("after a reserve", kStored);
    // Back to the pinned point: the windowed layer gathers the rows it kept aside.
    for (QuantizedKvCache* store : {rows.get(), blocks.get()}) {
      store->set_size(kTurn);
      ASSERT_TRUE(store->holds_window_for(kTurn));
    }
    expect_same("after a rollback", kTurn);
    ASSERT_TRUE(blocks->shrink_to(kTurn + 3).ok());
    ASSERT_TRUE(rows->shrink_to(kTurn + 3).ok());
    expect_same("after a shrink", kTurn);
  }
  allow_blocked_layouts(true);
}

TEST(QuantizedKvCache, IngestChecksCompatibilityShapeAndRange) {
  const KvGeometry g = test_geometry();
  auto cache = QuantizedKvCache::Create(g, 16, parse("int4-g32"));
  ASSERT_TRUE(cache.ok());
  QuantizedKvCache& q = **cache;
  EXPECT_FALSE(q.can_ingest(parse("int4-pc-g32"), true));
  EXPECT_TRUE(q.can_ingest(parse("int4-pc-g32"), false));  // values group per token anyway
  EXPECT_FALSE(q.can_ingest(parse("int4-g32-pre"), true));
  EXPECT_FALSE(q.can_ingest(parse("int4-g16"), false));
  EXPECT_FALSE(q.can_ingest(parse("int8-g32"), false));
  EXPECT_FALSE(q.can_ingest(parse("int4-g32-hk"), true));
  EXPECT_TRUE(q.can_ingest(parse("int4-g32-hk"), false));

  const auto k = random_rows(4, g.kv_dim(), 3);
  auto block = quantize_kv_block(parse("int4-g32"), g, true, k.data(), 4);
  ASSERT_TRUE(block.ok());
  absl::Status st = q.ingest_block(0, true, 14, *block);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_EQ(q.ingest_block(2, true, 0, *block).code(), absl::StatusCode::kInvalidArgument);
  QuantizedKvBlock short_block = *block;
  short_block.codes.pop_back();
  st = q.ingest_block(0, true, 0, short_block);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("code bytes"));
  QuantizedKvBlock nan_block = *block;
  nan_block.scales[0] = 0x7e00;
  EXPECT_EQ(q.ingest_block(0, true, 0, nan_block).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(q.ingest_block(0, true, 12, *block).ok());
  const auto big = random_rows(20, g.kv_dim(), 4);
  EXPECT_EQ(q.store(0, 0, 20, big.data(), big.data()).code(), absl::StatusCode::kResourceExhausted);
}

TEST(QuantizedKvCache, MixedStoreIngestsEachKindWithItsOwnBits) {
  const KvGeometry g = test_geometry();
  auto cache = QuantizedKvCache::Create(g, 16, parse("int4-k8-g32"));
  ASSERT_TRUE(cache.ok()) << cache.status();
  QuantizedKvCache& q = **cache;
  EXPECT_TRUE(q.can_ingest(parse("int4-k8-g32-z3"), true));
  EXPECT_TRUE(q.can_ingest(parse("int4-k8-g32-z3"), false));
  EXPECT_FALSE(q.can_ingest(parse("int4-g32"), true));  // INT4 keys into INT8 key rows
  EXPECT_TRUE(q.can_ingest(parse("int4-g32"), false));
  EXPECT_TRUE(q.can_ingest(parse("int8-g32"), true));   // INT8 keys of group 32 are the same bytes
  EXPECT_FALSE(q.can_ingest(parse("int8-g32"), false));
  EXPECT_FALSE(q.can_ingest(parse("int4-k8-kg16-g32"), true));
  const auto k = random_rows(4, g.kv_dim(), 3);
  auto int4_keys = quantize_kv_block(parse("int4-g32"), g, true, k.data(), 4);
  ASSERT_TRUE(int4_keys.ok());
  absl::Status st = q.ingest_block(0, true, 0, *int4_keys);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("key block of 4 tokens"));
  EXPECT_TRUE(q.ingest_block(0, false, 0, *int4_keys).ok());  // INT4 rows fit the value plane
}

// ------------------------------------------------------------- engine ------

struct EngineRun {
  std::vector<float> prefill_logits;              // last prompt token
  std::vector<std::vector<float>> decode_logits;  // per decoded token
  std::vector<int32_t> tokens;                    // greedy tokens
};

// Prefill 24 tokens, then 8 greedy decode steps. The decode inputs follow
// `forced` when given, so two runs see the same inputs.
EngineRun run_engine(const Model& model, KvCache& kv, const std::vector<int32_t>* forced) {
  Engine engine(model, EngineOptions{2, 16});
  const ModelSpec& s = model.spec();
  Rng rng(5);
  std::vector<int32_t> prompt(24);
  for (auto& t : prompt) t = static_cast<int32_t>(rng.next() % s.n_vocab);
  EngineRun run;
  EXPECT_TRUE(engine.prefill(prompt, kv, &run.prefill_logits).ok());
  std::vector<float> logits = run.prefill_logits;
  for (int i = 0; i < 8; ++i) {
    const int32_t next = forced ? (*forced)[i]
                                : static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    run.tokens.push_back(next);
    EXPECT_TRUE(engine.decode_step(next, kv, &logits).ok());
    run.decode_logits.push_back(logits);
  }
  return run;
}

// Max |a - b| over all logits of a run, relative to the largest |b|.
double relative_max_diff(const EngineRun& a, const EngineRun& b) {
  double worst = 0, scale = 1e-6;
  auto cmp = [&](const std::vector<float>& x, const std::vector<float>& y) {
    for (size_t i = 0; i < x.size(); ++i) {
      worst = std::max(worst, std::fabs(double{x[i]} - y[i]));
      scale = std::max(scale, std::fabs(double{y[i]}));
    }
  };
  cmp(a.prefill_logits, b.prefill_logits);
  for (size_t i = 0; i < a.decode_logits.size(); ++i) cmp(a.decode_logits[i], b.decode_logits[i]);
  return worst / scale;
}

struct EngineCase {
  std::string codec;
  double tolerance;  // relative max logit difference to the F32-KV engine
};

void PrintTo(const EngineCase& c, std::ostream* os) { *os << c.codec << " (tolerance " << c.tolerance << ")"; }

std::string engine_case_name(const ::testing::TestParamInfo<EngineCase>& info) {
  return param_name(::testing::TestParamInfo<std::string>(info.param.codec, info.index));
}

class QuantizedKvEngine : public ::testing::TestWithParam<EngineCase> {};

TEST_P(QuantizedKvEngine, MatchesF32KvWithinTheCodecTolerance) {
  auto model = Model::Load(testing::synth_model_path("tiny", GgmlType::kF16));
  ASSERT_TRUE(model.ok()) << model.status();
  Engine probe(**model, EngineOptions{1, 16});
  F32KvCache f32(probe.kv_geometry(), 64);
  const EngineRun reference = run_engine(**model, f32, nullptr);
  auto cache = QuantizedKvCache::Create(probe.kv_geometry(), 64, parse(GetParam().codec));
  ASSERT_TRUE(cache.ok()) << cache.status();
  const EngineRun got = run_engine(**model, **cache, &reference.tokens);
  const double diff = relative_max_diff(got, reference);
  RecordProperty("relative_max_logit_diff", std::to_string(diff));
  EXPECT_LE(diff, GetParam().tolerance) << GetParam().codec;
  std::printf("  %s: relative max logit diff to f32 KV %.2e\n", GetParam().codec.c_str(), diff);
  EXPECT_EQ((*cache)->size(), 32);
}

// Tolerances: f16 rounding of K/V (2^-11 relative) gives ~1e-3 on logits;
// INT8 per-group steps of amax/127 a few 1e-3; INT4 steps of range/15. The
// tiny model's head_dim is 16, so groups of 16.
INSTANTIATE_TEST_SUITE_P(Codecs, QuantizedKvEngine,
                         ::testing::Values(EngineCase{"f16", 2e-3}, EngineCase{"f16-had", 2e-3},
                                           EngineCase{"int8-g16", 2e-2}, EngineCase{"int8-g16-had", 2e-2},
                                           EngineCase{"int4-g16", 0.25}, EngineCase{"int4-g16-had", 0.25},
                                           EngineCase{"int4-k8-g16", 0.25}),
                         engine_case_name);

TEST(QuantizedKvEngineHadamard, F16RotationDoesNotChangeLogitsBeyondF16Rounding) {
  auto model = Model::Load(testing::synth_model_path("tiny", GgmlType::kF16));
  ASSERT_TRUE(model.ok());
  Engine probe(**model, EngineOptions{1, 16});
  auto plain = QuantizedKvCache::Create(probe.kv_geometry(), 64, parse("f16"));
  auto rotated = QuantizedKvCache::Create(probe.kv_geometry(), 64, parse("f16-had"));
  ASSERT_TRUE(plain.ok() && rotated.ok());
  const EngineRun a = run_engine(**model, **plain, nullptr);
  const EngineRun b = run_engine(**model, **rotated, &a.tokens);
  EXPECT_LE(relative_max_diff(b, a), 2e-3);
}

}  // namespace
}  // namespace baton
