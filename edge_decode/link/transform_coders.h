// TransformCoders: the edge's side of the transform KV codec (tc-*,
// kv_transform_codec.h). Both ends must code with the same calibration; the
// edge takes it from --kv-calibration or, without one, fetches the cloud's
// (CloudClient::fetch_kv_calibration) the first time a turn asks for tc, and
// keeps it in memory. A config is bound to the calibration (its digest goes
// into the CodecParams the cloud receives and the stream's header must
// carry), and one coder is kept per distinct config.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/kv_codec/kv_calibration.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_codec/kv_geometry.h"
#include "common/kv_codec/kv_transform_codec.h"

namespace baton {

class CloudClient;

// The most calibration bytes the edge accepts from the cloud (a 70B model's
// calibration is under 100 MiB).
inline constexpr uint64_t kMaxFetchedKvCalibrationBytes = uint64_t{256} << 20;

// The store a wire codec's KV lands in on the edge (QuantizedKvCache::
// store_config_for); the transform codec's is the form of its INT8 rows
// (KvTransformCodec::int8_config): groups of 32, or of head_dim when 32 does
// not divide it.
KvCodecConfig edge_store_config(const KvCodecConfig& wire, const KvGeometry& geometry);

class TransformCoders {
 public:
  // `calibration` (optional: --kv-calibration, already checked against the
  // model); `cloud` (optional) is where one is fetched from without it.
  TransformCoders(std::shared_ptr<const KvCalibration> calibration, CloudClient* cloud, std::string model_digest,
                  KvGeometry geometry);

  // The coder of transform config `config`, bound to the edge's calibration.
  // FAILED_PRECONDITION naming tc_calibration when `config` is bound to
  // another calibration, or when there is none (no file, no cloud, or the
  // fetch failed: the reason is in the message; the next call retries).
  absl::StatusOr<std::shared_ptr<const KvTransformCodec>> coder_for(const KvCodecConfig& config);

  // The calibration held now (null until loaded or fetched).
  std::shared_ptr<const KvCalibration> calibration() const;
  // Its SHA-256 (kv_calibration_digest) in hex; empty while none is held.
  std::string calibration_sha256() const;

  // The calibration for --codec auto's quality table: the one held, else
  // (when `may_fetch`: the turn may contact the cloud) the cloud's, asked
  // again at most every kChoiceFetchRetry after a failed fetch (so a cloud
  // without one is not asked every turn). Null, with `*why`, when none.
  std::shared_ptr<const KvCalibration> calibration_for_choice(bool may_fetch, std::string* why);
  static constexpr std::chrono::seconds kChoiceFetchRetry{60};

 private:
  absl::StatusOr<std::shared_ptr<const KvCalibration>> calibration_or_fetch();

  mutable std::mutex mu_;
  std::shared_ptr<const KvCalibration> calibration_;  // guarded by mu_
  std::string calibration_sha256_;                    // of calibration_ (hex); guarded by mu_
  std::mutex fetch_mu_;                               // one fetch at a time
  CloudClient* cloud_;
  const std::string model_digest_;
  const KvGeometry geometry_;
  std::map<std::string, std::shared_ptr<const KvTransformCodec>> coders_;  // guarded by mu_
  // When calibration_for_choice's last fetch failed, and why; guarded by mu_.
  std::optional<std::chrono::steady_clock::time_point> choice_fetch_failed_at_;
  std::string choice_fetch_error_;
};

}  // namespace baton
