// WriteStallWatchdog: the write-progress deadline of a server's streams
// (DESIGN.md "Security": a client that stops reading loses its call, never
// the server's workers).
//
// A server stream whose client stops reading (a zero HTTP/2 flow-control
// window) never completes its StartWrite; the producer then blocks in push()
// once the reactor's queue is full, holding a worker slot for as long as the
// client keeps the connection open. Each call registers a Watch; the reactor
// marks a write (or its Finish) in flight and done. One thread per watchdog
// scans the watches and cancels every call whose operation has been in
// flight for longer than the timeout: the call ends CANCELLED, the
// producer's push() fails, its slot is freed, and the cancel is logged and
// counted (stalled_calls(), and the optional /metrics counter).
//
// Lifetime: the cancel function (the call's TryCancel) may run the reactor's
// callbacks inline, OnDone included. Watch::close() (from OnDone, before the
// reactor goes) returns once no cancel of its call runs on another thread,
// and at once when called from inside that cancel.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/util/metrics.h"

namespace baton {

class WriteStallWatchdog {
 public:
  // One call's write state. Thread-safe.
  class Watch {
   public:
    Watch(std::string call, std::function<void()> cancel, int64_t timeout_ms)
        : call_(std::move(call)), cancel_(std::move(cancel)), timeout_ms_(timeout_ms) {}
    // A write (or the Finish) went out / completed.
    void write_started();
    void write_done();
    // True once the watchdog cancelled the call for a stalled write.
    bool stalled() const;
    int64_t timeout_ms() const { return timeout_ms_; }
    // The call is over: the cancel function is never started again, and none
    // runs on another thread when close() returns.
    void close();

   private:
    friend class WriteStallWatchdog;
    // True (once) when a write has been in flight since before
    // `stalled_before`: the call is then marked stalled, and this thread
    // must run_cancel() next.
    bool mark_if_stalled(std::chrono::steady_clock::time_point stalled_before);
    void run_cancel();

    const std::string call_;              // e.g. "Generate from ipv4:127.0.0.1:4242", for the log
    const std::function<void()> cancel_;
    const int64_t timeout_ms_;
    mutable std::mutex mu_;
    std::condition_variable cancel_done_cv_;
    bool writing_ = false;                                // guarded by mu_
    std::chrono::steady_clock::time_point write_start_;  // guarded by mu_; valid while writing_
    bool stalled_ = false;                                // guarded by mu_
    bool closed_ = false;                                 // guarded by mu_
    std::thread::id cancelling_;                          // guarded by mu_; the thread running cancel_
  };

  // timeout 0: no deadline (watch() returns nullptr, no thread runs).
  // `stalls` (optional, outlives the watchdog) counts the cancelled calls.
  explicit WriteStallWatchdog(std::chrono::milliseconds timeout, Counter* stalls = nullptr);
  ~WriteStallWatchdog();  // stops and joins the thread
  WriteStallWatchdog(const WriteStallWatchdog&) = delete;
  WriteStallWatchdog& operator=(const WriteStallWatchdog&) = delete;

  // Registers a call; `cancel` ends it (its context's TryCancel). nullptr
  // when the watchdog is off.
  std::shared_ptr<Watch> watch(std::string call, std::function<void()> cancel);

  std::chrono::milliseconds timeout() const { return timeout_; }
  // Calls cancelled for a stalled write so far.
  uint64_t stalled_calls() const { return stalled_calls_.load(); }

 private:
  void run();
  // Cancels the stalled calls and forgets the closed ones.
  void scan();

  const std::chrono::milliseconds timeout_;
  Counter* const stalls_counter_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;                          // guarded by mu_
  std::vector<std::weak_ptr<Watch>> watches_;  // guarded by mu_
  std::atomic<uint64_t> stalled_calls_{0};
  std::thread thread_;
};

}  // namespace baton
