// PrefillServer: a grpc::Server that serves one PrefillService (insecure
// credentials; TLS and auth are a later step).
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "cloud_prefill/prefill_service.h"

namespace baton {

class PrefillServer {
 public:
  // Starts serving `service` (which must outlive the server) on `address`
  // ("host:port"; port 0 picks a free port, see port()).
  static absl::StatusOr<std::unique_ptr<PrefillServer>> Start(const std::string& address, PrefillService& service);
  ~PrefillServer();

  int port() const { return port_; }
  // Stops accepting calls and cancels the running ones after `grace_ms`.
  void Shutdown(int64_t grace_ms = 0);
  void Wait() { server_->Wait(); }

 private:
  PrefillServer(std::unique_ptr<grpc::Server> server, int port) : server_(std::move(server)), port_(port) {}
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace baton
