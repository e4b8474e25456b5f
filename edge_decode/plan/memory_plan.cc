#include "edge_decode/plan/memory_plan.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_format.h"
#include "common/cpu/matmul.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/model/model.h"
#include "common/model/model_spec.h"

namespace baton {
namespace {

KvGeometry geometry_of(const ModelSpec& spec) {
  return kv_geometry_for(spec);
}

// A cgroup limit file: a decimal byte count, or "max" (no limit).
uint64_t read_cgroup_limit(const char* path) {
  std::ifstream in(path);
  if (!in) return 0;
  std::string text;
  in >> text;
  if (text.empty() || text == "max") return 0;
  uint64_t value = 0;
  if (std::sscanf(text.c_str(), "%" SCNu64, &value) != 1) return 0;
  // cgroup v1 reports "no limit" as a huge page-rounded number.
  if (value >= (uint64_t{1} << 60)) return 0;
  return value;
}

uint64_t read_mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    uint64_t kib = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %" SCNu64 " kB", &kib) == 1) return kib * 1024;
  }
  return 0;
}

// Tokens a KV budget holds for one session: what is left after the
// sliding-window layers, over the bytes per token of the full layers
// (unbounded when every layer is windowed).
uint64_t kv_budget_tokens(uint64_t kv_budget_bytes, const CodecCapacityPlan& capacity) {
  if (kv_budget_bytes < capacity.kv_window_bytes) return 0;
  const uint64_t left = kv_budget_bytes - capacity.kv_window_bytes;
  if (capacity.kv_bytes_per_token == 0) return capacity.kv_window_bytes > 0 ? uint64_t{1} << 40 : 0;
  return left / capacity.kv_bytes_per_token;
}

}  // namespace

const CodecCapacityPlan* EdgeMemoryPlan::find(const KvCodecConfig& codec) const {
  const KvCodecConfig store = QuantizedKvCache::store_config_for(codec);
  for (const CodecCapacityPlan& entry : capacity) {
    if (QuantizedKvCache::store_config_for(entry.codec) == store) return &entry;
  }
  return nullptr;
}

uint64_t engine_scratch_bytes(const ModelSpec& spec, int max_batch_tokens) {
  const uint64_t rows = static_cast<uint64_t>(std::max(1, max_batch_tokens));
  const uint64_t row_floats = 3 * uint64_t(spec.n_embd) + 2 * uint64_t(spec.q_dim()) +
                              2 * uint64_t(spec.kv_dim()) + 2 * uint64_t(spec.n_ff);
  const uint64_t activations = rows * row_floats * sizeof(float);
  const uint64_t quantized_activations = activations / 4;
  const uint64_t logits = 2 * uint64_t(spec.n_vocab) * sizeof(float);
  // The prefill GEMM's packed panels: kPanelRows rows of the widest input,
  // one per pool thread (bf16 panels are smaller).
  const uint64_t widest = std::max<uint64_t>(spec.n_embd, spec.n_ff);
  const uint64_t threads = std::max(1u, std::thread::hardware_concurrency());
  const uint64_t panels = threads * uint64_t(matmul_panel_scratch_bytes(static_cast<int64_t>(widest)));
  return activations + quantized_activations + logits + panels;
}

uint64_t kv_bytes_per_token(const KvCodecConfig& codec, const ModelSpec& spec) {
  const KvGeometry geometry = geometry_of(spec);
  const int64_t all_layers = QuantizedKvCache::bytes_per_token(QuantizedKvCache::store_config_for(codec), geometry);
  int full_layers = 0;
  for (int layer = 0; layer < geometry.n_layer; ++layer) full_layers += geometry.window(layer) > 0 ? 0 : 1;
  return static_cast<uint64_t>(all_layers / geometry.n_layer * full_layers);
}

uint64_t kv_window_bytes(const KvCodecConfig& codec, const ModelSpec& spec) {
  KvGeometry windowed = geometry_of(spec);
  int32_t widest = 0;
  for (int layer = 0; layer < windowed.n_layer; ++layer) widest = std::max(widest, windowed.window(layer));
  if (widest == 0) return 0;
  // Past every window (+ slack) the windowed layers hold a fixed size: count
  // them alone (full layers set to hold nothing).
  const int64_t past = int64_t{widest} + QuantizedKvCache::kWindowSlackTokens + 1;
  const KvCodecConfig store = QuantizedKvCache::store_config_for(codec);
  const int64_t all = QuantizedKvCache::memory_bytes_for(store, windowed, past);
  return static_cast<uint64_t>(all) - kv_bytes_per_token(codec, spec) * static_cast<uint64_t>(past);
}

