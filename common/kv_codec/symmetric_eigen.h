// Eigen-decomposition of a real symmetric matrix by the cyclic Jacobi method,
// in double: the KV calibration's PCA (kv_calibration.h) of head covariances
// (head_dim up to 1024). Jacobi is slow for large n (O(n^3) per sweep, a few
// sweeps) but simple, accurate to the last bits on the small eigenvalues the
// codec's bit allocation reads, and deterministic.
#pragma once

#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace baton {

struct SymmetricEigen {
  std::vector<double> values;   // [n], descending (ties keep the solver's order)
  std::vector<double> vectors;  // [n * n]; row i is the unit eigenvector of values[i]
  int sweeps = 0;               // Jacobi sweeps it took
};

// Eigenvalues and eigenvectors of `matrix` ([n * n], row-major, symmetric:
// only the upper triangle is read). Converged when the off-diagonal Frobenius
// norm is below 1e-12 of the whole matrix's. Each vector's sign is fixed so
// that its largest-magnitude entry (the first one on ties) is positive, so
// the same matrix always gives the same rows. InvalidArgument for n < 1,
// a size that is not n * n or a non-finite entry; Internal when 100 sweeps
// do not converge.
absl::StatusOr<SymmetricEigen> symmetric_eigen(std::span<const double> matrix, int n);

}  // namespace baton
