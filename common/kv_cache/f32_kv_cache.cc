#include "common/kv_cache/f32_kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "common/kv_cache/tiled_attention.h"
#include "common/util/check.h"
#include "common/util/thread_pool.h"

namespace baton {

F32KvCache::F32KvCache(const KvGeometry& geometry, int64_t capacity_tokens)
    : geometry_(geometry),
      capacity_(capacity_tokens),
      k_(static_cast<size_t>(geometry.n_layer * capacity_tokens * geometry.kv_dim())),
      v_(k_.size()) {}

const float* F32KvCache::k_row(int layer, int64_t token) const {
  return k_.data() + (layer * capacity_ + token) * geometry_.kv_dim();
}

const float* F32KvCache::v_row(int layer, int64_t token) const {
  return v_.data() + (layer * capacity_ + token) * geometry_.kv_dim();
}

absl::Status F32KvCache::store(int layer, int64_t pos, int64_t n, const float* k, const float* v) {
  BATON_CHECK(layer >= 0 && layer < geometry_.n_layer && pos >= 0 && n >= 0);
  if (pos + n > capacity_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "KV cache holds %d tokens; positions [%d, %d) do not fit", capacity_, pos, pos + n));
  }
  if (n == 0) return absl::OkStatus();  // k and v may be null then (memcpy from null is undefined)
  const int64_t kv_dim = geometry_.kv_dim();
  const size_t offset = static_cast<size_t>((layer * capacity_ + pos) * kv_dim);
  std::memcpy(k_.data() + offset, k, sizeof(float) * n * kv_dim);
  std::memcpy(v_.data() + offset, v, sizeof(float) * n * kv_dim);
  return absl::OkStatus();
}

void F32KvCache::attend(int layer, int64_t pos, int64_t n, const float* q, float* out,
                        ThreadPool* pool) const {
  const KvGeometry& g = geometry_;
  const int64_t row_bytes = g.kv_dim() * static_cast<int64_t>(sizeof(float));
  const int64_t head_bytes = int64_t{g.head_dim} * static_cast<int64_t>(sizeof(float));
  AttentionRows rows;
  rows.k = kv_kernels_impl::KvHeadRows{32, reinterpret_cast<const uint8_t*>(k_row(layer, 0)), row_bytes, nullptr,
                                       nullptr, 0, 0};
  rows.v = kv_kernels_impl::KvHeadRows{32, reinterpret_cast<const uint8_t*>(v_row(layer, 0)), row_bytes, nullptr,
                                       nullptr, 0, 0};
  rows.k_head_code_bytes = rows.v_head_code_bytes = head_bytes;
  attend_tiled(g, g.window(layer), 1.0f / std::sqrt(static_cast<float>(g.head_dim)), rows, pos, n, q, out, pool);
}

void F32KvCache::set_size(int64_t n) {
  BATON_CHECK(n >= 0 && n <= capacity_);
  size_ = n;
}

}  // namespace baton
