// cli::InterruptWatch: the first Ctrl-C runs the action (from the watcher
// thread) instead of ending the process; reset() re-arms it; the destructor
// gives SIGINT its previous disposition back. (A second Ctrl-C ends the
// process by design, so it is not raised here.)
#include "interrupt.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace baton::cli {
namespace {

// Polls until `done` or ~10 s; the action runs on the watcher thread.
bool wait_for(const std::atomic<int>& counter, int value) {
  for (int i = 0; i < 10000 && counter.load() < value; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return counter.load() >= value;
}

TEST(InterruptWatchTest, FirstCtrlCRunsTheActionAndTheProcessGoesOn) {
  std::atomic<int> actions{0};
  InterruptWatch watch;
  EXPECT_FALSE(watch.interrupted());
  watch.on_interrupt([&] { actions.fetch_add(1); });
  ASSERT_EQ(raise(SIGINT), 0);
  ASSERT_TRUE(wait_for(actions, 1)) << "the action never ran";
  EXPECT_TRUE(watch.interrupted());
  EXPECT_EQ(actions.load(), 1);
}

TEST(InterruptWatchTest, ResetRearmsForTheNextAnswer) {
  std::atomic<int> actions{0};
  InterruptWatch watch;
  watch.on_interrupt([&] { actions.fetch_add(1); });
  ASSERT_EQ(raise(SIGINT), 0);
  ASSERT_TRUE(wait_for(actions, 1));
  watch.reset();
  EXPECT_FALSE(watch.interrupted());
  // Without reset() this second SIGINT would end the process.
  ASSERT_EQ(raise(SIGINT), 0);
  ASSERT_TRUE(wait_for(actions, 2)) << "the re-armed action never ran";
  EXPECT_TRUE(watch.interrupted());
}

TEST(InterruptWatchTest, TheDestructorRestoresThePreviousDisposition) {
  struct sigaction before {};
  ASSERT_EQ(sigaction(SIGINT, nullptr, &before), 0);
  {
    InterruptWatch watch;
    struct sigaction during {};
    ASSERT_EQ(sigaction(SIGINT, nullptr, &during), 0);
    EXPECT_NE(during.sa_handler, before.sa_handler);
  }
  struct sigaction after {};
  ASSERT_EQ(sigaction(SIGINT, nullptr, &after), 0);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}

}  // namespace
}  // namespace baton::cli
