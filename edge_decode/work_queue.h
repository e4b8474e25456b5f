// WorkQueue: worker threads running jobs in arrival order. The edge agent
// has one for Generate turns (--max-batch workers: that many turns run at
// once, their decode steps batched by the DecodeBatcher; others wait here)
// plus one worker for network-bound pack pulls, so no job ever blocks a gRPC
// thread.
//
// A job may carry a key (the edge: its session id): jobs of one key run one
// at a time in arrival order, and a free worker takes the first waiting job
// whose key is not running, so a session's turns queue behind each other (as
// they did with one worker) without holding up other sessions.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace baton {

class WorkQueue {
 public:
  // A job gets `true` when it runs normally, `false` when the queue stops
  // before it started (it must then just end its call).
  using Job = std::function<void(bool run)>;

  // At most `max_queued` jobs wait (0: no cap) for one of `workers` (>= 1)
  // threads.
  explicit WorkQueue(int max_queued, int workers = 1);
  ~WorkQueue();  // stop()
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // False when the queue is full or stopped. `key`: see above; empty: none.
  bool try_push(Job job, std::string key = {});
  // Lets the running jobs end, calls the waiting ones with false, joins.
  void stop();

  uint32_t queued() const;   // jobs waiting for a worker
  uint32_t running() const;  // jobs running

 private:
  void loop();
  struct Entry {
    Job job;
    std::string key;
  };
  // The first waiting job whose key is not running; jobs_.end() if none.
  std::deque<Entry>::iterator next_runnable_locked();

  const int max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> jobs_;  // guarded by mu_
  std::multiset<std::string> running_keys_;  // guarded by mu_: keys of running jobs (non-empty ones)
  bool stopping_ = false;  // guarded by mu_
  int running_ = 0;        // guarded by mu_
  bool joined_ = false;    // guarded by mu_: stop() joined the workers
  std::vector<std::thread> workers_;
};

}  // namespace baton
