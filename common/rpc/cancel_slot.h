// CancelSlot: lets the gRPC thread that learns a call was cancelled (a
// reactor's OnCancel) stop a blocking operation on the worker thread — e.g.
// a cloud Prefill stream stuck in Read — instead of waiting for its deadline.
// The worker arms the slot with how to stop its operation (TryCancel on its
// ClientContext) and disarms it before that operation's state goes away;
// disarm() waits for a cancel() running at the same time.
#pragma once

#include <functional>
#include <mutex>

namespace baton {

class CancelSlot {
 public:
  // Runs `stop` at once when the slot was already cancelled.
  void arm(std::function<void()> stop) {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = std::move(stop);
    if (cancelled_ && stop_) stop_();
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = nullptr;
  }
  void cancel() {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    if (stop_) stop_();
  }
  bool cancelled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }

 private:
  mutable std::mutex mu_;
  std::function<void()> stop_;  // guarded by mu_
  bool cancelled_ = false;      // guarded by mu_
};

}  // namespace baton
