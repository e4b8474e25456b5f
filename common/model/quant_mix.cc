#include "common/model/quant_mix.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"

namespace baton {
namespace {

struct RecipeName {
  const char* name;
  QuantRecipe recipe;
  uint32_t file_type;  // llama_ftype
};

constexpr RecipeName kRecipes[] = {
    {"q4_0", {GgmlType::kQ4_0, QuantMix::kPure}, 2},
    {"q8_0", {GgmlType::kQ8_0, QuantMix::kPure}, 7},
    {"q4_k_m", {GgmlType::kQ4_K, QuantMix::kLlamaQ4_K_M}, 15},
    {"q5_k_m", {GgmlType::kQ5_K, QuantMix::kLlamaQ5_K_M}, 17},
    {"q6_k", {GgmlType::kQ6_K, QuantMix::kLlamaQ6_K}, 18},
    {"f16", {GgmlType::kF16, QuantMix::kPure}, 1},
    {"bf16", {GgmlType::kBF16, QuantMix::kPure}, 32},
    {"f32", {GgmlType::kF32, QuantMix::kPure}, 0},
};

// llama.cpp's "more bits" layers of a K-quant _M mix.
bool use_more_bits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// Layer of "blk.N.*", -1 for other names (llama.cpp's weight_name_comparer).
int layer_of(const std::string& name) {
  int layer = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &layer) != 1) layer = -1;
  return layer;
}

// Does llama.cpp quantize this tensor at all?
bool llama_quantizes(const QuantTensorInfo& t) {
  return t.dims.size() >= 2 && absl::EndsWith(t.name, "weight") && !absl::StrContains(t.name, "_norm.weight") &&
         !absl::StrContains(t.name, "ffn_gate_inp.weight") && t.name != "position_embd.weight" &&
         t.name != "token_types.weight";
}

// A row of `cols` must hold whole blocks: llama.cpp's fallback otherwise.
absl::StatusOr<GgmlType> fallback_for_row(GgmlType type, int64_t cols, const std::string& name) {
  if (cols % ggml_block_elements(type) == 0) return type;
  GgmlType fallback;
  switch (type) {
    case GgmlType::kQ4_K: fallback = GgmlType::kQ5_0; break;
    case GgmlType::kQ5_K: fallback = GgmlType::kQ5_1; break;
    case GgmlType::kQ6_K: fallback = GgmlType::kQ8_0; break;
    default:
      return absl::InvalidArgumentError(absl::StrFormat("tensor '%s' rows of %d cannot be stored as %s", name, cols,
                                                        ggml_type_name(type)));
  }
  return cols % ggml_block_elements(fallback) == 0 ? fallback : GgmlType::kF16;
}

// Counters of llama.cpp's quantize_state_impl that the rules read.
struct MixState {
  bool has_output = false;
  int n_attention_wv = 0;
  int i_attention_wv = 0;
  int i_ffn_down = 0;
};

// llama_tensor_get_type for the K-quant mixes, before the row fallback.
GgmlType llama_rule(const QuantTensorInfo& t, const QuantRecipe& recipe, const QuantModelShape& shape, MixState& st,
                    std::optional<GgmlType> output_type) {
  const bool m_mix = recipe.mix == QuantMix::kLlamaQ4_K_M || recipe.mix == QuantMix::kLlamaQ5_K_M;
  GgmlType type = recipe.base;
  if (t.name == "output.weight" || (!st.has_output && t.name == "token_embd.weight")) {
    if (output_type.has_value()) return *output_type;
    if (t.dims[0] % ggml_block_elements(type) != 0) return GgmlType::kQ8_0;
    return type != GgmlType::kQ8_0 ? GgmlType::kQ6_K : type;
  }
  if (t.name == "token_embd.weight") return type;
  if (absl::StrContains(t.name, "attn_v.weight")) {
    if (m_mix && use_more_bits(st.i_attention_wv, st.n_attention_wv)) type = GgmlType::kQ6_K;
    // llama.cpp's LLM_TYPE_70B: 80 llama layers with grouped KV heads.
    const bool is_70b = shape.arch == "llama" && shape.n_layer == 80 && shape.n_head != shape.n_head_kv;
    if (is_70b && type == GgmlType::kQ4_K) type = GgmlType::kQ5_K;
    ++st.i_attention_wv;
  } else if (absl::StrContains(t.name, "ffn_down")) {
    if (m_mix && use_more_bits(st.i_ffn_down, shape.n_layer)) type = GgmlType::kQ6_K;
    ++st.i_ffn_down;
  } else if (absl::StrContains(t.name, "attn_qkv.weight")) {
    if (recipe.mix == QuantMix::kLlamaQ4_K_M) type = GgmlType::kQ5_K;
    if (recipe.mix == QuantMix::kLlamaQ5_K_M) type = GgmlType::kQ6_K;
  }
  return type;
}

