// PrefillServer: a grpc::Server that serves one PrefillService, plaintext or
// TLS (server certificate; mutual TLS when a client CA is given).
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "cloud_prefill/prefill_service.h"
#include "common/rpc/server_credentials.h"  // ServerTlsOptions

namespace baton {

struct PrefillServerOptions {
  ServerTlsOptions tls;
  // Largest message accepted (PutPrefix blocks are bounded at ~1 MiB; the
  // slack covers the header's token ids).
  int max_receive_message_bytes = 8 << 20;
};

class PrefillServer {
 public:
  // Starts serving `service` (which must outlive the server) on `address`
  // ("host:port"; port 0 picks a free port, see port()).
  static absl::StatusOr<std::unique_ptr<PrefillServer>> Start(const std::string& address, PrefillService& service,
                                                              const PrefillServerOptions& options = {});
  // Shutdown(), then the service's workers stop (PrefillService::StopWorkers)
  // before the gRPC server goes: no worker is inside a call of it then.
  ~PrefillServer();

  int port() const { return port_; }
  // Stops accepting calls and cancels the running ones after `grace_ms`.
  void Shutdown(int64_t grace_ms = 0);
  void Wait() { server_->Wait(); }

 private:
  PrefillServer(std::unique_ptr<grpc::Server> server, int port, PrefillService* service)
      : server_(std::move(server)), port_(port), service_(service) {}
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  PrefillService* service_;
  bool shut_down_ = false;
};

}  // namespace baton
