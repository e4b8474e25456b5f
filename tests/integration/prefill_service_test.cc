// Real-server tests of the Prefill service: a PrefillServer on 127.0.0.1:0
// serving the synthetic tiny model, called through a real gRPC channel with
// deadlines. The KV that comes back must equal the engine's own KV for the
// same tokens (within the codec's rounding).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/str_format.h"
#include "cloud_prefill/prefill_server.h"
#include "cloud_prefill/prefill_service.h"
#include "common/engine/engine.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_stream/kv_fingerprint.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "proto/baton.grpc.pb.h"
#include "tests/support/edge_test_env.h"
#include "tests/support/test_models.h"
#include "tests/support/tiny_model.h"

namespace baton {
namespace {

constexpr int64_t kMaxContextTokens = 64;

class PrefillServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const testing::TinyModel& tiny = testing::shared_tiny_model(GgmlType::kF32);
    model_ = tiny.model.get();
    PrefillServiceOptions options;
    options.threads = 1;
    options.max_running = 2;
    options.max_queued = 4;
    options.max_context_tokens = kMaxContextTokens;
    options.chunk_tokens = 7;  // several chunks per prompt
    cloud_ = edge_test::start_cloud_with(tiny.path, options).release();
  }

  static void TearDownTestSuite() {
    delete cloud_;  // shuts the server down before the service goes
    cloud_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(cloud_->server, nullptr);
    channel_ = grpc::CreateChannel(cloud_->address(), grpc::InsecureChannelCredentials());
    stub_ = v1::Prefill::NewStub(channel_);
  }

  static void set_deadline(grpc::ClientContext& context) {
    edge_test::live_call(context, 30);
  }

  static std::vector<int32_t> prompt(int n) {
    std::vector<int32_t> tokens;
    for (int i = 0; i < n; ++i) tokens.push_back((i * 7 + 3) % model_->spec().n_vocab);
    return tokens;
  }

  static v1::PrefillRequest request_for(const std::vector<int32_t>& tokens) {
    v1::PrefillRequest request;
    for (int32_t token : tokens) request.mutable_tokens()->add_ids(static_cast<uint32_t>(token));
    return request;
  }

  // Runs one Prefill call; the messages it streamed and its final status.
  grpc::Status call_prefill(const v1::PrefillRequest& request, std::vector<v1::KvStreamMessage>* messages) {
    grpc::ClientContext context;
    set_deadline(context);
    std::unique_ptr<grpc::ClientReader<v1::KvStreamMessage>> reader = stub_->Prefill(&context, request);
    v1::KvStreamMessage message;
    while (reader->Read(&message)) messages->push_back(message);
    return reader->Finish();
  }

  static ModelFingerprint our_fingerprint() {
    auto fingerprint = model_fingerprint(*model_);
    EXPECT_TRUE(fingerprint.ok());
    return *fingerprint;
  }

  static edge_test::Cloud* cloud_;
  static const Model* model_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Prefill::Stub> stub_;
};

edge_test::Cloud* PrefillServiceTest::cloud_ = nullptr;
const Model* PrefillServiceTest::model_ = nullptr;

TEST_F(PrefillServiceTest, HealthIsReadyWithTheModelFingerprint) {
  grpc::ClientContext context;
  set_deadline(context);
  v1::HealthResponse response;
  grpc::Status status = stub_->Health(&context, v1::HealthRequest(), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.state(), v1::SERVING_STATE_READY);
  const v1::ModelFingerprint expected = model_fingerprint_to_proto(our_fingerprint());
  EXPECT_EQ(response.model().digest(), expected.digest());
  EXPECT_EQ(response.backend().rfind("cpu:", 0), 0u) << response.backend();
  EXPECT_EQ(response.codecs_size(), 3);
  EXPECT_EQ(response.max_context_tokens(), static_cast<uint32_t>(kMaxContextTokens));
}

