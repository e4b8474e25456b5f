// EdgeServer: a grpc::Server that serves one EdgeService on --listen
// (plaintext: local clients). It starts before the model loads, so Health
// answers LOADING / WARMING while EdgeService::Load runs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "edge_decode/edge_service.h"

namespace baton {

class EdgeServer {
 public:
  // Starts serving `service` (which must outlive the server) on `address`
  // ("host:port"; port 0 picks a free port, see port()).
  static absl::StatusOr<std::unique_ptr<EdgeServer>> Start(const std::string& address, EdgeService& service);
  // Shutdown(), then the service's workers stop (EdgeService::StopWorkers)
  // before the gRPC server goes: no worker is inside a call of it then.
  ~EdgeServer();

  int port() const { return port_; }
  // Stops accepting calls; running calls get `grace_ms` to finish, then are cancelled.
  void Shutdown(int64_t grace_ms = 0);

 private:
  EdgeServer(std::unique_ptr<grpc::Server> server, int port, EdgeService* service)
      : server_(std::move(server)), port_(port), service_(service) {}
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  EdgeService* service_;
  bool shut_down_ = false;
};

}  // namespace baton
