// A fake Prefill service on 127.0.0.1:0 for tests of the edge's CloudClient:
// it answers Health and Prefill the way the test scripts them (messages to
// stream, a status to end with, a pause before answering) and records what
// each call carried (the request and its metadata), so a test can check
// both what the client sent and what it makes of each kind of answer
// without a model-serving cloud behind it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "proto/baton.grpc.pb.h"

namespace baton::testing {

class FakePrefillService final : public v1::Prefill::Service {
 public:
  // What Prefill answers: `messages` in order, then `status`. With `stall`,
  // the call waits after `stall_after` messages until the client cancels
  // (or release() is called).
  struct PrefillScript {
    std::vector<v1::KvStreamMessage> messages;
    grpc::Status status = grpc::Status::OK;
    bool stall = false;
    size_t stall_after = 0;
  };
  struct SeenCall {
    v1::PrefillRequest request;
    std::multimap<std::string, std::string> metadata;  // client metadata, lower-case keys
  };

  void set_health(const v1::HealthResponse& response, grpc::Status status = grpc::Status::OK);
  void set_prefill(PrefillScript script);
  // Ends any stalled call.
  void release();

  std::vector<SeenCall> prefill_calls() const;
  int health_calls() const;

  grpc::Status Health(grpc::ServerContext* context, const v1::HealthRequest* request,
                      v1::HealthResponse* response) override;
  grpc::Status Prefill(grpc::ServerContext* context, const v1::PrefillRequest* request,
                       grpc::ServerWriter<v1::KvStreamMessage>* writer) override;

 private:
  mutable std::mutex mu_;
  std::condition_variable released_cv_;
  bool released_ = false;                     // guarded by mu_
  v1::HealthResponse health_;                 // guarded by mu_
  grpc::Status health_status_;                // guarded by mu_
  PrefillScript script_;                      // guarded by mu_
  std::vector<SeenCall> prefill_calls_;       // guarded by mu_
  int health_calls_ = 0;                      // guarded by mu_
};

// The fake service listening on 127.0.0.1:0 (plaintext).
class FakePrefillServer {
 public:
  // Null (with a test failure) when it cannot listen.
  static std::unique_ptr<FakePrefillServer> Start();
  ~FakePrefillServer();

  FakePrefillService& service() { return service_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // Stops listening; calls in flight end.
  void Shutdown();

 private:
  FakePrefillServer() = default;
  FakePrefillService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace baton::testing
