// WorkQueue: one worker thread running jobs in arrival order. The edge agent
// has one (the device's Engine computes one generation at a time; others
// wait here) plus one for network-bound pack pulls, so no job ever blocks a
// gRPC thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace baton {

class WorkQueue {
 public:
  // A job gets `true` when it runs normally, `false` when the queue stops
  // before it started (it must then just end its call).
  using Job = std::function<void(bool run)>;

  // At most `max_queued` jobs wait (0: no cap).
  explicit WorkQueue(int max_queued);
  ~WorkQueue();  // stop()
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // False when the queue is full or stopped.
  bool try_push(Job job);
  // Lets the running job end, calls the waiting ones with false, joins.
  void stop();

  uint32_t queued() const;
  uint32_t running() const;

 private:
  void loop();

  const int max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;   // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  bool running_ = false;   // guarded by mu_
  std::thread worker_;
};

}  // namespace baton
