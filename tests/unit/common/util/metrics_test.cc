// MetricsRegistry: what must hold is the Prometheus text exposition format
// 0.0.4 (HELP/TYPE lines, escaped label values, cumulative buckets with
// le="+Inf" = _count), handles that are shared per (name, labels), counters
// that only go up, and updates that survive concurrent writers.
#include "common/util/metrics.h"

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace baton {
namespace {

bool contains_line(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(MetricsTest, CounterWithLabelsRendersHelpTypeAndOneLinePerSeries) {
  MetricsRegistry registry;
  registry.counter("baton_requests_total", "Requests by outcome.", {{"outcome", "ok"}}).inc();
  registry.counter("baton_requests_total", "Requests by outcome.", {{"outcome", "ok"}}).inc(2);
  registry.counter("baton_requests_total", "Requests by outcome.", {{"outcome", "invalid_argument"}}).inc();
  const std::string text = registry.render();
  EXPECT_TRUE(contains_line(text, "# HELP baton_requests_total Requests by outcome.")) << text;
  EXPECT_TRUE(contains_line(text, "# TYPE baton_requests_total counter")) << text;
  EXPECT_TRUE(contains_line(text, "baton_requests_total{outcome=\"ok\"} 3")) << text;
  EXPECT_TRUE(contains_line(text, "baton_requests_total{outcome=\"invalid_argument\"} 1")) << text;
  // One HELP per family, however many series.
  EXPECT_EQ(text.find("# HELP baton_requests_total"), text.rfind("# HELP baton_requests_total"));
}

TEST(MetricsTest, SameNameAndLabelsReturnTheSameHandle) {
  MetricsRegistry registry;
  Counter& a = registry.counter("x_total", "x", {{"k", "v"}});
  Counter& b = registry.counter("x_total", "x", {{"k", "v"}});
  Counter& c = registry.counter("x_total", "x", {{"k", "w"}});
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &c);
}

TEST(MetricsTest, GaugeGoesUpAndDownAndUnlabeledSeriesHasNoBraces) {
  MetricsRegistry registry;
  Gauge& gauge = registry.gauge("baton_memory_bytes", "Bytes in use.");
  gauge.set(1024);
  gauge.add(-24);
  EXPECT_DOUBLE_EQ(gauge.value(), 1000);
  const std::string text = registry.render();
  EXPECT_TRUE(contains_line(text, "# TYPE baton_memory_bytes gauge")) << text;
  EXPECT_TRUE(contains_line(text, "baton_memory_bytes 1000")) << text;
}

TEST(MetricsTest, HistogramBucketsAreCumulativeAndInfEqualsCount) {
  MetricsRegistry registry;
  Histogram& h = registry.histogram("ttft_seconds", "Time to first token.", {0.1, 0.5, 1}, {{"place", "cloud"}});
  for (double v : {0.05, 0.1, 0.3, 0.7, 2.0, 5.0}) h.observe(v);
  const std::string text = registry.render();
  EXPECT_TRUE(contains_line(text, "# TYPE ttft_seconds histogram")) << text;
  // le is "less or equal": 0.1 falls in the 0.1 bucket.
  EXPECT_TRUE(contains_line(text, "ttft_seconds_bucket{place=\"cloud\",le=\"0.1\"} 2")) << text;
  EXPECT_TRUE(contains_line(text, "ttft_seconds_bucket{place=\"cloud\",le=\"0.5\"} 3")) << text;
  EXPECT_TRUE(contains_line(text, "ttft_seconds_bucket{place=\"cloud\",le=\"1\"} 4")) << text;
  EXPECT_TRUE(contains_line(text, "ttft_seconds_bucket{place=\"cloud\",le=\"+Inf\"} 6")) << text;
  EXPECT_TRUE(contains_line(text, "ttft_seconds_count{place=\"cloud\"} 6")) << text;
  EXPECT_TRUE(contains_line(text, "ttft_seconds_sum{place=\"cloud\"} 8.15")) << text;
  const Histogram::Snapshot snap = h.snapshot();
  EXPECT_EQ(snap.count, 6u);
  EXPECT_EQ(snap.cumulative_counts.back(), snap.count);
}

TEST(MetricsTest, UnlabeledHistogramPutsOnlyLeInBraces) {
  MetricsRegistry registry;
  registry.histogram("h", "h", {1}).observe(0.5);
  const std::string text = registry.render();
  EXPECT_TRUE(contains_line(text, "h_bucket{le=\"1\"} 1")) << text;
  EXPECT_TRUE(contains_line(text, "h_sum 0.5")) << text;
}

TEST(MetricsTest, LabelValuesAndHelpAreEscaped) {
  MetricsRegistry registry;
  registry.counter("e_total", "a \\ b\nc", {{"reason", "say \"no\"\nback\\slash"}}).inc();
  const std::string text = registry.render();
  EXPECT_TRUE(contains_line(text, "# HELP e_total a \\\\ b\\nc")) << text;
  EXPECT_TRUE(contains_line(text, "e_total{reason=\"say \\\"no\\\"\\nback\\\\slash\"} 1")) << text;
}

TEST(MetricsTest, ValuesUseShortestRoundTripAndPrometheusSpecials) {
  EXPECT_EQ(format_metric_value(0.1), "0.1");
  EXPECT_EQ(format_metric_value(123456789), "123456789");
  EXPECT_EQ(format_metric_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_metric_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(format_metric_value(std::nan("")), "NaN");
  EXPECT_EQ(std::stod(format_metric_value(1.0 / 3)), 1.0 / 3);
}

TEST(MetricsTest, FamiliesAreSortedByName) {
  MetricsRegistry registry;
  registry.gauge("zeta", "z").set(1);
  registry.gauge("alpha", "a").set(1);
  const std::string text = registry.render();
  EXPECT_LT(text.find("# HELP alpha"), text.find("# HELP zeta")) << text;
}

TEST(MetricsTest, CollectorsRunBeforeEveryRender) {
  MetricsRegistry registry;
  int scrapes = 0;
  registry.add_collector([&] { registry.gauge("scrapes", "Renders so far.").set(++scrapes); });
  EXPECT_TRUE(contains_line(registry.render(), "scrapes 1"));
  EXPECT_TRUE(contains_line(registry.render(), "scrapes 2"));
}

TEST(MetricsTest, AdvanceToNeverMovesACounterDown) {
  Counter counter;
  counter.advance_to(10);
  counter.advance_to(4);
  EXPECT_DOUBLE_EQ(counter.value(), 10);
  counter.inc(1);
  EXPECT_DOUBLE_EQ(counter.value(), 11);
}

TEST(MetricsTest, BucketHelpers) {
  EXPECT_EQ(exponential_buckets(0.01, 2, 4), (std::vector<double>{0.01, 0.02, 0.04, 0.08}));
  EXPECT_EQ(linear_buckets(5, 5, 3), (std::vector<double>{5, 10, 15}));
}

TEST(MetricsTest, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry registry;
  constexpr int kThreads = 4;
  constexpr int kPerThread = 10000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&registry] {
      for (int i = 0; i < kPerThread; ++i) {
        registry.counter("c_total", "c").inc();
        registry.histogram("h", "h", {0.5}).observe(i % 2);
        if (i % 1000 == 0) registry.render();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_DOUBLE_EQ(registry.counter("c_total", "c").value(), kThreads * kPerThread);
  const Histogram::Snapshot snap = registry.histogram("h", "h", {0.5}).snapshot();
  EXPECT_EQ(snap.count, uint64_t{kThreads * kPerThread});
  EXPECT_EQ(snap.cumulative_counts[0], uint64_t{kThreads * kPerThread / 2});
}

TEST(MetricsDeathTest, MisuseIsAProgrammingError) {
  MetricsRegistry registry;
  registry.counter("dup", "d");
  EXPECT_DEATH(registry.gauge("dup", "d"), "one metric name, one type");
  EXPECT_DEATH(registry.counter("bad name", "b"), "metric names");
  EXPECT_DEATH(registry.counter("ok_total", "b", {{"__reserved", "x"}}), "label names");
  EXPECT_DEATH(registry.counter("neg_total", "n").inc(-1), "only goes up");
  EXPECT_DEATH(registry.histogram("hb", "h", {1, 0.5}), "ascend");
}

}  // namespace
}  // namespace baton
