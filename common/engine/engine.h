// The fast CPU forward pass: batched prefill and single-token decode over a
// KvCache, multi-threaded matmuls on the stored weight types (Q4_0/Q8_0 with
// 8-bit activations). Tested against ReferenceEngine (reference_engine.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "common/kv_cache/kv_cache.h"
#include "common/model/model.h"
#include "common/cpu/matmul.h"
#include "common/cpu/ops.h"
#include "common/util/thread_pool.h"

namespace baton {

struct EngineOptions {
  int n_threads = 0;             // 0: all hardware threads
  int max_batch_tokens = 64;     // prefill micro-batch, tokens per forward
  // F16 / BF16 / F32 weights in prefill micro-batches: exact f32 (golden) or
  // bf16 products (the cloud CPU backend's --cpu-matmul bf16; see matmul.h).
  FloatMatmul float_matmul = FloatMatmul::kExact;
  // Repack the weights the AVX-512 kernels read faster packed (Q4_0; see
  // Model::pack_for_cpu) when the engine is made. false: the kernels read
  // the GGUF rows, unless another engine already packed this model (the
  // layout before packing, for benchmarks).
  bool pack_weights = true;
};

// The parts of a forward pass, for timing them one by one
// (Engine::set_part_times; baton bench decode --parts).
enum class StepPart {
  kNorms,      // the embedding row, RMS norms and residual adds
  kQkv,        // the Q, K and V projections (one matmul call)
  kQkPrep,     // their biases, q/k norms, RoPE and the K/V store
  kAttention,  // attention over the cache
  kWo,         // the output projection
  kGateUp,     // the feed-forward gate and up projections (one call)
  kGlu,        // SiLU / GELU times up
  kDown,       // the down projection
  kOutput,     // the final norm and the output (logits) projection
};
inline constexpr int kStepParts = 9;
const char* step_part_name(StepPart part);
// Wall seconds per part (indexed by StepPart), summed over the passes run
// while it is set.
struct StepPartTimes {
  double seconds[kStepParts] = {};
};

class Engine {
 public:
  Engine(const Model& model, const EngineOptions& options);

  const Model& model() const { return model_; }
  KvGeometry kv_geometry() const;
  // An F32 KV cache for this model.
  std::unique_ptr<KvCache> new_f32_kv_cache(int64_t capacity_tokens) const;

  // Runs `tokens` at positions [kv.size(), kv.size() + n) and commits them.
  // last_logits (optional): logits of the last token, [n_vocab].
  // all_logits (optional): logits of every token, [n, n_vocab].
  // On error the cache keeps its previous size.
  absl::Status prefill(std::span<const int32_t> tokens, KvCache& kv, std::vector<float>* last_logits,
                       std::vector<float>* all_logits = nullptr);
  // Runs `tokens` at positions [kv.size(), kv.size() + n) layer by layer
  // over the whole chunk (the cloud's order): after layer L's K/V of all n
  // tokens are stored, calls layer_done(L) (optional), so a caller can send
  // layer L while layer L+1 computes. The same micro-batches as prefill(), so
  // the KV is bit-identical to it. Commits at the end; on error (or a
  // non-OK layer_done) the cache keeps its previous size. No logits.
  // Scratch: n * n_embd floats for the chunk's residual stream.
  absl::Status prefill_layers(std::span<const int32_t> tokens, KvCache& kv,
                              const std::function<absl::Status(int layer)>& layer_done);
  // One token at position kv.size(); logits: [n_vocab].
  absl::Status decode_step(int32_t token, KvCache& kv, std::vector<float>* logits);

