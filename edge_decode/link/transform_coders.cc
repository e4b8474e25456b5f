#include "edge_decode/link/transform_coders.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/util/check.h"
#include "common/util/sha256.h"
#include "edge_decode/link/cloud_client.h"

namespace baton {

KvCodecConfig edge_store_config(const KvCodecConfig& wire, const KvGeometry& geometry) {
  KvCodecConfig store = QuantizedKvCache::store_config_for(wire);
  if (wire.transform && geometry.head_dim % store.group_size != 0) store.group_size = geometry.head_dim;
  return store;
}

TransformCoders::TransformCoders(std::shared_ptr<const KvCalibration> calibration, CloudClient* cloud,
                                 std::string model_digest, KvGeometry geometry)
    : calibration_(std::move(calibration)), cloud_(cloud), model_digest_(std::move(model_digest)),
      geometry_(geometry) {
  if (calibration_ != nullptr) calibration_sha256_ = to_hex(kv_calibration_digest(*calibration_));
}

std::shared_ptr<const KvCalibration> TransformCoders::calibration() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calibration_;
}

std::string TransformCoders::calibration_sha256() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calibration_sha256_;
}

absl::StatusOr<std::shared_ptr<const KvCalibration>> TransformCoders::calibration_or_fetch() {
  if (std::shared_ptr<const KvCalibration> held = calibration()) return held;
  if (cloud_ == nullptr) {
    return absl::FailedPreconditionError(
        "the transform codec needs a KV calibration (tc_calibration): give --kv-calibration or a --cloud that holds "
        "one");
  }
  // Turns that ask at once share one fetch.
  std::lock_guard<std::mutex> fetch_lock(fetch_mu_);
  if (std::shared_ptr<const KvCalibration> held = calibration()) return held;
  absl::StatusOr<std::shared_ptr<const KvCalibration>> fetched =
      cloud_->fetch_kv_calibration(model_digest_, geometry_, kMaxFetchedKvCalibrationBytes);
  if (!fetched.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the transform codec needs a KV calibration (tc_calibration) and this edge has none (--kv-calibration); "
        "fetching the cloud's failed: ",
        fetched.status().message()));
  }
  const std::string sha256 = to_hex(kv_calibration_digest(**fetched));  // serializes: outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  calibration_ = *fetched;
  calibration_sha256_ = sha256;
  return calibration_;
}

std::shared_ptr<const KvCalibration> TransformCoders::calibration_for_choice(bool may_fetch, std::string* why) {
  if (std::shared_ptr<const KvCalibration> held = calibration()) return held;
  if (cloud_ == nullptr || !may_fetch) {
    *why = cloud_ == nullptr ? "no KV calibration on this edge (--kv-calibration) and no cloud to fetch one from"
                             : "no KV calibration on this edge (--kv-calibration), and this turn may not ask the cloud";
    return nullptr;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (choice_fetch_failed_at_.has_value() &&
        std::chrono::steady_clock::now() - *choice_fetch_failed_at_ < kChoiceFetchRetry) {
      *why = choice_fetch_error_;
      return nullptr;
    }
  }
  absl::StatusOr<std::shared_ptr<const KvCalibration>> fetched = calibration_or_fetch();
  if (fetched.ok()) return *fetched;
  std::lock_guard<std::mutex> lock(mu_);
  choice_fetch_failed_at_ = std::chrono::steady_clock::now();
  choice_fetch_error_ = std::string(fetched.status().message());
  *why = choice_fetch_error_;
  return nullptr;
}

absl::StatusOr<std::shared_ptr<const KvTransformCodec>> TransformCoders::coder_for(const KvCodecConfig& config) {
  BATON_CHECK(config.transform.has_value());
  BATON_ASSIGN_OR_RETURN(std::shared_ptr<const KvCalibration> calibration, calibration_or_fetch());
  const std::string key =
      absl::StrCat(config.to_string(), "/", config.transform->bound() ? to_hex(config.transform->calibration) : "");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = coders_.find(key); it != coders_.end()) return it->second;
  }
  absl::StatusOr<std::unique_ptr<KvTransformCodec>> made = KvTransformCodec::Create(calibration, config);
  if (!made.ok()) {
    if (absl::IsFailedPrecondition(made.status())) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "codec %s: tc_calibration %s is not this edge's calibration %s", config.to_string(),
          to_hex(config.transform->calibration), calibration_sha256()));
    }
    return absl::InvalidArgumentError(absl::StrCat("codec ", config.to_string(), ": ", made.status().message()));
  }
  std::shared_ptr<const KvTransformCodec> coder = std::move(*made);
  std::lock_guard<std::mutex> lock(mu_);
  // Few distinct configs are ever asked for; the cap bounds what requests can make the map hold.
  if (coders_.size() >= 64) coders_.erase(coders_.begin());
  coders_.emplace(key, coder);
  return coder;
}

}  // namespace baton
