// KvCache that keeps K and V in F32: the reference layout and the default
// for local prefill until the quantized stores arrive.
#pragma once

#include <vector>

#include "common/kv_cache/kv_cache.h"
#include "common/util/huge_page_buffer.h"

namespace baton {

class F32KvCache final : public KvCache {
 public:
  F32KvCache(const KvGeometry& geometry, int64_t capacity_tokens);

  const KvGeometry& geometry() const override { return geometry_; }
  int64_t capacity() const override { return capacity_; }
  int64_t size() const override { return size_; }
  absl::Status store(int layer, int64_t pos, int64_t n, const float* k, const float* v) override;
  void attend(int layer, int64_t pos, int64_t n, const float* q, float* out,
              ThreadPool* pool) const override;
  void set_size(int64_t n) override;

  // Row of K / V for (layer, token): [n_head_kv * head_dim].
  const float* k_row(int layer, int64_t token) const;
  const float* v_row(int layer, int64_t token) const;

 private:
  KvGeometry geometry_;
  int64_t capacity_;
  int64_t size_ = 0;
  // Streamed whole per token, as the quantized store's planes: PlaneAllocator.
  std::vector<float, PlaneAllocator<float>> k_;  // [n_layer, capacity, kv_dim]
  std::vector<float, PlaneAllocator<float>> v_;  // [n_layer, capacity, kv_dim]
};

}  // namespace baton
