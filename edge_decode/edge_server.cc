#include "edge_decode/edge_server.h"

#include <chrono>

#include "common/rpc/grpc_listener.h"
#include "common/util/check.h"

namespace baton {

absl::StatusOr<std::unique_ptr<EdgeServer>> EdgeServer::Start(const std::string& address, EdgeService& service,
                                                               const EdgeServerOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = make_server_credentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  grpc::ServerBuilder builder;
  int port = 0;
  int relay_port = 0;
  std::vector<GrpcListeningPort> ports = {{address, *credentials, &port}};
  if (options.loopback_relay_port) {
    ports.push_back({"127.0.0.1:0", grpc::InsecureServerCredentials(), &relay_port});
  }
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  builder.RegisterService(&service);
  service.tsan_edges().started();
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<grpc::Server> server, start_grpc_server(builder, ports));
  auto edge_server = std::unique_ptr<EdgeServer>(new EdgeServer(std::move(server), port, &service));
  edge_server->relay_port_ = relay_port;
  return edge_server;
}

EdgeServer::~EdgeServer() {
  Shutdown();
  service_->StopWorkers();
}

void EdgeServer::Shutdown(int64_t grace_ms) {
  if (shut_down_) return;
  shut_down_ = true;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(grace_ms));
  service_->tsan_edges().shut_down();  // every handler has returned
}

}  // namespace baton
