// The --json output of the benches (tools/bench/bench_report.h, through
// tools/cli/json_line.h): scripts and tests read it with grep ('"key": '),
// Python's json module and tools/bench/model_matrix.sh, so the one-line
// layout and each figure's printed precision must hold.
#include "bench_report.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace baton::cli {
namespace {

TEST(BenchJsonTest, OneLineWithSpacedSeparators) {
  const Json value = {{"model", "tiny"}, {"rows", {{{"context", 16}, {"ok", true}}, Json::object()}}, {"none", nullptr}};
  EXPECT_EQ(json_line(value), R"({"model": "tiny", "rows": [{"context": 16, "ok": true}, {}], "none": null})");
}

TEST(BenchJsonTest, KeysKeepTheirOrder) {
  Json value = Json::object();
  value["zeta"] = 1;
  value["alpha"] = 2;
  EXPECT_EQ(json_line(value), R"({"zeta": 1, "alpha": 2})");
}

TEST(BenchJsonTest, FiguresKeepTheirPrecision) {
  EXPECT_EQ(json_line(fixed(2782.2334567, 3)), "2782.233");
  EXPECT_EQ(json_line(fixed(0.1 + 0.2, 3)), "0.3");
  EXPECT_EQ(json_line(fixed(1.0, 4)), "1.0");
  EXPECT_EQ(json_line(whole(56831.6)), "56832");
  EXPECT_EQ(json_line(significant(0.000238108123)), "0.000238108");
  EXPECT_EQ(json_line(significant(110.04412)), "110.044");
  EXPECT_EQ(json_line(significant(1632.0)), "1632");  // as "%.6g" wrote it: no ".0"
  EXPECT_EQ(json_line(significant(1234567.0)), "1234570.0");
}

TEST(BenchJsonTest, FiguresThatAreNotFiniteAreNull) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(json_line(fixed(nan, 3)), "null");
  EXPECT_EQ(json_line(whole(inf)), "null");
  EXPECT_EQ(json_line(significant(-inf)), "null");
}

TEST(BenchJsonTest, StringsAreEscaped) {
  EXPECT_EQ(json_line(Json("a \"quoted\"\\path\n\ttab")), R"("a \"quoted\"\\path\n\ttab")");
  // Bytes that are not UTF-8 (a path, an error message) do not throw.
  EXPECT_EQ(json_line(Json(std::string("bad \xff byte"))), "\"bad \xEF\xBF\xBD byte\"");
}

TEST(BenchReportTest, TableAndJsonOfTheSameFigures) {
  BenchReport report("prefill (local): tiny");
  report.add("prefill_tok_per_s", "prefill", 4020.78456, "tok/s");
  report.add("prefill_seconds", "time", 0.0079586612, "s", 3);
  report.add_int("tokens", "tokens", 32);
  report.add_text("kv_store", "KV store", "f16");
  EXPECT_EQ(json_line(report.to_json()),
            R"({"prefill_tok_per_s": 4020.78, "prefill_seconds": 0.00795866, "tokens": 32, "kv_store": "f16"})");
  char buffer[512] = {};
  std::FILE* out = fmemopen(buffer, sizeof(buffer), "w");
  ASSERT_NE(out, nullptr);
  report.print_table(out);
  std::fclose(out);
  EXPECT_STREQ(buffer,
               "prefill (local): tiny\n"
               "  prefill   4020.78 tok/s\n"
               "  time      0.008 s\n"
               "  tokens    32\n"
               "  KV store  f16\n");
}

}  // namespace
}  // namespace baton::cli
