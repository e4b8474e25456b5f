#include "common/util/shutdown.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

namespace baton {
namespace {

sigset_t shutdown_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  return signals;
}

}  // namespace

void block_shutdown_signals() {
  const sigset_t signals = shutdown_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

int wait_for_shutdown_signal() {
  const sigset_t signals = shutdown_signals();
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  return signal_number;
}

void request_shutdown() { kill(getpid(), SIGTERM); }

void ShutdownStack::stop_all() {
  while (!stops_.empty()) {
    std::function<void()> stop = std::move(stops_.back());
    stops_.pop_back();
    stop();
  }
}

void serve_until_signal(const std::function<void(int signal_number)>& drain, ShutdownStack& listeners) {
  drain(wait_for_shutdown_signal());
  listeners.stop_all();
}

}  // namespace baton
