#include "interrupt.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "common/util/check.h"

namespace baton::cli {
namespace {

// Signal-handler state: only async-signal-safe operations touch it.
std::atomic<int> g_write_fd{-1};
std::atomic<int> g_count{0};
struct sigaction g_previous {};

void on_sigint(int) {
  const int saved_errno = errno;
  if (g_count.fetch_add(1) >= 1) {
    // Second Ctrl-C: the default action (terminate), as if no watch existed.
    signal(SIGINT, SIG_DFL);
    raise(SIGINT);
  }
  const int fd = g_write_fd.load();
  if (fd >= 0) {
    const char byte = 1;
    [[maybe_unused]] const ssize_t n = write(fd, &byte, 1);
  }
  errno = saved_errno;
}

}  // namespace

InterruptWatch::InterruptWatch() {
  BATON_CHECK(g_write_fd.load() < 0, "only one InterruptWatch may be alive");
  BATON_CHECK(pipe2(pipe_fds_, O_CLOEXEC) == 0, "pipe2 failed");
  g_count.store(0);
  g_write_fd.store(pipe_fds_[1]);
  watcher_ = std::thread([this] { watch(); });
  struct sigaction action {};
  action.sa_handler = on_sigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, &g_previous);
}

InterruptWatch::~InterruptWatch() {
  sigaction(SIGINT, &g_previous, nullptr);
  g_write_fd.store(-1);
  close(pipe_fds_[1]);  // the watcher reads EOF and ends
  watcher_.join();
  close(pipe_fds_[0]);
}

void InterruptWatch::watch() {
  char byte;
  while (true) {
    const ssize_t n = read(pipe_fds_[0], &byte, 1);
    if (n == 0) return;
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    std::function<void()> action;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      action = action_;
    }
    if (action) action();
  }
}

void InterruptWatch::on_interrupt(std::function<void()> action) {
  std::lock_guard<std::mutex> lock(mutex_);
  action_ = std::move(action);
}

bool InterruptWatch::interrupted() const { return g_count.load() > 0; }

void InterruptWatch::reset() { g_count.store(0); }

}  // namespace baton::cli
