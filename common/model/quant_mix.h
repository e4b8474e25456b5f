// Which type each tensor gets in `baton model quantize`: either one type for
// every weight matrix ("pure", Baton's q4_0/q8_0/f16/bf16/f32), or llama.cpp's
// K-quant mixes (Q4_K_M, Q5_K_M, Q6_K) with its per-tensor rules
// (llama_tensor_get_type, llama.cpp as of early 2025, no importance matrix):
//   - output.weight (token_embd.weight when the output is tied to it): Q6_K,
//     or Q8_0 when its rows are not a multiple of the base type's block;
//   - Q4_K_M / Q5_K_M: attn_v and ffn_down Q6_K on the "more bits" layers
//     (the first and last eighth of the layers and every third in between),
//     attn_qkv (fused) Q5_K / Q6_K; attn_v of a 70B llama (80 layers, GQA)
//     Q5_K instead of Q4_K;
//   - a row that is not a multiple of 256 falls back to Q4_K -> Q5_0,
//     Q5_K -> Q5_1, Q6_K -> Q8_0 (F16 if not a multiple of 32 either).
// Tensors llama.cpp does not quantize (1-D, norms, names not ending in
// "weight") keep their type. The mixture-of-experts rules do not apply: Baton
// runs no MoE architecture.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf/ggml_types.h"

namespace baton {

enum class QuantMix {
  kPure,       // every weight matrix in the base type (1-D tensors f32)
  kLlamaQ4_K_M,
  kLlamaQ5_K_M,
  kLlamaQ6_K,
};

// A `--type` value of `baton model quantize`.
struct QuantRecipe {
  GgmlType base = GgmlType::kQ4_0;  // type of the plain weight matrices
  QuantMix mix = QuantMix::kPure;
};

// "q4_0", "q8_0", "f16", "bf16", "f32", "q4_k_m", "q5_k_m", "q6_k" (any case).
absl::StatusOr<QuantRecipe> parse_quant_recipe(std::string_view name);
// The accepted names, comma separated, for --help and errors.
std::string quant_recipe_names();
// general.file_type as llama.cpp writes it (llama_ftype): 2 q4_0, 7 q8_0,
// 15 Q4_K_M, 17 Q5_K_M, 18 Q6_K, 1 f16, 32 bf16, 0 f32.
uint32_t quant_recipe_file_type(const QuantRecipe& recipe);

struct QuantTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the row length
  GgmlType type;              // type in the input file
};

// The output type of every tensor (same order as `tensors`). `n_layer`,
// `n_head`, `n_head_kv` and `arch` feed llama.cpp's layer rules;
// `output_type` overrides output.weight (and a tied token_embd.weight) like
// llama-quantize's --output-tensor-type.
struct QuantModelShape {
  std::string arch;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
};
absl::StatusOr<std::vector<GgmlType>> plan_tensor_types(const std::vector<QuantTensorInfo>& tensors,
                                                        const QuantRecipe& recipe, const QuantModelShape& shape,
                                                        std::optional<GgmlType> output_type = std::nullopt);

// "39 q4_K, 5 q6_K, 13 f32": tensors per type, most frequent first (ties by
// name), as `baton model info` prints them.
std::string tensor_type_counts(const std::vector<GgmlType>& types);

}  // namespace baton
