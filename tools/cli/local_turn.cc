#include "local_turn.h"

#include <chrono>
#include <span>

#include "absl/strings/str_cat.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/util/check.h"
#include "edge_decode/link/transform_coders.h"
#include "edge_decode/plan/default_codec.h"

namespace baton::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The agent's local prefill chunk (edge_decode/generate/generate_turn_prefill.cc).
constexpr int64_t kAgentPrefillChunkTokens = 256;

absl::Status prefill_in_chunks(Engine& engine, std::span<const int32_t> tokens, KvCache& kv) {
  for (int64_t done = 0; done < static_cast<int64_t>(tokens.size());) {
    const int64_t count = std::min<int64_t>(kAgentPrefillChunkTokens, static_cast<int64_t>(tokens.size()) - done);
    BATON_RETURN_IF_ERROR(engine.prefill(tokens.subspan(done, count), kv, nullptr));
    done += count;
  }
  return absl::OkStatus();
}

// Tokens [0, n-1) into `store`: an F16 store computes them in f32 over f32
// K/V and rounds them in once (the agent's staging, which gives the cloud's
// bits); a quantized store attends over its own codes as it fills.
absl::Status prefill_front(Engine& engine, std::span<const int32_t> front, QuantizedKvCache& store) {
  const KvCodecConfig& config = store.config();
  if (config.bits != KvCodecConfig::Bits::kF16 || config.key_bits.has_value()) {
    return prefill_in_chunks(engine, front, store);
  }
  const int64_t n = static_cast<int64_t>(front.size());
  F32KvCache staging(store.geometry(), n);
  BATON_RETURN_IF_ERROR(prefill_in_chunks(engine, front, staging));
  for (int layer = 0; layer < store.geometry().n_layer && n > 0; ++layer) {
    BATON_RETURN_IF_ERROR(store.store(layer, 0, n, staging.k_row(layer, 0), staging.v_row(layer, 0)));
  }
  store.set_size(n);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<KvCodecConfig> local_kv_codec(const std::string& name, const KvGeometry& geometry) {
  BATON_ASSIGN_OR_RETURN(KvCodecConfig wire,
                         default_codec_from_name(name.empty() ? kEdgeFallbackCodec : name, geometry));
  if (wire.transform) {
    return absl::InvalidArgumentError(absl::StrCat("--codec ", name,
                                                   ": the transform codec needs a KV calibration; baton generate "
                                                   "--model takes f16, int8, int4 or a quantized codec name"));
  }
  return wire;
}

absl::StatusOr<std::unique_ptr<QuantizedKvCache>> new_local_kv_store(const KvCodecConfig& wire,
                                                                      const KvGeometry& geometry,
                                                                      int64_t capacity_tokens) {
  return QuantizedKvCache::Create(geometry, capacity_tokens, edge_store_config(wire, geometry));
}

absl::StatusOr<LocalTurn> run_local_turn(Engine& engine, QuantizedKvCache& store, Sampler& sampler,
                                         const std::vector<int32_t>& prompt, int64_t max_tokens,
                                         const TokenSink& sink) {
  BATON_CHECK(!prompt.empty());
  for (int32_t t : prompt) sampler.accept(t);
  const std::span<const int32_t> all(prompt);
  std::vector<float> logits;
  const auto start = Clock::now();
  BATON_RETURN_IF_ERROR(prefill_front(engine, all.first(all.size() - 1), store));
  BATON_RETURN_IF_ERROR(engine.decode_step(prompt.back(), store, &logits));
  const auto prefill_done = Clock::now();
  LocalTurn turn;
  Clock::time_point first_token_time = prefill_done;
  while (static_cast<int64_t>(turn.tokens.size()) < max_tokens) {
    const int32_t token = sampler.sample(logits);
    sampler.accept(token);
    if (turn.tokens.empty()) first_token_time = Clock::now();
    turn.tokens.push_back(token);
    if (!sink(token) || static_cast<int64_t>(turn.tokens.size()) == max_tokens) break;
    BATON_RETURN_IF_ERROR(engine.decode_step(token, store, &logits));
  }
  const auto end = Clock::now();
  auto secs = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  turn.figures.prompt_tokens = static_cast<int64_t>(prompt.size());
  turn.figures.generated_tokens = static_cast<int64_t>(turn.tokens.size());
  turn.figures.ttft_ms = secs(start, first_token_time) * 1e3;
  turn.figures.prefill_s = secs(start, prefill_done);
  turn.figures.decode_s = secs(first_token_time, end);
  return turn;
}

}  // namespace baton::cli
