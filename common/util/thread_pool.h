// A persistent pool of worker threads for the kernels' parallel loops.
//
// Decode issues 100+ parallel_for calls per token, so a call must cost a few
// microseconds, not a thread start: workers spin briefly on a generation counter
// after each job (the next call usually comes soon), then sleep on a futex
// (std::atomic::wait) so an idle pool burns no CPU.
//
// Pinning: a pool that takes every CPU its process may run on pins worker i
// to the i-th CPU (one per physical core first), and a Hot scope (a forward
// pass) pins its calling thread to the 0th for the scope's life, restoring
// the caller's own mask after. Unpinned, Linux often puts a thread woken from
// the futex beside the one that woke it, so for a while both run on one core:
// on a 2-core VM a 2-thread decode step ran no faster than a 1-thread one.
// Pinned, 1B Q4_0 decode was +12% / +22% / +37% at context 512 / 4096 /
// 16384 (medians of interleaved runs; the README has them and the command).
// A pool of fewer threads than CPUs leaves them unpinned (the other CPUs are
// other processes'), unless BATON_PIN_THREADS=1; BATON_PIN_THREADS=0 never
// pins. Each pinning pool of a process starts at the CPU after the previous
// one's, so concurrent pools on a large machine spread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace baton {

// Threads for a pool: `requested` when > 0, else one per hardware thread.
int resolve_thread_count(int requested);

// The order in which a pool takes CPUs: `allowed` (the process's CPUs, in
// increasing order) with, first, the first CPU of each physical core
// (core_of[i]: an id of allowed[i]'s core, equal for SMT siblings), then the
// siblings left, each group in the order given. A core id of -1 (unknown)
// counts as a core of its own.
std::vector<int> cpus_by_core(const std::vector<int>& allowed, const std::vector<int>& core_of);

// How a pool chooses whether to pin (see the top of this file).
enum class Pinning {
  kAuto,    // BATON_PIN_THREADS: "0" never, "1" whenever the CPUs suffice, else when the pool takes them all
  kAlways,  // whenever the process may run on at least n_threads CPUs
  kNever,
};

// Whether an n_threads pool pins, given its Pinning, BATON_PIN_THREADS's
// value (nullptr when unset) and the number of CPUs the process may run on.
bool should_pin(Pinning pinning, const char* env, int n_threads, int n_cpus);

class ThreadPool {
 public:
  // n_threads counts the calling thread, which takes part in every call:
  // ThreadPool(1) starts no worker and runs everything inline. Must be >= 1.
  // pinning: see the top of this file.
  explicit ThreadPool(int n_threads, Pinning pinning = Pinning::kAuto);
  ~ThreadPool();  // wakes and joins the workers
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // The CPUs the threads are pinned to (the caller's, in a Hot scope, first);
  // empty when the pool does not pin.
  const std::vector<int>& pinned_cpus() const { return cpus_; }
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
  // steps). A pinning pool also pins the scope's thread to pinned_cpus()[0]
  // while the scope lives, and gives it back the mask it had.
  class Hot {
   public:
    explicit Hot(ThreadPool& pool);
    ~Hot();
    Hot(const Hot&) = delete;
    Hot& operator=(const Hot&) = delete;

   private:
    ThreadPool& pool_;
    bool restore_ = false;  // the caller's mask was changed and is saved below
    std::vector<uint64_t> saved_mask_;
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
  // The same cover of [0, n_tasks), by work stealing: thread i owns the
  // static split's range [n_tasks*i/size(), n_tasks*(i+1)/size()) and runs
  // it front to back one task at a time (one weight stream per thread, as
  // long as a thread's share); a thread whose range is done takes the back
  // half of the largest range left (at least one task), and so on until
  // none is left. So the threads end within about a task of each other
  // without cutting every stream into fixed chunks (a decode matmul's last
  // chunk of 1/4 of a call left one thread waiting on the other) and a
  // thread that starts late or runs slow does less. n_tasks < 2^31; a
  // one-thread pool, a job of one task and nested calls run fn(0, n_tasks)
  // inline.
  void parallel_for_stealing(int64_t n_tasks, const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  // `seen`: the last generation this worker has handled (0 at construction).
  void worker_main(int thread_index, uint32_t seen);
  void run_share(int thread_index);

  const int n_threads_;
  std::vector<int> cpus_;  // pinned_cpus(): thread i's CPU; empty: unpinned
  std::vector<std::thread> workers_;  // n_threads_ - 1 threads, index 1..n

  // The current job, written by the caller before it bumps generation_ and
  // read by workers after they observe the new generation (release/acquire).
  // kStatic: the static split; kDynamic: chunks of job_grain_ claimed in
  // turn; kGuided: chunks shrinking with the tasks left, at least job_grain_;
  // kStealing: owned ranges, stolen from at the back.
  enum class Schedule { kStatic, kDynamic, kGuided, kStealing };
  const std::function<void(int64_t, int64_t)>* job_fn_ = nullptr;
  int64_t job_tasks_ = 0;
  int64_t job_grain_ = 0;
  Schedule job_schedule_ = Schedule::kStatic;

  // Next unclaimed task of a dynamic job; on its own cache line (every
  // thread increments it).
  alignas(64) std::atomic<int64_t> next_task_{0};

  // A stealing job's ranges, one per thread on its own cache line: the
  // front (next task the owner runs) in the high 32 bits, the end in the low.
  struct alignas(64) OwnedRange {
    std::atomic<uint64_t> bounds{0};
  };
  std::vector<OwnedRange> ranges_;
  void run_stealing(int thread_index);

  std::atomic<uint32_t> generation_{0};  // bumped once per job; workers futex-wait on it
  std::atomic<int> pending_{0};          // workers still running the current job
  std::atomic<bool> stop_{false};        // set (before a final bump) by the destructor
  std::atomic<bool> in_call_{false};     // a parallel_for is running
  std::atomic<int> hot_{0};              // live Hot scopes: workers spin longer before sleeping
  std::atomic<uint64_t> sleeps_{0};

  void run_job(int64_t n_tasks, int64_t grain, Schedule schedule, const std::function<void(int64_t, int64_t)>& fn);
};

}  // namespace baton
