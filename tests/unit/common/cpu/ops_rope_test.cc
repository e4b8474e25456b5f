// rope_rows_table: the same rotation as rope_rows from cos and sin computed
// once for a range of positions.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "common/cpu/ops.h"

namespace baton {
namespace {

TEST(RopeTableTest, BitIdenticalToRopeRowsForEveryPairing) {
  constexpr int kHeads = 3, kHeadDim = 16, kRot = 12;
  std::vector<float> inv_freq(kRot / 2);
  for (int i = 0; i < kRot / 2; ++i) inv_freq[static_cast<size_t>(i)] = 1.0f / (1.0f + 7.0f * i);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(20 * kHeads * kHeadDim));
  for (float& v : x) v = normal(rng);
  const RopeTable table = make_rope_table(100, 40, kRot, inv_freq.data());
  for (const bool neox : {false, true}) {
    std::vector<float> a = x, b = x;
    rope_rows(a.data(), 20, kHeads, kHeadDim, kRot, neox, 113, inv_freq.data());
    rope_rows_table(b.data(), 20, kHeads, kHeadDim, neox, 113, table);
    EXPECT_EQ(a, b) << neox;
    EXPECT_NE(a, x);
  }
}

// The engine's tables (Engine::rope_table) carry the model's attention
// factor (YaRN's), as rope_rows does; at large positions too (a long
// context's angles, where the double reduction matters).
TEST(RopeTableTest, BitIdenticalToRopeRowsWithAnAttentionFactor) {
  constexpr int kHeads = 2, kHeadDim = 8, kRot = 8;
  const std::vector<float> inv_freq = {1.0f, 0.1f, 0.01f, 0.001f};
  std::vector<float> x(static_cast<size_t>(3 * kHeads * kHeadDim));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  for (const float factor : {1.0f, 1.0693147f}) {
    const RopeTable table = make_rope_table(131070, 3, kRot, inv_freq.data(), factor);
    std::vector<float> a = x, b = x;
    rope_rows(a.data(), 3, kHeads, kHeadDim, kRot, /*neox=*/true, 131070, inv_freq.data(), factor);
    rope_rows_table(b.data(), 3, kHeads, kHeadDim, /*neox=*/true, 131070, table);
    EXPECT_EQ(a, b) << factor;
  }
  // A factor other than 1 scales the rotation: the tables differ.
  EXPECT_NE(make_rope_table(5, 1, kRot, inv_freq.data(), 1.0693147f).cos,
            make_rope_table(5, 1, kRot, inv_freq.data()).cos);
}

TEST(RopeTableDeathTest, RowsOutsideTheTableAbort) {
  const std::vector<float> inv_freq = {1.0f};
  const RopeTable table = make_rope_table(10, 5, 2, inv_freq.data());
  std::vector<float> x(2 * 6, 1.0f);
  EXPECT_DEATH(rope_rows_table(x.data(), 6, 1, 2, false, 10, table), "outside the table");
}

}  // namespace
}  // namespace baton
