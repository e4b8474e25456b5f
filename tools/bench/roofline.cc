#include "roofline.h"

#include <algorithm>
#include <map>

namespace baton::cli {

double attention_flops(const KvGeometry& geometry, int64_t first, int64_t n) {
  double keys_seen = 0;  // summed over layers and tokens
  for (int l = 0; l < geometry.n_layer; ++l) {
    const int64_t window = geometry.window(l);
    for (int64_t p = first; p < first + n; ++p) {
      keys_seen += static_cast<double>(window > 0 ? std::min<int64_t>(p + 1, window) : p + 1);
    }
  }
  return 4.0 * geometry.n_head * geometry.head_dim * keys_seen;
}

double kv_bytes_read_per_token(const KvGeometry& geometry, double attended_tokens, double bytes_per_cached_token) {
  if (geometry.n_layer == 0) return 0;
  double layer_tokens = 0;
  for (int l = 0; l < geometry.n_layer; ++l) {
    layer_tokens += geometry.window(l) > 0 ? std::min<double>(attended_tokens, geometry.window(l)) : attended_tokens;
  }
  return layer_tokens / geometry.n_layer * bytes_per_cached_token;
}

MatmulPeak matmul_peak_for(GgmlType weights, const CpuPeak& peak, FloatMatmul float_matmul) {
  MatmulPeak chosen;
  chosen.weights = std::string(ggml_type_name(weights));
  if (float_weights(weights)) {
    const bool bf16 = float_matmul == FloatMatmul::kBf16 && peak.bf16 && bf16_matmul_available();
    chosen.kind = bf16 ? "bf16" : "f32";
    chosen.figure = bf16 ? peak.bf16 : peak.f32;
  } else {
    chosen.kind = "int8";
    chosen.figure = peak.int8;
  }
  return chosen;
}

bool float_weights(GgmlType type) {
  return type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16;
}

GgmlType dominant_weight_type(const Model& model) {
  std::map<GgmlType, int64_t> elements;
  auto count = [&](const WeightMatrix& w) { elements[w.type] += w.rows * w.cols; };
  for (int i = 0; i < model.spec().n_layer; ++i) {
    const LayerWeights& l = model.layer(i);
    for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) count(*w);
  }
  count(model.output());
  return std::max_element(elements.begin(), elements.end(),
                          [](const auto& a, const auto& b) { return a.second < b.second; })
      ->first;
}

}  // namespace baton::cli
