#pragma once
// Watches a cloud KV stream while the edge reads it and ends the call when
// waiting no longer pays: nothing arrived for the stall timeout, or (under
// policy auto) the rest of the stream, projected from its recent pace (the
// last 2 s, so a collapse mid-stream shows at once), would take longer than
// prefilling locally from scratch. A bandwidth collapse
// mid-stream then costs the user about one local prefill, not the whole
// cloud deadline.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace baton {

struct StreamWatchdogLimits {
  std::chrono::milliseconds stall_timeout{0};  // no message for this long ends the call; 0: never
  // > 0: the estimated local prefill time of the same tokens (ms); the call
  // ends when the projected rest exceeds 1.5x this + 1 s. 0: never.
  double local_prefill_ms = 0;
  std::chrono::milliseconds min_observation{1000};  // no projection before this much of the stream
  std::chrono::milliseconds pace_window{2000};      // the recent pace is measured over this much time
};

// Where a stream stands, for StreamWatchdog::judge.
struct StreamPace {
  double elapsed_ms = 0;     // since the call began
  double since_last_ms = 0;  // since the last message
  uint64_t received = 0;     // units so far
  uint64_t total = 0;        // units in a complete stream
  double window_ms = 0;      // the recent window: min(pace_window, elapsed)
  uint64_t window_units = 0; // units received within it
};

class StreamWatchdog {
 public:
  // total_units: what a complete stream delivers (token-layer-kind blocks:
  // 2 x n_layer x tokens); cancel: ends the call (called once, from the
  // watchdog's thread).
  StreamWatchdog(const StreamWatchdogLimits& limits, uint64_t total_units, std::function<void()> cancel);
  ~StreamWatchdog();
  StreamWatchdog(const StreamWatchdog&) = delete;
  StreamWatchdog& operator=(const StreamWatchdog&) = delete;

  // A message arrived carrying `units` more of the stream (0 for header/trailer).
  void on_message(uint64_t units);
  // Stops watching (the stream ended); idempotent.
  void stop();
  // Why the watchdog ended the call; nullopt if it did not.
  std::optional<std::string> fired() const;
  // Units received so far over the whole stream's, in [0, 1].
  double received_fraction() const;

  // The decision, pure.
  static std::optional<std::string> judge(const StreamWatchdogLimits& limits, const StreamPace& pace);

 private:
  using Clock = std::chrono::steady_clock;
  void run();

  const StreamWatchdogLimits limits_;
  const uint64_t total_units_;
  const std::function<void()> cancel_;
  const Clock::time_point start_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Clock::time_point last_message_;  // guarded by mu_
  uint64_t received_ = 0;           // guarded by mu_
  // (time, units received by then) per message within the pace window.
  std::deque<std::pair<Clock::time_point, uint64_t>> history_;  // guarded by mu_
  uint64_t window_base_ = 0;  // units received by the window's start; guarded by mu_
  bool stopped_ = false;            // guarded by mu_
  std::optional<std::string> fired_;  // guarded by mu_
  std::thread thread_;  // last: starts after the fields it reads
};

}  // namespace baton
