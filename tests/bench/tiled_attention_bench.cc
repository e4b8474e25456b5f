// Attention of the edge store (QuantizedKvCache::attend, the tiled kernel of
// common/kv_cache/tiled_attention.h) on a 16-layer store, so a decode step's
// KV streams from memory as in a real model (16 x 4.4 MB at 4K, INT8,
// llama-3.2-1b shapes; F16, INT8 and INT4 stores), next to a plain read of a
// buffer of the same size.
//   Decode: one query per layer at the end of the context, every layer;
//     bytes/s = KV bytes of the context read (all layers, K and V, codes
//     and scales). Compare with BM_KvReadBaseline at the same size and
//     threads: that ratio is the share of read bandwidth attention reaches.
//     evict:1 runs `baton bench decode`'s read pass (its tuned reader over
//     1 GiB, on the attention's threads; untimed) before every iteration,
//     as that bench does before it times attention and as a decode step's
//     weight stream does. On the Zen 5 host (context 16384, 2 threads, 6
//     alternating runs) 5.63-7.70 against 5.36-7.36 ms with evict:0: no
//     steady gap within the host's two memory phases.
//   Prefill: a 64-query micro-batch (the engine's) at position pos of one
//     layer; items/s = queries.
//
//   build/bin/baton_microbench --benchmark_filter='TiledAttention|KvReadBaseline' --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/kv_cache/quantized_kv_cache.h"
#include "common/kv_cache/tiled_attention.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_codec/kv_kernels.h"
#include "common/util/fp16.h"
#include "common/util/huge_page_buffer.h"
#include "common/util/thread_pool.h"
#include "cpu_peak.h"
#include "read_bandwidth.h"

namespace baton {
namespace {

ThreadPool* pool_of(int n_threads) {
  static std::unique_ptr<ThreadPool> pools[3];
  if (n_threads <= 1) return nullptr;
  if (!pools[n_threads]) pools[n_threads] = std::make_unique<ThreadPool>(n_threads);
  return pools[n_threads].get();
}

const char* codec_name(int bits) { return bits == 16 ? "f16" : bits == 8 ? "int8-g32" : "int4-g32"; }

// A store of `context` random tokens in every layer (32 query heads, 8 KV
// heads); blocked false: INT8 keys and values in rows even where the
// kernels read key column blocks and value quads (the layout before them,
// to compare).
std::unique_ptr<QuantizedKvCache> make_store(int bits, int head_dim, int n_layer, int64_t context,
                                             bool blocked = true) {
  const KvGeometry g{n_layer, 32, 8, head_dim, {}};
  auto config = parse_kv_codec_config(codec_name(bits));
  // (Value quads allowed at the store's making only: the kernel's quads
  // path stays on for both layouts, as before the store kept quads.)
  kv_kernels_impl::set_q8_key_blocks_allowed(blocked);
  kv_kernels_impl::set_q8_value_quads_allowed(blocked);
  auto store = QuantizedKvCache::Create(g, context + 64, *config);
  kv_kernels_impl::set_q8_key_blocks_allowed(true);
  kv_kernels_impl::set_q8_value_quads_allowed(true);
  if (!config.ok() || !store.ok()) return nullptr;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(context * g.kv_dim())), v(k.size());
  for (int layer = 0; layer < n_layer; ++layer) {
    for (float& x : k) x = normal(rng);
    for (float& x : v) x = normal(rng);
    if (!(*store)->store(layer, 0, context, k.data(), v.data()).ok()) return nullptr;
  }
  (*store)->set_size(context);
  return std::move(*store);
}

std::vector<float> random_queries(int64_t n, int64_t q_dim) {
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> q(static_cast<size_t>(n * q_dim));
  for (float& x : q) x = normal(rng);
  return q;
}

// The label: the codec, "key blocks" and "value quads" where the store
// keeps its keys and values so.
// INT4 stores: "blocked" 1 reads the tiles in place where the kernel set
// can (attend_tile_q4_positions; the store in its INT4 layouts where the set
// reads them, q4_reads_blocks), 2 the same over a store that keeps rows
// (the forty-third session's layout: each tile unpacked per call), 0
// dequantizes them (rows; the path before the forty-third session); for
// the benchmark's time (the store made under it), then allowed again.
class Int4InPlace {
 public:
  Int4InPlace(int bits, bool allowed) : set_(bits == 4) {
    if (set_) kv_kernels_impl::set_q4_in_place_allowed(allowed);
  }
  ~Int4InPlace() {
    if (set_) kv_kernels_impl::set_q4_in_place_allowed(true);
  }
  Int4InPlace(const Int4InPlace&) = delete;
  Int4InPlace& operator=(const Int4InPlace&) = delete;

