#include "common/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <functional>

#include "absl/strings/str_format.h"
#include "common/cpu/ops.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/gguf/ggml_quant.h"
#include "common/util/check.h"

namespace baton {

const char* step_part_name(StepPart part) {
  switch (part) {
    case StepPart::kNorms: return "norms";
    case StepPart::kQkv: return "qkv";
    case StepPart::kQkPrep: return "rope+store";
    case StepPart::kAttention: return "attention";
    case StepPart::kWo: return "wo";
    case StepPart::kGateUp: return "gate+up";
    case StepPart::kGlu: return "glu";
    case StepPart::kDown: return "down";
    case StepPart::kOutput: return "output";
  }
  return "?";
}

namespace {

// Elements of the feed-forward gate per pool task (silu_mul / gelu_mul).
constexpr int64_t kGluChunk = 2048;

// Prefill micro-batches from this many rows on run their row ops (norms,
// RoPE, residual adds) on the pool: serial, they left the other thread
// spinning for ~2% of a 512-token prefill on two threads. Each row is
// computed alone either way (the same bits); decode steps keep them inline.
constexpr int64_t kPoolRowOpsMinRows = 16;

// fn(begin, end) over rows [0, n): split across the pool for prefill-sized n.
template <typename Fn>
void for_rows(ThreadPool& pool, int64_t n, Fn fn) {
  if (n >= kPoolRowOpsMinRows) {
    pool.parallel_for(n, std::ref(fn));
  } else {
    fn(int64_t{0}, n);
  }
}

void add_bias_rows(float* y, const std::vector<float>& bias, int64_t n_rows) {
  if (bias.empty()) return;
  const int64_t n = static_cast<int64_t>(bias.size());
  for (int64_t r = 0; r < n_rows; ++r) add_inplace(y + r * n, bias.data(), n);
}

}  // namespace

absl::Status check_tokens(std::span<const int32_t> tokens, int n_vocab) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= n_vocab) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "token %d at index %d is outside the vocabulary [0, %d)", tokens[i], i, n_vocab));
    }
  }
  return absl::OkStatus();
}

Engine::Engine(const Model& model, const EngineOptions& options)
    : model_(model), options_(options), pool_(resolve_thread_count(options.n_threads)) {
  BATON_CHECK(options_.max_batch_tokens >= 1);
  // The packed layout serves the AVX2 and AVX-512 kernels (matmul.h).
  if (options_.pack_weights && active_simd_level() >= SimdLevel::kAvx2) model.pack_for_cpu(&pool_);
  const ModelSpec& s = model.spec();
  const size_t b = static_cast<size_t>(options_.max_batch_tokens);
  x_.resize(b * s.n_embd);
  h_.resize(b * s.n_embd);
  q_.resize(b * s.q_dim());
  k_.resize(b * s.kv_dim());
  v_.resize(b * s.kv_dim());
  attn_.resize(b * s.q_dim());
  proj_.resize(b * s.n_embd);
  gate_.resize(b * s.n_ff);
  up_.resize(b * s.n_ff);
}

KvGeometry Engine::kv_geometry() const {
  const ModelSpec& s = model_.spec();
  return kv_geometry_for(s);
}

std::unique_ptr<KvCache> Engine::new_f32_kv_cache(int64_t capacity_tokens) const {
  return std::make_unique<F32KvCache>(kv_geometry(), capacity_tokens);
}

absl::Status Engine::prefill(std::span<const int32_t> tokens, KvCache& kv,
                             std::vector<float>* last_logits, std::vector<float>* all_logits) {
  const ModelSpec& s = model_.spec();
  if (tokens.empty()) return absl::InvalidArgumentError("prefill needs at least one token");
  BATON_RETURN_IF_ERROR(check_tokens(tokens, s.n_vocab));
  const int64_t start = kv.size();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (start + n > kv.capacity()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "prompt of %d tokens after %d cached does not fit the KV cache of %d tokens", n, start,
        kv.capacity()));
  }
  if (all_logits != nullptr) all_logits->assign(static_cast<size_t>(n) * s.n_vocab, 0.0f);
  if (last_logits != nullptr) last_logits->assign(s.n_vocab, 0.0f);
  for (int64_t begin = 0; begin < n; begin += options_.max_batch_tokens) {
    const int64_t count = std::min<int64_t>(options_.max_batch_tokens, n - begin);
    const bool is_last = begin + count == n;
    float* logits = nullptr;
    int64_t first_row = count;  // no logits
    if (all_logits != nullptr) {
      logits = all_logits->data() + begin * s.n_vocab;
      first_row = 0;
    } else if (is_last && last_logits != nullptr) {
      logits = last_logits->data();
      first_row = count - 1;
    }
    absl::Status status = forward(tokens.data() + begin, count, start + begin, kv, first_row, logits);
    if (!status.ok()) {
      kv.set_size(start);
      return status;
    }
    kv.set_size(start + begin + count);
  }
  if (all_logits != nullptr && last_logits != nullptr) {
    std::copy(all_logits->end() - s.n_vocab, all_logits->end(), last_logits->begin());
  }
  return absl::OkStatus();
}

