// WorkQueue (edge_decode/work_queue.h): worker threads (one by default, N for
// the edge's --max-batch), jobs in arrival order, a cap on waiting jobs, and a
// stop that lets the running jobs end and calls every waiting one with
// run == false (so each can end its call).
#include "edge_decode/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace baton {
namespace {

// A job that reports it started and then waits for release().
class Gate {
 public:
  WorkQueue::Job job(std::vector<bool>* runs = nullptr, std::mutex* mu = nullptr) {
    return [this, runs, mu](bool run) {
      if (runs != nullptr) {
        std::lock_guard<std::mutex> lock(*mu);
        runs->push_back(run);
      }
      started_.set_value();
      if (run) released_.wait();
    };
  }
  void wait_started() { ASSERT_EQ(started_future_.wait_for(std::chrono::seconds(10)), std::future_status::ready); }
  void release() { release_.set_value(); }

 private:
  std::promise<void> started_;
  std::future<void> started_future_ = started_.get_future();
  std::promise<void> release_;
  std::shared_future<void> released_ = release_.get_future().share();
};

// Returns once `queue` is stopping (it refuses jobs then); the probes it
// pushes before that wait behind the running job and must never run.
void wait_until_stopping(WorkQueue& queue) {
  while (queue.try_push([](bool run) { EXPECT_FALSE(run) << "a probe ran after stop began"; })) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

TEST(WorkQueueTest, RunsJobsInArrivalOrderOnOneWorkerThread) {
  WorkQueue queue(0);
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  std::promise<void> done;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(queue.try_push([&, i](bool run) {
      EXPECT_TRUE(run);
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
      if (i == 4) done.set_value();
    }));
  }
  ASSERT_EQ(done.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  for (const std::thread::id& id : threads) {
    EXPECT_EQ(id, threads[0]);
    EXPECT_NE(id, std::this_thread::get_id());
  }
}

TEST(WorkQueueTest, RefusesJobsPastTheCapOfWaitingOnesAndTheRunningJobDoesNotCount) {
  WorkQueue queue(2);
  Gate gate;
  ASSERT_TRUE(queue.try_push(gate.job()));
  gate.wait_started();
  EXPECT_EQ(queue.running(), 1u);
  std::atomic<int> ran{0};
  EXPECT_TRUE(queue.try_push([&](bool run) { ran += run ? 1 : 0; }));
  EXPECT_TRUE(queue.try_push([&](bool run) { ran += run ? 1 : 0; }));
  EXPECT_FALSE(queue.try_push([&](bool) { ADD_FAILURE() << "a refused job ran"; }));
  EXPECT_EQ(queue.queued(), 2u);
  gate.release();
  queue.stop();  // lets the running job end; the two waiting ones may have run by then or get false
  EXPECT_EQ(queue.queued(), 0u);
  EXPECT_EQ(queue.running(), 0u);
}

TEST(WorkQueueTest, StopLetsTheRunningJobEndAndCallsEveryWaitingJobWithFalse) {
  WorkQueue queue(0);
  Gate gate;
  std::mutex mu;
  std::vector<bool> runs;
  ASSERT_TRUE(queue.try_push(gate.job(&runs, &mu)));
  gate.wait_started();
  std::vector<bool> waiting_runs;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(queue.try_push([&](bool run) {
      std::lock_guard<std::mutex> lock(mu);
      waiting_runs.push_back(run);
    }));
  }
  std::thread stopper([&] { queue.stop(); });
  // stop() waits for the running job: release it only once stop has begun.
  wait_until_stopping(queue);
  gate.release();
  stopper.join();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(runs, (std::vector<bool>{true}));
  EXPECT_EQ(waiting_runs, (std::vector<bool>{false, false, false}));
  EXPECT_FALSE(queue.try_push([](bool) { ADD_FAILURE() << "a job pushed after stop ran"; }));
}

TEST(WorkQueueTest, TheDestructorStopsAndEndsWaitingJobs) {
  std::mutex mu;
  std::vector<bool> waiting_runs;
  {
    WorkQueue queue(0);
    Gate gate;
    ASSERT_TRUE(queue.try_push(gate.job()));
    gate.wait_started();
    ASSERT_TRUE(queue.try_push([&](bool run) {
      std::lock_guard<std::mutex> lock(mu);
      waiting_runs.push_back(run);
    }));
    std::thread releaser([&] {
      wait_until_stopping(queue);
      gate.release();
    });
    queue.stop();
    releaser.join();
    queue.stop();  // a second stop is a no-op
  }
  EXPECT_EQ(waiting_runs, (std::vector<bool>{false}));
}

TEST(WorkQueueTest, NWorkersRunNJobsAtOnceAndTheRestWait) {
  WorkQueue queue(0, 2);
  Gate first, second;
  ASSERT_TRUE(queue.try_push(first.job()));
  ASSERT_TRUE(queue.try_push(second.job()));
  first.wait_started();
  second.wait_started();  // both run although neither has ended
  EXPECT_EQ(queue.running(), 2u);
  std::promise<void> third_ran;
  ASSERT_TRUE(queue.try_push([&](bool run) {
    EXPECT_TRUE(run);
    third_ran.set_value();
  }));
  EXPECT_EQ(queue.queued(), 1u);
  std::future<void> third = third_ran.get_future();
  EXPECT_EQ(third.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  first.release();
  EXPECT_EQ(third.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  second.release();
  queue.stop();
  EXPECT_EQ(queue.running(), 0u);
}

TEST(WorkQueueTest, JobsOfOneKeyRunOneAtATimeInOrderWhileOtherKeysPassThem) {
  WorkQueue queue(0, 2);
  Gate a1;
  std::mutex mu;
  std::vector<std::string> order;
  ASSERT_TRUE(queue.try_push(a1.job(), "a"));
  a1.wait_started();
  std::promise<void> a2_ran, b_ran;
  ASSERT_TRUE(queue.try_push([&](bool run) {
    EXPECT_TRUE(run);
    std::lock_guard<std::mutex> lock(mu);
    order.push_back("a2");
    a2_ran.set_value();
  }, "a"));
  ASSERT_TRUE(queue.try_push([&](bool run) {
    EXPECT_TRUE(run);
    std::lock_guard<std::mutex> lock(mu);
    order.push_back("b");
    b_ran.set_value();
  }, "b"));
  // The free worker passes a2 (its key is running) and takes b.
  std::future<void> b = b_ran.get_future();
  ASSERT_EQ(b.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  std::future<void> a2 = a2_ran.get_future();
  EXPECT_EQ(a2.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout) << "two jobs of key a ran at once";
  EXPECT_EQ(queue.queued(), 1u);
  a1.release();
  ASSERT_EQ(a2.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  queue.stop();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(order, (std::vector<std::string>{"b", "a2"}));
}

TEST(WorkQueueTest, ZeroMeansNoCapOnWaitingJobs) {
  WorkQueue queue(0);
  Gate gate;
  ASSERT_TRUE(queue.try_push(gate.job()));
  gate.wait_started();
  std::atomic<int> ran{0};
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(queue.try_push([&](bool run) { ran += run ? 1 : 0; })) << i;
  EXPECT_EQ(queue.queued(), 100u);
  gate.release();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ran.load() < 100 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(ran.load(), 100);
}

}  // namespace
}  // namespace baton
