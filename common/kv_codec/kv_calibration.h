// The calibration of the transform KV codec (kv_transform_codec.h) for one
// model: per (layer, KV head, K|V) the mean and an orthonormal basis of the
// head vectors over calibration text (PCA / Karhunen-Loeve transform), the
// variance along each basis vector, and per (layer, K|V) the distribution
// shape of the normalized coefficients (what the entropy coder's models are
// built from). Keys are calibrated before RoPE (the codec sends pre-RoPE keys,
// as the "pre" option does).
//
// `baton model calibrate` writes it (a .batoncal file); the file is bound to
// the model fingerprint (model_digest) and its SHA-256 (digest()) enters the
// codec part of the KV fingerprint, so both ends must hold the same file.
// parse_kv_calibration() checks every length against the geometry it
// declares and caps it before allocating; hostile bytes give InvalidArgument.
//
// Format 2 adds an optional quality table (KvCodecQuality: what each codec
// cost on held-out text, measured by `baton model calibrate`), which the
// edge's `--codec auto` chooses from. Like the rest of the file it is in
// the digest: both ends hold the same file (the edge usually fetches the
// cloud's).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv_codec/kv_geometry.h"
#include "common/util/sha256.h"

namespace baton {

// One (layer, KV head, kind).
struct KvCalibrationHead {
  std::vector<float> mean;      // [D]
  std::vector<float> basis;     // [D * D]; row i is component i's unit direction, rows orthogonal
  std::vector<float> variance;  // [D], >= 0, descending: variance of the data along basis row i
};

// The normalized-coefficient histogram: bins of width 1/16 over [-16, 16).
inline constexpr int kKvShapeBins = 512;
inline constexpr float kKvShapeRange = 16.0f;

// One measured codec: the KV of held-out text handed over with it against
// the F16 handoff (tools/cli/kv_quality.h).
struct KvCodecQuality {
  std::string codec;           // canonical KvCodecConfig::to_string(), e.g. "tc-b2", "int4-pc-kg128-g32-z3"
  double wire_ratio = 0;       // wire bytes / F16 bytes of the same tokens, > 0
  double ppl_delta_pct = 0;    // perplexity change in percent (negative: lower than F16's)
  double mean_kl = 0;          // mean KL(p_f16 || p_codec) of the next-token distributions, >= 0

  bool operator==(const KvCodecQuality&) const = default;
};

// Caps of the quality table, checked before allocating.
inline constexpr uint32_t kMaxKvQualityRows = 64;
inline constexpr uint32_t kMaxKvQualityCodecBytes = 128;

struct KvCalibration {
  std::string model_digest;  // ModelFingerprint::digest of the calibrated model (hex)
  int n_layer = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  bool pre_rope_keys = true;  // keys were taken before RoPE
  int64_t tokens = 0;         // calibration tokens
  std::string source;         // what it was calibrated on (e.g. the text file's name), for people
  // [(layer * 2 + kind) * n_head_kv + head], kind 0 = K, 1 = V.
  std::vector<KvCalibrationHead> heads;
  // [layer * 2 + kind][kKvShapeBins]: probability mass of z = (coefficient) /
  // sqrt(variance) over the bins, pooled over the heads and the components
  // with variance > 0 of that layer and kind; sums to 1. Values beyond the
  // range count in the end bins.
  std::vector<std::vector<float>> shape;
  // The measured quality table (format 2); empty: none (a format 1 file).
  std::vector<KvCodecQuality> quality;

  const KvCalibrationHead& head(int layer, bool is_key, int kv_head) const {
    return heads[static_cast<size_t>((layer * 2 + (is_key ? 0 : 1)) * n_head_kv + kv_head)];
  }
  const std::vector<float>& shape_of(int layer, bool is_key) const {
    return shape[static_cast<size_t>(layer * 2 + (is_key ? 0 : 1))];
  }
  // OK when the calibration is for this KV shape (names the differing field).
  absl::Status check_geometry(const KvGeometry& geometry) const;
};

// The file bytes (deterministic: the same calibration gives the same bytes):
// format 1 without a quality table, format 2 with one.
std::string serialize_kv_calibration(const KvCalibration& calibration);
// SHA-256 of serialize_kv_calibration() (the file's SHA-256): what the KV
// fingerprint carries.
Digest256 kv_calibration_digest(const KvCalibration& calibration);
// Parses and checks a file of format 1 or 2 (magic, version, sizes against
// the declared geometry and caps, finite values, orthonormal basis within
// 1e-3, shapes summing to 1; the quality table's row count and name lengths
// against their caps, names that parse as codecs, finite ratios > 0 and
// KL >= 0). InvalidArgument naming what is wrong.
absl::StatusOr<KvCalibration> parse_kv_calibration(std::string_view bytes);
absl::StatusOr<KvCalibration> load_kv_calibration(const std::string& path);
// Atomic write (temp file, fsync, rename).
absl::Status save_kv_calibration(const KvCalibration& calibration, const std::string& path);

// Accumulates head vectors and computes the calibration.
class KvCalibrationBuilder {
 public:
  KvCalibrationBuilder(const KvGeometry& geometry, std::string model_digest, bool pre_rope_keys = true);
  // rows: f32 [n_tokens, n_head_kv * head_dim] of one layer's K (pre-RoPE
  // when pre_rope_keys) or V.
  absl::Status add(int layer, bool is_key, const float* rows, int64_t n_tokens);
  // Means, covariances, eigen-decomposition (symmetric Jacobi, in double),
  // variances and shapes. FailedPrecondition with fewer than head_dim tokens
  // in any layer and kind.
  absl::StatusOr<KvCalibration> finish(std::string source) const;

 private:
  KvGeometry geometry_;
  std::string model_digest_;
  bool pre_rope_keys_;
  std::vector<std::vector<float>> rows_;  // [layer * 2 + kind]: f32 [tokens, kv_dim]
};

}  // namespace baton
