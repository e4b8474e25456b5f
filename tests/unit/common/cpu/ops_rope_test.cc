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

TEST(RopeTableDeathTest, RowsOutsideTheTableAbort) {
  const std::vector<float> inv_freq = {1.0f};
  const RopeTable table = make_rope_table(10, 5, 2, inv_freq.data());
  std::vector<float> x(2 * 6, 1.0f);
  EXPECT_DEATH(rope_rows_table(x.data(), 6, 1, 2, false, 10, table), "outside the table");
}

}  // namespace
}  // namespace baton
