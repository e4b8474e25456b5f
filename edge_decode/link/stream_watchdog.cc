#include "edge_decode/link/stream_watchdog.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/util/clock.h"

namespace baton {
namespace {

// received / total in [0, 1]; a stream with nothing to send is complete.
double fraction_of(uint64_t received, uint64_t total) {
  return total > 0 ? std::min(1.0, static_cast<double>(received) / static_cast<double>(total)) : 1.0;
}

}  // namespace

StreamWatchdog::StreamWatchdog(const StreamWatchdogLimits& limits, uint64_t total_units,
                               std::function<void()> cancel)
    : limits_(limits),
      total_units_(total_units),
      cancel_(std::move(cancel)),
      start_(Clock::now()),
      last_message_(start_) {
  if (limits_.stall_timeout.count() > 0 || limits_.local_prefill_ms > 0) thread_ = std::thread([this] { run(); });
}

StreamWatchdog::~StreamWatchdog() { stop(); }

void StreamWatchdog::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StreamWatchdog::on_message(uint64_t units) {
  std::lock_guard<std::mutex> lock(mu_);
  last_message_ = Clock::now();
  received_ += units;
  if (units > 0) history_.emplace_back(last_message_, received_);
}

std::optional<std::string> StreamWatchdog::fired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fired_;
}

double StreamWatchdog::received_fraction() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fraction_of(received_, total_units_);
}

std::optional<std::string> StreamWatchdog::judge(const StreamWatchdogLimits& limits, const StreamPace& pace) {
  const double fraction = fraction_of(pace.received, pace.total);
  const double stall_ms = static_cast<double>(limits.stall_timeout.count());
  if (stall_ms > 0 && pace.since_last_ms >= stall_ms) {
    return absl::StrFormat("the cloud sent nothing for %.1f s (stall timeout %.1f s) with %.0f%% of the KV received",
                           pace.since_last_ms / 1000, stall_ms / 1000, fraction * 100);
  }
  if (limits.local_prefill_ms <= 0 || fraction >= 1.0 ||
      pace.elapsed_ms < static_cast<double>(limits.min_observation.count())) {
    return std::nullopt;
  }
  const double bound_ms = 1.5 * limits.local_prefill_ms + 1000;
  if (pace.window_units == 0 || pace.window_ms <= 0) {
    // Nothing recently: give up once the silence alone exceeds the bound.
    if (pace.since_last_ms < bound_ms) return std::nullopt;
    return absl::StrFormat(
        "the cloud's KV stream is too slow: nothing for %.1f s with %.0f%% received; local prefill takes about %.1f s",
        pace.since_last_ms / 1000, fraction * 100, limits.local_prefill_ms / 1000);
  }
  const double units_per_ms = static_cast<double>(pace.window_units) / pace.window_ms;
  const double rest_ms = static_cast<double>(pace.total - std::min(pace.received, pace.total)) / units_per_ms;
  if (rest_ms <= bound_ms) return std::nullopt;
  return absl::StrFormat(
      "the cloud's KV stream is too slow: %.0f%% in %.1f s, at the pace of the last %.1f s %.1f s more; local "
      "prefill takes about %.1f s",
      fraction * 100, pace.elapsed_ms / 1000, pace.window_ms / 1000, rest_ms / 1000, limits.local_prefill_ms / 1000);
}

void StreamWatchdog::run() {
  constexpr std::chrono::milliseconds kTick{50};
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopped_) {
    cv_.wait_for(lock, kTick, [this] { return stopped_; });
    if (stopped_) return;
    const Clock::time_point now = Clock::now();
    StreamPace pace;
    pace.elapsed_ms = ms_between(start_, now);
    pace.since_last_ms = ms_between(last_message_, now);
    pace.received = received_;
    pace.total = total_units_;
    // Units within the window: received after the last sample at or before its start.
    const Clock::time_point window_start = std::max(start_, now - limits_.pace_window);
    while (!history_.empty() && history_.front().first <= window_start) {
      window_base_ = history_.front().second;
      history_.pop_front();
    }
    pace.window_ms = ms_between(window_start, now);
    pace.window_units = received_ - window_base_;
    std::optional<std::string> why = judge(limits_, pace);
    if (!why) continue;
    fired_ = std::move(why);
    lock.unlock();
    cancel_();
    return;
  }
}

}  // namespace baton
