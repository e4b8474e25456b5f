#include "common/util/thread_pool.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace baton {
namespace {

// Runs call(n, fn), one of the pool's parallel calls over [0, n), checks
// that fn saw every index in [0, n) once, and returns how often fn ran.
template <typename Call>
int64_t visit_each_index_once(int64_t n, Call call) {
  std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
  std::atomic<int64_t> calls{0};
  call(n, [&](int64_t begin, int64_t end) {
    ASSERT_LT(begin, end);
    ASSERT_GE(begin, 0);
    ASSERT_LE(end, n);
    calls.fetch_add(1, std::memory_order_relaxed);
    for (int64_t i = begin; i < end; ++i) visits[i].fetch_add(1, std::memory_order_relaxed);
  });
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(visits[i].load(), 1) << "index " << i << " of " << n;
  return calls.load();
}

// Runs one parallel_for and checks every index in [0, n) was visited once.
void expect_each_index_once(ThreadPool& pool, int64_t n) {
  const int64_t calls = visit_each_index_once(n, [&](int64_t m, const auto& fn) { pool.parallel_for(m, fn); });
  EXPECT_LE(calls, pool.size());
}

class ThreadPoolTest : public testing::TestWithParam<int> {};

TEST_P(ThreadPoolTest, EveryIndexVisitedExactlyOnceForManySizes) {
  ThreadPool pool(GetParam());
  EXPECT_EQ(pool.size(), GetParam());
  for (int64_t n : {0, 1, 2, 3, 4, 5, 7, 8, 13, 64, 100, 1000, 4097}) expect_each_index_once(pool, n);
}

TEST_P(ThreadPoolTest, ManyBackToBackCallsStayCorrect) {
  ThreadPool pool(GetParam());
  std::atomic<int64_t> total{0};
  constexpr int kCalls = 5000;
  for (int call = 0; call < kCalls; ++call) {
    const int64_t n = call % 37;
    pool.parallel_for(n, [&](int64_t begin, int64_t end) {
      total.fetch_add(end - begin, std::memory_order_relaxed);
    });
  }
  int64_t want = 0;
  for (int call = 0; call < kCalls; ++call) want += call % 37;
  EXPECT_EQ(total.load(), want);
}

TEST_P(ThreadPoolTest, WorkersWakeAfterSleeping) {
  ThreadPool pool(GetParam());
  expect_each_index_once(pool, 50);
  // Long enough for every worker to stop spinning and futex-wait.
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  expect_each_index_once(pool, 50);
}

// A Hot scope only lengthens the spin: jobs stay correct, a worker idle
// inside the scope for long still goes to sleep (an unbounded spin shares a
// core with the thread that would hand it work, on a loaded machine), and
// one idle after the scope sleeps too; sleeping workers wake for the next
// job. (What the longer spin buys is a speed, measured by the benches.)
void wait_for_a_sleep(ThreadPool& pool, uint64_t before, const char* where) {
  if (pool.size() == 1) return;  // no worker
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (pool.sleeps() == before && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GT(pool.sleeps(), before) << "an idle worker kept spinning " << where << " (sleeps " << pool.sleeps() << ", before " << before << ")";
}

TEST_P(ThreadPoolTest, HotWorkersStillSleepWhenIdleLongAndRunEveryJob) {
  ThreadPool pool(GetParam());
  {
    ThreadPool::Hot hot(pool);
    for (int gap = 0; gap < 3; ++gap) {
      expect_each_index_once(pool, 50);
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
    // Read before the job: a worker must sleep after it at the latest.
    const uint64_t before = pool.sleeps();
    expect_each_index_once(pool, 50);
    wait_for_a_sleep(pool, before, "inside a Hot scope");
    expect_each_index_once(pool, 50);
  }
  const uint64_t before = pool.sleeps();
  expect_each_index_once(pool, 50);
  wait_for_a_sleep(pool, before, "after the Hot scope");
  expect_each_index_once(pool, 50);
}

TEST_P(ThreadPoolTest, ResultsWrittenByWorkersAreVisibleAfterReturn) {
  ThreadPool pool(GetParam());
  std::vector<int64_t> out(1000);  // plain (non-atomic) writes: TSan checks the happens-before
  for (int round = 0; round < 50; ++round) {
    pool.parallel_for(static_cast<int64_t>(out.size()), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = i * round;
    });
    for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) ASSERT_EQ(out[i], i * round);
  }
}

TEST_P(ThreadPoolTest, NestedCallsRunInlineIncludingSizesZeroAndOne) {
  ThreadPool pool(GetParam());
  std::atomic<int64_t> inner_total{0};
  pool.parallel_for(8, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      pool.parallel_for(0, [&](int64_t, int64_t) { inner_total.fetch_add(1000); });
      pool.parallel_for(1, [&](int64_t b, int64_t e) { inner_total.fetch_add(e - b); });
      pool.parallel_for(5, [&](int64_t b, int64_t e) { inner_total.fetch_add(e - b); });
    }
  });
  EXPECT_EQ(inner_total.load(), 8 * (1 + 5));
}

