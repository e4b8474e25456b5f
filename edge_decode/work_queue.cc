#include "edge_decode/work_queue.h"

namespace baton {

WorkQueue::WorkQueue(int max_queued) : max_queued_(max_queued), worker_([this] { loop(); }) {}

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
    if (stopping_ && !worker_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  std::deque<Job> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
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
  return running_ ? 1 : 0;
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
      running_ = true;
    }
    job(true);
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
  }
}

}  // namespace baton
