#include "cloud_prefill/cuda/cuda_prefill_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cloud_prefill/cuda/cuda_arch_support.h"
#include "cloud_prefill/cuda/cuda_check.h"
#include "cloud_prefill/cuda/cuda_device.h"
#include "cloud_prefill/cuda/cuda_gemm.h"
#include "cloud_prefill/cuda/cuda_ops.h"
#include "cloud_prefill/cuda/device_memory.h"
#include "common/engine/engine.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/util/check.h"
#include "common/util/log.h"
#include "common/util/thread_pool.h"

namespace baton::cuda {
namespace {

using AttentionLaunch = cudaError_t (*)(const AttentionParams&, const void*, const PagedKvView&, void*, cudaStream_t);

// The attention kernels by CudaBackendOptions::attention (cuda_ops.h): the
// names Create accepts and the kernel prefill launches, from one list.
struct NamedAttention {
  const char* name;
  AttentionLaunch launch;
};
constexpr NamedAttention kAttentionKernels[] = {{"pipelined", launch_flash_attention_pipelined},
                                                {"flash", launch_flash_attention},
                                                {"wmma", launch_flash_attention_wmma},
                                                {"simple", launch_attention_simple}};

AttentionLaunch attention_launch(const std::string& name) {
  for (const NamedAttention& k : kAttentionKernels) {
    if (name == k.name) return k.launch;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<std::shared_ptr<CudaSharedModel>> CudaSharedModel::Create(const Model& model,
                                                                         const CudaBackendOptions& options) {
  // Before any device call: an architecture the kernels do not implement is
  // refused with the way out (the CPU backend).
  BATON_RETURN_IF_ERROR(check_cuda_supports_model(model.spec()));
  if (options.kv_block_tokens < 1 || options.kv_block_tokens > 65536) {
    return absl::InvalidArgumentError(
        absl::StrFormat("kv_block_tokens is %d; must be in [1, 65536]", options.kv_block_tokens));
  }
  int device_count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&device_count); err != cudaSuccess || device_count == 0) {
    return absl::UnavailableError(absl::StrFormat(
        "no CUDA device: %s", err != cudaSuccess ? cudaGetErrorString(err) : "count is 0"));
  }
  if (options.device < 0 || options.device >= device_count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CUDA device %d requested; this machine has %d", options.device, device_count));
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  cudaDeviceProp prop{};
  BATON_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, options.device));
  auto shared = std::make_shared<CudaSharedModel>();
  shared->device_name = absl::StrFormat("%s (sm_%d%d)", prop.name, prop.major, prop.minor);
  BATON_ASSIGN_OR_RETURN(shared->weights, CudaModelWeights::Upload(model, options.compute_type));

  const ModelSpec& s = model.spec();
  PagedKvView layout;
  layout.dtype = shared->weights->dtype();
  layout.block_tokens = options.kv_block_tokens;
  layout.n_layer = s.n_layer;
  layout.kv_dim = static_cast<int>(s.kv_dim());
  const uint64_t block_bytes = static_cast<uint64_t>(layout.block_elements()) * dtype_bytes(layout.dtype);
  int64_t n_blocks = 0;
  if (options.kv_pool_tokens > 0) {
    n_blocks = (options.kv_pool_tokens + options.kv_block_tokens - 1) / options.kv_block_tokens;
  } else {
    size_t free_bytes = 0, total_bytes = 0;
    BATON_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
    n_blocks = static_cast<int64_t>(static_cast<double>(free_bytes) * options.kv_pool_fraction / block_bytes);
    if (n_blocks < 1) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "device KV pool: %.2f of %d MiB free leaves no block of %d KiB", options.kv_pool_fraction,
          free_bytes >> 20, block_bytes >> 10));
    }
  }
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<CudaKvBlockPool> pool, CudaKvBlockPool::Create(layout, n_blocks));
  shared->kv_pool = std::move(pool);
  BATON_INFO("CUDA model on %s: %s weights %d MiB, KV pool %d blocks x %d tokens (%d MiB)",
             shared->device_name.c_str(), dtype_name(layout.dtype),
             static_cast<int>(shared->weights->device_bytes() >> 20), static_cast<int>(n_blocks),
             layout.block_tokens, static_cast<int>(shared->kv_pool->bytes() >> 20));
  return shared;
}

