#pragma once
// FaultyPrefill: a Prefill service for fault tests that relays a real
// cloud's answer with a fault in it (edge_handoff_test, edge_overlap_test),
// and start_faulty_cloud to serve it on 127.0.0.1:0.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "common/kv_stream/kv_stream.h"
#include "proto/baton.grpc.pb.h"
#include "tests/integration/zstd_bomb.h"
#include "tests/support/edge_test_env.h"

namespace baton::edge_test {

// A Prefill service that relays a real cloud's answer with a fault in it.
class FaultyPrefill final : public v1::Prefill::Service {
 public:
  // kStall: half the blocks, then silence until cancelled; kSlow: a quarter
  // at full speed, then one block per 400 ms; kBomb: a block whose payload
  // is a small zstd frame of 256 MiB of zeros (raw_size and checksum made to
  // agree with it); kOversized: a 9 MiB block payload; kShiftFirstPosition
  // and kChangeToken ask the real cloud a different question than the edge
  // did (first_position one earlier; the last token id changed) and relay its
  // honest answer, which the edge's pins must refuse (kChangeToken moves any
  // early tokens ahead of the header, as a hostile cloud could). kEarlyThenCut: the
  // header, then every early token (PrefillRequest.early_tokens), then half
  // the blocks, then the end without a trailer. kEarlyAfterLast: the first
  // early-token message is marked `last` and the others still follow it.
  // kPaced: no fault, each block after the first 3 ms behind the one before
  // (a link slow enough for the edge to measure on any host).
  enum class Fault { kNone, kCorruptBlock, kTruncate, kStall, kSlow, kBomb, kOversized, kShiftFirstPosition,
                     kChangeToken, kEarlyThenCut, kEarlyAfterLast, kPaced };
  FaultyPrefill(const std::string& upstream, Fault fault)
      : stub_(v1::Prefill::NewStub(grpc::CreateChannel(upstream, grpc::InsecureChannelCredentials()))),
        fault_(fault) {}

  grpc::Status Health(grpc::ServerContext*, const v1::HealthRequest*, v1::HealthResponse* response) override {
    response->set_state(v1::SERVING_STATE_READY);
    response->set_prefill_tokens_per_s(1e6);
    return grpc::Status::OK;
  }

  grpc::Status Prefill(grpc::ServerContext* context, const v1::PrefillRequest* request,
                       grpc::ServerWriter<v1::KvStreamMessage>* writer) override {
    ++prefill_calls_;
    std::vector<v1::KvStreamMessage> messages;
    {
      grpc::ClientContext upstream;
      live_call(upstream, 30);
      v1::PrefillRequest asked = *request;
      if (fault_ == Fault::kShiftFirstPosition && asked.first_position() > 0) {
        asked.set_first_position(asked.first_position() - 1);
      }
      if (fault_ == Fault::kChangeToken && asked.tokens().ids_size() > 0) {
        const int last = asked.tokens().ids_size() - 1;
        asked.mutable_tokens()->set_ids(last, asked.tokens().ids(last) == 7 ? 8 : 7);
      }
      auto reader = stub_->Prefill(&upstream, asked);
      v1::KvStreamMessage message;
      while (reader->Read(&message)) {
        if (message.has_early_tokens()) ++early_messages_;
        messages.push_back(message);
      }
      grpc::Status status = reader->Finish();
      if (!status.ok()) return status;
    }
    if (fault_ == Fault::kChangeToken) {
      // Early tokens (when asked for) first, even before the header: the
      // edge must still show none of them, since the header fails its pins.
      std::stable_partition(messages.begin(), messages.end(),
                            [](const v1::KvStreamMessage& m) { return m.has_early_tokens(); });
    }
    if (fault_ == Fault::kEarlyThenCut) {
      // Early tokens right after the header, whatever order they came in.
      std::stable_partition(messages.begin(), messages.end(), [](const v1::KvStreamMessage& m) {
        return m.has_header() || m.has_early_tokens();
      });
    }
    if (fault_ == Fault::kEarlyAfterLast) {
      for (v1::KvStreamMessage& message : messages) {
        if (!message.has_early_tokens()) continue;
        message.mutable_early_tokens()->set_last(true);
        break;
      }
    }
    size_t n_blocks = 0;
    for (const v1::KvStreamMessage& message : messages) n_blocks += message.has_block() ? 1 : 0;
    size_t blocks = 0;
    for (v1::KvStreamMessage& message : messages) {
      if (message.has_block()) {
        ++blocks;
        if (fault_ == Fault::kCorruptBlock && blocks == 2) {
          std::string* payload = message.mutable_block()->mutable_payload();
          (*payload)[payload->size() / 2] ^= 0x5a;
        }
        if ((fault_ == Fault::kTruncate || fault_ == Fault::kEarlyThenCut) && blocks > n_blocks / 2) {
          return grpc::Status::OK;  // no trailer
        }
        if (fault_ == Fault::kStall && blocks > n_blocks / 2) {
          if (!stalled_set_.exchange(true)) stalled_.set_value();
          while (!context->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          return grpc::Status(grpc::StatusCode::CANCELLED, "shut down");
        }
        if (fault_ == Fault::kSlow && blocks > n_blocks / 4) {
          for (int i = 0; i < 40 && !context->IsCancelled(); ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
          if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "client left");
        }
        if (fault_ == Fault::kPaced && blocks > 1) std::this_thread::sleep_for(std::chrono::milliseconds(3));
        if (fault_ == Fault::kBomb && blocks == 2) {
          v1::KvBlock* block = message.mutable_block();
          block->set_payload(zstd_bomb(size_t{256} << 20));
          block->set_encoded_size(block->payload().size());
          block->set_raw_size(size_t{256} << 20);
          block->set_checksum(kv_payload_checksum(block->payload()));
        }
        if (fault_ == Fault::kOversized && blocks == 2) {
          v1::KvBlock* block = message.mutable_block();
          block->set_payload(std::string(size_t{9} << 20, '\x5a'));
          block->set_encoded_size(block->payload().size());
          block->set_checksum(kv_payload_checksum(block->payload()));
        }
      }
      writer->Write(message);
    }
    return grpc::Status::OK;
  }

  std::future<void> stalled() { return stalled_.get_future(); }
  int prefill_calls() const { return prefill_calls_.load(); }
  // EarlyTokens messages in the real cloud's answers (before any fault).
  int early_messages() const { return early_messages_.load(); }

 private:
  std::unique_ptr<v1::Prefill::Stub> stub_;
  Fault fault_;
  std::promise<void> stalled_;
  std::atomic<bool> stalled_set_{false};
  std::atomic<int> prefill_calls_{0};
  std::atomic<int> early_messages_{0};
};

struct FaultyCloud {
  std::unique_ptr<FaultyPrefill> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  ~FaultyCloud() {
    if (server) server->Shutdown(std::chrono::system_clock::now());
  }
};

inline std::unique_ptr<FaultyCloud> start_faulty_cloud(const std::string& upstream, FaultyPrefill::Fault fault) {
  auto cloud = std::make_unique<FaultyCloud>();
  cloud->service = std::make_unique<FaultyPrefill>(upstream, fault);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &cloud->port);
  builder.RegisterService(cloud->service.get());
  cloud->server = builder.BuildAndStart();
  EXPECT_NE(cloud->server, nullptr);
  return cloud;
}

}  // namespace baton::edge_test
