// The memory plan of a model with sliding-window layers (the Gemma 3 1B
// shape): only the global layers grow with the context; the windowed layers
// hold a fixed window + 64 rows (plus window - 1 kept for a rollback), so
// the same budget fits several times the context of the full-attention
// model. Fails if the planner counts the windowed layers per token (the
// context would match the full model's) or forgets them (budget overrun).
#include <gtest/gtest.h>

#include <algorithm>

#include "common/kv_cache/quantized_kv_cache.h"
#include "common/model/model_spec.h"
#include "edge_decode/plan/memory_plan.h"

namespace baton {
namespace {

ModelSpec gemma3_1b_spec(bool windowed) {
  ModelSpec spec;
  spec.arch = "gemma3";
  spec.n_layer = 26;
  spec.n_embd = 1152;
  spec.n_head = 4;
  spec.n_head_kv = 1;
  spec.head_dim = 256;
  spec.n_ff = 6912;
  spec.n_vocab = 262144;
  spec.n_ctx_train = 131072;
  if (windowed) {
    for (int il = 0; il < spec.n_layer; ++il) spec.layer_window.push_back((il + 1) % 6 == 0 ? 0 : 512);
  }
  return spec;
}

TEST(MemoryPlanWindowTest, WindowedLayersCostAFixedWindow) {
  auto parsed = parse_kv_codec_config("int8-g32");
  ASSERT_TRUE(parsed.ok());
  const KvCodecConfig codec = QuantizedKvCache::store_config_for(*parsed);
  const uint64_t limit = uint64_t{1} << 30, weights = 600ull << 20;
  const EdgeMemoryPlan full = make_memory_plan(gemma3_1b_spec(false), weights, limit, {codec});
  const EdgeMemoryPlan windowed = make_memory_plan(gemma3_1b_spec(true), weights, limit, {codec});
  // One layer-token, K and V: 2 x (256 codes + 8 f16 scales) = 544 bytes.
  constexpr uint64_t kRow = 544;
  EXPECT_EQ(full.capacity[0].kv_bytes_per_token, 26 * kRow);
  EXPECT_EQ(full.capacity[0].kv_window_bytes, 0u);
  EXPECT_EQ(windowed.capacity[0].kv_bytes_per_token, 4 * kRow);  // layers 5, 11, 17, 23 are global
  // The windowed layers' rows, and the global layers' rows past the 577
  // tokens the planner sizes the windows at up to whole 16-row key blocks
  // (their INT8 keys in key column blocks: 592 rows, 15 more a layer; the
  // windowed layers keep rows).
  EXPECT_EQ(windowed.capacity[0].kv_window_bytes, (22 * (512 + 64 + 511) + 4 * (592 - 577)) * kRow);
  EXPECT_EQ(windowed.capacity[0].max_context_tokens,
            std::min<uint64_t>(131072, (windowed.kv_budget_bytes - windowed.capacity[0].kv_window_bytes) / (4 * kRow)));
  EXPECT_GT(windowed.capacity[0].max_context_tokens, 3 * full.capacity[0].max_context_tokens);
  // The store the planner sized: a session at the planned context fits the budget.
  const int64_t n = windowed.capacity[0].max_context_tokens;
  EXPECT_LE(static_cast<uint64_t>(
                QuantizedKvCache::memory_bytes_for(codec, kv_geometry_for(gemma3_1b_spec(true)), n)),
            windowed.kv_budget_bytes);
}

}  // namespace
}  // namespace baton