TEST_F(PrefillServiceTest, F16KvEqualsTheEnginesOwnKv) {
  const std::vector<int32_t> tokens = prompt(20);
  v1::PrefillRequest request = request_for(tokens);
  request.mutable_codec()->set_codec(v1::KV_CODEC_F16);
  *request.mutable_expected_model() = model_fingerprint_to_proto(our_fingerprint());
  std::vector<v1::KvStreamMessage> messages;
  grpc::Status status = call_prefill(request, &messages);
  ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  ASSERT_GE(messages.size(), 3u);
  EXPECT_TRUE(messages.front().has_header());
  EXPECT_TRUE(messages.back().has_trailer());

  Engine engine(*model_, EngineOptions{.n_threads = 1});
  F32KvCache received(engine.kv_geometry(), kMaxContextTokens);
  KvStreamExpectation expected;
  expected.model = our_fingerprint();
  expected.first_position = 0;
  expected.token_ids = tokens;
  const KvRope rope = kv_rope_of(*model_);
  auto load = read_kv_segment(messages, expected, &rope, received);
  ASSERT_TRUE(load.ok()) << load.status();
  EXPECT_EQ(load->token_count, tokens.size());
  EXPECT_EQ(received.size(), static_cast<int64_t>(tokens.size()));

  F32KvCache reference(engine.kv_geometry(), kMaxContextTokens);
  ASSERT_TRUE(engine.prefill(tokens, reference, nullptr).ok());
  const KvGeometry geometry = engine.kv_geometry();
  for (int layer = 0; layer < geometry.n_layer; ++layer) {
    for (int64_t token = 0; token < static_cast<int64_t>(tokens.size()); ++token) {
      for (int64_t i = 0; i < geometry.kv_dim(); ++i) {
        const float k_ref = reference.k_row(layer, token)[i];
        const float v_ref = reference.v_row(layer, token)[i];
        // f16 keeps 11 significant bits: relative error <= 2^-11.
        ASSERT_NEAR(received.k_row(layer, token)[i], k_ref, 1e-3f * std::fabs(k_ref) + 1e-6f)
            << "K layer " << layer << " token " << token << " element " << i;
        ASSERT_NEAR(received.v_row(layer, token)[i], v_ref, 1e-3f * std::fabs(v_ref) + 1e-6f)
            << "V layer " << layer << " token " << token << " element " << i;
      }
    }
  }
}

TEST_F(PrefillServiceTest, DefaultInt8CodecStreamsASegmentFromFirstPosition) {
  const std::vector<int32_t> tokens = prompt(30);
  v1::PrefillRequest request = request_for(tokens);
  request.set_first_position(5);
  std::vector<v1::KvStreamMessage> messages;
  grpc::Status status = call_prefill(request, &messages);
  ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  ASSERT_FALSE(messages.empty());
  ASSERT_TRUE(messages.front().has_header());
  EXPECT_EQ(messages.front().header().codec().codec(), v1::KV_CODEC_INT8);

  Engine engine(*model_, EngineOptions{.n_threads = 1});
  auto edge = std::make_unique<F32KvCache>(engine.kv_geometry(), kMaxContextTokens);
  ASSERT_TRUE(engine.prefill(std::span<const int32_t>(tokens).first(5), *edge, nullptr).ok());
  KvStreamExpectation expected;
  expected.model = our_fingerprint();
  expected.first_position = 5;
  const KvRope rope = kv_rope_of(*model_);
  auto load = read_kv_segment(messages, expected, &rope, *edge);
  ASSERT_TRUE(load.ok()) << load.status();
  EXPECT_EQ(load->first_position, 5u);
  EXPECT_EQ(load->token_count, 25u);
  EXPECT_EQ(edge->size(), 30);
}

// The codec a fully specified request names (kv_codec_params, as the edge
// and bench split send it) is the codec of the stream, whatever the server's
// defaults: per-token INT4 keys stay per-token with the value group.
TEST_F(PrefillServiceTest, AFullySpecifiedCodecIsStreamedAsAsked) {
  const int g = std::min(32, model_->spec().head_dim);
  for (const std::string& name : {absl::StrFormat("int4-g%d-z3", g), absl::StrFormat("int4-pc-kg128-g%d-z3", g),
                                  absl::StrFormat("int4-k8-g%d-z3", g), absl::StrFormat("int8-g%d-z3", g),
                                  std::string("f16-z3")}) {
    SCOPED_TRACE(name);
    absl::StatusOr<KvCodecConfig> config = parse_kv_codec_config(name);
    ASSERT_TRUE(config.ok()) << config.status();
    v1::PrefillRequest request = request_for(prompt(8));
    absl::StatusOr<v1::CodecParams> params = kv_codec_params(*config);
    ASSERT_TRUE(params.ok()) << params.status();
    *request.mutable_codec() = *params;
    std::vector<v1::KvStreamMessage> messages;
    grpc::Status status = call_prefill(request, &messages);
    ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
    ASSERT_FALSE(messages.empty());
    ASSERT_TRUE(messages.front().has_header());
    absl::StatusOr<KvCodecConfig> streamed = kv_codec_config_from_params(messages.front().header().codec());
    ASSERT_TRUE(streamed.ok()) << streamed.status();
    EXPECT_EQ(streamed->to_string(), config->to_string());
  }
}

TEST_F(PrefillServiceTest, OutOfVocabularyTokenIsInvalidArgument) {
  v1::PrefillRequest request = request_for(prompt(4));
  request.mutable_tokens()->add_ids(static_cast<uint32_t>(model_->spec().n_vocab));
  std::vector<v1::KvStreamMessage> messages;
  grpc::Status status = call_prefill(request, &messages);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("tokens.ids[4]"), std::string::npos) << status.error_message();
  EXPECT_TRUE(messages.empty());
}

