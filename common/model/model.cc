#include "common/model/model.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/gguf/ggml_quant.h"
#include "common/util/check.h"
#include "common/util/huge_page_buffer.h"

namespace baton {
namespace {

std::string dims_string(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

absl::StatusOr<const GgufTensorInfo*> find_shaped(const GgufFile& file, const std::string& name,
                                                  const std::vector<int64_t>& dims) {
  const GgufTensorInfo* t = file.find_tensor(name);
  if (t == nullptr) return absl::InvalidArgumentError(absl::StrFormat("tensor '%s' is missing", name));
  if (t->dims != dims) {
    return absl::InvalidArgumentError(absl::StrFormat("tensor '%s' has dims %s, expected %s", name,
                                                      dims_string(t->dims), dims_string(dims)));
  }
  return t;
}

// A 2-D weight [rows, cols] in ggml dims order {cols, rows}.
absl::StatusOr<WeightMatrix> matrix(const GgufFile& file, const std::string& name, int64_t rows,
                                    int64_t cols) {
  BATON_ASSIGN_OR_RETURN(const GgufTensorInfo* t, find_shaped(file, name, {cols, rows}));
  return WeightMatrix{t->type, t->data, rows, cols};
}

absl::StatusOr<std::vector<float>> vector_f32(const GgufFile& file, const std::string& name, int64_t n) {
  BATON_ASSIGN_OR_RETURN(const GgufTensorInfo* t, find_shaped(file, name, {n}));
  if (ggml_block_elements(t->type) != 1) {  // block-quantized
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor '%s' is %s; 1-D tensors must be f32, f16 or bf16", name, ggml_type_name(t->type)));
  }
  std::vector<float> out(n);
  dequantize_row(t->type, t->data, out.data(), n);
  return out;
}

// Rows [row_begin, row_begin + n_rows) of `w`: a zero-copy view (rows are contiguous).
WeightMatrix weight_rows(const WeightMatrix& w, int64_t row_begin, int64_t n_rows) {
  BATON_CHECK(row_begin >= 0 && n_rows >= 0 && row_begin + n_rows <= w.rows);
  const int64_t row_bytes = ggml_row_bytes(w.type, w.cols);
  return WeightMatrix{w.type, static_cast<const uint8_t*>(w.data) + row_begin * row_bytes, n_rows, w.cols};
}

// The per-pair frequency divisors in use: rope_freqs (llama3) or the chosen
// LongRoPE set; empty when the model has none.
absl::StatusOr<std::vector<float>> rope_freq_factors(const GgufFile& f, const RopeSpec& rope) {
  const int64_t n_pairs = rope.n_rot / 2;
  if (rope.has_freq_factors) return vector_f32(f, "rope_freqs.weight", n_pairs);
  if (rope.long_rope == LongRopeFactors::kLong) return vector_f32(f, "rope_factors_long.weight", n_pairs);
  if (rope.long_rope == LongRopeFactors::kShort) return vector_f32(f, "rope_factors_short.weight", n_pairs);
  return std::vector<float>{};
}

// Q, K and V of layer prefix `b`: separate tensors, or views of attn_qkv (phi3).
absl::Status bind_qkv(const GgufFile& f, const ModelSpec& s, const std::string& b, LayerWeights& l) {
  if (f.find_tensor(b + "attn_qkv.weight") == nullptr) {
    BATON_ASSIGN_OR_RETURN(l.wq, matrix(f, b + "attn_q.weight", s.q_dim(), s.n_embd));
    BATON_ASSIGN_OR_RETURN(l.wk, matrix(f, b + "attn_k.weight", s.kv_dim(), s.n_embd));
    BATON_ASSIGN_OR_RETURN(l.wv, matrix(f, b + "attn_v.weight", s.kv_dim(), s.n_embd));
    return absl::OkStatus();
  }
  BATON_ASSIGN_OR_RETURN(WeightMatrix qkv, matrix(f, b + "attn_qkv.weight", s.q_dim() + 2 * s.kv_dim(), s.n_embd));
  l.wq = weight_rows(qkv, 0, s.q_dim());
  l.wk = weight_rows(qkv, s.q_dim(), s.kv_dim());
  l.wv = weight_rows(qkv, s.q_dim() + s.kv_dim(), s.kv_dim());
  return absl::OkStatus();
}

// Gate and up projections: separate tensors, or the gate rows then the up
// rows of one ffn_up [2 n_ff] when there is no ffn_gate (phi3).
absl::Status bind_gate_up(const GgufFile& f, const ModelSpec& s, const std::string& b, LayerWeights& l) {
  if (f.find_tensor(b + "ffn_gate.weight") != nullptr) {
    BATON_ASSIGN_OR_RETURN(l.w_gate, matrix(f, b + "ffn_gate.weight", s.n_ff, s.n_embd));
    BATON_ASSIGN_OR_RETURN(l.w_up, matrix(f, b + "ffn_up.weight", s.n_ff, s.n_embd));
    return absl::OkStatus();
  }
  BATON_ASSIGN_OR_RETURN(WeightMatrix gate_up, matrix(f, b + "ffn_up.weight", 2 * int64_t{s.n_ff}, s.n_embd));
  l.w_gate = weight_rows(gate_up, 0, s.n_ff);
  l.w_up = weight_rows(gate_up, s.n_ff, s.n_ff);
  return absl::OkStatus();
}

}  // namespace

std::vector<float> compute_rope_inv_freq(const RopeSpec& rope, const std::vector<float>& freq_factors) {
  const int n_pairs = rope.n_rot / 2;
  std::vector<float> inv_freq(n_pairs);
  const double linear = rope.scaling_type == "linear" ? 1.0 / rope.scaling_factor : 1.0;
  for (int i = 0; i < n_pairs; ++i) {
    double f = std::pow(static_cast<double>(rope.freq_base), -2.0 * i / rope.n_rot) * linear;
    if (!freq_factors.empty()) f /= freq_factors[i];
    inv_freq[i] = static_cast<float>(f);
  }
  return inv_freq;
}

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& path) {
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, FromFile(std::move(file)));
  model->path_ = path;
  return model;
}

