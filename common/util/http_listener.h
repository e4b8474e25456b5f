// HttpListener: one cpp-httplib server on an accept thread of its own, the
// way every Baton HTTP listener runs (GET /metrics of both programs, the
// edge's OpenAI-compatible API): a fixed pool of worker threads, exclusive
// socket options (listen_address.h), port 0 for any free port, a start that
// returns only once the server accepts, and a stop that joins.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace httplib {
class Server;
}

namespace baton {

class HttpListener {
 public:
  // Takes `server` (an httplib::Server or SSLServer; the caller adds routes
  // and handlers through server() before start()) and gives it `threads`
  // workers and the exclusive socket options.
  HttpListener(std::unique_ptr<httplib::Server> server, int threads);
  ~HttpListener();  // stop()
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  httplib::Server& server() { return *server_; }

  // Binds `host`:`port` (0: any free port, see port()) and accepts on a
  // thread of its own, returning once the server runs. UNAVAILABLE
  // (listen_error naming `address`) when the port cannot be bound; INTERNAL
  // "`name` did not start within 10 s" when the server does not come up.
  absl::Status start(const std::string& host, int port, const std::string& address, absl::string_view name);
  int port() const { return port_; }
  // Stops accepting and joins the accept thread; safe to call more than once.
  void stop();

 private:
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace baton
