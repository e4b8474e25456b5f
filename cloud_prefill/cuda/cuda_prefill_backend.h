// The CUDA PrefillBackend (cloud_prefill/prefill_backend.h): prefill of a
// chunk layer by layer on one GPU, with each layer's K/V copied back to the
// service's host F32KvCache while the next layer computes.
//
// Per layer, over sub-batches of at most max_batch_tokens tokens:
//   RMSNorm -> QKV GEMM (cuBLAS, 16-bit in, f32 out) -> bias + RoPE, K/V to
//   the paged device store and to an f32 staging buffer -> causal attention
//   over the device KV of all earlier positions (earlier chunks included) ->
//   O GEMM added into the residual -> RMSNorm -> gate|up GEMM -> SwiGLU ->
//   down GEMM added into the residual.
// After the layer: an event on the compute stream; the copy stream waits for
// it and copies the layer's K/V staging rows into pinned host buffers; the
// host thread waits only for that copy, stores the rows into the F32KvCache
// and calls layer_done(L) while the GPU works on layer L + 1.
// pipeline_depth staging slots: layer L uses slot L % depth, so the GPU runs
// up to depth - 1 layers ahead of the host. The host's copy from pinned memory
// into the cache runs on host_copy_threads threads (a 32K-token chunk of a 3B
// model is 256 MB of K/V per layer).
//
// Several backends (one per service worker) share the uploaded weights and
// the device KV pool through CudaSharedModel; each has its own streams,
// cuBLAS handle, scratch and block table, so requests of different workers
// interleave on the GPU.
//
// Device KV: a sequence's K/V stay on the device between chunks (the next
// chunk attends to them there); after begin_sequence(), rows the host cache
// already holds (the service's prefix or session cache) are uploaded once.
// Rows the host rolled back (kv.size() smaller than before) are dropped.
//
// In the service: PrefillServiceOptions::backend_factory =
// *make_cuda_prefill_backend_factory(options). Chunks should be large (the
// GPU needs thousands of tokens per GEMM; layer-by-layer delivery already
// overlaps transfer with compute within a chunk).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cloud_prefill/cuda/cuda_kv_block_pool.h"
#include "cloud_prefill/cuda/cuda_model_weights.h"
#include "cloud_prefill/prefill_backend.h"

namespace baton::cuda {

struct CudaBackendOptions {
  int device = 0;                       // CUDA device index
  std::string compute_type = "auto";    // auto | f16 | bf16 (cuda_model_weights.h)
  // pipelined (mma.sync, K/V tiles double-buffered by cp.async, 128 queries
  // a block) | flash (its first version: synchronous tile loads, 64 queries)
  // | wmma (WMMA, S/P/O in shared memory) | simple (CUDA cores, any head_dim
  // <= 256); the first three take head_dim 16/32/64/128.
  std::string attention = "pipelined";
  int max_batch_tokens = 4096;          // tokens per GEMM sub-batch: sizes the scratch
  int kv_block_tokens = 256;            // positions per device KV block
  int64_t kv_pool_tokens = 0;           // device KV capacity, tokens; 0: kv_pool_fraction of free memory
  double kv_pool_fraction = 0.4;        // of the device memory free after the weights
  int pipeline_depth = 3;               // K/V staging slots (>= 1): layers the GPU may run ahead
  int host_copy_threads = 0;            // threads copying K/V rows into the host cache; 0: min(8, cores)
  // Times the GPU's part of each prefill with CUDA events (the whole
  // compute stream, and the attention kernels alone): last_timings().
  bool profile = false;
};

// Where the last prefill's time went. The host figures are always
// measured; the GPU ones only with CudaBackendOptions::profile.
struct CudaPrefillTimings {
  double gpu_ms = 0;         // compute stream: embedding to the last layer (waits on staging slots included)
  double attention_ms = 0;   // the attention kernels' share of gpu_ms
  double host_wait_ms = 0;   // host thread waiting for layers' K/V copies to land in pinned memory
  double host_store_ms = 0;  // pinned rows -> host cache (host_copy_threads)
};

// What every backend of one model shares: weights and the device KV pool.
struct CudaSharedModel {
  std::shared_ptr<const CudaModelWeights> weights;
  std::shared_ptr<CudaKvBlockPool> kv_pool;
  std::string device_name;  // "NVIDIA H200 (sm_90)"

  // Uploads `model` and allocates the pool on options.device.
  static absl::StatusOr<std::shared_ptr<CudaSharedModel>> Create(const Model& model,
                                                                 const CudaBackendOptions& options);
};

class CudaPrefillBackend final : public PrefillBackend {
 public:
  static absl::StatusOr<std::unique_ptr<CudaPrefillBackend>> Create(std::shared_ptr<CudaSharedModel> shared,
                                                                    const CudaBackendOptions& options);
  ~CudaPrefillBackend() override;

  std::string name() const override;
  void begin_sequence() override;
  absl::Status prefill(std::span<const int32_t> tokens, F32KvCache& kv, const LayerDoneFn& layer_done) override {
    return prefill_with_logits(tokens, kv, layer_done, nullptr);
  }
  absl::Status decode(std::span<const int32_t> tokens, F32KvCache& kv, std::vector<float>* last_logits) override {
    return prefill_with_logits(tokens, kv, {}, last_logits);
  }

  // prefill(), and when last_logits != nullptr the logits of the chunk's last
  // token: f32 [n_vocab] (output RMSNorm and projection on the device).
  absl::Status prefill_with_logits(std::span<const int32_t> tokens, F32KvCache& kv, const LayerDoneFn& layer_done,
                                   std::vector<float>* last_logits);

  // Positions of the current sequence whose K/V are on the device.
  int64_t device_tokens() const { return device_tokens_; }
  const CudaPrefillTimings& last_timings() const { return timings_; }
  const CudaSharedModel& shared() const { return *shared_; }

 private:
  struct Impl;
  CudaPrefillBackend(std::shared_ptr<CudaSharedModel> shared, const CudaBackendOptions& options);

  std::shared_ptr<CudaSharedModel> shared_;
  CudaBackendOptions options_;
  std::unique_ptr<Impl> impl_;
  int64_t device_tokens_ = 0;
  CudaPrefillTimings timings_;
};

// Convenience for tools and tests: shared state for `model` plus one backend.
absl::StatusOr<std::unique_ptr<CudaPrefillBackend>> make_cuda_prefill_backend(const Model& model,
                                                                             const CudaBackendOptions& options);

// The service's factory: probes the device now (UNAVAILABLE with the driver's
// reason when there is no usable GPU); the first call uploads the model, and
// every backend it makes shares those weights and the KV pool. All calls must
// pass the same model (FAILED_PRECONDITION otherwise).
absl::StatusOr<PrefillBackendFactory> make_cuda_prefill_backend_factory(const CudaBackendOptions& options);

}  // namespace baton::cuda
