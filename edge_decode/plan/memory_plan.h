// EdgeMemoryPlan: how the edge device's memory is shared (DESIGN.md "Edge
// memory"):
//   kv_budget = device limit - weights - runtime scratch - headroom
//   max context (per codec) = (kv_budget - sliding-window bytes) / KV bytes
//   per token of the full-attention layers, capped at n_ctx_train
// Reported by Health (v1::MemoryPlan) and `baton plan`; a session beyond its
// codec's max context is refused (context_limit() + check_context_fits()).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/engine/context_limit.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/util/format_bytes.h"
#include "proto/baton.pb.h"

namespace baton {

class Model;
struct ModelSpec;

// Headroom rule: 5% of the device limit, at least 64 MiB (allocator slack,
// gRPC buffers, the tokenizer, stacks of the worker threads).
inline constexpr uint64_t kMinHeadroomBytes = uint64_t{64} << 20;
inline constexpr double kHeadroomFraction = 0.05;

struct CodecCapacityPlan {
  KvCodecConfig codec;               // the store config (QuantizedKvCache::store_config_for)
  uint64_t kv_bytes_per_token = 0;   // bytes per further token (kv_bytes_per_token())
  uint64_t kv_window_bytes = 0;      // fixed bytes of the sliding-window layers (kv_window_bytes())
  // (kv_budget_bytes - kv_window_bytes) / kv_bytes_per_token, capped at n_ctx_train
  uint32_t max_context_tokens = 0;
};

struct EdgeMemoryPlan {
  uint64_t device_limit_bytes = 0;   // --memory-budget, or detect_device_memory_bytes()
  uint64_t weights_bytes = 0;        // tensor data of the GGUF file
  uint64_t scratch_bytes = 0;        // engine activations + logits (engine_scratch_bytes)
  uint64_t headroom_bytes = 0;       // max(5% of the limit, 64 MiB), at most what is left
  uint64_t kv_budget_bytes = 0;      // what is left for KV (0 when the rest does not fit)
  std::vector<CodecCapacityPlan> capacity;  // one per codec; the default first

  // The entry whose store config equals `codec`'s store config; nullptr when
  // none does.
  const CodecCapacityPlan* find(const KvCodecConfig& codec) const;
};

// Bytes of the Engine's runtime buffers for `spec` with micro-batches of
// `max_batch_tokens` rows: f32 activations [B, 3 n_embd + 2 q_dim + 2 kv_dim
// + 2 n_ff], their 8-bit copies for the quantized matmuls (about a quarter
// more), and the logits of one token [n_vocab] f32 (twice: the engine's and
// the sampler's copy).
uint64_t engine_scratch_bytes(const ModelSpec& spec, int max_batch_tokens = 64);

// KV bytes one token takes on the device with `codec` (all layers, K and V,
// codes plus the f16 scales and, for INT4, minimums of its groups): the
// store form of the codec (QuantizedKvCache::store_config_for; no zstd on
// the device). The one figure Health, `baton plan` and `baton model info`
// print.
// With sliding-window layers (ModelSpec::layer_window) only the full-attention
// layers grow with the context: this is their bytes per token, and
// kv_window_bytes the fixed bytes the windowed layers hold per session
// (QuantizedKvCache::memory_bytes_for at a context past every window).
uint64_t kv_bytes_per_token(const KvCodecConfig& codec, const ModelSpec& spec);
uint64_t kv_window_bytes(const KvCodecConfig& codec, const ModelSpec& spec);

// The plan for `model` under `device_limit_bytes`, one capacity entry per
// codec in `codecs` (the default first). Max contexts are 0 when weights,
// scratch and headroom do not fit the limit.
EdgeMemoryPlan make_memory_plan(const Model& model, uint64_t device_limit_bytes,
                                const std::vector<KvCodecConfig>& codecs);
// The same from a spec and a weights size (no model loaded: `baton plan`
// for a shape).
EdgeMemoryPlan make_memory_plan(const ModelSpec& spec, uint64_t weights_bytes, uint64_t device_limit_bytes,
                                const std::vector<KvCodecConfig>& codecs);

// The memory Baton may use on this machine: the cgroup v2 memory.max (or v1
// memory.limit_in_bytes) when set, else MemAvailable from /proc/meminfo; 0
// when neither can be read.
uint64_t detect_device_memory_bytes();

// Fills `out` (kv_used_bytes: KV held by sessions now).
void to_proto(const EdgeMemoryPlan& plan, uint64_t kv_used_bytes, v1::MemoryPlan* out);

// The context limit of a session whose KV is stored as `capacity`'s codec on
// a model trained on `trained_tokens` positions: the smaller of the trained
// context and what the KV budget holds (uncapped here, so messages can say
// which one binds; common/engine/context_limit.h).
ContextLimit context_limit(const EdgeMemoryPlan& plan, const CodecCapacityPlan& capacity, int64_t trained_tokens);

}  // namespace baton
