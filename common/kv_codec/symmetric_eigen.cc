#include "common/kv_codec/symmetric_eigen.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_format.h"

namespace baton {
namespace {

constexpr int kMaxSweeps = 100;
constexpr double kRelativeOffDiagonal = 1e-12;

// Frobenius norm of the off-diagonal part of `a` ([n * n]).
double off_diagonal_norm(const std::vector<double>& a, int n) {
  double sum = 0.0;
  for (int p = 0; p < n; ++p) {
    for (int q = 0; q < n; ++q) {
      if (p != q) sum += a[static_cast<size_t>(p) * n + q] * a[static_cast<size_t>(p) * n + q];
    }
  }
  return std::sqrt(sum);
}

// One Jacobi rotation in the (p, q) plane that zeroes a[p][q]: A <- J^T A J
// (symmetric, both triangles kept) and V^T <- J^T V^T, whose rows gather the
// eigenvectors.
void rotate(std::vector<double>& a, std::vector<double>& vt, int n, int p, int q) {
  const size_t pn = static_cast<size_t>(p) * n, qn = static_cast<size_t>(q) * n;
  const double apq = a[pn + q];
  if (apq == 0.0) return;
  const double app = a[pn + p], aqq = a[qn + q];
  const double theta = (aqq - app) / (2.0 * apq);
  // The smaller root of t^2 + 2 theta t - 1 = 0 (rotation angle <= pi/4),
  // written so that a huge theta does not overflow.
  const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1.0));
  const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
  for (int k = 0; k < n; ++k) {
    if (k == p || k == q) continue;
    const double akp = a[pn + k], akq = a[qn + k];
    const double new_p = c * akp - s * akq, new_q = s * akp + c * akq;
    a[pn + k] = a[static_cast<size_t>(k) * n + p] = new_p;
    a[qn + k] = a[static_cast<size_t>(k) * n + q] = new_q;
  }
  a[pn + p] = app - t * apq;
  a[qn + q] = aqq + t * apq;
  a[pn + q] = a[qn + p] = 0.0;
  for (int k = 0; k < n; ++k) {
    const double vp = vt[pn + k], vq = vt[qn + k];
    vt[pn + k] = c * vp - s * vq;
    vt[qn + k] = s * vp + c * vq;
  }
}

// Values descending, rows in the same order, each row's largest-magnitude
// entry positive.
SymmetricEigen sorted_result(const std::vector<double>& a, const std::vector<double>& vt, int n, int sweeps) {
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int i, int j) {
    return a[static_cast<size_t>(i) * n + i] > a[static_cast<size_t>(j) * n + j];
  });
  SymmetricEigen result;
  result.sweeps = sweeps;
  result.values.resize(static_cast<size_t>(n));
  result.vectors.resize(static_cast<size_t>(n) * n);
  for (int r = 0; r < n; ++r) {
    const int i = order[static_cast<size_t>(r)];
    result.values[static_cast<size_t>(r)] = a[static_cast<size_t>(i) * n + i];
    const double* src = vt.data() + static_cast<size_t>(i) * n;
    double* dst = result.vectors.data() + static_cast<size_t>(r) * n;
    int largest = 0;
    for (int k = 1; k < n; ++k) {
      if (std::fabs(src[k]) > std::fabs(src[largest])) largest = k;
    }
    const double sign = src[largest] < 0 ? -1.0 : 1.0;
    for (int k = 0; k < n; ++k) dst[k] = sign * src[k];
  }
  return result;
}

}  // namespace

absl::StatusOr<SymmetricEigen> symmetric_eigen(std::span<const double> matrix, int n) {
  if (n < 1 || matrix.size() != static_cast<size_t>(n) * static_cast<size_t>(n)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("symmetric_eigen: %d values do not make a %d x %d matrix", matrix.size(), n, n));
  }
  std::vector<double> a(matrix.size());
  double total = 0.0;
  for (int p = 0; p < n; ++p) {
    for (int q = p; q < n; ++q) {
      const double v = matrix[static_cast<size_t>(p) * n + q];
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(absl::StrFormat("symmetric_eigen: entry (%d, %d) is %g", p, q, v));
      }
      a[static_cast<size_t>(p) * n + q] = a[static_cast<size_t>(q) * n + p] = v;
      total += (p == q ? 1.0 : 2.0) * v * v;
    }
  }
  total = std::sqrt(total);  // invariant under the rotations
  std::vector<double> vt(matrix.size(), 0.0);
  for (int i = 0; i < n; ++i) vt[static_cast<size_t>(i) * n + i] = 1.0;
  for (int sweep = 0; sweep <= kMaxSweeps; ++sweep) {
    if (off_diagonal_norm(a, n) <= kRelativeOffDiagonal * total) return sorted_result(a, vt, n, sweep);
    if (sweep == kMaxSweeps) break;
    for (int p = 0; p < n - 1; ++p) {
      for (int q = p + 1; q < n; ++q) rotate(a, vt, n, p, q);
    }
  }
  return absl::InternalError(absl::StrFormat(
      "symmetric_eigen: %d x %d matrix not converged after %d Jacobi sweeps (off-diagonal norm %g of %g)", n, n,
      kMaxSweeps, off_diagonal_norm(a, n), total));
}

}  // namespace baton