absl::StatusOr<std::unique_ptr<Model>> Model::FromFile(std::unique_ptr<GgufFile> file) {
  std::unique_ptr<Model> model(new Model());
  model->file_ = std::move(file);
  BATON_ASSIGN_OR_RETURN(model->spec_, model_spec_from_gguf(*model->file_));
  BATON_RETURN_IF_ERROR(model->bind());
  return model;
}

absl::Status Model::bind() {
  const GgufFile& f = *file_;
  const ModelSpec& s = spec_;
  for (const GgufTensorInfo& t : f.tensors()) {
    if (t.dims.size() == 2 && t.dims[0] % 32 != 0 &&
        (t.type == GgmlType::kQ4_0 || t.type == GgmlType::kQ8_0)) {
      return absl::InvalidArgumentError(absl::StrFormat("tensor '%s' row length %d is not a multiple of 32",
                                                        t.name, t.dims[0]));
    }
  }
  BATON_ASSIGN_OR_RETURN(token_embd_, matrix(f, "token_embd.weight", s.n_vocab, s.n_embd));
  if (s.tied_embeddings) {
    output_ = token_embd_;
  } else {
    BATON_ASSIGN_OR_RETURN(output_, matrix(f, "output.weight", s.n_vocab, s.n_embd));
  }
  BATON_ASSIGN_OR_RETURN(output_norm_, vector_f32(f, "output_norm.weight", s.n_embd));
  BATON_ASSIGN_OR_RETURN(std::vector<float> freq_factors, rope_freq_factors(f, s.rope));
  rope_inv_freq_ = compute_rope_inv_freq(s.rope, freq_factors);
  if (s.rope_swa_freq_base > 0) {
    RopeSpec local = s.rope;
    local.freq_base = s.rope_swa_freq_base;
    local.scaling_type = "none";
    rope_swa_inv_freq_ = compute_rope_inv_freq(local, {});
    layer_uses_swa_rope_.resize(s.n_layer);
    for (int i = 0; i < s.n_layer; ++i) layer_uses_swa_rope_[i] = !s.layer_window.empty() && s.layer_window[i] > 0;
  }

  layers_.resize(s.n_layer);
  for (int i = 0; i < s.n_layer; ++i) {
    const std::string b = absl::StrFormat("blk.%d.", i);
    LayerWeights& l = layers_[i];
    BATON_ASSIGN_OR_RETURN(l.attn_norm, vector_f32(f, b + "attn_norm.weight", s.n_embd));
    BATON_RETURN_IF_ERROR(bind_qkv(f, s, b, l));
    if (s.qkv_bias) {
      BATON_ASSIGN_OR_RETURN(l.bq, vector_f32(f, b + "attn_q.bias", s.q_dim()));
      BATON_ASSIGN_OR_RETURN(l.bk, vector_f32(f, b + "attn_k.bias", s.kv_dim()));
      BATON_ASSIGN_OR_RETURN(l.bv, vector_f32(f, b + "attn_v.bias", s.kv_dim()));
    }
    if (s.qk_norm) {
      BATON_ASSIGN_OR_RETURN(l.attn_q_norm, vector_f32(f, b + "attn_q_norm.weight", s.head_dim));
      BATON_ASSIGN_OR_RETURN(l.attn_k_norm, vector_f32(f, b + "attn_k_norm.weight", s.head_dim));
    }
    BATON_ASSIGN_OR_RETURN(l.wo, matrix(f, b + "attn_output.weight", s.n_embd, s.q_dim()));
    BATON_ASSIGN_OR_RETURN(l.ffn_norm, vector_f32(f, b + "ffn_norm.weight", s.n_embd));
    BATON_RETURN_IF_ERROR(bind_gate_up(f, s, b, l));
    BATON_ASSIGN_OR_RETURN(l.w_down, matrix(f, b + "ffn_down.weight", s.n_embd, s.n_ff));
    if (s.post_norms) {
      BATON_ASSIGN_OR_RETURN(l.post_attn_norm, vector_f32(f, b + "post_attention_norm.weight", s.n_embd));
      BATON_ASSIGN_OR_RETURN(l.post_ffn_norm, vector_f32(f, b + "post_ffw_norm.weight", s.n_embd));
    }
  }
  return absl::OkStatus();
}

