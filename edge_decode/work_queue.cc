#include "edge_decode/work_queue.h"

#include "common/util/check.h"

namespace baton {

WorkQueue::WorkQueue(int max_queued, int workers) : max_queued_(max_queued) {
  BATON_CHECK(workers >= 1, "a work queue needs a worker");
  for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { loop(); });
}

WorkQueue::~WorkQueue() { stop(); }

bool WorkQueue::try_push(Job job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    if (max_queued_ > 0 && static_cast<int>(jobs_.size()) >= max_queued_) return false;
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
  return true;
}

void WorkQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (joined_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& worker : workers_) {
    if (worker.joinable()) worker.join();
  }
  std::deque<Job> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    joined_ = true;
    left.swap(jobs_);
  }
  for (Job& job : left) job(false);
}

uint32_t WorkQueue::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<uint32_t>(jobs_.size());
}

uint32_t WorkQueue::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<uint32_t>(running_);
}

void WorkQueue::loop() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
      ++running_;
    }
    job(true);
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
  }
}

}  // namespace baton