TEST_F(PrefillServiceTest, EmptyPromptIsInvalidArgument) {
  v1::PrefillRequest request;
  request.mutable_tokens();
  std::vector<v1::KvStreamMessage> messages;
  grpc::Status status = call_prefill(request, &messages);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
}

TEST_F(PrefillServiceTest, WrongModelFingerprintIsFailedPreconditionNamingTheField) {
  auto other = Model::Load(testing::synth_model_path("tiny", GgmlType::kF32, /*seed=*/2));
  ASSERT_TRUE(other.ok()) << other.status();
  auto other_fingerprint = model_fingerprint(**other);
  ASSERT_TRUE(other_fingerprint.ok());
  v1::PrefillRequest request = request_for(prompt(4));
  *request.mutable_expected_model() = model_fingerprint_to_proto(*other_fingerprint);
  std::vector<v1::KvStreamMessage> messages;
  grpc::Status status = call_prefill(request, &messages);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_NE(status.error_message().find("expected_model"), std::string::npos) << status.error_message();
  EXPECT_NE(status.error_message().find("weights"), std::string::npos) << status.error_message();
}

TEST_F(PrefillServiceTest, PromptOverTheContextLimitIsResourceExhaustedWithTheNumbers) {
  v1::PrefillRequest request = request_for(prompt(kMaxContextTokens + 1));
  std::vector<v1::KvStreamMessage> messages;
  grpc::Status status = call_prefill(request, &messages);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_NE(status.error_message().find("65"), std::string::npos) << status.error_message();
  EXPECT_NE(status.error_message().find("64"), std::string::npos) << status.error_message();
}

TEST_F(PrefillServiceTest, UnknownCodecIsInvalidArgument) {
  v1::PrefillRequest request = request_for(prompt(4));
  request.mutable_codec()->set_codec(static_cast<v1::KvCodec>(99));
  std::vector<v1::KvStreamMessage> messages;
  grpc::Status status = call_prefill(request, &messages);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
}

TEST_F(PrefillServiceTest, TextIsTokenizedByTheServer) {
  v1::PrefillRequest request;
  request.set_text("hello world, hello prefill");
  std::vector<v1::KvStreamMessage> messages;
  grpc::Status status = call_prefill(request, &messages);
  ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  ASSERT_FALSE(messages.empty());
  ASSERT_TRUE(messages.front().has_header());
  EXPECT_GT(messages.front().header().token_count(), 0u);
  EXPECT_TRUE(messages.back().has_trailer());
}

