#include "cloud_prefill/prefill_server.h"

#include <chrono>

#include "common/rpc/grpc_listener.h"
#include "common/util/check.h"

namespace baton {

absl::StatusOr<std::unique_ptr<PrefillServer>> PrefillServer::Start(const std::string& address,
                                                                     PrefillService& service,
                                                                     const PrefillServerOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = make_server_credentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  builder.RegisterService(&service);
  service.tsan_edges().started();
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<grpc::Server> server,
                         start_grpc_server(builder, {{address, *credentials, &port}}));
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
  service_->tsan_edges().shut_down();  // every handler has returned
}

}  // namespace baton
