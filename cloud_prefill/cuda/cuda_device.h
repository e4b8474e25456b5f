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

// What this machine offers the CUDA backend. `absent`: no NVIDIA GPU at all
// (no device, or no kernel driver: a CPU-only host with the CUDA toolkit), the
// normal case, nothing to warn about. Otherwise `device` is the GPU, or why the
// one that is there cannot be used (a driver older than the runtime, ...).
struct GpuAvailability {
  bool absent = false;
  absl::StatusOr<CudaDeviceInfo> device;
};
GpuAvailability find_gpu();

// One line for --version: "NVIDIA H200 (139.8 GiB, sm_90)", "no GPU found" or
// "GPU not usable: REASON".
std::string describe_gpu(const GpuAvailability& gpu);

// Runs y[i] = a * x[i] + y[i] on device 0 and copies y back; used to prove
// the toolchain, the driver and our error checks end to end.
absl::Status saxpy_on_device(float a, const float* x, float* y, int n);

}  // namespace baton::cuda
