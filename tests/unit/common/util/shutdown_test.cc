// The shutdown sequence of both servers: listeners stop last started first,
// once; a shutdown request wakes the signal wait.
#include "common/util/shutdown.h"

#include <signal.h>
#include <unistd.h>

#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace baton {
namespace {

TEST(ShutdownStackTest, StopsLastStartedFirstAndOnlyOnce) {
  std::string order;
  {
    ShutdownStack listeners;
    listeners.push([&] { order += "server "; });
    listeners.push([&] { order += "http "; });
    listeners.push([&] { order += "metrics "; });
    listeners.stop_all();
    EXPECT_EQ(order, "metrics http server ");
  }
  EXPECT_EQ(order, "metrics http server ") << "the destructor stops nothing twice";
}

TEST(ShutdownStackTest, TheDestructorStopsWhatRunsOnAnEarlyReturn) {
  std::string order;
  {
    ShutdownStack listeners;
    listeners.push([&] { order += "server "; });
    listeners.push([&] { order += "http "; });
  }
  EXPECT_EQ(order, "http server ");
}

// In a child process: the test binary's other threads (gRPC's) do not block
// SIGTERM, so a process-wide signal there would end the whole run.
TEST(ShutdownSignalsTest, ARequestFromAnotherThreadEndsTheWaitThenDrainThenStop) {
  EXPECT_EXIT(
      {
        block_shutdown_signals();
        std::thread loader([] { request_shutdown(); });
        std::string order;
        ShutdownStack listeners;
        listeners.push([&] { order += "stop"; });
        int got = 0;
        serve_until_signal(
            [&](int signal_number) {
              got = signal_number;
              order += "drain ";
            },
            listeners);
        loader.join();
        _exit(got == SIGTERM && order == "drain stop" ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace baton
