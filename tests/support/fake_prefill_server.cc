#include "tests/support/fake_prefill_server.h"

#include <gtest/gtest.h>

#include <utility>

namespace baton::testing {

void FakePrefillService::set_health(const v1::HealthResponse& response, grpc::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  health_ = response;
  health_status_ = std::move(status);
}

void FakePrefillService::set_prefill(PrefillScript script) {
  std::lock_guard<std::mutex> lock(mu_);
  script_ = std::move(script);
  released_ = false;
}

void FakePrefillService::release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
  }
  released_cv_.notify_all();
}

std::vector<FakePrefillService::SeenCall> FakePrefillService::prefill_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return prefill_calls_;
}

int FakePrefillService::health_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return health_calls_;
}

grpc::Status FakePrefillService::Health(grpc::ServerContext*, const v1::HealthRequest*,
                                        v1::HealthResponse* response) {
  std::lock_guard<std::mutex> lock(mu_);
  ++health_calls_;
  if (!health_status_.ok()) return health_status_;
  *response = health_;
  return grpc::Status::OK;
}

grpc::Status FakePrefillService::Prefill(grpc::ServerContext* context, const v1::PrefillRequest* request,
                                         grpc::ServerWriter<v1::KvStreamMessage>* writer) {
  PrefillScript script;
  {
    std::lock_guard<std::mutex> lock(mu_);
    SeenCall seen;
    seen.request = *request;
    for (const auto& [key, value] : context->client_metadata()) {
      seen.metadata.emplace(std::string(key.data(), key.size()), std::string(value.data(), value.size()));
    }
    prefill_calls_.push_back(std::move(seen));
    script = script_;
  }
  // Polls the cancellation: gRPC has no wake-up for it in a sync handler.
  auto stall = [&]() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!released_ && !context->IsCancelled()) released_cv_.wait_for(lock, std::chrono::milliseconds(10));
    return !context->IsCancelled();
  };
  for (size_t i = 0; i < script.messages.size(); ++i) {
    if (script.stall && i == script.stall_after && !stall()) return grpc::Status::CANCELLED;
    if (!writer->Write(script.messages[i])) return grpc::Status::CANCELLED;
  }
  if (script.stall && script.stall_after >= script.messages.size() && !stall()) return grpc::Status::CANCELLED;
  return script.status;
}

std::unique_ptr<FakePrefillServer> FakePrefillServer::Start() {
  std::unique_ptr<FakePrefillServer> server(new FakePrefillServer());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &server->port_);
  builder.RegisterService(&server->service_);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    ADD_FAILURE() << "the fake Prefill server could not listen on 127.0.0.1:0";
    return nullptr;
  }
  return server;
}

void FakePrefillServer::Shutdown() {
  if (server_ == nullptr) return;
  service_.release();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server_.reset();
}

FakePrefillServer::~FakePrefillServer() { Shutdown(); }

}  // namespace baton::testing
