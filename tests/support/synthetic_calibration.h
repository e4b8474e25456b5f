// A seeded KV calibration with a known structure, and K/V rows drawn from it:
// per (layer, kind, head) a random orthonormal basis, variances decaying
// geometrically (ratio `decay` per component), random means, and a Gaussian
// coefficient shape. Rows are mean + sum_i sqrt(var_i) g_i basis_i with
// Gaussian g: the distribution the calibration describes.
#pragma once

#include <cstdint>
#include <vector>

#include "common/kv_codec/kv_calibration.h"
#include "common/kv_codec/kv_geometry.h"

namespace baton::testing {

KvCalibration synthetic_kv_calibration(const KvGeometry& geometry, uint64_t seed, double decay = 0.8);

// f32 [n_tokens, kv_dim] of `layer`'s K (is_key) or V.
std::vector<float> synthetic_kv_rows(const KvCalibration& calibration, int layer, bool is_key, int64_t n_tokens,
                                     uint64_t seed);

}  // namespace baton::testing