// Streams, handle, events and scratch of one backend.
struct CudaPrefillBackend::Impl {
  cudaStream_t compute = nullptr;  // kernels and GEMMs
  cudaStream_t copy = nullptr;     // K/V device -> host
  cublasHandle_t cublas = nullptr;
  std::vector<cudaEvent_t> layer_computed;  // [depth]: layer L's K/V staging rows are written
  std::vector<cudaEvent_t> copy_done;       // [depth]: layer L's rows are in pinned memory
  // options.profile: timing events, [0] start, [1] end, then a begin/end
  // pair per attention launch; grown on demand.
  std::vector<cudaEvent_t> timing;

  std::unique_ptr<ThreadPool> host_pool;  // copies pinned K/V rows into the host cache

  std::vector<int32_t> blocks;  // the sequence's pool blocks, in position order
  DeviceMemory block_table;     // int32 [blocks.size()]

  // Scratch; n = chunk tokens, m = min(n, max_batch_tokens).
  DeviceMemory x;          // f32 [n, n_embd] residual stream
  DeviceMemory kv_stage;   // f32 [depth][2][n, kv_dim] K/V of a layer for the host
  PinnedMemory kv_pinned;  // f32 [depth][2][n, kv_dim]
  DeviceMemory tokens;     // int32 [n]
  PinnedMemory tokens_pinned;
  DeviceMemory h;          // dtype [m, n_embd] normed input
  DeviceMemory qkv;        // f32 [m, q_dim + 2 kv_dim]
  DeviceMemory q;          // dtype [m, q_dim]
  DeviceMemory attn;       // dtype [m, q_dim]
  DeviceMemory gate_up;    // dtype [m, 2 n_ff] (16-bit: the largest activation, read once by SwiGLU)
  DeviceMemory act;        // dtype [m, n_ff]
  DeviceMemory logits;     // f32 [n_vocab]

  // Waits for everything queued (after an error; errors here are secondary).
  void drain() {
    if (compute != nullptr) cudaStreamSynchronize(compute);
    if (copy != nullptr) cudaStreamSynchronize(copy);
  }
};

CudaPrefillBackend::CudaPrefillBackend(std::shared_ptr<CudaSharedModel> shared, const CudaBackendOptions& options)
    : shared_(std::move(shared)), options_(options), impl_(std::make_unique<Impl>()) {}

CudaPrefillBackend::~CudaPrefillBackend() {
  if (cudaSetDevice(options_.device) == cudaSuccess) impl_->drain();
  shared_->kv_pool->release(impl_->blocks);
  for (cudaEvent_t e : impl_->layer_computed) cudaEventDestroy(e);
  for (cudaEvent_t e : impl_->copy_done) cudaEventDestroy(e);
  for (cudaEvent_t e : impl_->timing) cudaEventDestroy(e);
  if (impl_->cublas != nullptr) cublasDestroy(impl_->cublas);
  if (impl_->compute != nullptr) cudaStreamDestroy(impl_->compute);
  if (impl_->copy != nullptr) cudaStreamDestroy(impl_->copy);
}

absl::StatusOr<std::unique_ptr<CudaPrefillBackend>> CudaPrefillBackend::Create(
    std::shared_ptr<CudaSharedModel> shared, const CudaBackendOptions& options) {
  if (options.pipeline_depth < 1 || options.pipeline_depth > 8) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pipeline_depth is %d; must be in [1, 8]", options.pipeline_depth));
  }
  if (options.max_batch_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_batch_tokens is %d; must be >= 1", options.max_batch_tokens));
  }
  if (attention_launch(options.attention) == nullptr) {
    std::string names;
    for (const NamedAttention& k : kAttentionKernels) absl::StrAppend(&names, names.empty() ? "" : ", ", k.name);
    return absl::InvalidArgumentError(
        absl::StrFormat("attention '%s' is not one of %s", options.attention, names));
  }
  const int head_dim = shared->weights->model().spec().head_dim;
  if (head_dim > 256) {
    return absl::InvalidArgumentError(absl::StrFormat("head_dim %d exceeds the CUDA kernels' 256", head_dim));
  }
  std::unique_ptr<CudaPrefillBackend> backend(new CudaPrefillBackend(std::move(shared), options));
  if (options.attention != "simple" && !flash_attention_supports(head_dim)) {
    BATON_WARN("head_dim %d has no flash attention kernel; using the simple one", head_dim);
    backend->options_.attention = "simple";
  }
  Impl& impl = *backend->impl_;
  impl.host_pool = std::make_unique<ThreadPool>(
      options.host_copy_threads > 0 ? options.host_copy_threads : std::min(8, resolve_thread_count(0)));
  BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&impl.compute, cudaStreamNonBlocking));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&impl.copy, cudaStreamNonBlocking));
  BATON_CUBLAS_RETURN_IF_ERROR(cublasCreate(&impl.cublas));
  BATON_CUBLAS_RETURN_IF_ERROR(cublasSetStream(impl.cublas, impl.compute));
  for (int i = 0; i < options.pipeline_depth; ++i) {
    cudaEvent_t computed = nullptr, copied = nullptr;
    BATON_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&computed, cudaEventDisableTiming));
    impl.layer_computed.push_back(computed);
    BATON_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    impl.copy_done.push_back(copied);
  }
  return backend;
}

