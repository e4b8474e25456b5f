// QueuedWriteReactor: one server-streaming RPC (callback API) whose messages
// come from a worker thread: Prefill and GetPrefix on the cloud, Generate and
// PullPack on the edge. A worker thread produces messages (push) and ends the call (done);
// the reactor writes them one at a time and calls Finish once the producer
// is done and the last write completed. OnDone (after Finish) deletes the
// reactor, so the worker may use it until it calls done(). gRPC calls
// (StartWrite, Finish) are made outside mu_: Finish may run OnDone on
// another thread at once.
//
// push() blocks the worker while max_pending messages wait (flow control
// paces the producer to the client); it returns CANCELLED once the client is
// gone, which is how the worker learns to stop. A producer whose whole output
// is bounded (a Generate turn under --max-tokens-cap) sizes max_pending to
// hold all of it, so a slow client never holds the worker.
//
// With a WriteStallWatchdog, a write (or the Finish) that makes no progress
// for the watchdog's timeout cancels the call (a client that stopped
// reading): the producer's push() then fails and its slot is freed.
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
#include "common/rpc/grpc_status.h"
#include "common/rpc/pending_writes.h"
#include "common/rpc/tsan_annotations.h"
#include "common/rpc/write_stall_watchdog.h"

namespace baton {

template <typename Message>
class QueuedWriteReactor final : public grpc::ServerWriteReactor<Message> {
 public:
  static constexpr size_t kDefaultMaxPending = 64;

  // `watchdog` (optional) puts the call under its write-progress deadline;
  // `call_name` names the call in its log line ("Prefill").
  explicit QueuedWriteReactor(grpc::CallbackServerContext* context, WriteStallWatchdog* watchdog = nullptr,
                              const char* call_name = "stream", size_t max_pending = kDefaultMaxPending)
      : context_(context), max_pending_(max_pending) {
    if (watchdog != nullptr) {
      // TryCancel is safe until OnDone, and OnDone waits in close() for a cancel running elsewhere.
      watch_ = watchdog->watch(absl::StrCat(call_name, " from ", context->peer()), [context] { context->TryCancel(); });
    }
  }

  // Ends the call at once with `status` (a refused request), from the
  // handler before it returns the reactor. With retry_after_ms > 0 the retry
  // hint goes into trailing metadata.
  void refuse(const absl::Status& status, uint32_t retry_after_ms = 0) {
    if (retry_after_ms > 0) add_retry_after(*context_, retry_after_ms);
    done(status);
  }

  // Queues a message; CANCELLED once the client is gone.
  absl::Status push(Message message) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      room_cv_.wait(lock, [this] { return cancelled_ || pending_.size() < max_pending_; });
      if (cancelled_) return cancelled_status();
      pending_.push(std::move(message));
    }
    pump();
    return absl::OkStatus();
  }

  // Queues a message ahead of the regular ones waiting, after the urgent
  // ones before it, never ahead of the call's first message
  // (PendingWrites::push_urgent): early tokens overtake the KV blocks still
  // queued. Never blocks (the queue may pass max_pending by these);
  // CANCELLED once the client is gone.
  absl::Status push_urgent(Message message) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cancelled_) return cancelled_status();
      pending_.push_urgent(std::move(message));
    }
    pump();
    return absl::OkStatus();
  }

  // Queues a snapshot (a progress report) that a newer snapshot of the same
  // `kind` (e.g. the same phase) replaces while it still waits, so a client
  // still sees every change of kind; never blocks: with the queue full it is
  // dropped (later messages supersede it). CANCELLED once the client is gone.
  absl::Status push_snapshot(Message message, int64_t kind = 0) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cancelled_) return cancelled_status();
      if (pending_.replace_snapshot(message, kind)) return absl::OkStatus();
      if (pending_.size() >= max_pending_) return absl::OkStatus();
      pending_.push_snapshot(std::move(message), kind);
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
      if (watch_ != nullptr) watch_->write_done();
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
    TsanOnCancelEdge::cancelled(this);
  }

  void OnDone() override {
    TsanOnCancelEdge::done(this);
    if (watch_ != nullptr) watch_->close();  // no TryCancel of this call runs elsewhere after this
    delete this;
  }

 private:
  // guarded by mu_
  absl::Status cancelled_status() const {
    if (watch_ != nullptr && watch_->stalled()) {
      return absl::CancelledError(absl::StrCat("the client stopped reading: no write progress for ",
                                               watch_->timeout_ms(), " ms (the write-stall timeout)"));
    }
    return absl::CancelledError("the client went away");
  }

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
        current_ = pending_.pop();
        writing_ = true;
        write = true;
        if (watch_ != nullptr) watch_->write_started();
        room_cv_.notify_all();
      } else if (producer_done_) {
        finished_ = true;
        finish = true;
        if (watch_ != nullptr) watch_->write_started();  // the status (after queued data) may stall too
        final_status = cancelled_ && producer_status_.ok() ? grpc::Status(grpc::StatusCode::CANCELLED, "call cancelled")
                                                           : to_grpc_status(producer_status_);
      }
      lock.unlock();
    }
    if (write) this->StartWrite(&current_);
    if (finish) this->Finish(final_status);  // `this` may be gone after this line
  }

  grpc::CallbackServerContext* context_;
  const size_t max_pending_;
  std::shared_ptr<WriteStallWatchdog::Watch> watch_;  // null: no write-progress deadline
  mutable std::mutex mu_;
  std::condition_variable room_cv_;  // pending_ shrank or the call ended
  PendingWrites<Message> pending_;   // guarded by mu_
  Message current_;                  // the write in flight
  bool writing_ = false;             // guarded by mu_
  bool cancelled_ = false;           // guarded by mu_
  bool producer_done_ = false;       // guarded by mu_
  bool finished_ = false;            // guarded by mu_
  absl::Status producer_status_;     // guarded by mu_
  CancelSlot cancel_slot_;
};

}  // namespace baton
