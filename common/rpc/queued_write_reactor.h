// QueuedWriteReactor: one server-streaming RPC (callback API) whose messages
// come from a worker thread: Prefill and GetPrefix on the cloud, Generate and
// PullPack on the edge. A worker thread produces messages (push) and ends the call (done);
// the reactor writes them one at a time and calls Finish once the producer
// is done and the last write completed. OnDone (after Finish) deletes the
// reactor, so the worker may use it until it calls done(). gRPC calls
// (StartWrite, Finish) are made outside mu_: Finish may run OnDone on
// another thread at once.
//
// push() blocks the worker while kMaxPending messages wait (flow control
// paces the producer to the client); it returns CANCELLED once the client is
// gone, which is how the worker learns to stop.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/rpc/cancel_slot.h"

namespace baton {

// Trailing metadata key of the retry hint on UNAVAILABLE / RESOURCE_EXHAUSTED.
inline constexpr char kRetryAfterMetadataKey[] = "baton-retry-after-ms";

inline grpc::Status to_grpc_status(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

template <typename Message>
class QueuedWriteReactor final : public grpc::ServerWriteReactor<Message> {
 public:
  explicit QueuedWriteReactor(grpc::CallbackServerContext* context) : context_(context) {}

  // Ends the call at once with `status` (a refused request). With
  // retry_after_ms > 0 the retry hint goes into trailing metadata.
  void refuse(const absl::Status& status, uint32_t retry_after_ms = 0) {
    if (retry_after_ms > 0) context_->AddTrailingMetadata(kRetryAfterMetadataKey, std::to_string(retry_after_ms));
    done(status);
  }

  // Queues a message; CANCELLED once the client is gone.
  absl::Status push(Message message) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      room_cv_.wait(lock, [this] { return cancelled_ || pending_.size() < kMaxPending; });
      if (cancelled_) return absl::CancelledError("the client went away");
      pending_.push_back(std::move(message));
    }
    pump();
    return absl::OkStatus();
  }

  // The producer is done (it must not touch the reactor afterwards).
  void done(const absl::Status& status) {
    // One critical section: once producer_done_ is visible, a concurrent
    // OnWriteDone may Finish and delete the reactor, so done() must not
    // take the lock again after releasing it.
    std::unique_lock<std::mutex> lock(mu_);
    producer_done_ = true;
    producer_status_ = status;
    pump(std::move(lock));
  }

  bool cancelled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }
  // Stops the producer's blocking work when the client goes away.
  CancelSlot& cancel_slot() { return cancel_slot_; }

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok) {
        cancelled_ = true;  // the stream is broken: drop the rest
        pending_.clear();
      }
    }
    room_cv_.notify_all();
    // A broken stream may never see OnCancel: stop the producer's blocking work too.
    if (!ok) cancel_slot_.cancel();
    pump();
  }

  void OnCancel() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      pending_.clear();
    }
    room_cv_.notify_all();
    cancel_slot_.cancel();
  }

  void OnDone() override { delete this; }

 private:
  void pump() { pump(std::unique_lock<std::mutex>(mu_)); }
  // Starts the next write or the Finish; `lock` holds mu_ and is released
  // before the gRPC call.
  void pump(std::unique_lock<std::mutex> lock) {
    bool write = false;
    bool finish = false;
    grpc::Status final_status;
    {
      if (finished_ || writing_) return;
      if (!pending_.empty() && !cancelled_) {
        current_ = std::move(pending_.front());
        pending_.pop_front();
        writing_ = true;
        write = true;
        room_cv_.notify_all();
      } else if (producer_done_) {
        finished_ = true;
        finish = true;
        final_status = cancelled_ && producer_status_.ok() ? grpc::Status(grpc::StatusCode::CANCELLED, "call cancelled")
                                                           : to_grpc_status(producer_status_);
      }
      lock.unlock();
    }
    if (write) this->StartWrite(&current_);
    if (finish) this->Finish(final_status);  // `this` may be gone after this line
  }

  static constexpr size_t kMaxPending = 64;

  grpc::CallbackServerContext* context_;
  mutable std::mutex mu_;
  std::condition_variable room_cv_;  // pending_ shrank or the call ended
  std::deque<Message> pending_;      // guarded by mu_
  Message current_;                  // the write in flight
  bool writing_ = false;             // guarded by mu_
  bool cancelled_ = false;           // guarded by mu_
  bool producer_done_ = false;       // guarded by mu_
  bool finished_ = false;            // guarded by mu_
  absl::Status producer_status_;     // guarded by mu_
  CancelSlot cancel_slot_;
};

}  // namespace baton
