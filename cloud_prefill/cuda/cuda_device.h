// CUDA device discovery and a self-check kernel, the first piece of the CUDA
// prefill backend. Every CUDA call is checked and turned into absl::Status.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace baton::cuda {

struct CudaDeviceInfo {
  int device_count = 0;
  std::string name;            // device 0
  int compute_major = 0;       // SM version of device 0
  int compute_minor = 0;
  size_t total_memory_bytes = 0;
};

// UNAVAILABLE (with the driver's reason) when no usable GPU is present.
absl::StatusOr<CudaDeviceInfo> probe_devices();

// Runs y[i] = a * x[i] + y[i] on device 0 and copies y back; used to prove
// the toolchain, the driver and our error checks end to end.
absl::Status saxpy_on_device(float a, const float* x, float* y, int n);

}  // namespace baton::cuda