 private:
  bool set_;
};

// (Called while the benchmark's Int4InPlace holds: INT4 in place as it ran.)
std::string store_label(int bits, const QuantizedKvCache& store) {
  const bool int4_in_place = store.int4_in_place();
  return std::string(codec_name(bits)) + (store.key_blocks() ? " key blocks" : "") +
         (store.value_quads() ? " value quads" : "") + (int4_in_place ? " in place" : "") +
         (bits == 4 && !int4_in_place ? " dequantized" : "");
}

// What `baton bench decode` runs before it times attention (and a decode
// step's weight stream does to the caches): one pass of its tuned reader
// over a 1 GiB buffer on huge pages, on the attention's threads.
// Returns the pass's bytes/s.
double evict_caches(ThreadPool* pool) {
  static const cli::ReadBuffer* buffer = new cli::ReadBuffer(int64_t{1} << 30);
  static ThreadPool* one = new ThreadPool(1);
  return cli::measure_read_bandwidth(pool != nullptr ? *pool : *one, *buffer, 1);
}

// Counters of a run whose iterations each evicted the caches first
// (evict_caches, best_pass its best rate in bytes/s) and read `bytes` in all
// in `timed` seconds: pass_GBps, and of_pass, the rate the KV was read at
// (timed around the attention calls alone) over the host's best read pass
// in this run, as `baton bench decode`'s attn GB/s over its memory figure:
// the memory of a shared host switches between phases within minutes, so a
// ratio, not the ms, compares two runs. None without a pass.
void set_pass_counters(benchmark::State& state, double bytes, double timed, double best_pass) {
  if (best_pass <= 0.0) return;
  state.counters["pass_GBps"] = best_pass / 1e9;
  state.counters["of_pass"] = bytes / timed / best_pass;
}

// One decode step's attention over every layer of a store, timed: blocked
// 0: INT8 keys and values in rows; INT4: Int4InPlace; evict: the caches
// evicted before each iteration, untimed, by a read pass whose best rate
// the counters divide by (of_pass).
void decode_attention(benchmark::State& state, int bits, int64_t context, int head_dim, int threads, int blocked,
                      bool evict) {
  ThreadPool* pool = pool_of(threads);
  constexpr int kLayers = 16;
  const Int4InPlace int4_in_place(bits, blocked != 0);
  const std::unique_ptr<QuantizedKvCache> store = make_store(bits, head_dim, kLayers, context, blocked == 1);
  if (store == nullptr) return state.SkipWithError("store");
  const int64_t q_dim = store->geometry().q_dim();
  const std::vector<float> q = random_queries(1, q_dim);
  std::vector<float> out(static_cast<size_t>(q_dim));
  // As the engine's decode step: the caller is the pool's thread 0 (pinned
  // with a pinning pool) while the step runs.
  std::optional<ThreadPool::Hot> hot;
  if (pool != nullptr) hot.emplace(*pool);
  double best_pass = 0.0;  // bytes/s: the best of the evicting read passes
  double timed = 0.0;      // seconds of attention
  for (auto _ : state) {
    if (evict) {
      state.PauseTiming();
      best_pass = std::max(best_pass, evict_caches(pool));
      state.ResumeTiming();
    }
    // Position context - 1 attends over [0, context): the stored rows.
    const auto start = std::chrono::steady_clock::now();
    for (int layer = 0; layer < kLayers; ++layer) store->attend(layer, context - 1, 1, q.data(), out.data(), pool);
    benchmark::DoNotOptimize(out.data());
    timed += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  const double bytes = static_cast<double>(state.iterations()) * static_cast<double>(context * store->bytes_per_token());
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  set_pass_counters(state, bytes, timed, best_pass);
  state.SetLabel(store_label(bits, *store));
}

// Args: bits, context, head_dim, threads, blocked, evict (decode_attention).
void BM_TiledAttentionDecode(benchmark::State& state) {
  decode_attention(state, static_cast<int>(state.range(0)), state.range(1), static_cast<int>(state.range(2)),
                   static_cast<int>(state.range(3)), static_cast<int>(state.range(4)), state.range(5) != 0);
}
BENCHMARK(BM_TiledAttentionDecode)
    ->ArgNames({"bits", "ctx", "head_dim", "threads", "blocked", "evict"})
    ->ArgsProduct({{16, 8, 4}, {512, 4096, 16384}, {64, 128}, {1, 2}, {1}, {0}})
    ->ArgsProduct({{8, 4}, {4096, 16384}, {64}, {1, 2}, {0}, {0}})
    ->ArgsProduct({{8, 4}, {4096, 16384}, {64}, {2}, {1}, {1}})
    ->ArgsProduct({{4}, {4096, 16384}, {64, 128}, {1, 2}, {2}, {0}})
    ->ArgsProduct({{4}, {16384}, {64}, {2}, {2}, {1}})
    ->UseRealTime();

// Args: bits, context, threads, nta. Where decode attention prefetches the
// next tile (kv_kernels.h, set_attention_prefetch_nta): nta 1 to L1 as
// non-temporal (the AMD default), 0 to L2; the store's blocked layouts
// (INT4 in place), streamed from memory (evicted before each iteration).
// The host's bandwidth moves between phases within minutes: run the pairs
// several times, alternating, and compare within a run.
void BM_TiledAttentionDecodePrefetch(benchmark::State& state) {
  kv_kernels_impl::set_attention_prefetch_nta(static_cast<int>(state.range(3)));
  decode_attention(state, static_cast<int>(state.range(0)), state.range(1), /*head_dim=*/64,
                   static_cast<int>(state.range(2)), /*blocked=*/1, /*evict=*/true);
  kv_kernels_impl::set_attention_prefetch_nta(-1);
}
BENCHMARK(BM_TiledAttentionDecodePrefetch)
    ->ArgNames({"bits", "ctx", "threads", "nta"})
    ->ArgsProduct({{16, 8, 4}, {16384}, {1, 2}, {0, 1}})
    ->UseRealTime();

// Args: bits, context, threads, blocked. The compute ceiling of decode attention: one
// layer whose store (context x 1088 bytes at INT8) stays in L2, attended
// over again and again; bytes/s as BM_TiledAttentionDecode's. Well above
// memory bandwidth here means the kernel can keep up with memory; near it
// means decode attention is bound by its instructions, not by the reads.
// The INT8 rows at 4096 and 16384 (4.4 and 17.8 MB: L3, or memory where
// L3 is smaller) take the per-call costs (tasks, merges, the query's
// quantization) out: on the Zen 5 host (2026-12-07) they read at the same
// rate as 512 and 1024 (one thread 22-24 GB/s, two 43-45), so those costs
// are not where decode attention's time goes at long contexts.
void BM_TiledAttentionDecodeInCache(benchmark::State& state) {
  const int bits = static_cast<int>(state.range(0));
  const int64_t context = state.range(1);
  ThreadPool* pool = pool_of(static_cast<int>(state.range(2)));
  const Int4InPlace int4_in_place(bits, state.range(3) != 0);
  const std::unique_ptr<QuantizedKvCache> store = make_store(bits, 64, 1, context, state.range(3) == 1);
  if (store == nullptr) return state.SkipWithError("store");
  const std::vector<float> q = random_queries(1, store->geometry().q_dim());
  std::vector<float> out(q.size());
  std::optional<ThreadPool::Hot> hot;
  if (pool != nullptr) hot.emplace(*pool);
  for (auto _ : state) {
    store->attend(0, context - 1, 1, q.data(), out.data(), pool);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * context * store->bytes_per_token());
  state.SetLabel(store_label(bits, *store));
}
BENCHMARK(BM_TiledAttentionDecodeInCache)
    ->ArgNames({"bits", "ctx", "threads", "blocked"})
    ->ArgsProduct({{8, 4}, {512, 1024}, {1, 2}, {1, 0}})
    ->ArgsProduct({{8}, {4096, 16384}, {1, 2}, {1}})
    ->ArgsProduct({{4}, {512, 1024}, {1, 2}, {2}})
    ->UseRealTime();

// Decode attention's tile kernel (kv_kernels().attend_tile_q8_positions,
// INT8 keys in key column blocks and values in value quads, head_dim 64, 4
// query heads per KV head) called directly over 16 layers x 8 KV heads of
// random codes, without the store and tiled_attention.cc around it, so that
// what its stream is bound by can be taken apart from the store's layout,
// the pool's calls and the pages. Each iteration: a read pass that evicts
// the caches (untimed, evict_caches: of_pass divides by its best), then
// every (layer, KV head) of `ctx` rows, tile by tile, each tile's call
// spreading the prefetch of a tile `ahead` tiles on (TilePositions::next; 0:
// none) and its scales' lines prefetched before it, as
// run_segment_by_head does. Args:
//   layout 0: per (layer, KV head) four planes (K codes, V codes, K scales,
//     V scales), as the store; 1: per (layer, KV head, tile) one record
//     [K codes | V codes | K scales | V scales], records in order: one run.
//   in_cache 1: 8 (layer, KV head) pairs, no eviction: the kernel's own rate.
//   sync 0: one call of the pool for all layers (a thread takes half the
//     pairs in order); 1: a call per layer, 4 tasks of 2 KV heads handed out
//     dynamically (as attend_split on 2 threads); 2: the same, 8 tasks of 1;
//     3: a call per layer, 8 tasks of one head by work stealing
//     (parallel_for_stealing: a thread's own heads in order), each task's
//     last tile prefetching the next head's first.
//   huge 1: the bytes on huge pages (allocate_huge_pages, as the store's
//     planes); 0: aligned_alloc (4 KiB pages where transparent huge pages
//     are "madvise", as on the hosts so far).
//   build/bin/baton_microbench --benchmark_filter=BM_TileLayoutDecode
void BM_TileLayoutDecode(benchmark::State& state) {
  const auto& kern = kv_kernels_impl::kv_kernels();
  if (!kern.q8_reads_key_blocks || !kern.q8_reads_value_quads || !kv_kernels_impl::q8_value_quads_active()) {
    return state.SkipWithError("this CPU's kernel set does not read key column blocks and value quads in place");
  }
  const int layout = static_cast<int>(state.range(0));
  const int64_t context = state.range(1);
  const int n_threads = static_cast<int>(state.range(2));
  ThreadPool* pool = pool_of(n_threads);
  const bool in_cache = state.range(3) != 0;
  const int ahead = static_cast<int>(state.range(4));
  const int sync = static_cast<int>(state.range(5));
  constexpr int kHeadDim = 64, kNq = 4, kGroups = 2;
  const int kPairs = in_cache ? 8 : 16 * 8;
  constexpr int64_t kT = kv_kernels_impl::kAttentionTileRows;
  const int64_t tiles = context / kT;
  const int64_t codes_per_tile = kT * kHeadDim, scales_per_tile = kT * kGroups * 2;
  const int64_t record = 2 * codes_per_tile + 2 * scales_per_tile;
  const int64_t total = kPairs * tiles * record;
  const bool huge = state.range(6) != 0;
  HugePageBytes huge_mem = huge ? allocate_huge_pages(total) : nullptr;
  std::unique_ptr<uint8_t, decltype(&std::free)> small_mem(
      huge ? nullptr : static_cast<uint8_t*>(std::aligned_alloc(4096, (total + 4095) / 4096 * 4096)), &std::free);
  uint8_t* const base = huge ? huge_mem.get() : small_mem.get();
  if (base == nullptr) return state.SkipWithError("out of memory");
  std::mt19937 rng(5);
  for (int64_t i = 0; i < total; ++i) base[i] = static_cast<uint8_t>(rng());
  // Scales: f16 in [0.01, 0.05].
  auto fill_scales = [&](uint16_t* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) s[i] = fp32_to_fp16(0.01f + 0.04f * static_cast<float>(rng() % 1000) / 1000.0f);
  };
  // Layout 0 regions.
  uint8_t* k_codes = base;
  uint8_t* v_codes = base + kPairs * tiles * codes_per_tile;
  auto* k_scales = reinterpret_cast<uint16_t*>(base + 2 * kPairs * tiles * codes_per_tile);
  auto* v_scales = k_scales + kPairs * tiles * kT * kGroups;
  if (layout == 0) {
    fill_scales(k_scales, kPairs * context * kGroups);
    fill_scales(v_scales, kPairs * context * kGroups);
  } else {
    for (int64_t r = 0; r < kPairs * tiles; ++r) {
      fill_scales(reinterpret_cast<uint16_t*>(base + r * record + 2 * codes_per_tile), 2 * kT * kGroups);
    }
  }
  std::vector<int8_t> qc(kNq * kHeadDim);
  std::vector<float> qs(kNq * 2);
  std::vector<int32_t> qb(kNq * 2);
  {
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> q(kNq * kHeadDim);
    for (float& x : q) x = normal(rng);
    for (int i = 0; i < kNq; ++i) {
      kv_kernels_impl::quantize_query_q8(q.data() + i * kHeadDim, kHeadDim, 0.125f, qc.data() + i * kHeadDim,
                                         qs.data() + i * 2, qb.data() + i * 2);
    }
  }
  const kv_kernels_impl::QueryQ8 q8{qc.data(), qs.data(), qb.data()};
  // What every tile's K and V rows share (codes and scales set per tile).
  kv_kernels_impl::KvHeadRows k_rows, v_rows;
  k_rows.bits = v_rows.bits = 8;
  k_rows.group = v_rows.group = 32;
  k_rows.row_code_bytes = v_rows.row_code_bytes = kHeadDim;
  k_rows.row_groups = v_rows.row_groups = kGroups;
  k_rows.key_blocks = true;
  v_rows.value_quads = true;
  // Pairs [p0, p1); the last tile's prefetch runs on into the pairs before
  // p_end (the thread's next ones), none past it.
  auto run_pairs = [&](int64_t p0, int64_t p1, int64_t p_end) {
    alignas(64) float m[kNq], l[kNq], acc[kNq * kHeadDim];
    std::vector<float> scratch(kv_kernels_impl::attend_tile_q8_scratch_floats(kNq, kHeadDim));
    float sink = 0.0f;
    for (int64_t p = p0; p < p1; ++p) {
      std::fill(m, m + kNq, -INFINITY);
      std::fill(l, l + kNq, 0.0f);
      std::fill(acc, acc + kNq * kHeadDim, 0.0f);
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t np = t + ahead < tiles ? p : p + 1, nt = t + ahead < tiles ? t + ahead : t + ahead - tiles;
        kv_kernels_impl::KvHeadRows k = k_rows, v = v_rows;
        int64_t tile_row = 0;
        kv_kernels_impl::TilePositions pos;
        int lo = 0, hi = static_cast<int>(kT);
        pos.lo = &lo;
        pos.hi = &hi;
        if (layout == 0) {
          k.codes = k_codes + p * context * kHeadDim;
          v.codes = v_codes + p * context * kHeadDim;
          k.scales = k_scales + p * context * kGroups;
          v.scales = v_scales + p * context * kGroups;
          tile_row = t * kT;
          if (ahead > 0 && np < p_end) {
            pos.next.k = k_codes + (np * context + nt * kT) * kHeadDim;
            pos.next.v = v_codes + (np * context + nt * kT) * kHeadDim;
            pos.next.rows = 1;
            pos.next.lines = static_cast<int>(codes_per_tile / 64);
            pos.next.stride = codes_per_tile;
            for (const uint16_t* sc : {k_scales, v_scales}) {
              const auto* b = reinterpret_cast<const char*>(sc + (np * context + nt * kT) * kGroups);
              for (int x = 0; x < scales_per_tile; x += 64) __builtin_prefetch(b + x, 0, 2);
            }
          }
        } else {
          const uint8_t* rec = base + (p * tiles + t) * record;
          k.codes = rec;
          v.codes = rec + codes_per_tile;
          k.scales = reinterpret_cast<const uint16_t*>(rec + 2 * codes_per_tile);
          v.scales = k.scales + kT * kGroups;
          if (ahead > 0 && np < p_end) {  // the whole record as two halves, scales with it
            const uint8_t* next = base + (np * tiles + nt) * record;
            pos.next.k = next;
            pos.next.v = next + record / 2;
            pos.next.rows = 1;
            pos.next.lines = static_cast<int>(record / 2 / 64);
            pos.next.stride = record / 2;
          }
        }
        kern.attend_tile_q8_positions(k, v, tile_row, q8, pos, kNq, kHeadDim, m, l, acc, scratch.data());
      }
      sink += acc[0] / l[0];
    }
    benchmark::DoNotOptimize(sink);
  };
  std::optional<ThreadPool::Hot> hot;
  if (pool != nullptr) hot.emplace(*pool);
  double best_pass = 0.0, timed = 0.0;
  for (auto _ : state) {
    if (!in_cache) {
      state.PauseTiming();
      best_pass = std::max(best_pass, evict_caches(pool));
      state.ResumeTiming();
    }
    const auto start = std::chrono::steady_clock::now();
    if (pool != nullptr && sync == 3) {
      for (int layer = 0; layer < kPairs / 8; ++layer) {
        pool->parallel_for_stealing(8, [&](int64_t b, int64_t e) {
          for (int64_t x = b; x < e; ++x) run_pairs(layer * 8 + x, layer * 8 + x + 1, layer * 8 + 8);
        });
      }
    } else if (pool != nullptr && sync > 0) {
      const int per_task = sync == 1 ? 2 : 1;
      for (int layer = 0; layer < kPairs / 8; ++layer) {
        pool->parallel_for_dynamic(8 / per_task, 1, [&](int64_t b, int64_t e) {
          for (int64_t x = b; x < e; ++x) {
            run_pairs(layer * 8 + x * per_task, layer * 8 + (x + 1) * per_task, layer * 8 + (x + 1) * per_task);
          }
        });
      }
    } else if (pool != nullptr) {
      pool->parallel_for(n_threads, [&](int64_t b, int64_t e) {
        for (int64_t x = b; x < e; ++x) {
          run_pairs(x * kPairs / n_threads, (x + 1) * kPairs / n_threads, (x + 1) * kPairs / n_threads);
        }
      });
    } else {
      run_pairs(0, kPairs, kPairs);
    }
    timed += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  const double bytes = static_cast<double>(state.iterations()) * static_cast<double>(total);
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  set_pass_counters(state, bytes, timed, best_pass);
}
BENCHMARK(BM_TileLayoutDecode)
    ->ArgNames({"layout", "ctx", "threads", "in_cache", "ahead", "sync", "huge"})
    ->ArgsProduct({{0, 1}, {16384}, {2}, {0}, {0, 1, 2}, {0}, {1}})
    ->ArgsProduct({{0}, {16384}, {2}, {0}, {1}, {1, 2, 3}, {1}})
    ->ArgsProduct({{0}, {16384}, {2}, {0}, {1}, {0}, {0}})
    ->ArgsProduct({{0, 1}, {512}, {1, 2}, {1}, {0, 1}, {0}, {1}})
    ->UseRealTime();

// Args: bits, pos, threads, amx (1: the INT8 kernel's products on AMX tiles
// where the CPU has them, kv_kernels.h q8_amx_active; 0: on vpdpbusd /
// vpdpwssd). Counter of_int8_peak: QK^T and PV (2 x 2 x head_dim ops per
// query head and key) against one thread's vpdpbusd peak x threads.
void BM_TiledAttentionPrefill(benchmark::State& state) {
  const int bits = static_cast<int>(state.range(0));
  const int64_t pos = state.range(1);
  const int n_threads = static_cast<int>(state.range(2));
  ThreadPool* pool = pool_of(n_threads);
  const bool amx = state.range(3) != 0;
  if (amx && !kv_kernels_impl::q8_amx_active()) return state.SkipWithError("AMX-INT8 not usable here");
  constexpr int64_t kQueries = 64;
  constexpr int kHeadDim = 64;
  const std::unique_ptr<QuantizedKvCache> store = make_store(bits, kHeadDim, 1, pos + kQueries, state.range(4) != 0);
  if (store == nullptr) return state.SkipWithError("store");
  const int64_t q_dim = store->geometry().q_dim();
  const std::vector<float> q = random_queries(kQueries, q_dim);
  std::vector<float> out(q.size());
  kv_kernels_impl::set_q8_amx_allowed(amx);
  for (auto _ : state) {
    store->attend(0, pos, kQueries, q.data(), out.data(), pool);
    benchmark::DoNotOptimize(out.data());
  }
  kv_kernels_impl::set_q8_amx_allowed(true);
  state.SetItemsProcessed(state.iterations() * kQueries);
  // Query i (position pos + i) sees keys [0, pos + i].
  const double pairs = static_cast<double>(kQueries) * static_cast<double>(pos) + kQueries * (kQueries + 1) / 2.0;
  const double ops = pairs * static_cast<double>(q_dim / kHeadDim) * 4.0 * kHeadDim;
  // One thread's vpdpbusd peak, measured once per process.
  static const double int8_peak = [] {
    ThreadPool one(1);
    const cli::CpuPeak peak = cli::measure_cpu_peak(one);
    return peak.int8 ? peak.int8->ops_per_s : 0.0;
  }();
  if (int8_peak > 0) {
    state.counters["of_int8_peak"] =
        benchmark::Counter(ops * state.iterations() / (int8_peak * n_threads), benchmark::Counter::kIsRate);
  }
  state.SetLabel(std::string(codec_name(bits)) + (amx ? " amx" : " vnni"));
}
BENCHMARK(BM_TiledAttentionPrefill)
    ->ArgNames({"bits", "pos", "threads", "amx", "blocked"})
    ->ArgsProduct({{8}, {512, 2048, 8192, 32768}, {1, 2}, {0, 1}, {1}})
    ->ArgsProduct({{8}, {2048, 8192}, {1}, {0}, {0}})
    ->UseRealTime();

// One layer's synthetic INT8 planes (8 KV heads of 64, groups of 32), rows
// laid out as the store's: the old per-(query, KV head) kernel
// (attend_heads, what QuantizedKvCache::attend called before the tiled
// kernel) and attend_tiled on the same bytes, in one run. Args: context,
// queries (1: a decode step; 64: a prefill micro-batch ending at the
// context), tiled (0: attend_heads, 1: attend_tiled). bytes/s = K and V bytes
// of the context (once per call).
void BM_AttentionOldVsTiled(benchmark::State& state) {
  const int64_t context = state.range(0);
  const int64_t n = state.range(1);
  const bool tiled = state.range(2) != 0;
  constexpr int kHeadsKv = 8, kHeadDim = 64, kGqa = 4, kGroup = 32;
  constexpr int64_t kRowBytes = kHeadsKv * kHeadDim, kRowGroups = kRowBytes / kGroup;
  std::mt19937 rng(9);
  std::vector<uint8_t> k_codes(static_cast<size_t>(context * kRowBytes)), v_codes(k_codes.size());
  for (auto& b : k_codes) b = static_cast<uint8_t>(rng());
  for (auto& b : v_codes) b = static_cast<uint8_t>(rng());
  const std::vector<uint16_t> scales(static_cast<size_t>(context * kRowGroups), fp32_to_fp16(0.01f));
  const kv_kernels_impl::KvHeadRows k{8, k_codes.data(), kRowBytes, scales.data(), nullptr, kRowGroups, kGroup};
  const kv_kernels_impl::KvHeadRows v{8, v_codes.data(), kRowBytes, scales.data(), nullptr, kRowGroups, kGroup};
  const KvGeometry g{1, kHeadsKv * kGqa, kHeadsKv, kHeadDim, {}};
  const std::vector<float> q = random_queries(n, g.q_dim());
  std::vector<float> out(q.size());
  const int64_t scratch_floats = kv_kernels_impl::attend_heads_scratch_floats(kGqa, kHeadDim, context);
  std::vector<float> scratch(static_cast<size_t>(scratch_floats));
  const kv_kernels_impl::KvKernels& kern = kv_kernels_impl::kv_kernels();
  AttentionRows rows;
  rows.k = k;
  rows.v = v;
  rows.k_head_code_bytes = rows.v_head_code_bytes = kHeadDim;
  rows.k_head_groups = rows.v_head_groups = kHeadDim / kGroup;
  for (auto _ : state) {
    if (tiled) {
      attend_tiled(g, 0, 0.125f, rows, context - n, n, q.data(), out.data(), nullptr);
    } else {
      for (int64_t t = 0; t < n; ++t) {
        for (int h = 0; h < kHeadsKv; ++h) {
          kv_kernels_impl::KvHeadRows kh = k, vh = v;
          kh.codes += h * kHeadDim, vh.codes += h * kHeadDim;
          kh.scales += h * 2, vh.scales += h * 2;
          const int64_t offset = t * g.q_dim() + h * kGqa * kHeadDim;
          kern.attend_heads(kh, vh, q.data() + offset, kGqa, kHeadDim, 0.125f, context - n + t + 1, scratch.data(),
                            out.data() + offset);
        }
      }
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * context * 2 * (kRowBytes + 2 * kRowGroups));
  state.SetLabel(tiled ? "attend_tiled" : "attend_heads");
}
BENCHMARK(BM_AttentionOldVsTiled)
    ->ArgNames({"ctx", "queries", "tiled"})
    ->ArgsProduct({{512, 4096, 65536}, {1}, {0, 1}})
    ->UseRealTime();
BENCHMARK(BM_AttentionOldVsTiled)
    ->ArgNames({"ctx", "queries", "tiled"})
    ->ArgsProduct({{512, 2048, 8192}, {64}, {0, 1}})
    ->UseRealTime();

// The INT8 tile step alone, on one layer of `kContext` rows (8 KV heads of
// 64, groups of 32, 4 query heads per KV head: llama-3.2-1b; 4.4 MB, so the
// tiles come from cache), every tile of every KV head, in the dispatched
// set's two ways: path 0 dequantizes each tile's K and V rows once
// (dequantize_head_rows) and runs attend_tile per position (what
// tiled_attention.cc does when the set has no attend_tile_q8_positions);
// path 1 reads them in place with quantized queries
// (attend_tile_q8_positions); path 2 is path 1 in the scalar set. Args:
// positions (1: a decode step; kQ8MaxPositions: a prefill call, every
// position seeing the whole tile), path. items/s = query-head tile steps.
//   build/bin/baton_microbench --benchmark_filter=Q8TileStep
void BM_Q8TileStep(benchmark::State& state) {
  const int n_pos = static_cast<int>(state.range(0));
  const int path = static_cast<int>(state.range(1));
  constexpr int kHeadsKv = 8, kHeadDim = 64, kGqa = 4, kGroup = 32, kTile = kv_kernels_impl::kAttentionTileRows;
  constexpr int64_t kContext = 4096, kRowBytes = kHeadsKv * kHeadDim, kRowGroups = kRowBytes / kGroup;
  constexpr int kQHeads = kHeadsKv * kGqa, kBlocks = kHeadDim / kv_kernels_impl::kQ8Block;
  std::mt19937 rng(11);
  std::vector<uint8_t> k_codes(static_cast<size_t>(kContext * kRowBytes)), v_codes(k_codes.size());
  for (auto& b : k_codes) b = static_cast<uint8_t>(rng());
  for (auto& b : v_codes) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale_dist(0.005f, 0.02f);
  std::vector<uint16_t> k_scales(static_cast<size_t>(kContext * kRowGroups)), v_scales(k_scales.size());
  for (auto& x : k_scales) x = fp32_to_fp16(scale_dist(rng));
  for (auto& x : v_scales) x = fp32_to_fp16(scale_dist(rng));
  const std::vector<float> q = random_queries(n_pos, kQHeads * kHeadDim);
  constexpr float kScale = 0.125f;
  std::vector<int8_t> q_codes(q.size());
  std::vector<float> q_scales(static_cast<size_t>(n_pos * kQHeads * kBlocks));
  std::vector<int32_t> q_bias(q_scales.size());
  for (int h = 0; h < n_pos * kQHeads; ++h) {
    kv_kernels_impl::quantize_query_q8(q.data() + h * kHeadDim, kHeadDim, kScale, q_codes.data() + h * kHeadDim,
                                       q_scales.data() + h * kBlocks, q_bias.data() + h * kBlocks);
  }
  static const kv_kernels_impl::KvKernels scalar = kv_kernels_impl::kv_kernels_scalar();
  const kv_kernels_impl::KvKernels& kern = path == 2 ? scalar : kv_kernels_impl::kv_kernels();
  if (path != 0 && kern.attend_tile_q8_positions == nullptr) return state.SkipWithError("no in-place INT8 kernel");
  std::vector<float> kf(static_cast<size_t>(kTile * kHeadDim)), vf(kf.size());
  std::vector<float> scratch(
      static_cast<size_t>(kv_kernels_impl::attend_tile_q8_scratch_floats(n_pos * kGqa, kHeadDim)));
  std::vector<float> m(static_cast<size_t>(n_pos * kGqa)), l(m.size()), acc(m.size() * kHeadDim);
  std::vector<int> lo(static_cast<size_t>(n_pos), 0), hi(static_cast<size_t>(n_pos), kTile);
  kv_kernels_impl::TilePositions pos;
  pos.n = n_pos;
  pos.q_heads_stride = kQHeads;
  pos.state_stride = kGqa;
  pos.lo = lo.data();
  pos.hi = hi.data();
  for (auto _ : state) {
    for (int h = 0; h < kHeadsKv; ++h) {
      const kv_kernels_impl::KvHeadRows kh{8, k_codes.data() + h * kHeadDim, kRowBytes, k_scales.data() + h * 2,
                                           nullptr, kRowGroups, kGroup};
      const kv_kernels_impl::KvHeadRows vh{8, v_codes.data() + h * kHeadDim, kRowBytes, v_scales.data() + h * 2,
                                           nullptr, kRowGroups, kGroup};
      std::fill(m.begin(), m.end(), -INFINITY);
      std::fill(l.begin(), l.end(), 0.0f);
      std::fill(acc.begin(), acc.end(), 0.0f);
      const int64_t q_head = int64_t{h} * kGqa;
      for (int64_t t0 = 0; t0 < kContext; t0 += kTile) {
        if (path == 0) {
          kern.dequantize_head_rows(kh, t0, kTile, kHeadDim, kf.data());
          kern.dequantize_head_rows(vh, t0, kTile, kHeadDim, vf.data());
          for (int j = 0; j < n_pos; ++j) {
            kern.attend_tile(kf.data(), kHeadDim, vf.data(), kHeadDim, q.data() + (j * kQHeads + q_head) * kHeadDim,
                             kGqa, kHeadDim, kScale, 0, kTile, m.data() + j * kGqa, l.data() + j * kGqa,
                             acc.data() + j * kGqa * kHeadDim, scratch.data());
          }
        } else {
          const kv_kernels_impl::QueryQ8 qq{q_codes.data() + q_head * kHeadDim, q_scales.data() + q_head * kBlocks,
                                            q_bias.data() + q_head * kBlocks};
          kern.attend_tile_q8_positions(kh, vh, t0, qq, pos, kGqa, kHeadDim, m.data(), l.data(), acc.data(),
                                        scratch.data());
        }
      }
      benchmark::DoNotOptimize(acc.data());
    }
  }
  state.SetItemsProcessed(state.iterations() * kHeadsKv * (kContext / kTile) * n_pos * kGqa);
  state.SetLabel(path == 0 ? "dequantize+attend_tile" : path == 1 ? "in place" : "in place, scalar");
}
BENCHMARK(BM_Q8TileStep)
    ->ArgNames({"positions", "path"})
    ->ArgsProduct({{1, kv_kernels_impl::kQ8MaxPositions}, {0, 1, 2}})
    ->UseRealTime();

// Plain read of `mib` MiB split across the threads: the bandwidth the decode
// benchmark's bytes/s compares with (16 layers of INT8 KV at 4K, head_dim
// 64: 71 MiB).
void BM_KvReadBaseline(benchmark::State& state) {
  const int64_t floats = state.range(0) << 18;
  const int threads = static_cast<int>(state.range(1));
  ThreadPool* pool = pool_of(threads);
  const std::vector<float> buffer(static_cast<size_t>(floats), 1.0f);
  std::vector<float> sums(static_cast<size_t>(threads) * 16);
  for (auto _ : state) {
    auto read = [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        float acc[16] = {};
        for (int64_t i = floats * t / threads; i + 16 <= floats * (t + 1) / threads; i += 16) {
          for (int e = 0; e < 16; ++e) acc[e] += buffer[static_cast<size_t>(i + e)];
        }
        for (int e = 0; e < 16; ++e) sums[static_cast<size_t>(t * 16 + e)] = acc[e];
      }
    };
    if (pool != nullptr) {
      pool->parallel_for(threads, read);
    } else {
      read(0, 1);
    }
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetBytesProcessed(state.iterations() * floats * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK(BM_KvReadBaseline)->ArgNames({"mib", "threads"})->ArgsProduct({{72, 288}, {1, 2}})->UseRealTime();

}  // namespace
}  // namespace baton
