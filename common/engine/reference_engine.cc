#include "common/engine/reference_engine.h"

#include <algorithm>
#include <cmath>

#include "common/kv_cache/kv_cache.h"
#include "common/gguf/ggml_quant.h"
#include "common/util/check.h"

namespace baton {
namespace {

// y = W x for a weight of any stored type; W: [rows, cols], x: [cols].
std::vector<float> matvec(const WeightMatrix& w, const std::vector<float>& x) {
  BATON_CHECK(static_cast<int64_t>(x.size()) == w.cols);
  std::vector<float> y(w.rows);
  std::vector<float> row(w.cols);
  const int64_t row_bytes = ggml_row_bytes(w.type, w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + r * row_bytes, row.data(), w.cols);
    double sum = 0.0;
    for (int64_t c = 0; c < w.cols; ++c) sum += static_cast<double>(row[c]) * x[c];
    y[r] = static_cast<float>(sum);
  }
  return y;
}

std::vector<float> rmsnorm(const std::vector<float>& x, const std::vector<float>& weight, float eps) {
  double sum_sq = 0.0;
  for (float v : x) sum_sq += static_cast<double>(v) * v;
  const double scale = 1.0 / std::sqrt(sum_sq / x.size() + eps);
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = static_cast<float>(x[i] * scale * weight[i]);
  return y;
}

void add_bias(std::vector<float>& y, const std::vector<float>& bias) {
  for (size_t i = 0; i < bias.size(); ++i) y[i] += bias[i];
}

// QK-norm: each head of x ([n_heads * head_dim]) RMS-normalized on its own,
// times weight [head_dim].
void rmsnorm_each_head(std::vector<float>& x, int n_heads, int head_dim, const std::vector<float>& weight,
                       float eps) {
  for (int h = 0; h < n_heads; ++h) {
    std::vector<float> head(x.begin() + h * head_dim, x.begin() + (h + 1) * head_dim);
    head = rmsnorm(head, weight, eps);
    std::copy(head.begin(), head.end(), x.begin() + h * head_dim);
  }
}

// Rotates the first n_rot dims of each of n_heads heads at position pos; cos
// and sin are scaled by rope.attn_factor (LongRoPE; 1 otherwise).
void rope(std::vector<float>& x, int n_heads, const ModelSpec& s, const std::vector<float>& inv_freq,
          int64_t pos) {
  const int half = s.rope.n_rot / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x.data() + h * s.head_dim;
    for (int i = 0; i < half; ++i) {
      const double theta = static_cast<double>(pos) * inv_freq[i];
      const double c = std::cos(theta) * s.rope.attn_factor, sn = std::sin(theta) * s.rope.attn_factor;
      const int a = s.rope.type == RopeType::kNeox ? i : 2 * i;
      const int b = s.rope.type == RopeType::kNeox ? i + half : 2 * i + 1;
      const double x0 = v[a], x1 = v[b];
      v[a] = static_cast<float>(x0 * c - x1 * sn);
      v[b] = static_cast<float>(x0 * sn + x1 * c);
    }
  }
}

// Softmax attention of the query q ([n_head * head_dim]) over cached tokens
// [first, last] of one layer (k_cache / v_cache: [token][kv_dim]).
std::vector<float> attention(const ModelSpec& s, const std::vector<float>& q,
                             const std::vector<std::vector<float>>& k_cache,
                             const std::vector<std::vector<float>>& v_cache, int64_t first, int64_t last) {
  const int group = s.n_head / s.n_head_kv;
  std::vector<float> attn(s.q_dim(), 0.0f);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  for (int head = 0; head < s.n_head; ++head) {
    const int kv_head = head / group;
    std::vector<double> scores(last + 1 - first);
    double max_score = -INFINITY;
    for (int64_t j = first; j <= last; ++j) {
      double dot = 0.0;
      for (int i = 0; i < s.head_dim; ++i) {
        dot += static_cast<double>(q[head * s.head_dim + i]) * k_cache[j][kv_head * s.head_dim + i];
      }
      scores[j - first] = dot * scale;
      max_score = std::max(max_score, scores[j - first]);
    }
    double total = 0.0;
    for (double& sc : scores) total += (sc = std::exp(sc - max_score));
    for (int i = 0; i < s.head_dim; ++i) {
      double acc = 0.0;
      for (int64_t j = first; j <= last; ++j) acc += scores[j - first] / total * v_cache[j][kv_head * s.head_dim + i];
      attn[head * s.head_dim + i] = static_cast<float>(acc);
    }
  }
  return attn;
}