TEST_P(ThreadPoolTest, DestroyedWhileIdleAndRightAfterWork) {
  for (int i = 0; i < 20; ++i) {
    auto pool = std::make_unique<ThreadPool>(GetParam());
    if (i % 2 == 0) expect_each_index_once(*pool, 17);
  }
}

TEST_P(ThreadPoolTest, DynamicCoversEveryIndexOnceInGrainAlignedChunks) {
  ThreadPool pool(GetParam());
  for (int64_t grain : {1, 2, 3, 8, 64}) {
    for (int64_t n : {0, 1, 2, 5, 8, 13, 100, 1000, 4097}) {
      std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
      pool.parallel_for_dynamic(n, grain, [&](int64_t begin, int64_t end) {
        ASSERT_LT(begin, end);
        ASSERT_GE(begin, 0);
        ASSERT_LE(end, n);
        // A chunk is [k * grain, min((k + 1) * grain, n)); a one-thread pool
        // or a single chunk runs [0, n) inline.
        if (pool.size() > 1 && grain < n) {
          ASSERT_EQ(begin % grain, 0) << "grain " << grain << " n " << n;
          ASSERT_EQ(end, std::min(begin + grain, n)) << "grain " << grain << " n " << n;
        }
        for (int64_t i = begin; i < end; ++i) visits[i].fetch_add(1, std::memory_order_relaxed);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(visits[i].load(), 1) << "index " << i << " of " << n;
    }
  }
}

TEST_P(ThreadPoolTest, GuidedCoversEveryIndexOnceInShrinkingChunksOfAtLeastTheGrain) {
  ThreadPool pool(GetParam());
  for (int64_t min_grain : {1, 3, 16}) {
    for (int64_t n : {0, 1, 2, 5, 13, 100, 1000, 4097}) {
      std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
      std::vector<std::atomic<int64_t>> chunk_at(static_cast<size_t>(n));  // size of the chunk starting there
      pool.parallel_for_guided(n, min_grain, [&](int64_t begin, int64_t end) {
        ASSERT_LT(begin, end);
        ASSERT_GE(begin, 0);
        ASSERT_LE(end, n);
        chunk_at[begin].store(end - begin, std::memory_order_relaxed);
        for (int64_t i = begin; i < end; ++i) visits[i].fetch_add(1, std::memory_order_relaxed);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(visits[i].load(), 1) << "index " << i << " of " << n;
      if (pool.size() == 1 || min_grain >= n) continue;  // one inline call
      // Chunk k is 1/(2 size()) of what it left, at least min_grain (the
      // last one: what remains), so sizes never grow along [0, n).
      int64_t previous = n, begin = 0;
      while (begin < n) {
        const int64_t size = chunk_at[begin].load();
        const int64_t left = n - begin;
        ASSERT_EQ(size, std::min(left, std::max(min_grain, left / (2 * int64_t{pool.size()}))))
            << "chunk at " << begin << " of " << n << ", grain " << min_grain;
        ASSERT_LE(size, previous);
        previous = size;
        begin += size;
      }
    }
  }
}

TEST_P(ThreadPoolTest, StealingCoversEveryIndexOnceOneTaskPerCall) {
  ThreadPool pool(GetParam());
  for (int64_t n : {0, 1, 2, 3, 5, 7, 16, 33, 100, 1000}) {
    const int64_t calls =
        visit_each_index_once(n, [&](int64_t m, const auto& fn) { pool.parallel_for_stealing(m, fn); });
    // One task per call (a one-thread pool and a one-task job: one inline call).
    EXPECT_EQ(calls, pool.size() == 1 || n <= 1 ? std::min<int64_t>(n, 1) : n) << n;
  }
}

TEST_P(ThreadPoolTest, StaticDynamicAndGuidedCallsInterleaveBackToBack) {
  ThreadPool pool(GetParam());
  std::atomic<int64_t> total{0};
  int64_t want = 0;
  for (int call = 0; call < 3000; ++call) {
    const int64_t n = call % 41;
    auto add = [&](int64_t begin, int64_t end) { total.fetch_add(end - begin, std::memory_order_relaxed); };
    if (call % 3 == 0) {
      pool.parallel_for(n, add);
    } else if (call % 3 == 1) {
      pool.parallel_for_dynamic(n, 1 + call % 5, add);
    } else if (call % 2 == 0) {
      pool.parallel_for_guided(n, 1 + call % 5, add);
    } else {
      pool.parallel_for_stealing(n, add);
    }
    want += n;
  }
  EXPECT_EQ(total.load(), want);
}

TEST(ThreadPool, DynamicLetsAFastThreadTakeWhatASlowOneLeaves) {
  // The caller's first chunk does not finish until the worker has done 60
  // of the 100 tasks: only a dynamic hand-out lets it (a static split gives
  // the worker 50, and the caller gives up waiting after 20 s).
  ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int64_t> caller_tasks{0}, worker_tasks{0};
  pool.parallel_for_dynamic(100, 1, [&](int64_t begin, int64_t end) {
    if (std::this_thread::get_id() == caller) {
      if (caller_tasks.fetch_add(end - begin) == 0) {
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (worker_tasks.load() < 60 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
      }
    } else {
      worker_tasks.fetch_add(end - begin);
    }
  });
  EXPECT_EQ(caller_tasks.load() + worker_tasks.load(), 100);
  EXPECT_GT(worker_tasks.load(), 50);
}

INSTANTIATE_TEST_SUITE_P(ThreadCounts, ThreadPoolTest, testing::Values(1, 2, 3, 4, 8),
                         [](const testing::TestParamInfo<int>& param_info) {
                           return "threads" + std::to_string(param_info.param);
                         });

TEST(ThreadPool, StealingRunsEachThreadsHalfInOrderAndLetsTheOtherTakeItsBack) {
  // Two threads own [0, 50) and [50, 100). The caller's first task (0) does
  // not finish until the worker has done 75 tasks: only stealing lets the
  // worker go on past its own 50, from the back of the caller's range (the
  // caller gives up waiting after 20 s). Each thread runs the tasks of a
  // range it holds in increasing order.
  ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int64_t> worker_tasks{0};
  std::vector<int64_t> caller_order, worker_order;  // each written by its own thread only
  pool.parallel_for_stealing(100, [&](int64_t begin, int64_t end) {
    ASSERT_EQ(end, begin + 1);
    if (std::this_thread::get_id() == caller) {
      caller_order.push_back(begin);
      if (begin == 0) {
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (worker_tasks.load() < 75 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
      }
    } else {
      worker_order.push_back(begin);
      worker_tasks.fetch_add(1);
    }
  });
  ASSERT_EQ(caller_order.size() + worker_order.size(), 100u);
  EXPECT_GE(worker_order.size(), 75u);
  ASSERT_FALSE(caller_order.empty());
  EXPECT_EQ(caller_order.front(), 0);
  // The worker's own half first, in order, then stolen tasks of the caller's half.
  for (size_t i = 0; i < 50 && i < worker_order.size(); ++i) ASSERT_EQ(worker_order[i], 50 + int64_t(i));
  for (size_t i = 50; i < worker_order.size(); ++i) ASSERT_LT(worker_order[i], 50) << i;
  // The first steal is the back half of what the caller had left (49 tasks:
  // [25, 50)), run in order.
  ASSERT_GT(worker_order.size(), 51u);
  EXPECT_EQ(worker_order[50], 25);
  EXPECT_EQ(worker_order[51], 26);
}

TEST(ThreadPool, SingleThreadRunsInlineOnCaller) {
  ThreadPool pool(1);
  const std::thread::id caller = std::this_thread::get_id();
  int calls = 0;
  pool.parallel_for(10, [&](int64_t begin, int64_t end) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 10);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
}

TEST(ThreadPool, StaticSplitGivesContiguousBalancedRanges) {
  ThreadPool pool(4);
  std::vector<std::atomic<int64_t>> sizes(4);
  std::atomic<int> slot{0};
  pool.parallel_for(10, [&](int64_t begin, int64_t end) {
    sizes[slot.fetch_add(1)].store(end - begin);
  });
  ASSERT_EQ(slot.load(), 4);
  for (auto& s : sizes) {
    EXPECT_GE(s.load(), 2);
    EXPECT_LE(s.load(), 3);
  }
}

// The CPUs the calling thread may run on, in increasing order.
std::vector<int> thread_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(set), &set), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

// Each thread's CPU mask during one static job of size() tasks (thread i
// runs task i: StaticSplitGivesContiguousBalancedRanges).
std::vector<std::vector<int>> masks_in_a_job(ThreadPool& pool) {
  std::vector<std::vector<int>> masks(static_cast<size_t>(pool.size()));
  pool.parallel_for(pool.size(), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) masks[static_cast<size_t>(i)] = thread_cpus();
  });
  return masks;
}

TEST(ThreadPoolPinning, CpusByCoreTakesOneCpuPerCoreBeforeAnySibling) {
  // Linux's usual numbering on a 4-core SMT machine: siblings n and n + 4.
  EXPECT_EQ(cpus_by_core({0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3, 0, 1, 2, 3}),
            (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  // Siblings numbered next to each other (0/1 share a core, 2/3 another).
  EXPECT_EQ(cpus_by_core({0, 1, 2, 3}, {7, 7, 9, 9}), (std::vector<int>{0, 2, 1, 3}));
  // A process limited to a few CPUs, one of them of unknown core: its own.
  EXPECT_EQ(cpus_by_core({2, 3, 5, 8}, {1, 1, -1, 4}), (std::vector<int>{2, 5, 8, 3}));
  EXPECT_EQ(cpus_by_core({4, 6}, {-1, -1}), (std::vector<int>{4, 6}));
  EXPECT_TRUE(cpus_by_core({}, {}).empty());
}

TEST(ThreadPoolPinning, AutoPinsAPoolThatTakesEveryCpuUnlessTheEnvironmentSaysOtherwise) {
  EXPECT_TRUE(should_pin(Pinning::kAuto, nullptr, 2, 2));
  EXPECT_TRUE(should_pin(Pinning::kAuto, "", 16, 16));
  EXPECT_FALSE(should_pin(Pinning::kAuto, nullptr, 2, 16));  // the other CPUs are other processes'
  EXPECT_TRUE(should_pin(Pinning::kAuto, "1", 2, 16));
  EXPECT_FALSE(should_pin(Pinning::kAuto, "0", 2, 2));
  EXPECT_FALSE(should_pin(Pinning::kAuto, "1", 3, 2));  // more threads than CPUs: never
  EXPECT_FALSE(should_pin(Pinning::kAuto, "1", 1, 2));  // nothing to place
  EXPECT_TRUE(should_pin(Pinning::kAlways, "0", 2, 16));
  EXPECT_FALSE(should_pin(Pinning::kAlways, nullptr, 3, 2));
  EXPECT_FALSE(should_pin(Pinning::kNever, "1", 2, 2));
}

TEST(ThreadPoolPinning, WorkersGetACpuEachAndAHotScopeLendsTheCallerTheFirst) {
  const std::vector<int> process = thread_cpus();
  if (process.size() < 2) GTEST_SKIP() << "needs 2 CPUs; this process may run on " << process.size();
  ThreadPool pool(2, Pinning::kAlways);
  const std::vector<int> cpus = pool.pinned_cpus();
  ASSERT_EQ(cpus.size(), 2u);
  EXPECT_NE(cpus[0], cpus[1]);
  for (int cpu : cpus) EXPECT_NE(std::find(process.begin(), process.end(), cpu), process.end()) << cpu;

  // Outside a Hot scope the caller keeps its mask; the worker is pinned.
  std::vector<std::vector<int>> masks = masks_in_a_job(pool);
  EXPECT_EQ(masks[0], process);
  EXPECT_EQ(masks[1], std::vector<int>{cpus[1]});
  {
    ThreadPool::Hot hot(pool);
    masks = masks_in_a_job(pool);
    EXPECT_EQ(masks[0], std::vector<int>{cpus[0]});
    EXPECT_EQ(masks[1], std::vector<int>{cpus[1]});
    {
      ThreadPool::Hot inner(pool);  // nested: stays, and does not restore early
      EXPECT_EQ(thread_cpus(), std::vector<int>{cpus[0]});
    }
    EXPECT_EQ(thread_cpus(), std::vector<int>{cpus[0]});
  }
  EXPECT_EQ(thread_cpus(), process);  // given back
}

TEST(ThreadPoolPinning, NoPinningWhenAskedOrWhenThereAreMoreThreadsThanCpus) {
  const std::vector<int> process = thread_cpus();
  ThreadPool unpinned(2, Pinning::kNever);
  EXPECT_TRUE(unpinned.pinned_cpus().empty());
  for (const std::vector<int>& mask : masks_in_a_job(unpinned)) EXPECT_EQ(mask, process);
  {
    ThreadPool::Hot hot(unpinned);
    EXPECT_EQ(thread_cpus(), process);
  }
  ThreadPool crowded(static_cast<int>(process.size()) + 1, Pinning::kAlways);
  EXPECT_TRUE(crowded.pinned_cpus().empty());
  for (const std::vector<int>& mask : masks_in_a_job(crowded)) EXPECT_EQ(mask, process);
  ThreadPool single(1, Pinning::kAlways);
  EXPECT_TRUE(single.pinned_cpus().empty());
}

TEST(ThreadPoolPinning, TheNextPoolStartsAtTheCpuAfterThePreviousPools) {
  const std::vector<int> process = thread_cpus();
  if (process.size() < 3) GTEST_SKIP() << "needs 3 CPUs to tell pools apart; this process may run on " << process.size();
  ThreadPool first(2, Pinning::kAlways);
  ThreadPool second(2, Pinning::kAlways);
  ASSERT_EQ(first.pinned_cpus().size(), 2u);
  ASSERT_EQ(second.pinned_cpus().size(), 2u);
  // With at least 3 CPUs the second pool's first CPU is neither of the first
  // pool's unless the order wrapped (3 CPUs: it takes the third, then the first).
  EXPECT_NE(second.pinned_cpus()[0], first.pinned_cpus()[0]);
  EXPECT_NE(second.pinned_cpus()[0], first.pinned_cpus()[1]);
}

}  // namespace
}  // namespace baton
