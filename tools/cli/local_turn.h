// The local path of `baton generate --model` (and its tests): one turn on the
// CPU engine in this process, over the same KV store the edge agent keeps a
// conversation in, filled the same way, so a greedy answer here is the
// agent's answer to the same prompt:
//   - the store: QuantizedKvCache with edge_store_config(codec), the codec
//     by the agent's names (default_codec.h; default int4, the agent's
//     default without a cloud or a KV calibration);
//   - the prompt: tokens [0, n-1) prefilled in the agent's chunks (an F16
//     store through an f32 staging cache, as the agent does when it fits its
//     headroom), then the last prompt token as a decode step (the n-1 rule).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/engine/engine.h"
#include "common/engine/sampler.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "generation_flags.h"

namespace baton::cli {

// The wire codec `name` names ("" = the agent's fallback, int4; f16, int8,
// int4, auto = int4 here, or a full codec name). The transform codec (tc-*)
// needs a KV calibration this path does not take: INVALID_ARGUMENT.
absl::StatusOr<KvCodecConfig> local_kv_codec(const std::string& name, const KvGeometry& geometry);

// The agent's store for `wire`, with room for `capacity_tokens`.
absl::StatusOr<std::unique_ptr<QuantizedKvCache>> new_local_kv_store(const KvCodecConfig& wire,
                                                                      const KvGeometry& geometry,
                                                                      int64_t capacity_tokens);

// Called with each sampled token; false stops the turn after it.
using TokenSink = std::function<bool(int32_t token)>;

struct LocalTurn {
  std::vector<int32_t> tokens;  // sampled, in order (a stopping token included)
  LocalTurnFigures figures;
};

// Prefills `prompt` (not empty) into `store` as the agent does, then samples
// up to `max_tokens` tokens, each handed to `sink` as it comes.
absl::StatusOr<LocalTurn> run_local_turn(Engine& engine, QuantizedKvCache& store, Sampler& sampler,
                                         const std::vector<int32_t>& prompt, int64_t max_tokens,
                                         const TokenSink& sink);

}  // namespace baton::cli
