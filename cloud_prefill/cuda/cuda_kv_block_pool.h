// CudaKvBlockPool: the device memory of every sequence's KV, one allocation
// cut into fixed-size blocks (paged_kv.h), shared by the backends of one
// model. Sequences take blocks as they grow and give them back when a request
// ends, so memory is reused without fragmentation. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "cloud_prefill/cuda/device_memory.h"
#include "cloud_prefill/cuda/paged_kv.h"

namespace baton::cuda {

class CudaKvBlockPool {
 public:
  // n_blocks blocks of `layout` (pool, block_table unset) on the current device.
  static absl::StatusOr<std::unique_ptr<CudaKvBlockPool>> Create(const PagedKvView& layout, int64_t n_blocks);

  // Appends `count` free block indices to `blocks`; RESOURCE_EXHAUSTED naming
  // the numbers (and taking nothing) when fewer are free.
  absl::Status allocate(int64_t count, std::vector<int32_t>& blocks);
  // Returns blocks to the pool; `blocks` is cleared.
  void release(std::vector<int32_t>& blocks);

  // The layout with the pool pointer set (block_table still unset).
  const PagedKvView& layout() const { return layout_; }
  int64_t n_blocks() const { return n_blocks_; }
  int64_t free_blocks() const;
  uint64_t bytes() const { return memory_.bytes(); }

 private:
  CudaKvBlockPool() = default;

  PagedKvView layout_;
  int64_t n_blocks_ = 0;
  DeviceMemory memory_;               // [n_blocks][layout.block_elements()] of layout.dtype
  mutable std::mutex mu_;
  std::vector<int32_t> free_;          // guarded by mu_; a stack of free block indices
};

}  // namespace baton::cuda
