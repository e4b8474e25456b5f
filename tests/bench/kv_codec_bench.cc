// KV codec micro-benchmarks, one thread: encode and decode of one block of
// 256 tokens of a Llama-3.2-1B-shaped layer (8 KV heads x 64), and the
// quantized store's attention for one decode token over 4096 cached tokens.
// Bytes/s count F16-equivalent bytes (2 per element) for the codec, so every
// variant is measured against the same input; the store's figure counts the
// quantized bytes it reads.
//
//   build-kv/bin/baton_microbench --benchmark_filter=Kv --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/kv_codec/kv_codec.h"
#include "common/kv_cache/quantized_kv_cache.h"

namespace baton {
namespace {

constexpr int64_t kBlockTokens = 256;

KvGeometry bench_geometry() {
  KvGeometry g;
  g.n_layer = 1;
  g.n_head = 32;
  g.n_head_kv = 8;
  g.head_dim = 64;
  return g;
}

// N(0, 1) with an outlier channel every 16, like real keys.
std::vector<float> bench_data(int64_t n_tokens, int64_t width) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n_tokens * width));
  for (int64_t i = 0; i < n_tokens * width; ++i) x[i] = normal(rng) + ((i % width) % 16 == 3 ? 8.0f : 0.0f);
  return x;
}

KvCodecConfig config_of(const std::string& name) { return *parse_kv_codec_config(name); }

void BM_KvEncode(benchmark::State& state, const std::string& name) {
  const KvGeometry g = bench_geometry();
  const KvCodecConfig c = config_of(name);
  const std::vector<float> x = bench_data(kBlockTokens, g.kv_dim());
  size_t encoded = 0;
  for (auto _ : state) {
    auto enc = encode_kv_block(c, g, /*is_key=*/true, x.data(), kBlockTokens);
    encoded = enc->payload.size();
    benchmark::DoNotOptimize(enc->payload.data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(x.size()));
  state.counters["ratio_to_f16"] = static_cast<double>(encoded) / (2.0 * static_cast<double>(x.size()));
}

void BM_KvDecode(benchmark::State& state, const std::string& name) {
  const KvGeometry g = bench_geometry();
  const KvCodecConfig c = config_of(name);
  const std::vector<float> x = bench_data(kBlockTokens, g.kv_dim());
  const EncodedKvBlock enc = *encode_kv_block(c, g, /*is_key=*/true, x.data(), kBlockTokens);
  std::vector<float> inv_freq(g.head_dim / 2, 0.01f);
  const KvRopeParams rope{inv_freq.data(), g.head_dim, false, 0};
  std::vector<float> out(x.size());
  for (auto _ : state) {
    absl::Status st = decode_kv_block(c, g, true, enc.payload, enc.raw_size, kBlockTokens, out.data(), &rope);
    if (!st.ok()) state.SkipWithError(std::string(st.message()).c_str());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(x.size()));
}

void BM_KvDecodeQuantized(benchmark::State& state, const std::string& name) {
  const KvGeometry g = bench_geometry();
  const KvCodecConfig c = config_of(name);
  const std::vector<float> x = bench_data(kBlockTokens, g.kv_dim());
  const EncodedKvBlock enc = *encode_kv_block(c, g, true, x.data(), kBlockTokens);
  for (auto _ : state) {
    auto block = decode_kv_block_quantized(c, g, true, enc.payload, enc.raw_size, kBlockTokens);
    benchmark::DoNotOptimize(block->codes.data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(x.size()));
}

#define KV_CODEC_VARIANT(name)                          \
  BENCHMARK_CAPTURE(BM_KvEncode, name, std::string(name)); \
  BENCHMARK_CAPTURE(BM_KvDecode, name, std::string(name));

KV_CODEC_VARIANT("f16")
KV_CODEC_VARIANT("f16-z3")
KV_CODEC_VARIANT("int8-g32")
KV_CODEC_VARIANT("int8-g32-z3")
KV_CODEC_VARIANT("int8-pc-g32-z3")
KV_CODEC_VARIANT("int4-g32")
KV_CODEC_VARIANT("int4-g32-z1")
KV_CODEC_VARIANT("int4-g32-z3")
KV_CODEC_VARIANT("int4-pc-g32-z3")
KV_CODEC_VARIANT("int4-g32-had-z3")
KV_CODEC_VARIANT("int4-g32-pre-z3")
KV_CODEC_VARIANT("int4-g64-z3")
BENCHMARK_CAPTURE(BM_KvDecodeQuantized, "int4-g32-z3", std::string("int4-g32-z3"));

// One decode token attending over 4096 stored tokens of one layer.
void BM_KvStoreAttend(benchmark::State& state, const std::string& name) {
  const KvGeometry g = bench_geometry();
  const int64_t n_ctx = 4096;
  auto cache = *QuantizedKvCache::Create(g, n_ctx, config_of(name));
  const std::vector<float> kv = bench_data(n_ctx, g.kv_dim());
  (void)cache->store(0, 0, n_ctx, kv.data(), kv.data());
  cache->set_size(n_ctx);
  const std::vector<float> q = bench_data(1, g.q_dim());
  std::vector<float> out(q.size());
  for (auto _ : state) {
    cache->attend(0, n_ctx - 1, 1, q.data(), out.data(), nullptr);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * n_ctx * cache->bytes_per_token());
}

BENCHMARK_CAPTURE(BM_KvStoreAttend, "f16", std::string("f16"));
BENCHMARK_CAPTURE(BM_KvStoreAttend, "int8-g32", std::string("int8-g32"));
BENCHMARK_CAPTURE(BM_KvStoreAttend, "int4-g32", std::string("int4-g32"));
BENCHMARK_CAPTURE(BM_KvStoreAttend, "int4-g32-had", std::string("int4-g32-had"));

}  // namespace
}  // namespace baton
