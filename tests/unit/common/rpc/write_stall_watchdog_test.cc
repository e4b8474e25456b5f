// WriteStallWatchdog: a write in flight longer than the timeout cancels its
// call once; writes that complete, idle calls and closed calls are left
// alone; close() from inside the cancel (TryCancel running OnDone inline)
// returns at once.
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include <gtest/gtest.h>

#include "common/rpc/write_stall_watchdog.h"
#include "common/util/metrics.h"

namespace baton {
namespace {

using std::chrono::milliseconds;

// Polls `done` every 5 ms for up to 10 s.
template <typename Predicate>
bool eventually(Predicate done) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < give_up) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return done();
}

TEST(WriteStallWatchdogTest, WriteInFlightPastTheTimeoutCancelsTheCallOnce) {
  MetricsRegistry registry;
  Counter& stalls = registry.counter("test_write_stalls_total", "stalls");
  WriteStallWatchdog watchdog(milliseconds(20), &stalls);
  std::atomic<int> cancels{0};
  std::shared_ptr<WriteStallWatchdog::Watch> watch = watchdog.watch("Test from here", [&] { ++cancels; });
  ASSERT_NE(watch, nullptr);
  watch->write_started();
  ASSERT_TRUE(eventually([&] { return cancels.load() == 1; }));
  std::this_thread::sleep_for(milliseconds(60));  // a few more scans: still one cancel
  EXPECT_EQ(cancels.load(), 1);
  EXPECT_TRUE(watch->stalled());
  EXPECT_EQ(watchdog.stalled_calls(), 1u);
  EXPECT_EQ(stalls.value(), 1);
  watch->close();
}

TEST(WriteStallWatchdogTest, CompletedWritesAndIdleCallsAreNotCancelled) {
  WriteStallWatchdog watchdog(milliseconds(30));
  std::atomic<int> cancels{0};
  std::shared_ptr<WriteStallWatchdog::Watch> watch = watchdog.watch("Test", [&] { ++cancels; });
  // Writes that each complete within the timeout, for several timeouts in all.
  for (int i = 0; i < 10; ++i) {
    watch->write_started();
    std::this_thread::sleep_for(milliseconds(5));
    watch->write_done();
  }
  std::this_thread::sleep_for(milliseconds(100));  // idle (the producer is slow, not the client)
  EXPECT_EQ(cancels.load(), 0);
  EXPECT_FALSE(watch->stalled());
  watch->close();
}

TEST(WriteStallWatchdogTest, ClosedCallIsNeverCancelled) {
  WriteStallWatchdog watchdog(milliseconds(10));
  std::atomic<int> cancels{0};
  std::shared_ptr<WriteStallWatchdog::Watch> watch = watchdog.watch("Test", [&] { ++cancels; });
  watch->write_started();
  watch->close();
  std::this_thread::sleep_for(milliseconds(60));
  EXPECT_EQ(cancels.load(), 0);
}

TEST(WriteStallWatchdogTest, CloseFromInsideTheCancelReturns) {
  WriteStallWatchdog watchdog(milliseconds(10));
  std::shared_ptr<WriteStallWatchdog::Watch> watch;
  std::atomic<bool> closed{false};
  // As TryCancel may run the reactor's OnDone inline: close() on the cancelling thread.
  watch = watchdog.watch("Test", [&] {
    watch->close();
    closed = true;
  });
  watch->write_started();
  EXPECT_TRUE(eventually([&] { return closed.load(); }));
}

TEST(WriteStallWatchdogTest, ZeroTimeoutWatchesNothing) {
  WriteStallWatchdog watchdog(milliseconds(0));
  EXPECT_EQ(watchdog.watch("Test", [] {}), nullptr);
}

}  // namespace
}  // namespace baton
