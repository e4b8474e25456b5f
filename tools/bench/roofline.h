// The work a prefill or decode does, counted the way the CPU benches divide
// it by a measured peak (cpu_peak.h) or bandwidth (read_bandwidth.h): pure
// arithmetic over shapes, so the tests can check every count by hand.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/cpu/matmul.h"
#include "common/kv_codec/kv_geometry.h"
#include "common/model/model.h"
#include "cpu_peak.h"

namespace baton::cli {

// Attention work of a prefill of positions [first, first + n): per layer and
// query token, QK^T and PV over the keys it sees, 2 MACs x head_dim each per
// query head: 4 * n_head * head_dim * (sum over tokens of keys seen). A token
// at position p sees p + 1 keys, or min(p + 1, W) on a sliding-window layer
// of window W (windows respected).
double attention_flops(const KvGeometry& geometry, int64_t first, int64_t n);

// KV bytes a decode step reads when the context holds `attended_tokens`
// tokens: per layer, the tokens it attends over (min(attended, W) on a
// sliding-window layer) x that layer's share of `bytes_per_cached_token`
// (all layers, K and V, codes plus scales: the store's own bytes per
// element).
double kv_bytes_read_per_token(const KvGeometry& geometry, double attended_tokens, double bytes_per_cached_token);

// Which measured peak a model's matmuls are held against: the weights' type
// that holds most elements of the layer matrices and the output projection
// decides. Quantized (Q4_0, Q8_0, K-quants, ...): the int8 dot-product peak
// (the kernels quantize activations to 8 bits and multiply integers); float
// weights (F16, BF16, F32): the F32 FMA peak on the exact path (the kernels
// widen them to F32), the BF16 dot-product peak with FloatMatmul::kBf16
// where the CPU has one. kind: "int8", "bf16", "f32"; figure empty when the
// level measured none (scalar).
struct MatmulPeak {
  std::string kind;
  std::string weights;  // the deciding weight type's name, e.g. "q4_0"
  std::optional<PeakFigure> figure;
};
MatmulPeak matmul_peak_for(GgmlType weights, const CpuPeak& peak, FloatMatmul float_matmul = FloatMatmul::kExact);
// The type holding most elements of the layer matrices and the output
// projection (a Q4_K_M file: q4_k; Q4_0 with a Q6_K output: q4_0).
GgmlType dominant_weight_type(const Model& model);

// F16 / BF16 / F32: weights the float matmuls run (the F32 FMA or BF16
// peak; the cloud's micro-batch), not the int8 ones.
bool float_weights(GgmlType type);

}  // namespace baton::cli