TEST_F(PrefillServiceTest, CancelledCallLeavesTheServerServing) {
  for (int round = 0; round < 3; ++round) {
    grpc::ClientContext context;
    set_deadline(context);
    v1::PrefillRequest request = request_for(prompt(kMaxContextTokens));
    request.mutable_codec()->set_codec(v1::KV_CODEC_F16);
    request.set_chunk_tokens(1);  // many small blocks
    auto reader = stub_->Prefill(&context, request);
    v1::KvStreamMessage message;
    if (round > 0) {
      ASSERT_TRUE(reader->Read(&message));  // round 0 cancels before the first message
    }
    context.TryCancel();
    while (reader->Read(&message)) {
    }
    grpc::Status status = reader->Finish();
    EXPECT_TRUE(status.error_code() == grpc::StatusCode::CANCELLED || status.ok()) << status.error_message();
  }
  // The workers are free again: a full call still works.
  std::vector<v1::KvStreamMessage> messages;
  grpc::Status status = call_prefill(request_for(prompt(8)), &messages);
  ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  EXPECT_TRUE(messages.back().has_trailer());
  for (int attempt = 0; attempt < 100; ++attempt) {
    grpc::ClientContext context;
    set_deadline(context);
    v1::HealthResponse health;
    ASSERT_TRUE(stub_->Health(&context, v1::HealthRequest(), &health).ok());
    if (health.running() == 0 && health.queued() == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ADD_FAILURE() << "requests still counted as running after cancellation";
}

// Found by prefill_request_fuzz (UBSan "invalid vptr" in QueuedWriteReactor::done):
// the worker's done() released the reactor's lock and took it again in
// pump(), while the gRPC thread's OnWriteDone for the last block could
// Finish and delete the reactor in between. Short streams end while their
// last write is in flight; each must end OK with its whole stream. The race
// is a use-after-free: a BATON_SANITIZE=address build reports it, a plain
// build may only crash now and then.
TEST_F(PrefillServiceTest, ShortStreamsEndCleanlyWhileTheirLastWriteCompletes) {
  for (int call = 0; call < 300; ++call) {
    v1::PrefillRequest request = request_for(prompt(1 + call % 3));
    request.mutable_codec()->set_codec(call % 2 == 0 ? v1::KV_CODEC_F16 : v1::KV_CODEC_INT8);
    std::vector<v1::KvStreamMessage> messages;
    grpc::Status status = call_prefill(request, &messages);
    ASSERT_TRUE(status.ok()) << "call " << call << ": " << status.error_message();
    ASSERT_FALSE(messages.empty());
    EXPECT_TRUE(messages.front().has_header());
    EXPECT_TRUE(messages.back().has_trailer());
  }
}

// --encode-threads: workers encode the layers' slices out of order, the
// sender sends them in order, so the stream is the same bytes as with one
// worker: every message but the trailer's producer timings, for codecs whose
// blocks split differently (f16, int8, per-channel int4) and a segment that
// starts after position 0. Many small slices (chunks of 7 tokens) keep the
// workers and the look-ahead busy.
TEST(PrefillServiceEncodeThreadsTest, AnyNumberOfEncodeWorkersSendsTheSameStream) {
  const testing::TinyModel& tiny = testing::shared_tiny_model(GgmlType::kF32);
  std::vector<std::unique_ptr<edge_test::Cloud>> clouds;
  for (int workers : {1, 4}) {
    PrefillServiceOptions options;
    options.threads = 1;
    options.max_context_tokens = kMaxContextTokens;
    options.chunk_tokens = 7;
    options.encode_threads = workers;
    clouds.push_back(edge_test::start_cloud_with(tiny.path, options));
    ASSERT_NE(clouds.back()->server, nullptr);
  }
  std::vector<int32_t> tokens;
  for (int i = 0; i < 60; ++i) tokens.push_back((i * 11 + 5) % tiny.model->spec().n_vocab);
  const int g = std::min(32, tiny.model->spec().head_dim);
  for (const std::string& name : {std::string("f16-z3"), absl::StrFormat("int8-g%d-z3", g),
                                  absl::StrFormat("int4-pc-kg128-g%d-z3", g)}) {
    for (uint32_t first : {0u, 9u}) {
      SCOPED_TRACE(name + " from " + std::to_string(first));
      absl::StatusOr<KvCodecConfig> config = parse_kv_codec_config(name);
      ASSERT_TRUE(config.ok()) << config.status();
      absl::StatusOr<v1::CodecParams> params = kv_codec_params(*config);
      ASSERT_TRUE(params.ok()) << params.status();
      std::vector<std::vector<v1::KvStreamMessage>> streams;
      for (auto& cloud : clouds) {
        v1::PrefillRequest request;
        for (int32_t t : tokens) request.mutable_tokens()->add_ids(static_cast<uint32_t>(t));
        request.set_first_position(first);
        *request.mutable_codec() = *params;
        grpc::ClientContext context;
        edge_test::live_call(context, 30);
        auto reader = cloud->stub->Prefill(&context, request);
        std::vector<v1::KvStreamMessage> messages;
        v1::KvStreamMessage message;
        while (reader->Read(&message)) messages.push_back(message);
        const grpc::Status status = reader->Finish();
        ASSERT_TRUE(status.ok()) << status.error_message();
        ASSERT_TRUE(messages.back().has_trailer());
        messages.back().mutable_trailer()->clear_producer();  // timings differ
        streams.push_back(std::move(messages));
      }
      ASSERT_EQ(streams[0].size(), streams[1].size());
      ASSERT_GE(streams[0].size(), 6u);  // the header, K and V of each layer at least, the trailer
      for (size_t i = 0; i < streams[0].size(); ++i) {
        EXPECT_EQ(streams[1][i].SerializeAsString(), streams[0][i].SerializeAsString()) << "message " << i;
      }
    }
  }
}

TEST(PrefillServiceNotReadyTest, PrefillBeforeReadyIsUnavailableWithARetryHint) {
  PrefillService service(PrefillServiceOptions{});  // never loaded: LOADING
  auto server = PrefillServer::Start("127.0.0.1:0", service);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::Prefill::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()),
                                                       grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    edge_test::live_call(context, 30);
    v1::HealthResponse health;
    ASSERT_TRUE(stub->Health(&context, v1::HealthRequest(), &health).ok());
    EXPECT_EQ(health.state(), v1::SERVING_STATE_LOADING);
    EXPECT_GT(health.retry_after_ms(), 0u);
  }
  grpc::ClientContext context;
  edge_test::live_call(context, 30);
  v1::PrefillRequest request;
  request.mutable_tokens()->add_ids(1);
  auto reader = stub->Prefill(&context, request);
  v1::KvStreamMessage message;
  EXPECT_FALSE(reader->Read(&message));
  grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  const auto& trailers = context.GetServerTrailingMetadata();
  EXPECT_NE(trailers.find(kRetryAfterMetadataKey), trailers.end());
  (*server)->Shutdown();
}

}  // namespace
}  // namespace baton
