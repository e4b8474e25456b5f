// PrefillBackend: the narrow interface between the Prefill service and the
// hardware that runs the forward pass (CPU engine today, CUDA in
// cloud_prefill/cuda/). The service owns the host KV (an F32KvCache holding
// the whole prompt: the source of the KV stream, the prefix cache and the
// session cache); a backend computes the KV of new tokens into it, one layer
// at a time over the whole chunk, so the service can encode and send layer L
// while the backend computes layer L+1.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace baton {

class F32KvCache;
class Model;

// Called after layer `layer`'s K and V of every token of the chunk are in the
// host cache (rows [kv.size(), kv.size() + n) of that layer; kv.size() itself
// only moves when the whole chunk is done). A non-OK return (cancellation)
// stops the prefill, which returns that status with the cache's size unchanged.
using LayerDoneFn = std::function<absl::Status(int layer)>;

class PrefillBackend {
 public:
  virtual ~PrefillBackend() = default;

  // e.g. "cpu:avx512 x16", "cuda:NVIDIA H200 (sm_90)".
  virtual std::string name() const = 0;

  // A new request starts: forget any device-side copy of an earlier
  // request's KV. The next prefill() reads rows [0, kv.size()) of its cache
  // from the host (they may come from the prefix or session cache).
  virtual void begin_sequence() = 0;

  // Computes `tokens` at positions [kv.size(), kv.size() + n) layer by layer:
  // after layer L's K/V of all n tokens are in `kv`, calls layer_done(L)
  // (on the calling thread). Commits the chunk (kv.set_size) at the end. On
  // error (bad token, capacity, layer_done's status) kv.size() is unchanged.
  // Called by one thread at a time per backend instance.
  virtual absl::Status prefill(std::span<const int32_t> tokens, F32KvCache& kv, const LayerDoneFn& layer_done) = 0;

  // As prefill() without the per-layer callback, plus the logits of the
  // last token ([n_vocab], through the output norm and projection): the
  // decode steps behind early tokens (PrefillRequest.early_tokens).
  virtual absl::Status decode(std::span<const int32_t> tokens, F32KvCache& kv, std::vector<float>* last_logits) = 0;
};

// Makes one backend per service worker; all share `model` (read-only, owned
// by the service, outlives every backend). worker_index is 0..max_running-1.
using PrefillBackendFactory =
    std::function<absl::StatusOr<std::unique_ptr<PrefillBackend>>(const Model& model, int worker_index)>;

}  // namespace baton
