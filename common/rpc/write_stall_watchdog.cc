#include "common/rpc/write_stall_watchdog.h"

#include <algorithm>

#include "common/util/clock.h"
#include "common/util/log.h"

namespace baton {

void WriteStallWatchdog::Watch::write_started() {
  std::lock_guard<std::mutex> lock(mu_);
  writing_ = true;
  write_start_ = SteadyClock::now();
}

void WriteStallWatchdog::Watch::write_done() {
  std::lock_guard<std::mutex> lock(mu_);
  writing_ = false;
}

bool WriteStallWatchdog::Watch::stalled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stalled_;
}

void WriteStallWatchdog::Watch::close() {
  std::unique_lock<std::mutex> lock(mu_);
  closed_ = true;
  // From inside cancel_ (TryCancel ran OnDone inline) the caller is the
  // cancelling thread itself: waiting would never end.
  const std::thread::id self = std::this_thread::get_id();
  cancel_done_cv_.wait(lock, [&] { return cancelling_ == std::thread::id() || cancelling_ == self; });
}

bool WriteStallWatchdog::Watch::mark_if_stalled(SteadyClock::time_point stalled_before) {
  double stalled_ms = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || stalled_ || !writing_ || write_start_ >= stalled_before) return false;
    stalled_ = true;
    cancelling_ = std::this_thread::get_id();  // close() on another thread now waits for run_cancel()
    stalled_ms = ms_since(write_start_);
  }
  BATON_WARN("%s: no write progress for %.0f ms (the client stopped reading); cancelling the call", call_.c_str(),
             stalled_ms);
  return true;
}

void WriteStallWatchdog::Watch::run_cancel() {
  cancel_();  // may run the reactor's OnDone (and so close()) on this thread
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelling_ = std::thread::id();
  }
  cancel_done_cv_.notify_all();
}

WriteStallWatchdog::WriteStallWatchdog(std::chrono::milliseconds timeout, Counter* stalls)
    : timeout_(timeout), stalls_counter_(stalls) {
  if (timeout_.count() > 0) thread_ = std::thread([this] { run(); });
}

WriteStallWatchdog::~WriteStallWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<WriteStallWatchdog::Watch> WriteStallWatchdog::watch(std::string call, std::function<void()> cancel) {
  if (timeout_.count() <= 0) return nullptr;
  auto watch = std::make_shared<Watch>(std::move(call), std::move(cancel), timeout_.count());
  std::lock_guard<std::mutex> lock(mu_);
  watches_.push_back(watch);
  return watch;
}

void WriteStallWatchdog::run() {
  // A stall is noticed between timeout and timeout + period after its write started.
  const auto period = std::clamp<std::chrono::milliseconds>(timeout_ / 4, std::chrono::milliseconds(5),
                                                            std::chrono::milliseconds(250));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, period, [this] { return stop_; })) {
    lock.unlock();
    scan();
    lock.lock();
  }
}

void WriteStallWatchdog::scan() {
  std::vector<std::shared_ptr<Watch>> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    live.reserve(watches_.size());
    std::erase_if(watches_, [&](const std::weak_ptr<Watch>& weak) {
      std::shared_ptr<Watch> watch = weak.lock();
      if (watch == nullptr) return true;
      live.push_back(std::move(watch));
      return false;
    });
  }
  // Cancels run without mu_: they may register or close watches.
  const SteadyClock::time_point stalled_before = SteadyClock::now() - timeout_;
  for (const std::shared_ptr<Watch>& watch : live) {
    if (!watch->mark_if_stalled(stalled_before)) continue;
    // Counted before the cancel: whoever sees the call end sees it counted.
    ++stalled_calls_;
    if (stalls_counter_ != nullptr) stalls_counter_->inc();
    watch->run_cancel();
  }
}

}  // namespace baton