std::string CudaPrefillBackend::name() const {
  return absl::StrFormat("cuda:%s %s %s-attention", shared_->device_name, dtype_name(shared_->weights->dtype()),
                         options_.attention);
}

void CudaPrefillBackend::begin_sequence() {
  if (cudaSetDevice(options_.device) == cudaSuccess) impl_->drain();
  shared_->kv_pool->release(impl_->blocks);
  device_tokens_ = 0;
}

absl::Status CudaPrefillBackend::prefill_with_logits(std::span<const int32_t> tokens, F32KvCache& kv,
                                                     const LayerDoneFn& layer_done,
                                                     std::vector<float>* last_logits) {
  const CudaModelWeights& w = *shared_->weights;
  const ModelSpec& s = w.model().spec();
  const CudaDType dtype = w.dtype();
  Impl& impl = *impl_;
  if (tokens.empty()) return absl::InvalidArgumentError("prefill needs at least one token");
  BATON_RETURN_IF_ERROR(check_tokens(tokens, s.n_vocab));
  const KvGeometry& g = kv.geometry();
  if (g.n_layer != s.n_layer || g.n_head != s.n_head || g.n_head_kv != s.n_head_kv || g.head_dim != s.head_dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV cache geometry (%d layers, %d heads, %d kv heads, head_dim %d) does not match the model's "
        "(%d, %d, %d, %d)",
        g.n_layer, g.n_head, g.n_head_kv, g.head_dim, s.n_layer, s.n_head, s.n_head_kv, s.head_dim));
  }
  const int64_t start = kv.size();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (start + n > kv.capacity()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "prompt of %d tokens after %d cached does not fit the KV cache of %d tokens", n, start, kv.capacity()));
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  const int64_t d = s.n_embd, q_dim = s.q_dim(), kv_dim = s.kv_dim(), n_ff = s.n_ff;
  const int depth = options_.pipeline_depth;
  const int64_t m_max = std::min<int64_t>(n, options_.max_batch_tokens);
  const size_t tb = dtype_bytes(dtype);

  // Device KV of the sequence: drop rows the host rolled back, take blocks for
  // the new ones, then bring rows the host has and the device lacks (a prefix
  // from the service's caches after begin_sequence).
  device_tokens_ = std::min(device_tokens_, start);
  CudaKvBlockPool& pool = *shared_->kv_pool;
  const int64_t bt = pool.layout().block_tokens;
  const int64_t blocks_needed = (start + n + bt - 1) / bt;
  if (static_cast<int64_t>(impl.blocks.size()) < blocks_needed) {
    BATON_RETURN_IF_ERROR(pool.allocate(blocks_needed - static_cast<int64_t>(impl.blocks.size()), impl.blocks));
    BATON_RETURN_IF_ERROR(impl.block_table.reserve(impl.blocks.size() * sizeof(int32_t)));
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(impl.block_table.get(), impl.blocks.data(),
                                               impl.blocks.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                               impl.compute));
  }
  PagedKvView view = pool.layout();
  view.block_table = impl.block_table.as<int32_t>();

  // Scratch (grows only).
  const int64_t stage_rows = std::max(n, std::min<int64_t>(start - device_tokens_, options_.max_batch_tokens));
  BATON_RETURN_IF_ERROR(impl.x.reserve(sizeof(float) * n * d));
  BATON_RETURN_IF_ERROR(impl.kv_stage.reserve(sizeof(float) * depth * 2 * stage_rows * kv_dim));
  BATON_RETURN_IF_ERROR(impl.kv_pinned.reserve(sizeof(float) * depth * 2 * n * kv_dim));
  BATON_RETURN_IF_ERROR(impl.tokens.reserve(sizeof(int32_t) * n));
  BATON_RETURN_IF_ERROR(impl.tokens_pinned.reserve(sizeof(int32_t) * n));
  BATON_RETURN_IF_ERROR(impl.h.reserve(tb * m_max * d));
  BATON_RETURN_IF_ERROR(impl.qkv.reserve(sizeof(float) * m_max * (q_dim + 2 * kv_dim)));
  BATON_RETURN_IF_ERROR(impl.q.reserve(tb * m_max * q_dim));
  BATON_RETURN_IF_ERROR(impl.attn.reserve(tb * m_max * q_dim));
  BATON_RETURN_IF_ERROR(impl.gate_up.reserve(tb * m_max * 2 * n_ff));
  BATON_RETURN_IF_ERROR(impl.act.reserve(tb * m_max * n_ff));
  // Layer L's K and V rows for the host: slot L % depth.
  auto stage = [&](int slot, int kind) { return impl.kv_stage.as<float>() + (slot * 2 + kind) * n * kv_dim; };
  auto pinned = [&](int slot, int kind) { return impl.kv_pinned.as<float>() + (slot * 2 + kind) * n * kv_dim; };

  if (device_tokens_ < start) {
    // Through the staging buffer as [2][stage_rows, kv_dim] (K, V) pieces.
    float* up_k = impl.kv_stage.as<float>();
    float* up_v = up_k + stage_rows * kv_dim;
    for (int layer = 0; layer < s.n_layer; ++layer) {
      for (int64_t p0 = device_tokens_; p0 < start; p0 += stage_rows) {
        const int64_t rows = std::min(stage_rows, start - p0);
        const size_t bytes = sizeof(float) * rows * kv_dim;
        BATON_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(up_k, kv.k_row(layer, p0), bytes, cudaMemcpyHostToDevice, impl.compute));
        BATON_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(up_v, kv.v_row(layer, p0), bytes, cudaMemcpyHostToDevice, impl.compute));
        BATON_CUDA_RETURN_IF_ERROR(launch_kv_store(up_k, up_v, rows, p0, layer, view, impl.compute));
      }
    }
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl.compute));
    device_tokens_ = start;
  }

  // Timing events (profile): start, end, and a pair per attention launch.
  timings_ = CudaPrefillTimings{};
  const int64_t n_batches = (n + m_max - 1) / m_max;
  const size_t n_timing = options_.profile ? static_cast<size_t>(2 + 2 * s.n_layer * n_batches) : 0;
  while (impl.timing.size() < n_timing) {
    cudaEvent_t e = nullptr;
    BATON_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
    impl.timing.push_back(e);
  }
  if (options_.profile) BATON_CUDA_RETURN_IF_ERROR(cudaEventRecord(impl.timing[0], impl.compute));

  std::copy(tokens.begin(), tokens.end(), impl.tokens_pinned.as<int32_t>());
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(impl.tokens.get(), impl.tokens_pinned.get(), sizeof(int32_t) * n,
                                             cudaMemcpyHostToDevice, impl.compute));
  float* x = impl.x.as<float>();
  BATON_CUDA_RETURN_IF_ERROR(
      launch_embedding_gather(dtype, w.token_embd(), impl.tokens.as<int32_t>(), n, static_cast<int>(d), x, impl.compute));

  const AttentionLaunch attention_kernel = attention_launch(options_.attention);  // checked by Create
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  // Queues layer `layer` on the compute stream and its K/V copy on the copy stream.
  auto enqueue_layer = [&](int layer) -> absl::Status {
    const int slot = layer % depth;
    const CudaLayerWeights& lw = w.layer(layer);
    // Staging slot reuse: the copy of layer - depth must be done reading it.
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(impl.compute, impl.copy_done[slot], 0));
    for (int64_t b = 0; b < n; b += m_max) {
      const int64_t m = std::min(m_max, n - b);
      float* x_b = x + b * d;
      BATON_CUDA_RETURN_IF_ERROR(launch_rmsnorm(x_b, lw.attn_norm.as<float>(), m, static_cast<int>(d), s.norm_eps,
                                                dtype, impl.h.get(), impl.compute));
      BATON_RETURN_IF_ERROR(gemm_xwt(impl.cublas, dtype, lw.wqkv.get(), q_dim + 2 * kv_dim, d, impl.h.get(), m,
                                     CudaDType::kF32, impl.qkv.get(), 0.0f));
      QkvRopeParams rope;
      rope.n_tokens = m;
      rope.pos0 = start + b;
      rope.n_head = s.n_head;
      rope.n_head_kv = s.n_head_kv;
      rope.head_dim = s.head_dim;
      rope.n_rot = s.rope.n_rot;
      rope.neox = s.rope.type == RopeType::kNeox;
      rope.inv_freq = w.rope_inv_freq();
      rope.bias = lw.bqkv.empty() ? nullptr : lw.bqkv.as<float>();
      rope.layer = layer;
      BATON_CUDA_RETURN_IF_ERROR(launch_qkv_bias_rope(rope, impl.qkv.as<float>(), dtype, impl.q.get(),
                                                      stage(slot, 0) + b * kv_dim, stage(slot, 1) + b * kv_dim,
                                                      view, impl.compute));
      AttentionParams attn;
      attn.n_queries = m;
      attn.pos0 = start + b;
      attn.n_head = s.n_head;
      attn.n_head_kv = s.n_head_kv;
      attn.head_dim = s.head_dim;
      attn.layer = layer;
      attn.scale = scale;
      const size_t pair = 2 + 2 * static_cast<size_t>(layer * n_batches + b / m_max);
      if (options_.profile) BATON_CUDA_RETURN_IF_ERROR(cudaEventRecord(impl.timing[pair], impl.compute));
      BATON_CUDA_RETURN_IF_ERROR(attention_kernel(attn, impl.q.get(), view, impl.attn.get(), impl.compute));
      if (options_.profile) BATON_CUDA_RETURN_IF_ERROR(cudaEventRecord(impl.timing[pair + 1], impl.compute));
      BATON_RETURN_IF_ERROR(
          gemm_xwt(impl.cublas, dtype, lw.wo.get(), d, q_dim, impl.attn.get(), m, CudaDType::kF32, x_b, 1.0f));
      BATON_CUDA_RETURN_IF_ERROR(launch_rmsnorm(x_b, lw.ffn_norm.as<float>(), m, static_cast<int>(d), s.norm_eps,
                                                dtype, impl.h.get(), impl.compute));
      BATON_RETURN_IF_ERROR(gemm_xwt(impl.cublas, dtype, lw.w_gate_up.get(), 2 * n_ff, d, impl.h.get(), m, dtype,
                                     impl.gate_up.get(), 0.0f));
      BATON_CUDA_RETURN_IF_ERROR(
          launch_swiglu(dtype, impl.gate_up.get(), m, static_cast<int>(n_ff), dtype, impl.act.get(), impl.compute));
      BATON_RETURN_IF_ERROR(
          gemm_xwt(impl.cublas, dtype, lw.w_down.get(), d, n_ff, impl.act.get(), m, CudaDType::kF32, x_b, 1.0f));
    }
    BATON_CUDA_RETURN_IF_ERROR(cudaEventRecord(impl.layer_computed[slot], impl.compute));
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(impl.copy, impl.layer_computed[slot], 0));
    const size_t bytes = sizeof(float) * n * kv_dim;
    BATON_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(pinned(slot, 0), stage(slot, 0), bytes, cudaMemcpyDeviceToHost, impl.copy));
    BATON_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(pinned(slot, 1), stage(slot, 1), bytes, cudaMemcpyDeviceToHost, impl.copy));
    BATON_CUDA_RETURN_IF_ERROR(cudaEventRecord(impl.copy_done[slot], impl.copy));
    return absl::OkStatus();
  };
  // Hands layer `layer`'s rows to the host cache once its copy is done.
  // The pinned -> cache copy runs on host_pool in pieces of rows: one thread
  // copies ~10 GB/s, well below what the GPU produces for big chunks.
  constexpr int64_t kRowsPerPiece = 256;
  const int64_t n_pieces = (n + kRowsPerPiece - 1) / kRowsPerPiece;
  auto consume_layer = [&](int layer) -> absl::Status {
    const int slot = layer % depth;
    const auto wait_start = std::chrono::steady_clock::now();
    BATON_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(impl.copy_done[slot]));
    const auto store_start = std::chrono::steady_clock::now();
    impl.host_pool->parallel_for(n_pieces, [&](int64_t begin, int64_t end) {
      for (int64_t piece = begin; piece < end; ++piece) {
        const int64_t r0 = piece * kRowsPerPiece;
        const int64_t rows = std::min(kRowsPerPiece, n - r0);
        // Cannot fail: the capacity was checked above.
        const absl::Status st = kv.store(layer, start + r0, rows, pinned(slot, 0) + r0 * kv_dim,
                                         pinned(slot, 1) + r0 * kv_dim);
        BATON_CHECK(st.ok(), "F32KvCache::store failed after the capacity check");
      }
    });
    const auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    timings_.host_wait_ms += ms(wait_start, store_start);
    timings_.host_store_ms += ms(store_start, std::chrono::steady_clock::now());
    return layer_done ? layer_done(layer) : absl::OkStatus();
  };

  absl::Status status = [&]() -> absl::Status {
    int next_to_consume = 0;
    for (int layer = 0; layer < s.n_layer; ++layer) {
      BATON_RETURN_IF_ERROR(enqueue_layer(layer));
      // All slots in flight: the host takes the oldest before queuing more.
      if (layer - next_to_consume + 1 >= depth) BATON_RETURN_IF_ERROR(consume_layer(next_to_consume++));
    }
    if (options_.profile) BATON_CUDA_RETURN_IF_ERROR(cudaEventRecord(impl.timing[1], impl.compute));
    while (next_to_consume < s.n_layer) BATON_RETURN_IF_ERROR(consume_layer(next_to_consume++));
    if (last_logits != nullptr) {
      BATON_RETURN_IF_ERROR(impl.logits.reserve(sizeof(float) * s.n_vocab));
      BATON_CUDA_RETURN_IF_ERROR(launch_rmsnorm(x + (n - 1) * d, w.output_norm(), 1, static_cast<int>(d), s.norm_eps,
                                                dtype, impl.h.get(), impl.compute));
      BATON_RETURN_IF_ERROR(gemm_xwt(impl.cublas, dtype, w.output(), s.n_vocab, d, impl.h.get(), 1, CudaDType::kF32,
                                     impl.logits.get(), 0.0f));
      last_logits->resize(s.n_vocab);
      BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(last_logits->data(), impl.logits.get(), sizeof(float) * s.n_vocab,
                                                 cudaMemcpyDeviceToHost, impl.compute));
    }
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl.compute));
    if (options_.profile) {
      float elapsed = 0;
      BATON_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&elapsed, impl.timing[0], impl.timing[1]));
      timings_.gpu_ms = elapsed;
      for (size_t i = 2; i < n_timing; i += 2) {
        BATON_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&elapsed, impl.timing[i], impl.timing[i + 1]));
        timings_.attention_ms += elapsed;
      }
    }
    return absl::OkStatus();
  }();
  if (!status.ok()) {
    impl.drain();
    return status;
  }
  kv.set_size(start + n);
  device_tokens_ = start + n;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CudaPrefillBackend>> make_cuda_prefill_backend(const Model& model,
                                                                             const CudaBackendOptions& options) {
  BATON_ASSIGN_OR_RETURN(std::shared_ptr<CudaSharedModel> shared, CudaSharedModel::Create(model, options));
  return CudaPrefillBackend::Create(std::move(shared), options);
}