absl::StatusOr<std::vector<GgmlType>> plan_llama_mix(const std::vector<QuantTensorInfo>& tensors,
                                                     const QuantRecipe& recipe, const QuantModelShape& shape,
                                                     std::optional<GgmlType> output_type) {
  MixState st;
  for (const QuantTensorInfo& t : tensors) {
    if (t.name == "output.weight") st.has_output = true;
    if (absl::StrContains(t.name, "attn_v.weight") || absl::StrContains(t.name, "attn_qkv.weight") ||
        absl::StrContains(t.name, "attn_kv_b.weight")) {
      ++st.n_attention_wv;
    }
  }
  // llama.cpp visits tensors ordered by layer, then name: the counters above
  // then equal the layer index.
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int la = layer_of(tensors[a].name), lb = layer_of(tensors[b].name);
    return la != lb ? la < lb : tensors[a].name < tensors[b].name;
  });
  std::vector<GgmlType> out(tensors.size());
  for (size_t i : order) {
    const QuantTensorInfo& t = tensors[i];
    if (!llama_quantizes(t)) {
      out[i] = t.type;
      continue;
    }
    const GgmlType wanted = llama_rule(t, recipe, shape, st, output_type);
    auto type = fallback_for_row(wanted, t.dims[0], t.name);
    if (!type.ok()) return type.status();
    out[i] = *type;
  }
  return out;
}

}  // namespace

absl::StatusOr<QuantRecipe> parse_quant_recipe(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(absl::string_view(name.data(), name.size()));
  for (const RecipeName& r : kRecipes) {
    if (lower == r.name) return r.recipe;
  }
  return absl::InvalidArgumentError(absl::StrFormat("--type: '%s' is not one of %s", std::string(name), quant_recipe_names()));
}

std::string quant_recipe_names() {
  std::string out;
  for (const RecipeName& r : kRecipes) out += std::string(out.empty() ? "" : ", ") + r.name;
  return out;
}

uint32_t quant_recipe_file_type(const QuantRecipe& recipe) {
  for (const RecipeName& r : kRecipes) {
    if (r.recipe.base == recipe.base && r.recipe.mix == recipe.mix) return r.file_type;
  }
  return 0;
}

absl::StatusOr<std::vector<GgmlType>> plan_tensor_types(const std::vector<QuantTensorInfo>& tensors,
                                                        const QuantRecipe& recipe, const QuantModelShape& shape,
                                                        std::optional<GgmlType> output_type) {
  if (recipe.mix != QuantMix::kPure) return plan_llama_mix(tensors, recipe, shape, output_type);
  // Pure: every matrix in the base type; a row that is not whole blocks, and
  // every 1-D tensor, as f32.
  bool has_output = false;
  for (const QuantTensorInfo& t : tensors) has_output = has_output || t.name == "output.weight";
  std::vector<GgmlType> out;
  out.reserve(tensors.size());
  for (const QuantTensorInfo& t : tensors) {
    GgmlType type = GgmlType::kF32;
    if (t.dims.size() == 2 && t.dims[0] % ggml_block_elements(recipe.base) == 0) type = recipe.base;
    const bool is_output = t.name == "output.weight" || (!has_output && t.name == "token_embd.weight");
    if (t.dims.size() == 2 && is_output && output_type.has_value()) {
      auto fallback = fallback_for_row(*output_type, t.dims[0], t.name);
      if (!fallback.ok()) return fallback.status();
      type = *fallback;
    }
    out.push_back(type);
  }
  return out;
}

std::string tensor_type_counts(const std::vector<GgmlType>& types) {
  std::map<std::string, int> counts;
  for (GgmlType t : types) ++counts[std::string(ggml_type_name(t))];
  std::vector<std::pair<std::string, int>> sorted(counts.begin(), counts.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (const auto& [name, n] : sorted) out += absl::StrFormat("%s%d %s", out.empty() ? "" : ", ", n, name);
  return out;
}

}  // namespace baton
