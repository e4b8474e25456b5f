// How a Baton server process ends, written once for baton-edge and
// baton-prefill: SIGINT / SIGTERM are blocked in every thread and taken by
// the main thread with sigwait; then the service drains (no new work, running
// work ends) and the listeners stop, the last started first.
#pragma once

#include <functional>
#include <vector>

namespace baton {

// Blocks SIGINT and SIGTERM in the calling thread. Threads started later
// inherit the mask, so only wait_for_shutdown_signal() takes them: call it
// first in main, before gRPC or a loader starts threads.
void block_shutdown_signals();
// Waits for SIGINT or SIGTERM (blocked by block_shutdown_signals()); returns
// the signal's number.
int wait_for_shutdown_signal();
// Wakes wait_for_shutdown_signal() from any thread (sends this process
// SIGTERM): a start-up step that failed on a thread of its own.
void request_shutdown();

// The stop calls of a process's listeners (gRPC server, HTTP API, metrics),
// pushed as each starts. stop_all() calls them last-pushed first, once; the
// destructor calls it, so an early return on a failed start stops what
// already runs.
class ShutdownStack {
 public:
  ShutdownStack() = default;
  ~ShutdownStack() { stop_all(); }
  ShutdownStack(const ShutdownStack&) = delete;
  ShutdownStack& operator=(const ShutdownStack&) = delete;

  void push(std::function<void()> stop) { stops_.push_back(std::move(stop)); }
  void stop_all();

 private:
  std::vector<std::function<void()>> stops_;
};

// The end of a server's main: waits for SIGINT / SIGTERM, calls
// drain(signal_number) (refuse new work, let running work finish), then
// listeners.stop_all().
void serve_until_signal(const std::function<void(int signal_number)>& drain, ShutdownStack& listeners);

}  // namespace baton
