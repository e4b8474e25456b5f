// The transform KV codec ("tc-bB.B", kv_codec_config.h), after KVTC (NVIDIA,
// ICLR 2026): each head vector is centred and projected on a calibrated
// orthonormal basis (KvCalibration: PCA of the model's K and V over
// calibration text, keys pre-RoPE), the components get bits from a budget by
// rate-distortion optimal allocation (trailing components get none), are
// quantized uniformly and entropy-coded with rANS (rans.h) from models both
// ends derive from the same calibration. Sink tokens and the stream's most
// recent tokens travel as INT8.
//
// Allocation, per (layer, K|V), from the calibration alone (so both ends
// agree without side information): component i of head h has variance s2 =
// variance[i]; its options are 0 bits (reconstructed at the mean, distortion
// s2) or a step delta * sqrt(s2) with delta on a fixed ladder m / 16, m in
// kKvTransformLadder, whose rate (the entropy of the quantized coefficient) and
// distortion are computed on the layer's calibrated coefficient shape
// (KvCalibration::shape, 1/16-wide bins; the ladder's cell edges fall on
// half-bins, so the sums are exact). A Lagrange multiplier found by bisection
// picks per component the option of least distortion + lambda * rate, the
// largest rate within budget_tenths / 10 bits per element over the heads.
// Symbols: k = clamp(round(y / step), -K, K) + K with K = min(127, ...) so
// the cells cover the shape's range; the end cells take the tails.
//
// Block payload, for a block of T tokens at positions [p, p + T) of a stream
// ending at E (stream_end), S = sink_tokens, W = recent_tokens:
//   rows [0, a) with positions < S and rows [b, T) with positions >= E - W
//   (b >= a) are INT8 (int8-gG, G = 32 when it divides head_dim, else
//   head_dim; kv_codec.h's planes layout, not compressed): the bytes of rows
//   [0, a), then those of rows [b, T); then the transform rows [a, b): the
//   rANS stream (rans.h) of their symbols [b - a, n_active] row-major, active
//   components in (head, component) order; with the zstd back end
//   (zstd_level != 0) one zstd frame of those symbol bytes instead. With no
//   active component (every variance 0, or a budget too small for any)
//   nothing follows the INT8 rows: the transform rows decode to the means.
// raw_size is the F16 size 2 * T * kv_dim (kv_block_raw_size). Keys come out
// pre-RoPE: the receiver applies RoPE (kv_handoff.cc), as for "pre" codecs.
//
// Determinism: allocation and models are computed in double with plain sums
// and products (the file is built with -ffp-contract=off, see
// common/CMakeLists.txt); a mismatch between the ends' models would fail the
// rANS state check, never decode silently wrong.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv_codec/kv_calibration.h"
#include "common/kv_codec/kv_codec.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_codec/rans.h"

namespace baton {

// Steps m / 16 (in units of the component's standard deviation).
inline constexpr std::array<int, 23> kKvTransformLadder = {2,  3,  4,  5,  6,  7,  8,  10, 12, 14, 16, 20,
                                                           24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128};

// One coded component of one head.
struct KvTransformComponent {
  int head = 0;
  int index = 0;       // basis row
  float step = 0.0f;   // quantization step
  float inv_step = 0.0f;
  int half = 0;        // K: symbols 0..2K stand for (symbol - K) * step
  int ladder = 0;      // index into kKvTransformLadder
};

// One head's coded components as matrices for the kernels.
struct KvTransformHeadPlan {
  int first = 0;                     // its first column among the active components
  int count = 0;                     // its active components, k
  std::vector<float> project;        // [D, k]: basis rows transposed (encode)
  std::vector<float> project_bias;   // [k]: -mean . basis row
  std::vector<float> inv_step;       // [k]
  std::vector<float> half;           // [k]: K as a float
  // Decode (kv_kernels.h affine_u8_rows): x[j] = bias[j] + scale[j] *
  // sum_i symbol_i * reconstruct_i8[i, j], where step_i * basis row i =
  // scale * reconstruct_i8 (per column j, max |.| = 127) and the bias folds in
  // the mean and the symbols' offset -half_i. The INT8 weights add about
  // 0.2% of the signal's RMS to the reconstruction, far below the
  // quantization noise of any budget, and let VNNI sum four components per
  // instruction.
  std::vector<int8_t> reconstruct_i8;  // [ceil(k / 4), D, 4], zeros past k
  std::vector<float> reconstruct_scale;  // [D]
  std::vector<float> reconstruct_bias;   // [D]
};

// The allocation of one (layer, K|V).
struct KvTransformPlan {
  std::vector<KvTransformComponent> active;       // (head, index) order
  std::vector<const RansModel*> models;           // per active component
  std::vector<std::unique_ptr<RansModel>> owned;  // per ladder entry used (null where unused)
  std::vector<KvTransformHeadPlan> heads;         // [n_head_kv]
  double predicted_bits = 0.0;  // per token over the heads (entropy of the models)
  double predicted_mse = 0.0;   // per token over the heads, calibration units
};

class KvTransformCodec {
 public:
  // Checks the calibration against `config` (a transform config; a bound
  // config must carry this calibration's digest: FailedPrecondition naming
  // both digests otherwise) and computes the allocation and models.
  static absl::StatusOr<std::unique_ptr<KvTransformCodec>> Create(std::shared_ptr<const KvCalibration> calibration,
                                                                  const KvCodecConfig& config);

  // The config, bound to the calibration's digest.
  const KvCodecConfig& config() const { return config_; }
  const KvCalibration& calibration() const { return *calibration_; }
  const KvTransformPlan& plan(int layer, bool is_key) const {
    return plans_[static_cast<size_t>(layer * 2 + (is_key ? 0 : 1))];
  }
  // The INT8 codec of its sink and recent rows (int8-gG): also the edge
  // store form transform blocks are requantized to (kv_handoff.h).
  const KvCodecConfig& int8_config() const { return int8_; }
  // n_layer, n_head_kv (as n_head too) and head_dim of the calibration.
  const KvGeometry& geometry() const { return geometry_; }

  // rows: f32 [n_tokens, kv_dim] of `layer`'s K (pre-RoPE) or V for
  // positions [token_begin, token_begin + n_tokens) of a stream whose last
  // position is stream_end - 1. Values must be finite, |x| <= 65504.
  absl::StatusOr<EncodedKvBlock> encode(int layer, bool is_key, int64_t token_begin, int64_t stream_end,
                                        const float* rows, int64_t n_tokens) const;
  // The inverse into out f32 [n_tokens, kv_dim] (keys pre-RoPE). Checks
  // raw_size, every section's size, the rANS stream or zstd frame;
  // InvalidArgument naming what is wrong. out may be partly written on error.
  absl::Status decode(int layer, bool is_key, int64_t token_begin, int64_t stream_end, std::string_view payload,
                      uint64_t raw_size, int64_t n_tokens, float* out) const;

  // Rows [a, b) of a block that are transform-coded (the others INT8).
  struct Split {
    int64_t a = 0, b = 0;
  };
  Split split(int64_t token_begin, int64_t stream_end, int64_t n_tokens) const;

 private:
  KvTransformCodec() = default;
  absl::Status check_block(int layer, int64_t token_begin, int64_t stream_end, int64_t n_tokens) const;

  std::shared_ptr<const KvCalibration> calibration_;
  KvCodecConfig config_;
  KvCodecConfig int8_;  // the INT8 rows' codec
  KvGeometry geometry_;
  std::vector<KvTransformPlan> plans_;  // [layer * 2 + kind]
};

}  // namespace baton