absl::StatusOr<PrefillBackendFactory> make_cuda_prefill_backend_factory(const CudaBackendOptions& options) {
  absl::StatusOr<CudaDeviceInfo> info = probe_devices();
  if (!info.ok()) return info.status();
  struct State {
    std::mutex mu;
    std::shared_ptr<CudaSharedModel> shared;  // guarded by mu; made by the first call
  };
  auto state = std::make_shared<State>();
  return PrefillBackendFactory(
      [options, state](const Model& model, int worker_index) -> absl::StatusOr<std::unique_ptr<PrefillBackend>> {
        std::shared_ptr<CudaSharedModel> shared;
        {
          std::lock_guard<std::mutex> lock(state->mu);
          if (state->shared == nullptr) {
            BATON_ASSIGN_OR_RETURN(state->shared, CudaSharedModel::Create(model, options));
          } else if (&state->shared->weights->model() != &model) {
            return absl::FailedPreconditionError(
                "the CUDA backend factory was already used for another model; make one factory per model");
          }
          shared = state->shared;
        }
        BATON_ASSIGN_OR_RETURN(std::unique_ptr<CudaPrefillBackend> backend,
                               CudaPrefillBackend::Create(std::move(shared), options));
        BATON_DEBUG("CUDA backend for worker %d: %s", worker_index, backend->name().c_str());
        return std::unique_ptr<PrefillBackend>(std::move(backend));
      });
}

}  // namespace baton::cuda
