#include "edge_decode/edge_server.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace baton {

absl::StatusOr<std::unique_ptr<EdgeServer>> EdgeServer::Start(const std::string& address, EdgeService& service) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on '", address, "'"));
  }
  return std::unique_ptr<EdgeServer>(new EdgeServer(std::move(server), port, &service));
}

EdgeServer::~EdgeServer() {
  Shutdown();
  service_->StopWorkers();
}

void EdgeServer::Shutdown(int64_t grace_ms) {
  if (shut_down_) return;
  shut_down_ = true;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(grace_ms));
}

}  // namespace baton