void Engine::start_parts() {
  if (part_times_ != nullptr) part_last_ = std::chrono::steady_clock::now();
}

void Engine::lap(StepPart part) {
  if (part_times_ == nullptr) return;
  const auto now = std::chrono::steady_clock::now();
  part_times_->seconds[static_cast<int>(part)] += std::chrono::duration<double>(now - part_last_).count();
  part_last_ = now;
}

absl::Status Engine::decode_step(int32_t token, KvCache& kv, std::vector<float>* logits) {
  return prefill(std::span<const int32_t>(&token, 1), kv, logits);
}

absl::Status Engine::forward(const int32_t* tokens, int64_t n, int64_t pos, KvCache& kv,
                             int64_t first_logit_row, float* logits) {
  const ModelSpec& s = model_.spec();
  const int64_t d = s.n_embd;
  ThreadPool::Hot hot(pool_);
  start_parts();
  embed(tokens, n, x_.data());
  lap(StepPart::kNorms);
  const RowRun run{&kv, pos, 0, n};
  for (int il = 0; il < s.n_layer; ++il) {
    BATON_RETURN_IF_ERROR(layer(il, x_.data(), n, std::span<const RowRun>(&run, 1), /*decode_order=*/false));
  }
  if (logits != nullptr && first_logit_row < n) {
    const int64_t rows = n - first_logit_row;
    rmsnorm_rows(x_.data() + first_logit_row * d, model_.output_norm().data(), h_.data(), rows, d,
                 s.norm_eps);
    matmul(model_.output(), h_.data(), rows, logits, &pool_, options_.float_matmul);
    lap(StepPart::kOutput);
  }
  return absl::OkStatus();
}

absl::Status Engine::prefill_layers(std::span<const int32_t> tokens, KvCache& kv,
                                    const std::function<absl::Status(int layer)>& layer_done) {
  const ModelSpec& s = model_.spec();
  if (tokens.empty()) return absl::InvalidArgumentError("prefill needs at least one token");
  BATON_RETURN_IF_ERROR(check_tokens(tokens, s.n_vocab));
  const int64_t start = kv.size();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (start + n > kv.capacity()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "prompt of %d tokens after %d cached does not fit the KV cache of %d tokens", n, start,
        kv.capacity()));
  }
  const int64_t d = s.n_embd;
  chunk_x_.resize(static_cast<size_t>(n * d));
  embed(tokens.data(), n, chunk_x_.data());
  for (int il = 0; il < s.n_layer; ++il) {
    // The same micro-batches as prefill(), so the KV is bit-identical.
    for (int64_t begin = 0; begin < n; begin += options_.max_batch_tokens) {
      const int64_t count = std::min<int64_t>(options_.max_batch_tokens, n - begin);
      const RowRun run{&kv, start + begin, 0, count};
      ThreadPool::Hot hot(pool_);  // not across layer_done, which may block (a stream's flow control)
      start_parts();  // layer_done's time is not a part's
      absl::Status status =
          layer(il, chunk_x_.data() + begin * d, count, std::span<const RowRun>(&run, 1), /*decode_order=*/false);
      if (!status.ok()) {
        kv.set_size(start);
        return status;
      }
    }
    if (layer_done) {
      absl::Status status = layer_done(il);
      if (!status.ok()) {
        kv.set_size(start);
        return status;
      }
    }
  }
  kv.set_size(start + n);
  return absl::OkStatus();
}

void Engine::embed(const int32_t* tokens, int64_t n, float* x) const {
  // Embedding rows: token_embd is [n_vocab, n_embd] in its stored type.
  const int64_t d = model_.spec().n_embd;
  const WeightMatrix& embd = model_.token_embd();
  const int64_t embd_row_bytes = ggml_row_bytes(embd.type, d);
  for (int64_t t = 0; t < n; ++t) {
    const auto* row = static_cast<const uint8_t*>(embd.data) + tokens[t] * embd_row_bytes;
    dequantize_row(embd.type, row, x + t * d, d);
  }
  const float embedding_scale = model_.spec().embedding_scale;  // gemma3: sqrt(n_embd)
  if (embedding_scale != 1.0f) scale_inplace(x, embedding_scale, n * d);
}

