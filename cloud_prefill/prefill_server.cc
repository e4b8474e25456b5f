#include "cloud_prefill/prefill_server.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace baton {

absl::StatusOr<std::unique_ptr<PrefillServer>> PrefillServer::Start(const std::string& address,
                                                                     PrefillService& service,
                                                                     const PrefillServerOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = make_server_credentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address, *credentials, &port);
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on '", address, "'"));
  }
  return std::unique_ptr<PrefillServer>(new PrefillServer(std::move(server), port, &service));
}

PrefillServer::~PrefillServer() {
  Shutdown();
  service_->StopWorkers();
}

void PrefillServer::Shutdown(int64_t grace_ms) {
  if (shut_down_) return;
  shut_down_ = true;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(grace_ms));
}

}  // namespace baton
