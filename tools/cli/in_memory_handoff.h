// The cloud/edge KV handoff in one process, no gRPC: the cloud side writes a
// segment with the wire codec exactly as it streams one (kv_handoff.h:
// encode, stream writer, zstd), the edge side reads the messages back
// (verifying fingerprint, positions, prefix digest, every block and the
// trailer) into a fresh QuantizedKvCache. The quality measurements (bench
// fidelity, kv_quality.h) score what comes out.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/kv_codec/kv_transform_codec.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/model/model_fingerprint.h"

namespace baton::cli {

// One end of the handoff: its model's fingerprint and RoPE.
struct HandoffEnd {
  const ModelFingerprint* fingerprint = nullptr;
  const KvRope* rope = nullptr;
};

struct InMemoryHandoff {
  HandoffEnd cloud, edge;
  KvGeometry geometry;  // the edge store's
  KvCodecConfig wire;   // the codec on the wire
  KvCodecConfig store;  // the edge store's (QuantizedKvCache::store_config_for(wire))
  // The transform codec's coder when `wire` is one (both ends share it here;
  // in a deployment each end builds its own from the same calibration file).
  const KvTransformCodec* transform = nullptr;
};

// The KV of `tokens` (positions [0, n), held by `cloud`) handed over into an
// edge store of `capacity` tokens; `load` gets what the reader counted.
absl::StatusOr<std::unique_ptr<QuantizedKvCache>> hand_off(const InMemoryHandoff& handoff, const F32KvCache& cloud,
                                                           std::span<const int32_t> tokens, int64_t capacity,
                                                           KvSegmentLoad* load);

}  // namespace baton::cli
