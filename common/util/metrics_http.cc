#include "common/util/metrics_http.h"

#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/util/check.h"
#include "common/util/http_listener.h"
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
    listener_.server().Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      if (before_scrape_) before_scrape_();
      res.set_content(registry_.render(), MetricsRegistry::kContentType);
    });
    BATON_RETURN_IF_ERROR(listener_.start(host, port, address, "the metrics listener"));
    // Debug only: the programs announce their listeners once all are bound.
    BATON_DEBUG("metrics on http://%s:%d/metrics", host.c_str(), listener_.port());
    return absl::OkStatus();
  }

  void stop() { listener_.stop(); }

  int port() const { return listener_.port(); }

 private:
  MetricsRegistry& registry_;
  std::function<void()> before_scrape_;
  // One worker: scrapes are rare and cheap.
  HttpListener listener_{std::make_unique<httplib::Server>(), 1};
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