EdgeMemoryPlan make_memory_plan(const ModelSpec& spec, uint64_t weights_bytes, uint64_t device_limit_bytes,
                                const std::vector<KvCodecConfig>& codecs) {
  EdgeMemoryPlan plan;
  plan.device_limit_bytes = device_limit_bytes;
  plan.weights_bytes = weights_bytes;
  plan.scratch_bytes = engine_scratch_bytes(spec);
  const uint64_t fixed = plan.weights_bytes + plan.scratch_bytes;
  const uint64_t left = device_limit_bytes > fixed ? device_limit_bytes - fixed : 0;
  const uint64_t headroom_rule =
      std::max(kMinHeadroomBytes, static_cast<uint64_t>(kHeadroomFraction * static_cast<double>(device_limit_bytes)));
  plan.headroom_bytes = std::min(headroom_rule, left);
  plan.kv_budget_bytes = left - plan.headroom_bytes;
  for (const KvCodecConfig& codec : codecs) {
    CodecCapacityPlan entry;
    entry.codec = QuantizedKvCache::store_config_for(codec);
    entry.kv_bytes_per_token = kv_bytes_per_token(codec, spec);
    entry.kv_window_bytes = kv_window_bytes(codec, spec);
    const uint64_t tokens = kv_budget_tokens(plan.kv_budget_bytes, entry);
    entry.max_context_tokens =
        static_cast<uint32_t>(std::min<uint64_t>(tokens, static_cast<uint64_t>(std::max(0, spec.n_ctx_train))));
    plan.capacity.push_back(entry);
  }
  return plan;
}

EdgeMemoryPlan make_memory_plan(const Model& model, uint64_t device_limit_bytes,
                                const std::vector<KvCodecConfig>& codecs) {
  return make_memory_plan(model.spec(), model.weight_bytes(), device_limit_bytes, codecs);
}

uint64_t detect_device_memory_bytes() {
  const uint64_t available = read_mem_available();
  uint64_t limit = read_cgroup_limit("/sys/fs/cgroup/memory.max");
  if (limit == 0) limit = read_cgroup_limit("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  if (limit == 0) return available;
  return limit;
}

void to_proto(const EdgeMemoryPlan& plan, uint64_t kv_used_bytes, v1::MemoryPlan* out) {
  out->Clear();
  out->set_device_limit_bytes(plan.device_limit_bytes);
  out->set_weights_bytes(plan.weights_bytes);
  out->set_scratch_bytes(plan.scratch_bytes);
  out->set_headroom_bytes(plan.headroom_bytes);
  out->set_kv_budget_bytes(plan.kv_budget_bytes);
  out->set_kv_used_bytes(kv_used_bytes);
  for (const CodecCapacityPlan& entry : plan.capacity) {
    v1::CodecCapacity* capacity = out->add_capacity();
    if (absl::StatusOr<v1::CodecParams> params = kv_codec_params(entry.codec); params.ok()) {
      *capacity->mutable_codec() = *params;
    }
    capacity->set_kv_bytes_per_token(entry.kv_bytes_per_token);
    capacity->set_max_context_tokens(entry.max_context_tokens);
  }
}

namespace {

// "codec int4-g32 (KV budget 512.0 MiB = limit 4.00 GiB - weights 3.10 GiB -
// scratch 40.0 MiB - headroom 204.8 MiB; 87.4 KiB per token)".
std::string budget_words(const EdgeMemoryPlan& plan, const CodecCapacityPlan& capacity) {
  const std::string window =
      capacity.kv_window_bytes == 0
          ? ""
          : absl::StrFormat(" after %s of sliding-window layers", format_bytes(capacity.kv_window_bytes));
  return absl::StrFormat(
      "codec %s (KV budget %s = limit %s - weights %s - scratch %s - headroom %s; %s per token%s)",
      capacity.codec.to_string(), format_bytes(plan.kv_budget_bytes), format_bytes(plan.device_limit_bytes),
      format_bytes(plan.weights_bytes), format_bytes(plan.scratch_bytes), format_bytes(plan.headroom_bytes),
      format_bytes(capacity.kv_bytes_per_token), window);
}

}  // namespace

ContextLimit context_limit(const EdgeMemoryPlan& plan, const CodecCapacityPlan& capacity, int64_t trained_tokens) {
  ContextLimit limit;
  limit.trained_tokens = trained_tokens;
  const uint64_t fit = kv_budget_tokens(plan.kv_budget_bytes, capacity);
  limit.memory_tokens = static_cast<int64_t>(std::min<uint64_t>(fit, uint64_t{1} << 40));
  limit.memory_detail = budget_words(plan, capacity);
  return limit;
}

}  // namespace baton