void Model::pack_for_cpu(ThreadPool* pool) const {
  std::call_once(pack_once_, [&] {
    std::vector<WeightMatrix*> matrices;
    for (LayerWeights& l : layers_) {
      for (WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) matrices.push_back(w);
    }
    matrices.push_back(&output_);
    int64_t total = 0;
    for (const WeightMatrix* w : matrices) total += packed_weight_bytes(w->type, w->rows, w->cols);
    if (total == 0) return;
    // On huge pages: decode streams the whole copy per token.
    packed_ = allocate_huge_pages(total);
    BATON_CHECK(packed_ != nullptr, "pack_for_cpu: out of memory for the packed weights");
    uint8_t* const buffer = packed_.get();
    packed_bytes_ = total;
    int64_t offset = 0;
    for (WeightMatrix* w : matrices) {
      const int64_t bytes = packed_weight_bytes(w->type, w->rows, w->cols);
      if (bytes == 0) continue;
      pack_weight_matrix(*w, buffer + offset, pool);
      w->packed = buffer + offset;
      offset += bytes;
    }
    // The GGUF copies of what was packed: only the token embedding's rows
    // (tied output) are still read, a few per token, from the file.
    for (const WeightMatrix* w : matrices) {
      if (w->packed != nullptr) file_->release_pages(w->data, static_cast<uint64_t>(ggml_row_bytes(w->type, w->cols) * w->rows));
    }
  });
}

uint64_t Model::weight_bytes() const {
  uint64_t total = 0;
  for (const GgufTensorInfo& t : file_->tensors()) total += t.n_bytes;
  return total;
}

int64_t Model::parameter_count() const {
  int64_t total = 0;
  for (const GgufTensorInfo& t : file_->tensors()) total += t.n_elements();
  return total;
}

}  // namespace baton