absl::Status Engine::decode_rows(std::span<const DecodeRow> rows, float* logits) {
  const ModelSpec& s = model_.spec();
  const int64_t n = static_cast<int64_t>(rows.size());
  if (n == 0) return absl::InvalidArgumentError("decode_rows needs at least one row");
  if (n > options_.max_batch_tokens) {
    return absl::InvalidArgumentError(absl::StrFormat("decode_rows: %d rows exceed the engine's batch of %d", n,
                                                      options_.max_batch_tokens));
  }
  // Runs of consecutive rows of one cache; a cache may not come back later.
  std::vector<RowRun> runs;
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const DecodeRow& row = rows[static_cast<size_t>(i)];
    if (row.kv == nullptr) return absl::InvalidArgumentError("decode_rows: a row without a cache");
    tokens[static_cast<size_t>(i)] = row.token;
    if (!runs.empty() && runs.back().kv == row.kv) {
      ++runs.back().n;
      continue;
    }
    for (const RowRun& run : runs) {
      if (run.kv == row.kv) {
        return absl::InvalidArgumentError("decode_rows: the rows of one cache must be consecutive");
      }
    }
    runs.push_back(RowRun{row.kv, row.kv->size(), i, 1});
  }
  BATON_RETURN_IF_ERROR(check_tokens(tokens, s.n_vocab));
  for (const RowRun& run : runs) {
    if (run.pos + run.n > run.kv->capacity()) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%d tokens after %d cached do not fit the KV cache of %d tokens", run.n, run.pos, run.kv->capacity()));
    }
  }
  const int64_t d = s.n_embd;
  ThreadPool::Hot hot(pool_);
  start_parts();
  embed(tokens.data(), n, x_.data());
  lap(StepPart::kNorms);
  for (int il = 0; il < s.n_layer; ++il) {
    absl::Status status = layer(il, x_.data(), n, runs, /*decode_order=*/true);
    if (!status.ok()) {
      for (const RowRun& run : runs) run.kv->set_size(run.pos);
      return status;
    }
  }
  for (const RowRun& run : runs) run.kv->set_size(run.pos + run.n);
  if (logits != nullptr) {
    rmsnorm_rows(x_.data(), model_.output_norm().data(), h_.data(), n, d, s.norm_eps);
    matmul_decode_order(model_.output(), h_.data(), n, logits, &pool_);
    lap(StepPart::kOutput);
  }
  return absl::OkStatus();
}

const RopeTable& Engine::rope_table(const float* inv_freq, int64_t pos0, int64_t n) {
  for (const RopeEntry& e : rope_tables_) {
    if (e.inv_freq == inv_freq && e.table.pos0 == pos0 && e.table.n == n) return e.table;
  }
  // A call's runs (a batched step: one per session) times the model's
  // frequency tables; older entries go first.
  constexpr size_t kRopeTables = 16;
  if (rope_tables_.size() == kRopeTables) rope_tables_.erase(rope_tables_.begin());
  const RopeSpec& rope = model_.spec().rope;
  rope_tables_.push_back(RopeEntry{inv_freq, make_rope_table(pos0, n, rope.n_rot, inv_freq, rope.attn_factor)});
  return rope_tables_.back().table;
}

