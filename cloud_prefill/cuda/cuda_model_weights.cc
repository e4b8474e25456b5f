#include "cloud_prefill/cuda/cuda_model_weights.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "cloud_prefill/cuda/cuda_check.h"
#include "common/gguf/ggml_quant.h"
#include "common/util/check.h"
#include "common/util/fp16.h"
#include "common/util/thread_pool.h"

namespace baton::cuda {
namespace {

// Host rows converted per copy: bounds the host staging memory.
constexpr int64_t kStagingElements = int64_t{16} << 20;

// Copies matrices stacked row-wise into `dst` (dtype [sum of rows, cols]),
// converting on the host through a staging buffer when the stored type is not
// already dtype.
absl::Status upload_stacked(const std::vector<const WeightMatrix*>& parts, CudaDType dtype, DeviceMemory& dst,
                            ThreadPool& pool, uint64_t& total_bytes) {
  const int64_t cols = parts.front()->cols;
  int64_t rows = 0;
  for (const WeightMatrix* w : parts) {
    BATON_CHECK(w->cols == cols, "stacked matrices must have equal widths");
    rows += w->rows;
  }
  const uint64_t bytes = static_cast<uint64_t>(rows) * cols * 2;
  BATON_RETURN_IF_ERROR(dst.reserve(bytes));
  total_bytes += bytes;
  const GgmlType native = dtype == CudaDType::kF16 ? GgmlType::kF16 : GgmlType::kBF16;
  std::vector<uint16_t> staging;
  uint8_t* out = dst.as<uint8_t>();
  for (const WeightMatrix* w : parts) {
    const uint64_t part_bytes = static_cast<uint64_t>(w->rows) * cols * 2;
    if (w->type == native) {
      BATON_CUDA_RETURN_IF_ERROR(cudaMemcpy(out, w->data, part_bytes, cudaMemcpyHostToDevice));
      out += part_bytes;
      continue;
    }
    const int64_t row_bytes = ggml_row_bytes(w->type, cols);
    const int64_t rows_per_copy = std::max<int64_t>(1, kStagingElements / cols);
    staging.resize(static_cast<size_t>(std::min(rows_per_copy, w->rows) * cols));
    for (int64_t r0 = 0; r0 < w->rows; r0 += rows_per_copy) {
      const int64_t n_rows = std::min(rows_per_copy, w->rows - r0);
      pool.parallel_for(n_rows, [&](int64_t begin, int64_t end) {
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = begin; r < end; ++r) {
          dequantize_row(w->type, static_cast<const uint8_t*>(w->data) + (r0 + r) * row_bytes, row.data(), cols);
          uint16_t* o = staging.data() + r * cols;
          for (int64_t c = 0; c < cols; ++c) {
            o[c] = dtype == CudaDType::kF16 ? fp32_to_fp16(row[c]) : fp32_to_bf16(row[c]);
          }
        }
      });
      const uint64_t copy_bytes = static_cast<uint64_t>(n_rows) * cols * 2;
      BATON_CUDA_RETURN_IF_ERROR(cudaMemcpy(out, staging.data(), copy_bytes, cudaMemcpyHostToDevice));
      out += copy_bytes;
    }
  }
  return absl::OkStatus();
}

absl::Status upload_f32(const std::vector<const std::vector<float>*>& parts, DeviceMemory& dst,
                        uint64_t& total_bytes) {
  std::vector<float> joined;
  for (const std::vector<float>* p : parts) joined.insert(joined.end(), p->begin(), p->end());
  const uint64_t bytes = joined.size() * sizeof(float);
  BATON_RETURN_IF_ERROR(dst.reserve(bytes));
  total_bytes += bytes;
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst.get(), joined.data(), bytes, cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

bool all_f16(const Model& model) {
  if (model.token_embd().type != GgmlType::kF16 || model.output().type != GgmlType::kF16) return false;
  for (int i = 0; i < model.spec().n_layer; ++i) {
    const LayerWeights& l = model.layer(i);
    for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      if (w->type != GgmlType::kF16) return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const CudaModelWeights>> CudaModelWeights::Upload(const Model& model,
                                                                                const std::string& dtype_name) {
  std::shared_ptr<CudaModelWeights> w(new CudaModelWeights(model));
  if (dtype_name == "auto") {
    w->dtype_ = all_f16(model) ? CudaDType::kF16 : CudaDType::kBF16;
  } else if (dtype_name == "f16") {
    w->dtype_ = CudaDType::kF16;
  } else if (dtype_name == "bf16") {
    w->dtype_ = CudaDType::kBF16;
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("compute type '%s' is not one of auto, f16, bf16", dtype_name));
  }
  const ModelSpec& s = model.spec();
  ThreadPool pool(resolve_thread_count(0));
  uint64_t& total = w->device_bytes_;
  BATON_RETURN_IF_ERROR(upload_stacked({&model.token_embd()}, w->dtype_, w->token_embd_, pool, total));
  if (!s.tied_embeddings) {
    BATON_RETURN_IF_ERROR(upload_stacked({&model.output()}, w->dtype_, w->output_storage_, pool, total));
    w->output_ = w->output_storage_.get();
  }
  BATON_RETURN_IF_ERROR(upload_f32({&model.output_norm()}, w->output_norm_, total));
  BATON_RETURN_IF_ERROR(upload_f32({&model.rope_inv_freq()}, w->rope_inv_freq_, total));
  w->layers_.resize(s.n_layer);
  for (int i = 0; i < s.n_layer; ++i) {
    const LayerWeights& l = model.layer(i);
    CudaLayerWeights& d = w->layers_[i];
    BATON_RETURN_IF_ERROR(upload_f32({&l.attn_norm}, d.attn_norm, total));
    BATON_RETURN_IF_ERROR(upload_stacked({&l.wq, &l.wk, &l.wv}, w->dtype_, d.wqkv, pool, total));
    if (s.qkv_bias) BATON_RETURN_IF_ERROR(upload_f32({&l.bq, &l.bk, &l.bv}, d.bqkv, total));
    BATON_RETURN_IF_ERROR(upload_stacked({&l.wo}, w->dtype_, d.wo, pool, total));
    BATON_RETURN_IF_ERROR(upload_f32({&l.ffn_norm}, d.ffn_norm, total));
    BATON_RETURN_IF_ERROR(upload_stacked({&l.w_gate, &l.w_up}, w->dtype_, d.w_gate_up, pool, total));
    BATON_RETURN_IF_ERROR(upload_stacked({&l.w_down}, w->dtype_, d.w_down, pool, total));
  }
  return std::shared_ptr<const CudaModelWeights>(std::move(w));
}

}  // namespace baton::cuda
