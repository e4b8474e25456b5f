// Every Baton gRPC server (baton-prefill, baton-edge and its loopback relay
// port) binds through start_grpc_server: port reuse off, and a port that
// cannot be bound is one line with the OS reason.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"

namespace baton {

struct GrpcListeningPort {
  std::string address;  // "host:port"; port 0 picks a free one
  std::shared_ptr<grpc::ServerCredentials> credentials;
  int* selected_port = nullptr;  // receives the bound port
};

// Adds `ports` to `builder` with SO_REUSEPORT off (GRPC_ARG_ALLOW_REUSEPORT 0:
// gRPC turns it on by default, and then a second process on a taken port
// starts, says READY and silently takes part of the calls), builds and starts
// the server. UNAVAILABLE "cannot listen on ADDR: address already in use" (the
// OS reason) when a port cannot be bound; nothing then listens.
absl::StatusOr<std::unique_ptr<grpc::Server>> start_grpc_server(grpc::ServerBuilder& builder,
                                                                const std::vector<GrpcListeningPort>& ports);

}  // namespace baton
