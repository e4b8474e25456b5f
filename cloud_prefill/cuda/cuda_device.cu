#include "cloud_prefill/cuda/cuda_check.h"
#include "cloud_prefill/cuda/cuda_device.h"

#include <dirent.h>
#include <unistd.h>

namespace baton::cuda {
namespace {

__global__ void saxpy_kernel(float a, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

}  // namespace

absl::StatusOr<CudaDeviceInfo> probe_devices() {
  CudaDeviceInfo info;
  cudaError_t err = cudaGetDeviceCount(&info.device_count);
  if (err != cudaSuccess || info.device_count == 0) {
    return absl::UnavailableError(absl::StrFormat(
        "no CUDA device: %s", err != cudaSuccess ? cudaGetErrorString(err) : "count is 0"));
  }
  cudaDeviceProp prop{};
  BATON_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, 0));
  info.name = prop.name;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.total_memory_bytes = prop.totalGlobalMem;
  return info;
}

namespace {

// The NVIDIA kernel driver lists each GPU under /proc/driver/nvidia/gpus and
// makes /dev/nvidia0; neither exists on a host without a GPU.
bool nvidia_kernel_device_present() {
  if (access("/dev/nvidia0", F_OK) == 0) return true;
  DIR* gpus = opendir("/proc/driver/nvidia/gpus");
  if (gpus == nullptr) return false;
  bool any = false;
  while (const dirent* entry = readdir(gpus)) {
    if (entry->d_name[0] != '.') any = true;
  }
  closedir(gpus);
  return any;
}

}  // namespace

GpuAvailability find_gpu() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  // Without a driver the runtime says "driver version is insufficient": on a
  // host with no GPU at all that is not a problem worth a warning.
  const bool no_device = err == cudaErrorNoDevice || (err == cudaSuccess && count == 0);
  if (no_device || (err != cudaSuccess && !nvidia_kernel_device_present())) {
    return GpuAvailability{true, absl::UnavailableError("no GPU found")};
  }
  return GpuAvailability{false, probe_devices()};
}

std::string describe_gpu(const GpuAvailability& gpu) {
  if (gpu.absent) return "no GPU found";
  if (!gpu.device.ok()) return absl::StrFormat("GPU not usable: %s", gpu.device.status().message());
  return absl::StrFormat("%s (%.1f GiB, sm_%d%d)", gpu.device->name,
                         static_cast<double>(gpu.device->total_memory_bytes) / (1024.0 * 1024 * 1024),
                         gpu.device->compute_major, gpu.device->compute_minor);
}

absl::Status saxpy_on_device(float a, const float* x, float* y, int n) {
  float* dx = nullptr;
  float* dy = nullptr;
  const size_t bytes = sizeof(float) * static_cast<size_t>(n);
  BATON_CUDA_RETURN_IF_ERROR(cudaMalloc(&dx, bytes));
  absl::Status status = [&]() -> absl::Status {
    BATON_CUDA_RETURN_IF_ERROR(cudaMalloc(&dy, bytes));
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice));
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice));
    saxpy_kernel<<<(n + 255) / 256, 256>>>(a, dx, dy, n);
    BATON_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpy(y, dy, bytes, cudaMemcpyDeviceToHost));
    return absl::OkStatus();
  }();
  cudaFree(dx);
  if (dy != nullptr) cudaFree(dy);
  return status;
}

}  // namespace baton::cuda
