// baton bench decode --speculative: the figures its table and JSON derive
// from the replies (tools/bench/bench_decode.h), and a run on the bundled
// model, which fails unless every greedy reply is identical both ways.
#include <gtest/gtest.h>

#include "bench_decode.h"
#include "common/model/model_quantize.h"
#include "json_line.h"
#include "tests/support/test_models.h"

namespace baton::cli {
namespace {

SpeculativeTask two_replies() {
  SpeculativeTask task;
  task.name = "quote";
  SpeculativeReply a;
  a.tokens = 100;
  a.plain_seconds = 4.0;
  a.speculative_seconds = 2.0;
  a.verifies = 30;
  a.plain_steps = 10;
  a.drafted = 120;
  a.accepted = 60;
  a.identical = true;
  SpeculativeReply b = a;
  b.plain_seconds = 6.0;   // 200 tokens in 10 s plain, 5 s speculative: 2x
  b.speculative_seconds = 3.0;
  b.accepted = 20;
  b.identical = false;
  task.replies = {a, b};
  return task;
}

TEST(BenchSpeculative, AggregatesAreTotalsOverTheReplies) {
  const SpeculativeTask task = two_replies();
  EXPECT_DOUBLE_EQ(task.plain_tok_per_s(), 20.0);
  EXPECT_DOUBLE_EQ(task.speculative_tok_per_s(), 40.0);
  EXPECT_DOUBLE_EQ(task.ratio(), 2.0);
  EXPECT_DOUBLE_EQ(task.acceptance(), 80.0 / 240.0);
  EXPECT_DOUBLE_EQ(task.tokens_per_pass(), 200.0 / 80.0);  // 2 x (30 verifies + 10 steps)
  EXPECT_EQ(task.identical(), 1);
}

TEST(BenchSpeculative, EmptyTaskHasNoFigures) {
  const SpeculativeTask empty;
  EXPECT_EQ(empty.ratio(), 0.0);
  EXPECT_EQ(empty.acceptance(), 0.0);
  EXPECT_EQ(empty.tokens_per_pass(), 0.0);
}

TEST(BenchSpeculative, JsonCarriesTheTaskFiguresAndTheVerificationCosts) {
  SpeculativeRun run;
  run.model = "m";
  run.max_draft = 8;
  run.tasks.push_back(two_replies());
  run.verify_costs = {{1, 0.010}, {2, 0.011}, {4, 0.0125}};
  const std::string line = json_line(speculative_json(run));
  EXPECT_NE(line.find(R"("ratio": 2.0)"), std::string::npos) << line;
  EXPECT_NE(line.find(R"("identical": 1)"), std::string::npos) << line;
  EXPECT_NE(line.find(R"("rows": 4, "ms": 12.5, "cost_in_steps": 1.25)"), std::string::npos) << line;
}

TEST(BenchSpeculative, RunsOnTheBundledModelWithIdenticalReplies) {
  // The command fails (INTERNAL) when a speculative reply differs from the
  // plain one; bad flags are INVALID_ARGUMENT.
  const std::string path = testing::make_temp_dir("bench_speculative") + "/kjv-q4_0.gguf";
  ASSERT_TRUE(quantize_model(testing::source_dir() + "/deploy/models/baton-tiny-kjv-f16.gguf", path,
                             QuantizeOptions{GgmlType::kQ4_0, 2})
                  .ok());
  const std::string text = testing::source_dir() + "/deploy/models/baton-tiny-kjv.heldout.txt";
  const absl::Status ok = bench_decode_speculative({"--speculative", "4", "--model", path, "--tokens", "24",
                                                    "--prompts", "2", "--text-file", text, "--json"});
  EXPECT_TRUE(ok.ok()) << ok;
  const absl::Status bad = bench_decode_speculative({"--speculative", "17", "--model", path, "--text-file", text});
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
}

}  // namespace
}  // namespace baton::cli
