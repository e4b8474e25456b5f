// StreamWatchdog: the pure decision (stall, projected pace against local
// prefill) and the thread that acts on it.
#include "edge_decode/link/stream_watchdog.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace baton {
namespace {

using std::chrono::milliseconds;

StreamWatchdogLimits limits(int64_t stall_ms, double local_ms) {
  StreamWatchdogLimits l;
  l.stall_timeout = milliseconds(stall_ms);
  l.local_prefill_ms = local_ms;
  return l;
}

// elapsed, since the last message, received of total, window and units in it.
StreamPace pace(double elapsed_ms, double since_last_ms, uint64_t received, uint64_t total, double window_ms,
                uint64_t window_units) {
  StreamPace p;
  p.elapsed_ms = elapsed_ms;
  p.since_last_ms = since_last_ms;
  p.received = received;
  p.total = total;
  p.window_ms = window_ms;
  p.window_units = window_units;
  return p;
}

TEST(StreamWatchdogTest, StallTimeoutFiresOnSilenceOnly) {
  const StreamWatchdogLimits l = limits(2000, 0);
  EXPECT_FALSE(StreamWatchdog::judge(l, pace(5000, 1999, 10, 100, 2000, 0)));
  std::optional<std::string> why = StreamWatchdog::judge(l, pace(5000, 2000, 10, 100, 2000, 0));
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("sent nothing for 2.0 s"), std::string::npos) << *why;
  EXPECT_NE(why->find("10% of the KV"), std::string::npos) << *why;
}

TEST(StreamWatchdogTest, ProjectedRestAgainstLocalPrefill) {
  // Local prefill 4 s: the bound is 1.5 x 4 + 1 = 7 s of projected rest.
  const StreamWatchdogLimits l = limits(0, 4000);
  // 50 of 100 left at 10 per 2 s (the recent pace): 10 s more, over the bound.
  std::optional<std::string> why = StreamWatchdog::judge(l, pace(3000, 10, 50, 100, 2000, 10));
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("50% in 3.0 s, at the pace of the last 2.0 s 10.0 s more"), std::string::npos) << *why;
  EXPECT_NE(why->find("local prefill takes about 4.0 s"), std::string::npos) << *why;
  // The same stream at 20 per 2 s: 5 s more, under it (the average pace
  // does not matter: a fast start does not hide a collapse).
  EXPECT_FALSE(StreamWatchdog::judge(l, pace(3000, 10, 50, 100, 2000, 20)));
  // A complete stream is never abandoned; nor one observed under a second.
  EXPECT_FALSE(StreamWatchdog::judge(l, pace(60000, 10, 100, 100, 2000, 1)));
  EXPECT_FALSE(StreamWatchdog::judge(l, pace(999, 10, 1, 1000, 999, 1)));
  // Nothing recently: wait until the silence itself exceeds the bound.
  EXPECT_FALSE(StreamWatchdog::judge(l, pace(9000, 6999, 30, 100, 2000, 0)));
  why = StreamWatchdog::judge(l, pace(9000, 7000, 30, 100, 2000, 0));
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("nothing for 7.0 s with 30% received"), std::string::npos) << *why;
}

TEST(StreamWatchdogTest, WithoutLimitsItNeverFires) {
  const StreamWatchdogLimits l = limits(0, 0);
  EXPECT_FALSE(StreamWatchdog::judge(l, pace(1e9, 1e9, 0, 100, 2000, 0)));
}

TEST(StreamWatchdogTest, ThreadCancelsASilentStreamOnceAndSaysWhy) {
  std::atomic<int> cancels{0};
  StreamWatchdog watchdog(limits(150, 0), 100, [&] { cancels.fetch_add(1); });
  watchdog.on_message(0);
  for (int i = 0; i < 200 && cancels.load() == 0; ++i) std::this_thread::sleep_for(milliseconds(10));
  watchdog.stop();
  EXPECT_EQ(cancels.load(), 1);
  ASSERT_TRUE(watchdog.fired());
  EXPECT_NE(watchdog.fired()->find("sent nothing"), std::string::npos);
}

TEST(StreamWatchdogTest, ThreadLeavesAStreamThatKeepsComingAlone) {
  std::atomic<int> cancels{0};
  StreamWatchdog watchdog(limits(500, 0), 100, [&] { cancels.fetch_add(1); });
  for (int i = 0; i < 10; ++i) {
    if (i == 5) {
      EXPECT_DOUBLE_EQ(watchdog.received_fraction(), 0.5);
    }
    watchdog.on_message(10);
    std::this_thread::sleep_for(milliseconds(20));
  }
  watchdog.stop();
  EXPECT_DOUBLE_EQ(watchdog.received_fraction(), 1.0);
  EXPECT_EQ(cancels.load(), 0);
  EXPECT_FALSE(watchdog.fired());
}

}  // namespace
}  // namespace baton
