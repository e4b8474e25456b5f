#include "common/util/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

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

// Where the next pinning pool starts in the CPU order (see thread_pool.h).
// Unsigned: a server that makes a pool per request wraps it, harmlessly.
std::atomic<unsigned> g_next_first_cpu{0};

// The CPUs this thread may run on, in increasing order (empty on error).
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

// An id of cpu's physical core from sysfs (package x 2^16 + core id), -1 when
// unreadable.
int core_id_of(int cpu) {
  const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
  int package = -1, core = -1;
  std::ifstream(dir + "physical_package_id") >> package;
  std::ifstream(dir + "core_id") >> core;
  if (package < 0 || core < 0) return -1;
  return package * 65536 + core;
}

// The CPUs an n-thread pool pins to, from the next free place in the order;
// empty when it should not pin.
std::vector<int> choose_cpus(int n_threads, Pinning pinning) {
  if (n_threads < 2 || pinning == Pinning::kNever) return {};
  const std::vector<int> allowed = allowed_cpus();
  if (!should_pin(pinning, std::getenv("BATON_PIN_THREADS"), n_threads, static_cast<int>(allowed.size()))) return {};
  std::vector<int> core_of;
  core_of.reserve(allowed.size());
  for (int cpu : allowed) core_of.push_back(core_id_of(cpu));
  const std::vector<int> order = cpus_by_core(allowed, core_of);
  const size_t n = order.size();
  const size_t first = g_next_first_cpu.fetch_add(static_cast<unsigned>(n_threads), std::memory_order_relaxed) % n;
  std::vector<int> cpus;
  for (size_t i = 0; i < static_cast<size_t>(n_threads); ++i) cpus.push_back(order[(first + i) % n]);
  return cpus;
}

// Pins the calling thread to one CPU; false (and nothing changed) on error.
bool pin_this_thread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

}  // namespace

std::vector<int> cpus_by_core(const std::vector<int>& allowed, const std::vector<int>& core_of) {
  BATON_CHECK(allowed.size() == core_of.size(), "cpus_by_core: one core id per CPU");
  std::vector<int> first, rest;
  std::vector<int> seen;
  for (size_t i = 0; i < allowed.size(); ++i) {
    const bool known = core_of[i] >= 0;
    if (known && std::find(seen.begin(), seen.end(), core_of[i]) != seen.end()) {
      rest.push_back(allowed[i]);
      continue;
    }
    if (known) seen.push_back(core_of[i]);
    first.push_back(allowed[i]);
  }
  first.insert(first.end(), rest.begin(), rest.end());
  return first;
}

bool should_pin(Pinning pinning, const char* env, int n_threads, int n_cpus) {
  if (n_threads < 2 || n_cpus < n_threads || pinning == Pinning::kNever) return false;
  if (pinning == Pinning::kAlways) return true;
  if (env != nullptr && std::strcmp(env, "0") == 0) return false;
  if (env != nullptr && std::strcmp(env, "1") == 0) return true;
  return n_threads == n_cpus;
}

int resolve_thread_count(int requested) {
  if (requested > 0) return requested;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(int n_threads, Pinning pinning) : n_threads_(n_threads), ranges_(static_cast<size_t>(n_threads)) {
  BATON_CHECK(n_threads >= 1, "a pool needs at least the calling thread");
  cpus_ = choose_cpus(n_threads, pinning);
  workers_.reserve(n_threads - 1);
  // Workers start from generation 0 as passed here, not from a load of
  // generation_ once running: a job published before a worker got scheduled
  // would otherwise be skipped, and the caller would wait for it forever.
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_main(i, 0); });
}

