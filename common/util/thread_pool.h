// A persistent pool of worker threads for the kernels' parallel loops.
//
// Decode issues 100+ parallel_for calls per token, so a call must cost a few
// microseconds, not a thread start: workers spin briefly on a generation counter
// after each job (the next call usually comes soon), then sleep on a futex
// (std::atomic::wait) so an idle pool burns no CPU.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace baton {

// Threads for a pool: `requested` when > 0, else one per hardware thread.
int resolve_thread_count(int requested);

class ThreadPool {
 public:
  // n_threads counts the calling thread, which takes part in every call:
  // ThreadPool(1) starts no worker and runs everything inline. Must be >= 1.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();  // wakes and joins the workers
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Times a worker went to sleep (futex-waited) for want of a job.
  uint64_t sleeps() const { return sleeps_.load(std::memory_order_relaxed); }

  // While a Hot lives, the workers spin ~16x longer between jobs (~1 ms,
  // yielding their core now and then) before they sleep: a forward pass
  // issues its jobs back to back with serial gaps (norms, RoPE, the KV
  // store) and imbalances longer than the usual ~50 us spin, and a worker
  // that slept costs the next job a futex wake-up (~40 us on this VM; a
  // decode step has ~100 jobs). Bounded all the same (thread_pool.cc says
  // why). Scopes nest; outside them an idle pool sleeps after the short
  // spin (a step of the edge must not burn a core its turns need between
  // steps).
  class Hot {
   public:
    explicit Hot(ThreadPool& pool) : pool_(pool) { pool_.hot_.fetch_add(1, std::memory_order_relaxed); }
    ~Hot() { pool_.hot_.fetch_sub(1, std::memory_order_relaxed); }
    Hot(const Hot&) = delete;
    Hot& operator=(const Hot&) = delete;

   private:
    ThreadPool& pool_;
  };

  // Calls fn(begin, end) over contiguous ranges that together cover [0, n_tasks)
  // exactly once; returns when all are done. Static split: thread i of size()
  // gets [n_tasks*i/size(), n_tasks*(i+1)/size()), the caller is thread 0, so a
  // range is never empty and fn runs at most size() times.
  // Callers that want finer load balancing pass more, smaller tasks.
  // A call made from inside fn (nested) runs inline on that thread. One caller
  // at a time: concurrent calls from two outside threads are a BATON_CHECK failure.
  void parallel_for(int64_t n_tasks, const std::function<void(int64_t begin, int64_t end)>& fn);

  // The same cover of [0, n_tasks), handed out dynamically: every thread
  // (the caller included) claims chunks of `grain` consecutive tasks (the
  // last one shorter) from a shared counter in increasing order until none
  // are left, so a thread that starts late or runs slow (a shared machine)
  // does less instead of holding up the others. fn may run many times per
  // thread. grain >= 1. A one-thread pool, a job of one chunk and nested
  // calls run fn(0, n_tasks) inline.
  void parallel_for_dynamic(int64_t n_tasks, int64_t grain,
                            const std::function<void(int64_t begin, int64_t end)>& fn);

  // The same dynamic hand-out (consecutive chunks, increasing order, every
  // thread claiming), but a chunk is 1/(2 size()) of the tasks left, never
  // under min_grain: long runs while much is left, single tasks at the end,
  // so the threads finish within about a task of each other instead of a
  // fixed chunk (a prefill matmul's last chunk of 1/16 of the work left one
  // thread idle for ~3% of the call). min_grain >= 1; one-thread pools, jobs
  // of one chunk and nested calls run fn(0, n_tasks) inline.
  void parallel_for_guided(int64_t n_tasks, int64_t min_grain,
                           const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  // `seen`: the last generation this worker has handled (0 at construction).
  void worker_main(int thread_index, uint32_t seen);
  void run_share(int thread_index);

  const int n_threads_;
  std::vector<std::thread> workers_;  // n_threads_ - 1 threads, index 1..n

  // The current job, written by the caller before it bumps generation_ and
  // read by workers after they observe the new generation (release/acquire).
  const std::function<void(int64_t, int64_t)>* job_fn_ = nullptr;
  int64_t job_tasks_ = 0;
  int64_t job_grain_ = 0;  // 0: static split; else chunk size of a dynamic job (least chunk of a guided one)
  bool job_guided_ = false;  // chunks shrink with the tasks left (parallel_for_guided)

  // Next unclaimed task of a dynamic job; on its own cache line (every
  // thread increments it).
  alignas(64) std::atomic<int64_t> next_task_{0};

  std::atomic<uint32_t> generation_{0};  // bumped once per job; workers futex-wait on it
  std::atomic<int> pending_{0};          // workers still running the current job
  std::atomic<bool> stop_{false};        // set (before a final bump) by the destructor
  std::atomic<bool> in_call_{false};     // a parallel_for is running
  std::atomic<int> hot_{0};              // live Hot scopes: workers spin longer before sleeping
  std::atomic<uint64_t> sleeps_{0};

  void run_job(int64_t n_tasks, int64_t grain, bool guided, const std::function<void(int64_t, int64_t)>& fn);
};

}  // namespace baton
