// The KV calibration of a model over token chunks (`baton model calibrate`;
// the benches may calibrate in-process the same way): each chunk prefilled
// from position 0 into an F32 cache, every layer's keys un-rotated to
// pre-RoPE exactly as the handoff's "pre" option sends them
// (kv_handoff.cc), keys and values fed to a KvCalibrationBuilder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/engine/engine.h"
#include "common/kv_codec/kv_calibration.h"
#include "common/model/model.h"

namespace baton::cli {

// `engine` runs `model`; `chunks` are token ids (each its own sequence);
// `source` says what they came from (KvCalibration::source). The result is
// bound to model_fingerprint(model).digest.
absl::StatusOr<KvCalibration> calibrate_kv(const Model& model, Engine& engine,
                                           const std::vector<std::vector<int32_t>>& chunks, std::string source);

// Mean over the (layer, KV head) pairs of `is_key`'s kind with any variance
// of the fraction of the head's variance held by its first
// ceil(fraction * head_dim) components (how much a budget that keeps only
// those would keep).
double variance_share(const KvCalibration& calibration, bool is_key, double fraction);

}  // namespace baton::cli
