#include "common/util/http_listener.h"

#include <httplib.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/util/listen_address.h"

namespace baton {

HttpListener::HttpListener(std::unique_ptr<httplib::Server> server, int threads) : server_(std::move(server)) {
  const size_t workers = static_cast<size_t>(threads < 1 ? 1 : threads);
  server_->new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  // httplib's default sets SO_REUSEPORT, which lets a second process bind the
  // same port and silently take part of the requests.
  server_->set_socket_options([](socket_t sock) { set_exclusive_listener_options(sock); });
}

HttpListener::~HttpListener() { stop(); }

absl::Status HttpListener::start(const std::string& host, int port, const std::string& address,
                                 absl::string_view name) {
  if (port == 0) {
    port_ = server_->bind_to_any_port(host);
  } else if (server_->bind_to_port(host, port)) {
    port_ = port;
  }
  if (port_ <= 0) return listen_error(listen_address_or_loopback(address));
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // stop() only takes effect once the server runs; wait for it (a few ms).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!server_->is_running() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!server_->is_running()) return absl::InternalError(absl::StrCat(name, " did not start within 10 s"));
  return absl::OkStatus();
}

void HttpListener::stop() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace baton