absl::Status Engine::layer(int il, float* x, int64_t n, std::span<const RowRun> runs, bool decode_order) {
  const ModelSpec& s = model_.spec();
  const int64_t d = s.n_embd;
  ThreadPool* pool = &pool_;
  const bool neox = s.rope.type == RopeType::kNeox;
  const LayerWeights& l = model_.layer(il);
  auto mm = [&](const WeightMatrix& w, const float* in, float* out) {
    if (decode_order) {
      matmul_decode_order(w, in, n, out, pool);
    } else {
      matmul(w, in, n, out, pool, options_.float_matmul);
    }
  };
  auto mm_many = [&](std::span<const WeightMatrix* const> ws, const float* in, std::span<float* const> outs) {
    if (decode_order) {
      matmul_many_decode_order(ws, in, n, outs, pool);
    } else {
      matmul_many(ws, in, n, outs, pool, options_.float_matmul);
    }
  };
  // Attention block.
  for_rows(pool_, n, [&](int64_t begin, int64_t end) {
    rmsnorm_rows(x + begin * d, l.attn_norm.data(), h_.data() + begin * d, end - begin, d, s.norm_eps);
  });
  lap(StepPart::kNorms);
  const WeightMatrix* qkv[] = {&l.wq, &l.wk, &l.wv};  // one dispatch, x quantized once
  float* const qkv_out[] = {q_.data(), k_.data(), v_.data()};
  mm_many(qkv, h_.data(), qkv_out);
  lap(StepPart::kQkv);
  add_bias_rows(q_.data(), l.bq, n);
  add_bias_rows(k_.data(), l.bk, n);
  add_bias_rows(v_.data(), l.bv, n);
  if (s.qk_norm) {
    rmsnorm_heads(q_.data(), n, s.n_head, s.head_dim, l.attn_q_norm.data(), s.norm_eps);
    rmsnorm_heads(k_.data(), n, s.n_head_kv, s.head_dim, l.attn_k_norm.data(), s.norm_eps);
  }
  const float* inv_freq = model_.rope_inv_freq(il).data();  // gemma3: local or global base
  const int64_t q_dim = s.q_dim();
  const int64_t kv_dim = s.kv_dim();
  for (const RowRun& run : runs) {
    float* q = q_.data() + run.first_row * q_dim;
    float* k = k_.data() + run.first_row * kv_dim;
    const RopeTable& table = rope_table(inv_freq, run.pos, run.n);
    for_rows(pool_, run.n, [&](int64_t begin, int64_t end) {
      rope_rows_table(q + begin * q_dim, end - begin, s.n_head, s.head_dim, neox, run.pos + begin, table);
      rope_rows_table(k + begin * kv_dim, end - begin, s.n_head_kv, s.head_dim, neox, run.pos + begin, table);
    });
  }
  if (s.query_scale != 1.0f) scale_inplace(q_.data(), s.query_scale, n * q_dim);
  // Every run's K/V first: a later row of a run attends over the earlier ones.
  for (const RowRun& run : runs) {
    BATON_RETURN_IF_ERROR(run.kv->store(il, run.pos, run.n, k_.data() + run.first_row * kv_dim,
                                        v_.data() + run.first_row * kv_dim));
  }
  lap(StepPart::kQkPrep);
  // One call per run: each query's result does not depend on the others
  // in the call (kv_cache.h), so a run of draft rows attends as decode steps.
  // Several runs (a batched step of several sessions) share one pool job,
  // a run per task: each run's own tasks then run inline on its thread, in
  // the same order and with the same arithmetic as with the pool, so a row
  // keeps its bits; and the step pays one hand-off to the pool instead of
  // two per run over a few dozen keys each.
  auto attend_run = [&](const RowRun& run, ThreadPool* run_pool) {
    run.kv->attend(il, run.pos, run.n, q_.data() + run.first_row * q_dim, attn_.data() + run.first_row * q_dim,
                   run_pool);
  };
  if (runs.size() == 1) {
    attend_run(runs[0], pool);
  } else {
    pool->parallel_for_dynamic(static_cast<int64_t>(runs.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) attend_run(runs[static_cast<size_t>(r)], pool);
    });
  }
  lap(StepPart::kAttention);
  mm(l.wo, attn_.data(), proj_.data());
  lap(StepPart::kWo);
  if (s.post_norms) rmsnorm_rows(proj_.data(), l.post_attn_norm.data(), proj_.data(), n, d, s.norm_eps);
  // Feed-forward block (SwiGLU; gemma3: GeGLU), its norm in the same pass as the residual add.
  for_rows(pool_, n, [&](int64_t begin, int64_t end) {
    add_inplace(x + begin * d, proj_.data() + begin * d, (end - begin) * d);
    rmsnorm_rows(x + begin * d, l.ffn_norm.data(), h_.data() + begin * d, end - begin, d, s.norm_eps);
  });
  const WeightMatrix* gate_up[] = {&l.w_gate, &l.w_up};
  float* const gate_up_out[] = {gate_.data(), up_.data()};
  lap(StepPart::kNorms);
  mm_many(gate_up, h_.data(), gate_up_out);
  lap(StepPart::kGateUp);
  // Elementwise, so split across the pool (the same bits however split):
  // a batched step's rows would otherwise spend ~8% of the step here on one
  // thread while the other waits.
  pool->parallel_for(n * s.n_ff / kGluChunk + (n * s.n_ff % kGluChunk != 0), [&](int64_t begin, int64_t end) {
    const int64_t first = begin * kGluChunk, count = std::min(end * kGluChunk, n * s.n_ff) - first;
    if (s.gelu_ffn) {
      gelu_mul(gate_.data() + first, up_.data() + first, count);
    } else {
      silu_mul(gate_.data() + first, up_.data() + first, count);
    }
  });
  lap(StepPart::kGlu);
  mm(l.w_down, gate_.data(), proj_.data());
  lap(StepPart::kDown);
  if (s.post_norms) rmsnorm_rows(proj_.data(), l.post_ffn_norm.data(), proj_.data(), n, d, s.norm_eps);
  for_rows(pool_, n, [&](int64_t begin, int64_t end) {
    add_inplace(x + begin * d, proj_.data() + begin * d, (end - begin) * d);
  });
  lap(StepPart::kNorms);
  return absl::OkStatus();
}

}  // namespace baton
