#include "common/util/metrics_http.h"

#include <httplib.h>

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/util/listen_address.h"
#include "common/util/log.h"

namespace baton {

class MetricsHttpServer::Impl {
 public:
  Impl(MetricsRegistry& registry, std::function<void()> before_scrape)
      : registry_(registry), before_scrape_(std::move(before_scrape)) {}
  ~Impl() { stop(); }

  absl::Status start(const std::string& address) {
    absl::StatusOr<std::pair<std::string, int>> host_port = parse_listen_address(address);
    if (!host_port.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("metrics ", host_port.status().message()));
    }
    const auto& [host, port] = *host_port;
    server_.new_task_queue = [] { return new httplib::ThreadPool(1); };
    // httplib's default sets SO_REUSEPORT, which lets a second process bind
    // the same port and silently take half the scrapes.
    server_.set_socket_options([](socket_t sock) { set_exclusive_listener_options(sock); });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      if (before_scrape_) before_scrape_();
      res.set_content(registry_.render(), MetricsRegistry::kContentType);
    });
    if (port == 0) {
      port_ = server_.bind_to_any_port(host);
    } else if (server_.bind_to_port(host, port)) {
      port_ = port;
    }
    if (port_ <= 0) return listen_error(listen_address_or_loopback(address));
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() only takes effect once the server runs.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!server_.is_running() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!server_.is_running()) return absl::InternalError("the metrics listener did not start within 10 s");
    // Debug only: the programs announce their listeners once all are bound.
    BATON_DEBUG("metrics on http://%s:%d/metrics", host.c_str(), port_);
    return absl::OkStatus();
  }

  void stop() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }

  int port() const { return port_; }

 private:
  MetricsRegistry& registry_;
  std::function<void()> before_scrape_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
};

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(const std::string& address,
                                                                             MetricsRegistry& registry,
                                                                             std::function<void()> before_scrape) {
  auto impl = std::make_unique<Impl>(registry, std::move(before_scrape));
  absl::Status started = impl->start(address);
  if (!started.ok()) return started;
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(impl)));
}

int MetricsHttpServer::port() const { return impl_->port(); }

void MetricsHttpServer::Stop() { impl_->stop(); }

}  // namespace baton
