#include "kv_calibrate.h"

#include <cmath>
#include <span>

#include "common/cpu/ops.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/model/model_fingerprint.h"
#include "common/util/check.h"

namespace baton::cli {
namespace {

// One prefilled chunk's K (pre-RoPE) and V rows of every layer into `builder`.
absl::Status add_chunk(const F32KvCache& cache, const KvRope& rope, const std::vector<float>& unrotate_freq,
                       KvCalibrationBuilder& builder) {
  const KvGeometry& g = cache.geometry();
  const int64_t n = cache.size();
  const size_t kv_dim = static_cast<size_t>(g.kv_dim());
  std::vector<float> rows(static_cast<size_t>(n) * kv_dim);  // f32 [n, kv_dim]
  for (int layer = 0; layer < g.n_layer; ++layer) {
    for (const bool is_key : {true, false}) {
      for (int64_t t = 0; t < n; ++t) {
        const float* row = is_key ? cache.k_row(layer, t) : cache.v_row(layer, t);
        std::copy(row, row + kv_dim, rows.begin() + static_cast<std::ptrdiff_t>(t * kv_dim));
      }
      // RoPE at the negated angle undoes the engine's rotation; the chunk
      // starts at position 0.
      if (is_key && rope.n_rot > 0) {
        rope_rows(rows.data(), n, g.n_head_kv, g.head_dim, rope.n_rot, rope.neox, 0, unrotate_freq.data());
      }
      BATON_RETURN_IF_ERROR(builder.add(layer, is_key, rows.data(), n));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<KvCalibration> calibrate_kv(const Model& model, Engine& engine,
                                           const std::vector<std::vector<int32_t>>& chunks, std::string source) {
  BATON_ASSIGN_OR_RETURN(const ModelFingerprint fingerprint, model_fingerprint(model));
  const KvGeometry geometry = engine.kv_geometry();
  const KvRope rope = kv_rope_of(model);
  std::vector<float> unrotate_freq(rope.inv_freq.begin(), rope.inv_freq.begin() + rope.n_rot / 2);
  for (float& f : unrotate_freq) f = -f;
  KvCalibrationBuilder builder(geometry, fingerprint.digest, /*pre_rope_keys=*/true);
  for (const std::vector<int32_t>& chunk : chunks) {
    const int64_t n = static_cast<int64_t>(chunk.size());
    if (n == 0) continue;
    F32KvCache cache(geometry, n);
    BATON_RETURN_IF_ERROR(engine.prefill(std::span<const int32_t>(chunk), cache, nullptr));
    BATON_RETURN_IF_ERROR(add_chunk(cache, rope, unrotate_freq, builder));
  }
  return builder.finish(std::move(source));
}

double variance_share(const KvCalibration& calibration, bool is_key, double fraction) {
  const int kept = static_cast<int>(std::ceil(fraction * calibration.head_dim));
  double sum = 0.0;
  int heads = 0;
  for (int layer = 0; layer < calibration.n_layer; ++layer) {
    for (int head = 0; head < calibration.n_head_kv; ++head) {
      const std::vector<float>& variance = calibration.head(layer, is_key, head).variance;
      double total = 0.0, top = 0.0;
      for (int i = 0; i < calibration.head_dim; ++i) {
        total += variance[static_cast<size_t>(i)];
        if (i < kept) top += variance[static_cast<size_t>(i)];
      }
      if (total <= 0.0) continue;
      sum += top / total;
      ++heads;
    }
  }
  return heads > 0 ? sum / heads : 0.0;
}

}  // namespace baton::cli
