// rANS coder micro-benchmarks (common/kv_codec/rans.h), one thread: a table
// shaped like one KV head's transform components, 64 columns coded with
// discretized-Gaussian models of 3..40 symbols, n_rows tokens drawn from the
// models themselves. items/s counts symbols; the counter bits_per_symbol is
// the coded size, size_to_ideal that size over the models' ideal cost.
//
//   build/bin/baton_microbench --benchmark_filter=Rans --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/kv_codec/rans.h"

namespace baton {
namespace {

constexpr int kCols = 64;

struct RansBenchTable {
  std::vector<RansModel> owned;
  std::vector<const RansModel*> models;
  std::vector<uint8_t> symbols;  // [n_rows, kCols], row-major
};

RansBenchTable rans_bench_table(int64_t n_rows) {
  std::mt19937 rng(21);
  RansBenchTable t;
  t.owned.reserve(kCols);
  for (int c = 0; c < kCols; ++c) {
    const int n = 3 + static_cast<int>(rng() % 38);
    const double sigma = 0.5 + n / 6.0;
    std::vector<double> w(n);
    for (int s = 0; s < n; ++s) {
      const double z = (s - (n - 1) / 2.0) / sigma;
      w[s] = std::exp(-0.5 * z * z);
    }
    t.owned.push_back(*make_rans_model(w));
  }
  for (const RansModel& m : t.owned) t.models.push_back(&m);
  t.symbols.resize(static_cast<size_t>(n_rows) * kCols);
  for (size_t i = 0; i < t.symbols.size(); ++i) {
    t.symbols[i] = t.owned[i % kCols].slot_symbol[rng() % (1u << kRansProbBits)];
  }
  return t;
}

void BM_RansEncode(benchmark::State& state) {
  const int64_t n_rows = state.range(0);
  const RansBenchTable t = rans_bench_table(n_rows);
  size_t encoded = 0;
  for (auto _ : state) {
    absl::StatusOr<std::string> enc = rans_encode(t.symbols.data(), n_rows, kCols, t.models);
    if (!enc.ok()) state.SkipWithError(std::string(enc.status().message()).c_str());
    encoded = enc->size();
    benchmark::DoNotOptimize(enc->data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(t.symbols.size()));
  state.counters["bits_per_symbol"] = 8.0 * static_cast<double>(encoded) / static_cast<double>(t.symbols.size());
  state.counters["size_to_ideal"] =
      8.0 * static_cast<double>(encoded) / rans_ideal_bits(t.symbols.data(), n_rows, kCols, t.models);
}

void BM_RansDecode(benchmark::State& state) {
  const int64_t n_rows = state.range(0);
  const RansBenchTable t = rans_bench_table(n_rows);
  const std::string enc = *rans_encode(t.symbols.data(), n_rows, kCols, t.models);
  std::vector<uint8_t> out(t.symbols.size());
  for (auto _ : state) {
    absl::Status st = rans_decode(enc, n_rows, kCols, t.models, out.data());
    if (!st.ok()) state.SkipWithError(std::string(st.message()).c_str());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(t.symbols.size()));
  state.counters["bits_per_symbol"] = 8.0 * static_cast<double>(enc.size()) / static_cast<double>(t.symbols.size());
}

BENCHMARK(BM_RansEncode)->Arg(256)->Arg(4096);
BENCHMARK(BM_RansDecode)->Arg(256)->Arg(4096);

}  // namespace
}  // namespace baton
