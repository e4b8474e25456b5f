#include "tests/support/synthetic_calibration.h"

#include <cmath>
#include <random>

namespace baton::testing {
namespace {

// Rows of a random orthonormal D x D matrix (Gram-Schmidt of Gaussian rows).
std::vector<float> random_orthonormal(int d, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  std::vector<double> m(static_cast<size_t>(d) * d);
  for (double& x : m) x = normal(rng);
  for (int i = 0; i < d; ++i) {
    double* row = m.data() + static_cast<size_t>(i) * d;
    for (int j = 0; j < i; ++j) {
      const double* prev = m.data() + static_cast<size_t>(j) * d;
      double dot = 0;
      for (int k = 0; k < d; ++k) dot += row[k] * prev[k];
      for (int k = 0; k < d; ++k) row[k] -= dot * prev[k];
    }
    double norm = 0;
    for (int k = 0; k < d; ++k) norm += row[k] * row[k];
    norm = std::sqrt(norm);
    for (int k = 0; k < d; ++k) row[k] /= norm;
  }
  return std::vector<float>(m.begin(), m.end());
}

// Standard normal mass over the shape's bins.
std::vector<float> gaussian_shape() {
  std::vector<double> mass(kKvShapeBins);
  double total = 0;
  for (int b = 0; b < kKvShapeBins; ++b) {
    const double lo = -kKvShapeRange + b / 16.0, hi = lo + 1.0 / 16.0;
    mass[static_cast<size_t>(b)] = 0.5 * (std::erf(hi / std::sqrt(2.0)) - std::erf(lo / std::sqrt(2.0)));
    total += mass[static_cast<size_t>(b)];
  }
  std::vector<float> shape(kKvShapeBins);
  for (int b = 0; b < kKvShapeBins; ++b) shape[static_cast<size_t>(b)] = static_cast<float>(mass[static_cast<size_t>(b)] / total);
  return shape;
}

}  // namespace

KvCalibration synthetic_kv_calibration(const KvGeometry& geometry, uint64_t seed, double decay) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  KvCalibration c;
  c.model_digest = "synthetic";
  c.n_layer = geometry.n_layer;
  c.n_head_kv = geometry.n_head_kv;
  c.head_dim = geometry.head_dim;
  c.pre_rope_keys = true;
  c.tokens = 1000;
  c.source = "synthetic";
  for (int layer = 0; layer < geometry.n_layer; ++layer) {
    for (int kind = 0; kind < 2; ++kind) {
      for (int h = 0; h < geometry.n_head_kv; ++h) {
        KvCalibrationHead head;
        head.basis = random_orthonormal(geometry.head_dim, rng);
        double var = 1.0 + layer;
        for (int i = 0; i < geometry.head_dim; ++i) {
          head.mean.push_back(static_cast<float>(0.5 * normal(rng)));
          head.variance.push_back(static_cast<float>(var));
          var *= decay;
        }
        c.heads.push_back(std::move(head));
      }
      c.shape.push_back(gaussian_shape());
    }
  }
  return c;
}

std::vector<float> synthetic_kv_rows(const KvCalibration& calibration, int layer, bool is_key, int64_t n_tokens,
                                     uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  const int d = calibration.head_dim;
  std::vector<float> rows(static_cast<size_t>(n_tokens) * calibration.n_head_kv * d);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int h = 0; h < calibration.n_head_kv; ++h) {
      const KvCalibrationHead& head = calibration.head(layer, is_key, h);
      float* x = rows.data() + (t * calibration.n_head_kv + h) * d;
      for (int j = 0; j < d; ++j) x[j] = head.mean[static_cast<size_t>(j)];
      for (int i = 0; i < d; ++i) {
        const float y = static_cast<float>(std::sqrt(static_cast<double>(head.variance[static_cast<size_t>(i)])) *
                                           normal(rng));
        for (int j = 0; j < d; ++j) x[j] += y * head.basis[static_cast<size_t>(i) * d + j];
      }
    }
  }
  return rows;
}

}  // namespace baton::testing
