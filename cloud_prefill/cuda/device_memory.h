// RAII owners of device memory (cudaMalloc) and pinned host memory
// (cudaHostAlloc). Sized in bytes; reserve() only grows, so scratch buffers
// are allocated once per size and reused across calls.
#pragma once

#include <cstddef>
#include <utility>

#include "cloud_prefill/cuda/cuda_check.h"

namespace baton::cuda {

template <bool kPinned>
class CudaMemory {
 public:
  CudaMemory() = default;
  ~CudaMemory() { release(); }
  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;
  CudaMemory(CudaMemory&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  CudaMemory& operator=(CudaMemory&& other) noexcept {
    if (this != &other) {
      release();
      ptr_ = std::exchange(other.ptr_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }

  // Makes room for at least `bytes` (contents are lost when it grows).
  absl::Status reserve(size_t bytes) {
    if (bytes <= bytes_) return absl::OkStatus();
    release();
    if (kPinned) {
      BATON_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&ptr_, bytes, cudaHostAllocDefault));
    } else {
      BATON_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr_, bytes));
    }
    bytes_ = bytes;
    return absl::OkStatus();
  }

  void release() {
    if (ptr_ != nullptr) {
      if (kPinned) {
        cudaFreeHost(ptr_);
      } else {
        cudaFree(ptr_);
      }
    }
    ptr_ = nullptr;
    bytes_ = 0;
  }

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }
  bool empty() const { return ptr_ == nullptr; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

using DeviceMemory = CudaMemory<false>;
using PinnedMemory = CudaMemory<true>;

}  // namespace baton::cuda