  // A row of decode_rows: `token` at the next position of `kv`.
  struct DecodeRow {
    int32_t token;
    KvCache* kv;
  };
  // One decode step per row, all rows in one pass over the weights: rows of
  // different caches (a step of several sessions) and/or consecutive tokens
  // of one cache (a speculative draft to verify; a cache's i-th row runs at
  // its size() + i). Each row's logits and K/V are bit-identical to
  // decode_step() of that token at that point (matmul_decode_order, one
  // query per attention call), so greedy output cannot tell them apart.
  // At most max_batch_tokens rows; logits: [rows, n_vocab]. Commits every
  // cache; on error every cache keeps its previous size.
  absl::Status decode_rows(std::span<const DecodeRow> rows, float* logits);
  int max_batch_tokens() const { return options_.max_batch_tokens; }

  ThreadPool& pool() { return pool_; }
  // While times is set, every forward pass (prefill, decode_step,
  // decode_rows) adds each part's wall time to it: a clock read between
  // parts (~20 ns, 10 a layer). nullptr stops it. Not for use by
  // two threads at once (nor is the engine).
  void set_part_times(StepPartTimes* times) { part_times_ = times; }

 private:
  // One micro-batch of n <= max_batch_tokens tokens at pos; logits for rows
  // [first_logit_row, n) go to `logits` ([n - first_logit_row, n_vocab]).
  absl::Status forward(const int32_t* tokens, int64_t n, int64_t pos, KvCache& kv,
                       int64_t first_logit_row, float* logits);
  // Embedding rows of n tokens into x: f32 [n, n_embd].
  void embed(const int32_t* tokens, int64_t n, float* x) const;
  // Consecutive rows of a micro-batch that run at consecutive positions of
  // one cache: [first_row, first_row + n) at [pos, pos + n) of kv.
  struct RowRun {
    KvCache* kv;
    int64_t pos;
    int64_t first_row;
    int64_t n;
  };
  // Transformer block `il` on n <= max_batch_tokens rows of x ([n, n_embd],
  // updated in place), `runs` covering them in order; stores their K/V.
  // decode_order: the matrix products of a decode step per row
  // (decode_rows); else prefill's. Attention: one call per run either way.
  absl::Status layer(int il, float* x, int64_t n, std::span<const RowRun> runs, bool decode_order);
  // RoPE's cos and sin for positions [pos0, pos0 + n) of a frequency table
  // (Model::rope_inv_freq: gemma3 has a local and a global one), computed
  // once and kept for the layers after: a step's rows are at the same
  // positions in every layer, and q and k take the same angles (rope_rows
  // took 2 x n_rot / 2 double cos and sin per row, per layer, for each of
  // q and k). The same bits as rope_rows (rope_rows_table). The reference
  // holds until the next call.
  const RopeTable& rope_table(const float* inv_freq, int64_t pos0, int64_t n);
  // set_part_times: a pass starts its clock, then charges the time since the
  // last lap to each part as it ends.
  void start_parts();
  void lap(StepPart part);

  const Model& model_;
  EngineOptions options_;
  // set_part_times: where the times go, and when the last part ended.
  StepPartTimes* part_times_ = nullptr;
  std::chrono::steady_clock::time_point part_last_;
  ThreadPool pool_;
  // Scratch, sized for max_batch_tokens rows.
  std::vector<float> x_;       // [B, n_embd] residual stream
  std::vector<float> h_;       // [B, n_embd] normed input
  std::vector<float> q_;       // [B, q_dim]
  std::vector<float> k_;       // [B, kv_dim]
  std::vector<float> v_;       // [B, kv_dim]
  std::vector<float> attn_;    // [B, q_dim]
  std::vector<float> proj_;    // [B, n_embd]
  std::vector<float> gate_;    // [B, n_ff]
  std::vector<float> up_;      // [B, n_ff]
  std::vector<float> chunk_x_; // [n, n_embd] residual stream of a prefill_layers chunk
  struct RopeEntry {
    const float* inv_freq;
    RopeTable table;
  };
  std::vector<RopeEntry> rope_tables_;  // rope_table's, the newest last (at most kRopeTables)
};

// Validates token ids against the vocabulary.
absl::Status check_tokens(std::span<const int32_t> tokens, int n_vocab);

}  // namespace baton
