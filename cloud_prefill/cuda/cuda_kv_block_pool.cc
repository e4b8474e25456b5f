#include "cloud_prefill/cuda/cuda_kv_block_pool.h"

#include "absl/strings/str_format.h"
#include "common/util/check.h"

namespace baton::cuda {

absl::StatusOr<std::unique_ptr<CudaKvBlockPool>> CudaKvBlockPool::Create(const PagedKvView& layout,
                                                                        int64_t n_blocks) {
  if (n_blocks < 1 || n_blocks > int64_t{1} << 30) {
    return absl::InvalidArgumentError(absl::StrFormat("KV pool of %d blocks; need 1 .. 2^30", n_blocks));
  }
  if (layout.dtype == CudaDType::kF32 || layout.block_tokens < 1 || layout.n_layer < 1 || layout.kv_dim < 1) {
    return absl::InvalidArgumentError("KV pool layout needs a 16-bit type and positive sizes");
  }
  std::unique_ptr<CudaKvBlockPool> pool(new CudaKvBlockPool());
  pool->layout_ = layout;
  pool->n_blocks_ = n_blocks;
  const uint64_t bytes = static_cast<uint64_t>(n_blocks) * layout.block_elements() * dtype_bytes(layout.dtype);
  if (absl::Status st = pool->memory_.reserve(bytes); !st.ok()) {
    return absl::ResourceExhaustedError(absl::StrFormat("cannot allocate the device KV pool of %d blocks (%d MiB): %s",
                                                        n_blocks, bytes >> 20, st.message()));
  }
  pool->layout_.pool = pool->memory_.get();
  pool->layout_.block_table = nullptr;
  pool->free_.reserve(static_cast<size_t>(n_blocks));
  for (int64_t i = n_blocks - 1; i >= 0; --i) pool->free_.push_back(static_cast<int32_t>(i));
  return pool;
}

absl::Status CudaKvBlockPool::allocate(int64_t count, std::vector<int32_t>& blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  if (count > static_cast<int64_t>(free_.size())) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "device KV pool: %d blocks of %d tokens needed, %d of %d free", count, layout_.block_tokens,
        free_.size(), n_blocks_));
  }
  for (int64_t i = 0; i < count; ++i) {
    blocks.push_back(free_.back());
    free_.pop_back();
  }
  return absl::OkStatus();
}

void CudaKvBlockPool::release(std::vector<int32_t>& blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int32_t b : blocks) {
    BATON_CHECK(b >= 0 && b < n_blocks_, "block index outside the pool");
    free_.push_back(b);
  }
  BATON_CHECK(static_cast<int64_t>(free_.size()) <= n_blocks_, "a block was released twice");
  blocks.clear();
}

int64_t CudaKvBlockPool::free_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(free_.size());
}

}  // namespace baton::cuda
