// EdgeClient: the CLI's side of the Edge service (proto/baton.proto, service
// Edge) served by baton-edge. Every call runs under the target's deadline
// (one deadline for a call and its retries) and retries while the agent is
// warming up (edge_client_rpc.h). Streaming calls hand each message to a
// callback as it arrives.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include <grpcpp/grpcpp.h>

#include "edge_client_rpc.h"
#include "proto/baton.grpc.pb.h"

namespace baton::cli {

class EdgeClient {
 public:
  explicit EdgeClient(RpcTarget target);

  const RpcTarget& target() const { return target_; }
  // Retries done by the calls so far (warming-up waits).
  int retries() const { return retries_; }

  grpc::Status health(v1::EdgeHealthResponse* response);
  grpc::Status list_sessions(v1::ListSessionsResponse* response);
  grpc::Status delete_session(const std::string& session_id, v1::DeleteSessionResponse* response);
  grpc::Status list_packs(v1::ListPacksResponse* response);

  // Streams one Generate; `on_event` sees every message in order. Not retried
  // once the first message has arrived. cancel_generate() (e.g. from a
  // Ctrl-C watcher) ends it CANCELLED; the agent keeps the answer streamed so
  // far in the session.
  grpc::Status generate(const v1::GenerateRequest& request,
                        const std::function<void(const v1::GenerateResponse&)>& on_event);
  // Cancels the Generate in flight (ClientContext::TryCancel), from any
  // thread (a Ctrl-C watcher); a call that has not started yet is cancelled
  // as it starts. The call then ends with CANCELLED.
  void cancel_generate();
  grpc::Status pull_pack(const v1::PullPackRequest& request,
                         const std::function<void(const v1::PullPackResponse&)>& on_event);

  // One line for a failed call of this client.
  std::string describe(const std::string& rpc, const grpc::Status& status) const {
    return describe_rpc_error(target_, rpc, status);
  }

 private:
  RpcTarget target_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Edge::Stub> stub_;
  int retries_ = 0;
  std::mutex generate_mutex_;                       // guards the two below
  grpc::ClientContext* generate_context_ = nullptr; // the Generate attempt in flight
  bool generate_cancelled_ = false;
};

}  // namespace baton::cli