ThreadPool::Hot::Hot(ThreadPool& pool) : pool_(pool) {
  pool_.hot_.fetch_add(1, std::memory_order_relaxed);
  if (pool_.cpus_.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (pthread_getaffinity_np(pthread_self(), sizeof(set), &set) != 0) return;
  if (CPU_COUNT(&set) == 1 && CPU_ISSET(pool_.cpus_[0], &set)) return;  // already there (an outer scope)
  if (!pin_this_thread(pool_.cpus_[0])) return;
  saved_mask_.resize(sizeof(set) / sizeof(uint64_t));
  std::memcpy(saved_mask_.data(), &set, sizeof(set));
  restore_ = true;
}

ThreadPool::Hot::~Hot() {
  if (restore_) {
    cpu_set_t set;
    std::memcpy(&set, saved_mask_.data(), sizeof(set));
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  }
  pool_.hot_.fetch_sub(1, std::memory_order_relaxed);
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (std::thread& t : workers_) t.join();
}

namespace {
// Thread i's part of the static split of n tasks over n_threads: [share_begin(i), share_begin(i + 1)).
constexpr int64_t share_begin(int64_t n_tasks, int64_t i, int64_t n_threads) { return n_tasks * i / n_threads; }
constexpr uint64_t pack_range(uint64_t front, uint64_t end) { return front << 32 | end; }
constexpr int64_t range_front(uint64_t r) { return static_cast<int64_t>(r >> 32); }
constexpr int64_t range_end(uint64_t r) { return static_cast<int64_t>(r & 0xffffffffu); }
}  // namespace

void ThreadPool::run_stealing(int thread_index) {
  std::atomic<uint64_t>& mine = ranges_[static_cast<size_t>(thread_index)].bounds;
  // This thread's range, front to back, a task per claim (a thief may take the back meanwhile).
  auto drain = [&] {
    uint64_t r = mine.load(std::memory_order_acquire);
    while (range_front(r) < range_end(r)) {
      const int64_t task = range_front(r);
      const uint64_t rest = pack_range(static_cast<uint64_t>(task) + 1, static_cast<uint64_t>(range_end(r)));
      if (!mine.compare_exchange_weak(r, rest, std::memory_order_acq_rel)) continue;  // r reloaded
      (*job_fn_)(task, task + 1);
      r = mine.load(std::memory_order_acquire);
    }
  };
  drain();
  // Then the back half of the largest range left, as this thread's own, until none is.
  for (;;) {
    int victim = -1;
    int64_t most = 0;
    uint64_t victim_r = 0;
    for (int i = 0; i < n_threads_; ++i) {
      const uint64_t ri = ranges_[static_cast<size_t>(i)].bounds.load(std::memory_order_acquire);
      if (range_end(ri) - range_front(ri) > most) victim = i, most = range_end(ri) - range_front(ri), victim_r = ri;
    }
    if (victim < 0) return;
    const int64_t end = range_end(victim_r), first = end - (most + 1) / 2;
    const uint64_t shrunk = pack_range(static_cast<uint64_t>(range_front(victim_r)), static_cast<uint64_t>(first));
    std::atomic<uint64_t>& theirs = ranges_[static_cast<size_t>(victim)].bounds;
    if (!theirs.compare_exchange_strong(victim_r, shrunk, std::memory_order_acq_rel)) continue;  // it moved: look again
    mine.store(pack_range(static_cast<uint64_t>(first), static_cast<uint64_t>(end)), std::memory_order_release);
    drain();
  }
}

void ThreadPool::run_share(int thread_index) {
  if (job_schedule_ == Schedule::kStealing) return run_stealing(thread_index);
  if (job_schedule_ == Schedule::kGuided) {
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
  if (job_schedule_ == Schedule::kDynamic) {
    for (;;) {
      const int64_t begin = next_task_.fetch_add(job_grain_, std::memory_order_relaxed);
      if (begin >= job_tasks_) return;
      (*job_fn_)(begin, std::min(begin + job_grain_, job_tasks_));
    }
  }
  const int64_t begin = share_begin(job_tasks_, thread_index, n_threads_);
  const int64_t end = share_begin(job_tasks_, thread_index + 1, n_threads_);
  if (begin < end) (*job_fn_)(begin, end);
}

void ThreadPool::worker_main(int thread_index, uint32_t seen) {
  t_inside_pool_job = true;  // a worker only ever runs pool jobs
  if (!cpus_.empty()) pin_this_thread(cpus_[thread_index]);  // a hint: on error it runs unpinned
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
  run_job(n_tasks, 0, Schedule::kStatic, fn);
}

void ThreadPool::parallel_for_dynamic(int64_t n_tasks, int64_t grain,
                                      const std::function<void(int64_t begin, int64_t end)>& fn) {
  BATON_CHECK(grain >= 1, "parallel_for_dynamic: grain must be >= 1");
  run_job(n_tasks, grain, Schedule::kDynamic, fn);
}

void ThreadPool::parallel_for_guided(int64_t n_tasks, int64_t min_grain,
                                     const std::function<void(int64_t begin, int64_t end)>& fn) {
  BATON_CHECK(min_grain >= 1, "parallel_for_guided: min_grain must be >= 1");
  run_job(n_tasks, min_grain, Schedule::kGuided, fn);
}

void ThreadPool::parallel_for_stealing(int64_t n_tasks, const std::function<void(int64_t begin, int64_t end)>& fn) {
  BATON_CHECK(n_tasks < (int64_t{1} << 31), "parallel_for_stealing: n_tasks must be < 2^31");
  run_job(n_tasks, 1, Schedule::kStealing, fn);
}

void ThreadPool::run_job(int64_t n_tasks, int64_t grain, Schedule schedule,
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
  job_schedule_ = schedule;
  next_task_.store(0, std::memory_order_relaxed);
  if (schedule == Schedule::kStealing) {
    for (int i = 0; i < n_threads_; ++i) {
      ranges_[static_cast<size_t>(i)].bounds.store(
          pack_range(static_cast<uint64_t>(share_begin(n_tasks, i, n_threads_)),
                     static_cast<uint64_t>(share_begin(n_tasks, i + 1, n_threads_))),
          std::memory_order_relaxed);
    }
  }
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
