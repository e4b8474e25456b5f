#include "edge_decode/work_queue.h"

#include <algorithm>

#include "common/util/check.h"

namespace baton {

WorkQueue::WorkQueue(int max_queued, int workers) : max_queued_(max_queued) {
  BATON_CHECK(workers >= 1, "a work queue needs a worker");
  for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { loop(); });
}

WorkQueue::~WorkQueue() { stop(); }

bool WorkQueue::try_push(Job job, std::string key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    if (max_queued_ > 0 && static_cast<int>(jobs_.size()) >= max_queued_) return false;
    jobs_.push_back(Entry{std::move(job), std::move(key)});
  }
  cv_.notify_all();  // the worker that is free may not be the one notify_one wakes
  return true;
}

std::deque<WorkQueue::Entry>::iterator WorkQueue::next_runnable_locked() {
  return std::find_if(jobs_.begin(), jobs_.end(),
                      [this](const Entry& e) { return e.key.empty() || !running_keys_.contains(e.key); });
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
  std::deque<Entry> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    joined_ = true;
    left.swap(jobs_);
  }
  for (Entry& entry : left) entry.job(false);
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
    Entry entry;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || next_runnable_locked() != jobs_.end(); });
      if (stopping_) return;
      auto next = next_runnable_locked();
      entry = std::move(*next);
      jobs_.erase(next);
      if (!entry.key.empty()) running_keys_.insert(entry.key);
      ++running_;
    }
    entry.job(true);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --running_;
      if (!entry.key.empty()) running_keys_.erase(running_keys_.find(entry.key));
    }
    cv_.notify_all();  // a job waiting for this key may run now
  }
}

}  // namespace baton
