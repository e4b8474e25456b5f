// llama.cpp's per-tensor type rules for the K-quant mixes (common/model/
// quant_mix.h) on tensor lists of real shapes: Gemma 3 1B (rows of 1152, not
// whole 256-blocks; tied output), Phi-3 (fused QKV), a 12-layer model whose
// file order is not layer order. Each expectation is what llama-quantize
// writes for that tensor; a wrong rule, fallback or layer count fails one.
#include "common/model/quant_mix.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace baton {
namespace {

using Types = std::map<std::string, GgmlType>;

Types plan(const std::vector<QuantTensorInfo>& tensors, const std::string& recipe_name, QuantModelShape shape,
           std::optional<GgmlType> output_type = std::nullopt) {
  auto recipe = parse_quant_recipe(recipe_name);
  EXPECT_TRUE(recipe.ok());
  auto types = plan_tensor_types(tensors, *recipe, shape, output_type);
  EXPECT_TRUE(types.ok()) << types.status();
  Types out;
  for (size_t i = 0; i < tensors.size(); ++i) out[tensors[i].name] = (*types)[i];
  return out;
}

// Gemma 3 1B: n_embd 1152, 4 heads x 256, 1 KV head, n_ff 6912, tied output.
std::vector<QuantTensorInfo> gemma3_1b(int n_layer) {
  std::vector<QuantTensorInfo> t = {{"token_embd.weight", {1152, 262144}, GgmlType::kBF16},
                                    {"output_norm.weight", {1152}, GgmlType::kF32}};
  for (int i = 0; i < n_layer; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    t.push_back({b + "attn_q.weight", {1152, 1024}, GgmlType::kBF16});
    t.push_back({b + "attn_k.weight", {1152, 256}, GgmlType::kBF16});
    t.push_back({b + "attn_v.weight", {1152, 256}, GgmlType::kBF16});
    t.push_back({b + "attn_output.weight", {1024, 1152}, GgmlType::kBF16});
    t.push_back({b + "ffn_down.weight", {6912, 1152}, GgmlType::kBF16});
    t.push_back({b + "ffn_up.weight", {1152, 6912}, GgmlType::kBF16});
    t.push_back({b + "attn_q_norm.weight", {256}, GgmlType::kF32});
  }
  return t;
}

TEST(QuantMix, Gemma3RowsOf1152FallBackAndTiedEmbeddingIsTheOutput) {
  const QuantModelShape shape{"gemma3", 26, 4, 1};
  Types q4 = plan(gemma3_1b(26), "q4_k_m", shape);
  EXPECT_EQ(q4["token_embd.weight"], GgmlType::kQ8_0);   // output rule: 1152 % 256 != 0
  EXPECT_EQ(q4["blk.1.attn_q.weight"], GgmlType::kQ5_0);  // Q4_K -> Q5_0
  EXPECT_EQ(q4["blk.1.attn_output.weight"], GgmlType::kQ4_K);  // rows of 1024
  EXPECT_EQ(q4["blk.0.attn_v.weight"], GgmlType::kQ8_0);  // more bits: Q6_K -> Q8_0
  EXPECT_EQ(q4["blk.4.attn_v.weight"], GgmlType::kQ5_0);  // (4 - 3) % 3 != 2
  EXPECT_EQ(q4["blk.5.attn_v.weight"], GgmlType::kQ8_0);  // (5 - 3) % 3 == 2
  EXPECT_EQ(q4["blk.5.ffn_down.weight"], GgmlType::kQ6_K);  // rows of 6912 = 27 x 256
  EXPECT_EQ(q4["blk.4.ffn_down.weight"], GgmlType::kQ4_K);
  EXPECT_EQ(q4["blk.4.ffn_up.weight"], GgmlType::kQ5_0);
  EXPECT_EQ(q4["blk.4.attn_q_norm.weight"], GgmlType::kF32);  // kept as is
  EXPECT_EQ(q4["output_norm.weight"], GgmlType::kF32);
  Types q5 = plan(gemma3_1b(26), "q5_k_m", shape);
  EXPECT_EQ(q5["blk.1.attn_q.weight"], GgmlType::kQ5_1);
  EXPECT_EQ(q5["blk.4.ffn_down.weight"], GgmlType::kQ5_K);
  Types q6 = plan(gemma3_1b(26), "q6_k", shape);
  EXPECT_EQ(q6["blk.1.attn_q.weight"], GgmlType::kQ8_0);
  EXPECT_EQ(q6["blk.1.attn_output.weight"], GgmlType::kQ6_K);
  EXPECT_EQ(q6["token_embd.weight"], GgmlType::kQ8_0);
}

TEST(QuantMix, MoreBitsLayersFollowLayerOrderNotFileOrder) {
  // 12 layers listed blk.0, blk.1, blk.10, blk.11, blk.2, ...: llama.cpp counts
  // them by layer, so the "more bits" ones are 0, 3, 6, 9, 10, 11.
  std::vector<QuantTensorInfo> t = {{"token_embd.weight", {256, 1000}, GgmlType::kF16},
                                    {"output.weight", {256, 1000}, GgmlType::kF16}};
  for (const char* layer : {"0", "1", "10", "11", "2", "3", "4", "5", "6", "7", "8", "9"}) {
    t.push_back({std::string("blk.") + layer + ".ffn_down.weight", {512, 256}, GgmlType::kF16});
    t.push_back({std::string("blk.") + layer + ".attn_v.weight", {256, 64}, GgmlType::kF16});
  }
  Types q4 = plan(t, "q4_k_m", {"llama", 12, 4, 1});
  for (int i = 0; i < 12; ++i) {
    const bool more = i == 0 || i == 3 || i == 6 || i == 9 || i == 10 || i == 11;
    const std::string b = "blk." + std::to_string(i) + ".";
    EXPECT_EQ(q4[b + "ffn_down.weight"], more ? GgmlType::kQ6_K : GgmlType::kQ4_K) << i;
    EXPECT_EQ(q4[b + "attn_v.weight"], more ? GgmlType::kQ6_K : GgmlType::kQ4_K) << i;
  }
  EXPECT_EQ(q4["output.weight"], GgmlType::kQ6_K);
  EXPECT_EQ(q4["token_embd.weight"], GgmlType::kQ4_K);  // untied: base type
}

TEST(QuantMix, FusedQkvGetsOneStepMoreAndSeventyBillionAttnVIsQ5_K) {
  std::vector<QuantTensorInfo> phi = {{"output.weight", {3072, 32064}, GgmlType::kF16},
                                      {"blk.0.attn_qkv.weight", {3072, 9216}, GgmlType::kF16}};
  EXPECT_EQ(plan(phi, "q4_k_m", {"phi3", 32, 32, 32})["blk.0.attn_qkv.weight"], GgmlType::kQ5_K);
  EXPECT_EQ(plan(phi, "q5_k_m", {"phi3", 32, 32, 32})["blk.0.attn_qkv.weight"], GgmlType::kQ6_K);
  EXPECT_EQ(plan(phi, "q6_k", {"phi3", 32, 32, 32})["blk.0.attn_qkv.weight"], GgmlType::kQ6_K);
  std::vector<QuantTensorInfo> big;
  for (int i = 0; i < 80; ++i) big.push_back({"blk." + std::to_string(i) + ".attn_v.weight", {8192, 1024}, GgmlType::kF16});
  Types q4 = plan(big, "q4_k_m", {"llama", 80, 64, 8});
  EXPECT_EQ(q4["blk.20.attn_v.weight"], GgmlType::kQ5_K);  // not a more-bits layer: Q4_K -> Q5_K
  EXPECT_EQ(q4["blk.0.attn_v.weight"], GgmlType::kQ6_K);
}

TEST(QuantMix, PureTypesKeepBatonsRulesAndOutputTypeOverridesOnlyTheOutput) {
  std::vector<QuantTensorInfo> t = {{"token_embd.weight", {256, 1000}, GgmlType::kF16},
                                    {"output.weight", {256, 1000}, GgmlType::kF16},
                                    {"odd.weight", {48, 10}, GgmlType::kF16},
                                    {"norm.weight", {256}, GgmlType::kF16}};
  Types q4 = plan(t, "q4_0", {"llama", 1, 1, 1});
  EXPECT_EQ(q4["output.weight"], GgmlType::kQ4_0);
  EXPECT_EQ(q4["odd.weight"], GgmlType::kF32);
  EXPECT_EQ(q4["norm.weight"], GgmlType::kF32);
  Types def = plan(t, "q4_0", {"llama", 1, 1, 1}, GgmlType::kQ6_K);
  EXPECT_EQ(def["output.weight"], GgmlType::kQ6_K);
  EXPECT_EQ(def["token_embd.weight"], GgmlType::kQ4_0);
}

TEST(QuantMix, NamesFileTypesAndCounts) {
  EXPECT_EQ(quant_recipe_file_type(*parse_quant_recipe("q4_k_m")), 15u);
  EXPECT_EQ(quant_recipe_file_type(*parse_quant_recipe("Q5_K_M")), 17u);
  EXPECT_EQ(quant_recipe_file_type(*parse_quant_recipe("q6_k")), 18u);
  EXPECT_EQ(quant_recipe_file_type(*parse_quant_recipe("q4_0")), 2u);
  EXPECT_EQ(quant_recipe_file_type(*parse_quant_recipe("q8_0")), 7u);
  EXPECT_FALSE(parse_quant_recipe("q3_k_m").ok());
  EXPECT_EQ(tensor_type_counts({GgmlType::kF32, GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ4_K}),
            "2 q4_K, 1 f32, 1 q6_K");
}

}  // namespace
}  // namespace baton
