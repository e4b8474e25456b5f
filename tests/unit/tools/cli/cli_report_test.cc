// The CLI's Report (tools/cli/report.h) and json_line_with: `baton health
// --json`, `baton model info --json`, `baton plan --json` and `baton
// generate --edge --json` are read by scripts and tests with grep
// ('"key": value'), so keys, their order and the one-line layout must hold.
#include "report.h"

#include <cstdio>

#include <gtest/gtest.h>

#include "json_line.h"

namespace baton::cli {
namespace {

TEST(CliReportTest, BytesAndUnmeasuredFiguresInTableAndJson) {
  Report report("edge agent 127.0.0.1:1");
  report.add_text("state", "state", "READY");
  report.add_bytes("kv_bytes", "KV held", 3812352);
  report.add_bytes("small", "small", 480);
  report.add_measured("decode_tok_per_s", "decode speed", 0, "tok/s");
  report.add_measured("rtt_ms", "round trip", 12.345, "ms");
  report.add_int("retry_after_ms", "retry after", 250, "ms");
  EXPECT_EQ(json_line(report.to_json()),
            R"({"state": "READY", "kv_bytes": 3812352, "small": 480, "decode_tok_per_s": null, )"
            R"("rtt_ms": 12.345, "retry_after_ms": 250})");
  char buffer[512] = {};
  std::FILE* out = fmemopen(buffer, sizeof(buffer), "w");
  ASSERT_NE(out, nullptr);
  report.print_table(out);
  std::fclose(out);
  EXPECT_STREQ(buffer,
               "edge agent 127.0.0.1:1\n"
               "  state         READY\n"
               "  KV held       3.6 MiB (3812352 B)\n"
               "  small         480 B\n"
               "  decode speed  not measured yet\n"
               "  round trip    12.3 ms\n"
               "  retry after   250 ms\n");
}

TEST(CliReportTest, JsonLineWithKeepsARawMemberAsItIs) {
  const Json head = {{"text", "hi \"there\""}, {"token_ids", Json::array({1, 2, 3})}, {"retries", 0}};
  EXPECT_EQ(json_line_with(head, "stats", R"({"generated_tokens":3})"),
            R"({"text": "hi \"there\"", "token_ids": [1, 2, 3], "retries": 0, "stats": {"generated_tokens":3}})");
  EXPECT_EQ(json_line_with(Json::object(), "stats", "null"), R"({"stats": null})");
}

}  // namespace
}  // namespace baton::cli
