#include "edge_client.h"

#include <memory>
#include <mutex>
#include <utility>

namespace baton::cli {
namespace {

// Reads a server stream to its end, handing each message to `on_event`.
template <typename Response>
grpc::Status drain_stream(grpc::ClientReader<Response>& reader, const std::function<void(const Response&)>& on_event,
                          bool* started) {
  Response message;
  while (reader.Read(&message)) {
    *started = true;
    on_event(message);
  }
  return reader.Finish();
}

}  // namespace

EdgeClient::EdgeClient(RpcTarget target)
    : target_(std::move(target)), channel_(open_channel(target_)), stub_(v1::Edge::NewStub(channel_)) {}

grpc::Status EdgeClient::health(v1::EdgeHealthResponse* response) {
  // Health answers in every state; no retry needed.
  grpc::ClientContext context;
  prepare_call(context, deadline_after(target_), target_.bearer_token);
  return stub_->Health(&context, v1::HealthRequest(), response);
}

grpc::Status EdgeClient::list_sessions(v1::ListSessionsResponse* response) {
  return call_with_retry(
      target_, deadline_after(target_),
      [&](grpc::ClientContext& context, bool*) {
        return stub_->ListSessions(&context, v1::ListSessionsRequest(), response);
      },
      &retries_);
}

grpc::Status EdgeClient::delete_session(const std::string& session_id, v1::DeleteSessionResponse* response) {
  v1::DeleteSessionRequest request;
  request.set_session_id(session_id);
  return call_with_retry(
      target_, deadline_after(target_),
      [&](grpc::ClientContext& context, bool*) { return stub_->DeleteSession(&context, request, response); },
      &retries_);
}

grpc::Status EdgeClient::list_packs(v1::ListPacksResponse* response) {
  return call_with_retry(
      target_, deadline_after(target_),
      [&](grpc::ClientContext& context, bool*) {
        return stub_->ListPacks(&context, v1::ListPacksRequest(), response);
      },
      &retries_);
}

grpc::Status EdgeClient::generate(const v1::GenerateRequest& request,
                                  const std::function<void(const v1::GenerateResponse&)>& on_event) {
  {
    std::lock_guard<std::mutex> lock(generate_mutex_);
    generate_cancelled_ = false;
  }
  return call_with_retry(
      target_, deadline_after(target_),
      [&](grpc::ClientContext& context, bool* started) {
        {
          std::lock_guard<std::mutex> lock(generate_mutex_);
          generate_context_ = &context;
          if (generate_cancelled_) context.TryCancel();
        }
        std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub_->Generate(&context, request);
        grpc::Status status = drain_stream(*reader, on_event, started);
        std::lock_guard<std::mutex> lock(generate_mutex_);
        generate_context_ = nullptr;
        return status;
      },
      &retries_);
}

void EdgeClient::cancel_generate() {
  std::lock_guard<std::mutex> lock(generate_mutex_);
  generate_cancelled_ = true;
  if (generate_context_ != nullptr) generate_context_->TryCancel();
}

grpc::Status EdgeClient::pull_pack(const v1::PullPackRequest& request,
                                   const std::function<void(const v1::PullPackResponse&)>& on_event) {
  return call_with_retry(
      target_, deadline_after(target_),
      [&](grpc::ClientContext& context, bool* started) {
        std::unique_ptr<grpc::ClientReader<v1::PullPackResponse>> reader = stub_->PullPack(&context, request);
        return drain_stream(*reader, on_event, started);
      },
      &retries_);
}

}  // namespace baton::cli
