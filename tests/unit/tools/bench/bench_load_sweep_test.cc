// The figures of `baton bench load --clients LIST` (tools/bench/bench_load.h):
// aggregate tok/s per level, per-client tok/s, the ratio to the first level,
// inter-token latency, and the greedy identity verdict in --json.
#include <gtest/gtest.h>

#include "bench_load.h"

namespace baton::cli {
namespace {

SweepLevel level(int64_t clients, double wall_s, int64_t tokens, std::vector<double> gaps_ms) {
  SweepLevel l;
  l.clients = clients;
  l.wall_s = wall_s;
  l.tally.tokens = tokens;
  l.tally.sent = clients;
  l.tally.completed = clients;
  l.tally.inter_token = distribution(std::move(gaps_ms));
  return l;
}

TEST(BenchLoadSweepTest, AggregatePerClientAndRatioToTheFirstLevel) {
  // 1 client: 100 tokens in 10 s; 4 clients: 1200 tokens in 10 s.
  std::vector<SweepLevel> levels = {level(1, 10, 100, {100, 100}), level(4, 10, 1200, {20, 30, 40})};
  levels[1].tally.decode_batch_mean = 3.5;
  const std::vector<SweepRow> rows = sweep_rows(levels);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_DOUBLE_EQ(rows[0].aggregate_tokens_per_s, 10);
  EXPECT_DOUBLE_EQ(rows[0].per_client_tokens_per_s, 10);
  EXPECT_DOUBLE_EQ(rows[0].ratio_to_first, 1);
  EXPECT_DOUBLE_EQ(rows[1].aggregate_tokens_per_s, 120);
  EXPECT_DOUBLE_EQ(rows[1].per_client_tokens_per_s, 30);
  EXPECT_DOUBLE_EQ(rows[1].ratio_to_first, 12);
  EXPECT_EQ(rows[1].clients, 4);
  EXPECT_DOUBLE_EQ(rows[1].decode_batch_mean, 3.5);
}

TEST(BenchLoadSweepTest, InterTokenP99IsTheSlowGapNotTheMean) {
  // Two stalls among 100 gaps (a prefill chunk of a newcomer, say): the
  // 99th percentile (nearest rank) is a stall, the median and mean are not.
  std::vector<double> gaps(98, 10.0);
  gaps.push_back(500.0);
  gaps.push_back(500.0);
  const std::vector<SweepRow> rows = sweep_rows({level(2, 1, 10, gaps)});
  EXPECT_DOUBLE_EQ(rows[0].inter_token_p50_ms, 10);
  EXPECT_DOUBLE_EQ(rows[0].inter_token_p99_ms, 500);
}

TEST(BenchLoadSweepTest, AFirstLevelWithoutTokensGivesNoRatio) {
  const std::vector<SweepRow> rows = sweep_rows({level(1, 10, 0, {}), level(2, 10, 50, {})});
  EXPECT_DOUBLE_EQ(rows[1].ratio_to_first, 0);
  EXPECT_DOUBLE_EQ(rows[1].aggregate_tokens_per_s, 5);
}

TEST(BenchLoadSweepTest, JsonCarriesEachLevelAndTheIdentityVerdict) {
  LoadSweep sweep;
  sweep.edge = "127.0.0.1:1";
  sweep.levels = {level(1, 10, 100, {}), level(2, 10, 300, {})};
  sweep.identity.ran = true;
  sweep.identity.compared = 3;
  sweep.identity.differing = 1;
  sweep.identity.first_difference = "client 1 session 0 turn 0";
  const Json json = sweep_json(sweep);
  ASSERT_EQ(json["levels"].size(), 2u);
  EXPECT_EQ(json["levels"][1]["clients"], 2);
  EXPECT_EQ(json_line(json["levels"][1]["ratio_to_first"]), "3.0");
  EXPECT_EQ(json_line(json["levels"][1]["per_client_tokens_per_s"]), "15.0");
  EXPECT_EQ(json["greedy_identity"]["identical"], false);
  EXPECT_EQ(json["greedy_identity"]["differing_turns"], 1);
  sweep.identity = IdentityCheck{};
  EXPECT_TRUE(sweep_json(sweep)["greedy_identity"].is_null());
}

}  // namespace
}  // namespace baton::cli
