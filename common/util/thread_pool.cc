#include "common/util/thread_pool.h"

#include <algorithm>

#include "common/util/check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace baton {
namespace {

// ~50-100 us of spinning (pause is ~40-140 cycles) before a worker sleeps:
// long enough to bridge the gap between two kernel calls within a token.
constexpr int kSpinIterations = 1 << 11;
// Inside a Hot scope: 16x longer (~1 ms), yielding the core every 64 pauses
// after the first kSpinIterations, then asleep all the same. Never unbounded:
// on a loaded machine (other processes, the edge's turn and gRPC threads) a
// worker that spins forever shares a core with the thread that would give
// it its next job, and each hand-off then waits out a scheduler time slice
// (a 512-wide model decoded at 11 tok/s instead of 220 that way).
constexpr int kHotSpinIterations = 1 << 15;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Set while a thread runs a pool job, so nested parallel_for runs inline.
thread_local bool t_inside_pool_job = false;

}  // namespace

int resolve_thread_count(int requested) {
  if (requested > 0) return requested;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads) {
  BATON_CHECK(n_threads >= 1, "a pool needs at least the calling thread");
  workers_.reserve(n_threads - 1);
  // Workers start from generation 0 as passed here, not from a load of
  // generation_ once running: a job published before a worker got scheduled
  // would otherwise be skipped, and the caller would wait for it forever.
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_main(i, 0); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::run_share(int thread_index) {
  if (job_guided_) {
    int64_t begin = next_task_.load(std::memory_order_relaxed);
    for (;;) {
      const int64_t left = job_tasks_ - begin;
      if (left <= 0) return;
      const int64_t chunk = std::min(left, std::max(job_grain_, left / (2 * int64_t{n_threads_})));
      if (!next_task_.compare_exchange_weak(begin, begin + chunk, std::memory_order_relaxed)) continue;
      (*job_fn_)(begin, begin + chunk);
      begin = next_task_.load(std::memory_order_relaxed);
    }
  }
  if (job_grain_ > 0) {
    for (;;) {
      const int64_t begin = next_task_.fetch_add(job_grain_, std::memory_order_relaxed);
      if (begin >= job_tasks_) return;
      (*job_fn_)(begin, std::min(begin + job_grain_, job_tasks_));
    }
  }
  const int64_t begin = job_tasks_ * thread_index / n_threads_;
  const int64_t end = job_tasks_ * (thread_index + 1) / n_threads_;
  if (begin < end) (*job_fn_)(begin, end);
}

void ThreadPool::worker_main(int thread_index, uint32_t seen) {
  t_inside_pool_job = true;  // a worker only ever runs pool jobs
  for (;;) {
    uint32_t now = generation_.load(std::memory_order_acquire);
    for (int spin = 0; now == seen; ++spin) {
      if (spin >= kSpinIterations) {
        if (spin >= kHotSpinIterations || hot_.load(std::memory_order_relaxed) == 0) break;
        if (spin % 64 == 0) std::this_thread::yield();
      }
      cpu_relax();
      now = generation_.load(std::memory_order_acquire);
    }
    if (now == seen) sleeps_.fetch_add(1, std::memory_order_relaxed);
    while (now == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      now = generation_.load(std::memory_order_acquire);
    }
    seen = now;
    if (stop_.load(std::memory_order_relaxed)) return;
    run_share(thread_index);
    // The caller cannot publish the next job before this, so no generation is missed.
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t n_tasks,
                              const std::function<void(int64_t begin, int64_t end)>& fn) {
  run_job(n_tasks, 0, /*guided=*/false, fn);
}

void ThreadPool::parallel_for_dynamic(int64_t n_tasks, int64_t grain,
                                      const std::function<void(int64_t begin, int64_t end)>& fn) {
  BATON_CHECK(grain >= 1, "parallel_for_dynamic: grain must be >= 1");
  run_job(n_tasks, grain, /*guided=*/false, fn);
}

void ThreadPool::parallel_for_guided(int64_t n_tasks, int64_t min_grain,
                                     const std::function<void(int64_t begin, int64_t end)>& fn) {
  BATON_CHECK(min_grain >= 1, "parallel_for_guided: min_grain must be >= 1");
  run_job(n_tasks, min_grain, /*guided=*/true, fn);
}

void ThreadPool::run_job(int64_t n_tasks, int64_t grain, bool guided,
                         const std::function<void(int64_t, int64_t)>& fn) {
  if (n_tasks <= 0) return;
  if (n_threads_ == 1 || n_tasks == 1 || t_inside_pool_job || (grain > 0 && grain >= n_tasks)) {
    fn(0, n_tasks);
    return;
  }
  const bool was_in_call = in_call_.exchange(true, std::memory_order_acquire);
  BATON_CHECK(!was_in_call, "ThreadPool::parallel_for called from two threads at once");

  job_fn_ = &fn;
  job_tasks_ = n_tasks;
  job_grain_ = grain;
  job_guided_ = guided;
  next_task_.store(0, std::memory_order_relaxed);
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();

  t_inside_pool_job = true;
  run_share(0);
  t_inside_pool_job = false;

  int left = pending_.load(std::memory_order_acquire);
  for (int spin = 0; left != 0 && spin < kSpinIterations; ++spin) {
    cpu_relax();
    left = pending_.load(std::memory_order_acquire);
  }
  while (left != 0) {
    pending_.wait(left, std::memory_order_acquire);
    left = pending_.load(std::memory_order_acquire);
  }
  in_call_.store(false, std::memory_order_release);
}

}  // namespace baton
