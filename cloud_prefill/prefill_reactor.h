// PrefillReactor: the server side of one streaming RPC whose messages are
// produced on another thread (a Prefill job's encoder; GetPrefix's stored
// messages). The producer pushes messages (blocking while kMaxPendingMessages
// wait, so gRPC flow control paces it to the link) and says when it is done;
// the reactor writes them one at a time and finishes with the producer's
// status. OnDone deletes the reactor.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "proto/baton.pb.h"

namespace baton {

grpc::Status to_grpc_status(const absl::Status& status);

// One Prefill RPC. The worker thread produces messages (push / producer_done);
// the reactor writes them one at a time and calls Finish once the producer is
// done and the last write completed. OnDone (after Finish) deletes the
// reactor, so the worker may use it until it calls producer_done. gRPC calls
// (StartWrite, Finish) are made outside mu_: Finish may run OnDone on another
// thread at once.
class PrefillReactor final : public grpc::ServerWriteReactor<v1::KvStreamMessage> {
 public:
  // A refused request: finishes at once with `status`.
  explicit PrefillReactor(const grpc::Status& status) { Finish(status); }
  PrefillReactor() = default;

  // Queues a message; CANCELLED once the client is gone (the worker stops).
  // Blocks the worker while kMaxPendingMessages are waiting, so gRPC flow
  // control paces the encoder to the link.
  absl::Status push(v1::KvStreamMessage message) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      room_cv_.wait(lock, [this] { return cancelled_ || pending_.size() < kMaxPendingMessages; });
      if (cancelled_) return absl::CancelledError("the client cancelled the Prefill call");
      pending_.push_back(std::move(message));
    }
    pump();
    return absl::OkStatus();
  }

  // The worker is done with this reactor (it must not touch it afterwards).
  void producer_done(const absl::Status& status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      producer_done_ = true;
      producer_status_ = status;
    }
    pump();
  }

  bool cancelled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }

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
    pump();
  }

  void OnCancel() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      pending_.clear();
    }
    room_cv_.notify_all();
  }

  void OnDone() override { delete this; }

 private:
  // Starts the next write, or finishes once everything is written.
  void pump() {
    bool write = false;
    bool finish = false;
    grpc::Status final_status;
    {
      std::lock_guard<std::mutex> lock(mu_);
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
        final_status = cancelled_ && producer_status_.ok()
                           ? grpc::Status(grpc::StatusCode::CANCELLED, "Prefill call cancelled")
                           : to_grpc_status(producer_status_);
      }
    }
    if (write) StartWrite(&current_);
    if (finish) Finish(final_status);  // `this` may be gone after this line
  }

  // Messages (each <= ~1 MiB of payload) encoded ahead of the network.
  static constexpr size_t kMaxPendingMessages = 8;

  mutable std::mutex mu_;
  std::condition_variable room_cv_;          // pending_ shrank or the call ended
  std::deque<v1::KvStreamMessage> pending_;  // guarded by mu_
  v1::KvStreamMessage current_;              // the write in flight
  bool writing_ = false;                     // guarded by mu_
  bool cancelled_ = false;                   // guarded by mu_
  bool producer_done_ = false;               // guarded by mu_
  bool finished_ = false;                    // guarded by mu_
  absl::Status producer_status_;             // guarded by mu_
};


}  // namespace baton
