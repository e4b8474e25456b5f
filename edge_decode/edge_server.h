// EdgeServer: a grpc::Server that serves one EdgeService on --listen
// (plaintext, or TLS with --tls-cert/--tls-key). It starts before the model
// loads, so Health answers LOADING / WARMING while EdgeService::Load runs.
// Optionally a second, plaintext port on 127.0.0.1 for the agent's own HTTP
// front end to relay to (it cannot speak the public port's TLS without the
// certificate's name); calls on it still need an API key when keys are set.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "common/rpc/server_credentials.h"
#include "edge_decode/edge_service.h"

namespace baton {

struct EdgeServerOptions {
  ServerTlsOptions tls;  // cert_path empty: plaintext
  // Largest request accepted: above the HTTP front end's body cap (8 MiB),
  // so every prompt the HTTP API accepts also fits a relayed Generate.
  int max_receive_message_bytes = 16 << 20;
  bool loopback_relay_port = false;  // also listen on 127.0.0.1:0, plaintext (see relay_port())
};

class EdgeServer {
 public:
  // Starts serving `service` (which must outlive the server) on `address`
  // ("host:port"; port 0 picks a free port, see port()).
  static absl::StatusOr<std::unique_ptr<EdgeServer>> Start(const std::string& address, EdgeService& service,
                                                           const EdgeServerOptions& options = {});
  // Shutdown(), then the service's workers stop (EdgeService::StopWorkers)
  // before the gRPC server goes: no worker is inside a call of it then.
  ~EdgeServer();

  int port() const { return port_; }
  // The loopback relay port (options.loopback_relay_port); 0 without one.
  int relay_port() const { return relay_port_; }
  // Stops accepting calls; running calls get `grace_ms` to finish, then are cancelled.
  void Shutdown(int64_t grace_ms = 0);

 private:
  EdgeServer(std::unique_ptr<grpc::Server> server, int port, EdgeService* service)
      : server_(std::move(server)), port_(port), service_(service) {}
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  int relay_port_ = 0;
  EdgeService* service_;
  bool shut_down_ = false;
};

}  // namespace baton
