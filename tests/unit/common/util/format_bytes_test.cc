// One formatter for byte counts and rates (common/util/format_bytes.h):
// IEC units everywhere, and "not measured yet" for a rate never measured.
#include "common/util/format_bytes.h"

#include <gtest/gtest.h>

#include "edge_decode/plan/memory_plan.h"

namespace baton {
namespace {

TEST(FormatBytesTest, IecUnitsWithOneDecimalBelowAGibAndTwoAbove) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.0 KiB");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(480 * 1024 + 512), "480.5 KiB");
  EXPECT_EQ(format_bytes(uint64_t{3} << 20), "3.0 MiB");
  EXPECT_EQ(format_bytes((uint64_t{3} << 30) / 2), "1.50 GiB");
  EXPECT_EQ(format_bytes(uint64_t{2} << 40), "2.00 TiB");
}

TEST(FormatBytesTest, RoundsIntoTheNextUnitInsteadOfPrinting1024) {
  EXPECT_EQ(format_bytes((uint64_t{1} << 20) - 1), "1.0 MiB");
  EXPECT_EQ(format_bytes((uint64_t{1} << 30) - 1), "1.00 GiB");
}

TEST(FormatBytesTest, RatesAndUnmeasuredRates) {
  EXPECT_EQ(format_rate(12.5 * 1024 * 1024), "12.5 MiB/s");
  EXPECT_EQ(format_rate(0), "not measured yet");
  EXPECT_EQ(format_rate(-1), "not measured yet");
}

// The edge's error messages use the same formatter as the CLI's tables.
TEST(FormatBytesTest, OverBudgetErrorUsesTheSameUnits) {
  EdgeMemoryPlan plan;
  plan.device_limit_bytes = uint64_t{3} << 29;  // 1.5 GiB
  plan.kv_budget_bytes = uint64_t{1} << 20;
  CodecCapacityPlan capacity;
  capacity.kv_bytes_per_token = 480;
  capacity.max_context_tokens = 100;
  const std::string message(
      check_context_fits(context_limit(plan, capacity, /*trained_tokens=*/4096), 0, 3000).message());
  EXPECT_NE(message.find("limit " + format_bytes(plan.device_limit_bytes)), std::string::npos) << message;
  EXPECT_NE(message.find("480 B per token"), std::string::npos) << message;
}

}  // namespace
}  // namespace baton
