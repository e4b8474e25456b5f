// The plan's reason says why the cloud is not used (not ready vs
// unreachable), and a failed turn's reserved KV capacity can be given back
// (QuantizedKvCache::shrink_to) without touching the tokens held.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "edge_decode/plan/split_policy.h"

namespace baton {
namespace {

TEST(SplitPolicyReasonTest, LocalBecauseOfTheCloudSaysWhichStateItWasIn) {
  SplitInputs in;
  in.cloud_configured = true;
  in.cloud_reachable = false;
  in.prefill_tokens = 4000;
  in.cloud_unusable_why = "not ready (WARMING at the last Health check)";
  const SplitPlan plan = decide_split(in);
  EXPECT_EQ(plan.place, v1::PREFILL_PLACE_LOCAL);
  EXPECT_EQ(plan.reason.rfind("local: the cloud is not ready (WARMING at the last Health check); local ", 0), 0u)
      << plan.reason;
}

TEST(QuantizedKvCacheShrinkTest, ShrinkGivesBackCapacityAndKeepsTheRowsHeld) {
  const KvGeometry geometry{2, 4, 2, 16, {}};
  const KvCodecConfig codec = default_kv_codec_config(KvCodecConfig::Bits::kInt8, geometry);
  auto created = QuantizedKvCache::Create(geometry, 8, codec);
  ASSERT_TRUE(created.ok()) << created.status();
  QuantizedKvCache& kv = **created;
  std::vector<float> k(static_cast<size_t>(8 * geometry.kv_dim()));
  std::vector<float> v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<float>(i % 17) - 8.0f;
    v[i] = static_cast<float>(i % 13) * 0.5f;
  }
  for (int layer = 0; layer < geometry.n_layer; ++layer) ASSERT_TRUE(kv.store(layer, 0, 6, k.data(), v.data()).ok());
  kv.set_size(6);
  auto before = kv.export_block(1, /*is_key=*/true, 0, 6);
  ASSERT_TRUE(before.ok());
  const int64_t bytes_at_8 = kv.memory_bytes();

  ASSERT_TRUE(kv.reserve(40).ok());
  EXPECT_GT(kv.memory_bytes(), bytes_at_8);
  ASSERT_TRUE(kv.shrink_to(8).ok());
  EXPECT_EQ(kv.capacity(), 8);
  EXPECT_EQ(kv.memory_bytes(), bytes_at_8);
  auto after = kv.export_block(1, /*is_key=*/true, 0, 6);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->codes, before->codes);
  EXPECT_EQ(after->scales, before->scales);
  EXPECT_EQ(kv.shrink_to(5).code(), absl::StatusCode::kInvalidArgument);  // below the 6 tokens held
}

}  // namespace
}  // namespace baton