// gelu(gate) * up (tanh approximation, GeGLU) or silu(gate) * up (SwiGLU), in double.
void gated_activation(const ModelSpec& s, std::vector<float>& gate, const std::vector<float>& up) {
  const double sqrt_2_over_pi = std::sqrt(2.0 / M_PI);
  for (int i = 0; i < s.n_ff; ++i) {
    const double g = gate[i];
    const double act = s.gelu_ffn ? 0.5 * g * (1.0 + std::tanh(sqrt_2_over_pi * (g + 0.044715 * g * g * g)))
                                  : g / (1.0 + std::exp(-g));
    gate[i] = static_cast<float>(act * up[i]);
  }
}

}  // namespace

ReferenceEngine::ReferenceEngine(const Model& model)
    : model_(model),
      k_cache_(model.spec().n_layer),
      v_cache_(model.spec().n_layer) {}

void ReferenceEngine::reset() {
  n_tokens_ = 0;
  for (auto& layer : k_cache_) layer.clear();
  for (auto& layer : v_cache_) layer.clear();
}

std::vector<float> ReferenceEngine::forward(int32_t token) {
  const ModelSpec& s = model_.spec();
  BATON_CHECK(token >= 0 && token < s.n_vocab);
  const int64_t pos = n_tokens_;

  std::vector<float> x(s.n_embd);  // residual stream [n_embd]
  const WeightMatrix& embd = model_.token_embd();
  dequantize_row(embd.type,
                 static_cast<const uint8_t*>(embd.data) + token * ggml_row_bytes(embd.type, s.n_embd),
                 x.data(), s.n_embd);
  for (float& v : x) v *= s.embedding_scale;  // gemma3: sqrt(n_embd); else 1

  const KvGeometry geometry = kv_geometry_for(s);
  for (int il = 0; il < s.n_layer; ++il) {
    const LayerWeights& l = model_.layer(il);
    std::vector<float> h = rmsnorm(x, l.attn_norm, s.norm_eps);
    std::vector<float> q = matvec(l.wq, h);  // [n_head * head_dim]
    std::vector<float> k = matvec(l.wk, h);  // [n_head_kv * head_dim]
    std::vector<float> v = matvec(l.wv, h);  // [n_head_kv * head_dim]
    add_bias(q, l.bq);
    add_bias(k, l.bk);
    add_bias(v, l.bv);
    if (s.qk_norm) {
      rmsnorm_each_head(q, s.n_head, s.head_dim, l.attn_q_norm, s.norm_eps);
      rmsnorm_each_head(k, s.n_head_kv, s.head_dim, l.attn_k_norm, s.norm_eps);
    }
    rope(q, s.n_head, s, model_.rope_inv_freq(il), pos);
    rope(k, s.n_head_kv, s, model_.rope_inv_freq(il), pos);
    for (float& e : q) e *= s.query_scale;
    k_cache_[il].push_back(k);
    v_cache_[il].push_back(v);

    // A sliding-window layer of window W sees keys (pos - W, pos].
    const int32_t window = geometry.window(il);
    const int64_t first = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
    std::vector<float> o = matvec(l.wo, attention(s, q, k_cache_[il], v_cache_[il], first, pos));
    if (s.post_norms) o = rmsnorm(o, l.post_attn_norm, s.norm_eps);
    for (int i = 0; i < s.n_embd; ++i) x[i] += o[i];

    h = rmsnorm(x, l.ffn_norm, s.norm_eps);
    std::vector<float> gate = matvec(l.w_gate, h);  // [n_ff]
    std::vector<float> up = matvec(l.w_up, h);      // [n_ff]
    gated_activation(s, gate, up);
    std::vector<float> down = matvec(l.w_down, gate);
    if (s.post_norms) down = rmsnorm(down, l.post_ffn_norm, s.norm_eps);
    for (int i = 0; i < s.n_embd; ++i) x[i] += down[i];
  }
  ++n_tokens_;
  return matvec(model_.output(), rmsnorm(x, model_.output_norm(), s.norm_eps));
}

}  // namespace baton
