#include "common/kv_stream/kv_calibration_check.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace baton {

absl::Status check_kv_calibration_model(const KvCalibration& calibration, const std::string& model_digest,
                                        const KvGeometry& geometry, const std::string& what) {
  if (calibration.model_digest != model_digest) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s was calibrated on model %s, but this model's fingerprint digest is %s (calibrate it with `baton model "
        "calibrate --model` on this model)",
        what, calibration.model_digest, model_digest));
  }
  if (absl::Status status = calibration.check_geometry(geometry); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", status.message()));
  }
  return absl::OkStatus();
}

}  // namespace baton
