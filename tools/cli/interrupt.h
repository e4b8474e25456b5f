// InterruptWatch: Ctrl-C (SIGINT) as a request, not a kill. While one is alive
// the first SIGINT runs the registered action once, from a watcher thread (not
// from the signal handler), e.g. `grpc::ClientContext::TryCancel()` so that a
// streaming call ends cleanly and the CLI can still print what it has. A second
// SIGINT before reset() restores the default action and re-raises: the process
// ends at once, as a user pressing Ctrl-C twice expects.
//
// One watch at a time per process (the signal disposition is process-wide);
// constructing a second while one is alive is a programming error (CHECK).
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

namespace baton::cli {

class InterruptWatch {
 public:
  InterruptWatch();
  ~InterruptWatch();  // restores the previous SIGINT disposition
  InterruptWatch(const InterruptWatch&) = delete;
  InterruptWatch& operator=(const InterruptWatch&) = delete;

  // Sets the action for the next Ctrl-C (replacing any earlier one); called
  // from the watcher thread, at most once per interrupt.
  void on_interrupt(std::function<void()> action);
  // True once Ctrl-C was pressed since construction or the last reset().
  bool interrupted() const;
  // Forgets an interrupt (e.g. a chat goes on to the next prompt); the next
  // Ctrl-C again runs the action instead of ending the process.
  void reset();

 private:
  void watch();

  int pipe_fds_[2] = {-1, -1};
  std::mutex mutex_;
  std::function<void()> action_;
  std::thread watcher_;
};

}  // namespace baton::cli
