// Decode attention over a quantized KV store head group (llama-3.2-1b:
// head_dim 64, 4 query heads per KV head): the per-row kernel calls that
// QuantizedKvCache::attend makes (one dot per K row and one axpy per V row,
// per query head) against one attend_heads call per head group. items/s =
// context rows attended for all 4 query heads.
//
//   build-perf/bin/baton_microbench --benchmark_filter=KvAttention
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/cpu/ops.h"
#include "common/kv_codec/kv_kernels.h"
#include "common/util/fp16.h"

namespace baton {
namespace {

using kv_kernels_impl::KvHeadRows;
using kv_kernels_impl::KvKernels;

constexpr int kHeadDim = 64, kQueryHeads = 4, kGroup = 32;
constexpr int64_t kRowElements = 8 * kHeadDim;  // 8 KV heads per row, as the 1B model

struct BenchPlane {
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales, mins;
  KvHeadRows head;
};

BenchPlane make_plane(int bits, int64_t n_ctx) {
  std::mt19937 rng(5);
  BenchPlane p;
  const int64_t row_code_bytes = bits == 16 ? 2 * kRowElements : bits == 8 ? kRowElements : kRowElements / 2;
  const int64_t row_groups = bits == 16 ? 0 : kRowElements / kGroup;
  p.codes.resize(static_cast<size_t>(row_code_bytes * n_ctx));
  p.scales.assign(static_cast<size_t>(row_groups * n_ctx), fp32_to_fp16(0.01f));
  if (bits == 4) p.mins.assign(p.scales.size(), fp32_to_fp16(-0.05f));
  if (bits == 16) {
    auto* halves = reinterpret_cast<uint16_t*>(p.codes.data());
    for (size_t i = 0; i < p.codes.size() / 2; ++i) halves[i] = fp32_to_fp16(static_cast<float>(rng() % 200) / 100 - 1);
  } else {
    for (auto& b : p.codes) b = static_cast<uint8_t>(rng());
  }
  p.head = KvHeadRows{bits, p.codes.data(), row_code_bytes, p.scales.empty() ? nullptr : p.scales.data(),
                      p.mins.empty() ? nullptr : p.mins.data(), row_groups, kGroup};
  return p;
}

// The per-row path: for each query head, one kernel call per K row and per V row.
void per_row(const KvKernels& kern, const KvHeadRows& k, const KvHeadRows& v, const float* q, int64_t n_ctx,
             std::vector<float>& scores, float* out) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  for (int i = 0; i < kQueryHeads; ++i) {
    const float* qh = q + i * kHeadDim;
    for (int64_t j = 0; j < n_ctx; ++j) {
      const uint8_t* codes = k.codes + j * k.row_code_bytes;
      switch (k.bits) {
        case 16: scores[j] = kern.dot_f16(qh, reinterpret_cast<const uint16_t*>(codes), kHeadDim) * scale; break;
        case 8:
          scores[j] = kern.dot_int8(qh, reinterpret_cast<const int8_t*>(codes), k.scales + j * k.row_groups, kHeadDim,
                                    kGroup) * scale;
          break;
        default:
          scores[j] = kern.dot_int4(qh, codes, k.scales + j * k.row_groups, k.mins + j * k.row_groups, kHeadDim,
                                    kGroup) * scale;
      }
    }
    softmax_inplace(scores.data(), n_ctx);
    float* oh = out + i * kHeadDim;
    for (int d = 0; d < kHeadDim; ++d) oh[d] = 0;
    for (int64_t j = 0; j < n_ctx; ++j) {
      const uint8_t* codes = v.codes + j * v.row_code_bytes;
      switch (v.bits) {
        case 16: kern.axpy_f16(scores[j], reinterpret_cast<const uint16_t*>(codes), oh, kHeadDim); break;
        case 8:
          kern.axpy_int8(scores[j], reinterpret_cast<const int8_t*>(codes), v.scales + j * v.row_groups, oh, kHeadDim,
                         kGroup);
          break;
        default:
          kern.axpy_int4(scores[j], codes, v.scales + j * v.row_groups, v.mins + j * v.row_groups, oh, kHeadDim,
                         kGroup);
      }
    }
  }
}

// Args: bits, context, grouped (0: per-row calls, 1: attend_heads).
void BM_KvAttention(benchmark::State& state) {
  const int bits = static_cast<int>(state.range(0));
  const int64_t n_ctx = state.range(1);
  const bool grouped = state.range(2) != 0;
  const BenchPlane k = make_plane(bits, n_ctx), v = make_plane(bits, n_ctx);
  std::vector<float> q(kQueryHeads * kHeadDim, 0.1f), out(kQueryHeads * kHeadDim);
  std::vector<float> scores(static_cast<size_t>(n_ctx));
  std::vector<float> scratch(kv_kernels_impl::attend_heads_scratch_floats(kQueryHeads, kHeadDim, n_ctx));
  const KvKernels& kern = kv_kernels_impl::kv_kernels();
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  for (auto _ : state) {
    if (grouped) {
      kern.attend_heads(k.head, v.head, q.data(), kQueryHeads, kHeadDim, scale, n_ctx, scratch.data(), out.data());
    } else {
      per_row(kern, k.head, v.head, q.data(), n_ctx, scores, out.data());
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n_ctx);
  state.SetLabel(grouped ? "attend_heads" : "per-row calls");
}
BENCHMARK(BM_KvAttention)
    ->ArgNames({"bits", "ctx", "grouped"})
    ->ArgsProduct({{16, 8, 4}, {512, 4096}, {0, 1}});

}  // namespace
}  // namespace baton
