// MetricsHttpServer: a tiny HTTP listener that serves GET /metrics (the
// Prometheus text format 0.0.4 of a MetricsRegistry) for baton-prefill and
// baton-edge (--metrics ADDR, each on its own address, off by default).
// Anything else is 404; one worker thread (scrapes are rare and cheap).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/util/metrics.h"

namespace baton {

class MetricsHttpServer {
 public:
  // Serves `registry` (which must outlive the server) on `address`
  // ("host:port"; port 0 picks a free port, see port()). INVALID_ARGUMENT for
  // a malformed address, UNAVAILABLE when it cannot be bound.
  // `before_scrape` (optional) runs before each render, to refresh gauges.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& address,
                                                                  MetricsRegistry& registry,
                                                                  std::function<void()> before_scrape = {});
  ~MetricsHttpServer();  // Stop()
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const;
  void Stop();

  class Impl;

 private:
  explicit MetricsHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton
