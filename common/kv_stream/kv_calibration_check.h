// Whether a KV calibration (kv_calibration.h) belongs to a model: the
// transform codec's two ends must hold the calibration of the model they
// serve, and a calibration of another model would code every block against
// the wrong basis (it still decodes, silently worse), so both baton-prefill
// (--kv-calibration) and baton-edge (its file or the one it fetched) check
// it before use.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "common/kv_codec/kv_calibration.h"
#include "common/kv_codec/kv_geometry.h"

namespace baton {

// FAILED_PRECONDITION naming both digests when calibration.model_digest is
// not `model_digest` (ModelFingerprint::digest); INVALID_ARGUMENT when its
// shape does not fit `geometry`. `what` names the calibration's source in
// the message ("--kv-calibration f.batoncal", "the cloud's calibration").
absl::Status check_kv_calibration_model(const KvCalibration& calibration, const std::string& model_digest,
                                        const KvGeometry& geometry, const std::string& what);

}  // namespace baton
