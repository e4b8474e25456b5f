#include "common/kv_cache/f32_kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "common/cpu/ops.h"
#include "common/cpu/vec.h"
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
  const int64_t q_dim = g.q_dim();
  const int group = g.n_head / g.n_head_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(g.head_dim));
  const int32_t window = g.window(layer);  // 0: full attention
  // One task per (query token, head); scores live in a per-task buffer.
  auto run = [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(pos + n));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t t = task / g.n_head;
      const int h = static_cast<int>(task % g.n_head);
      const int kv_h = h / group;
      // Causal: keys [first, pos + t]; a sliding-window layer sees the last `window` of them.
      const int64_t first = window > 0 ? std::max<int64_t>(0, pos + t - window + 1) : 0;
      const int64_t n_ctx = pos + t + 1 - first;
      const float* qh = q + t * q_dim + int64_t{h} * g.head_dim;
      for (int64_t j = 0; j < n_ctx; ++j) {
        scores[j] = dot_f32(qh, k_row(layer, first + j) + int64_t{kv_h} * g.head_dim, g.head_dim) * scale;
      }
      softmax_inplace(scores.data(), n_ctx);
      float* oh = out + t * q_dim + int64_t{h} * g.head_dim;
      std::memset(oh, 0, sizeof(float) * g.head_dim);
      for (int64_t j = 0; j < n_ctx; ++j) {
        axpy_f32(scores[j], v_row(layer, first + j) + int64_t{kv_h} * g.head_dim, oh, g.head_dim);
      }
    }
  };
  const int64_t n_tasks = n * g.n_head;
  if (pool != nullptr) {
    pool->parallel_for(n_tasks, run);
  } else {
    run(0, n_tasks);
  }
}

void F32KvCache::set_size(int64_t n) {
  BATON_CHECK(n >= 0 && n <= capacity_);
  size_ = n;
}

}  // namespace baton
