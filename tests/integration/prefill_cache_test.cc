// Real-server tests of the Prefill service's streaming, caches, packs, auth,
// admission and draining: PrefillServers on 127.0.0.1:0 serving the synthetic
// tiny model, called through real gRPC channels with deadlines. Exactness is
// checked against the engine's one-shot prefill streamed through the same
// codec: a chunked, cached or delta prefill must give the same bytes.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "cloud_prefill/cpu_prefill_backend.h"
#include "cloud_prefill/prefill_server.h"
#include "cloud_prefill/prefill_service.h"
#include "cloud_prefill/tenant_auth.h"
#include "common/engine/engine.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/kv_stream/kv_stream_writer.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "proto/baton.grpc.pb.h"
#include "common/util/check.h"
#include "tests/support/edge_test_env.h"
#include "tests/support/kv_streams.h"
#include "tests/support/test_models.h"
#include "tests/support/tiny_model.h"
#include "tests/support/test_certs.h"
#include "tests/integration/zstd_bomb.h"
#include "common/kv_stream/kv_stream.h"

namespace baton {
namespace {

constexpr int64_t kMaxContext = 512;
constexpr char kTokenA[] = "tenant-a-token-0123456789";
constexpr char kTokenB[] = "tenant-b-token-0123456789";

// The tiny model (F32), loaded once: the service's model and the source of reference KV.
const testing::TinyModel& reference() { return testing::shared_tiny_model(GgmlType::kF32); }

std::vector<int32_t> prompt(int n, int seed) { return testing::seeded_prompt(reference(), n, seed); }

v1::PrefillRequest request_for(const std::vector<int32_t>& tokens, v1::KvCodec codec = v1::KV_CODEC_F16) {
  v1::PrefillRequest request;
  for (int32_t token : tokens) request.mutable_tokens()->add_ids(static_cast<uint32_t>(token));
  request.mutable_codec()->set_codec(codec);
  return request;
}

// A running service + server + stub (tests/support) serving the tiny model,
// with this file's defaults; null when the server did not start.
struct Cloud {
  static std::unique_ptr<edge_test::Cloud> Start(PrefillServiceOptions options,
                                                 const PrefillServerOptions& server_options = {}) {
    if (options.max_context_tokens == 0) options.max_context_tokens = kMaxContext;
    if (options.threads == 0) options.threads = 1;
    auto cloud = edge_test::start_cloud_with(reference().path, std::move(options), server_options);
    if (cloud->server == nullptr) return nullptr;
    return cloud;
  }
};

void set_deadline(grpc::ClientContext& context, const std::string& token = "") {
  edge_test::live_call(context, 60);
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
}

grpc::Status call_prefill(v1::Prefill::Stub& stub, const v1::PrefillRequest& request,
                          std::vector<v1::KvStreamMessage>* messages, const std::string& token = "") {
  grpc::ClientContext context;
  set_deadline(context, token);
  auto reader = stub.Prefill(&context, request);
  v1::KvStreamMessage message;
  while (reader->Read(&message)) messages->push_back(message);
  return reader->Finish();
}

// What the edge would hold after reading `messages` on top of the engine's
// own KV of tokens [0, first): F32 rows of [0, end).
std::unique_ptr<F32KvCache> receive(const std::vector<int32_t>& tokens, uint32_t first,
                                    const std::vector<v1::KvStreamMessage>& messages) {
  return testing::receive_stream(reference(), tokens, first, messages, kMaxContext);
}

// The stream a perfect server sends: the engine's one-shot KV of `tokens`
// through write_kv_segment with `codec`.
std::vector<v1::KvStreamMessage> one_shot_stream(const std::vector<int32_t>& tokens, uint32_t first,
                                                 const KvCodecConfig& codec) {
  return testing::one_shot_stream(reference(), tokens, first, codec, kMaxContext);
}

// Rows [first, end) of every layer are bit-identical.
void expect_same_kv(const F32KvCache& a, const F32KvCache& b, int64_t first, int64_t end) {
  const KvGeometry& g = a.geometry();
  for (int layer = 0; layer < g.n_layer; ++layer) {
    for (int64_t t = first; t < end; ++t) {
      ASSERT_TRUE(std::equal(a.k_row(layer, t), a.k_row(layer, t) + g.kv_dim(), b.k_row(layer, t)))
          << "K differs at layer " << layer << " token " << t;
      ASSERT_TRUE(std::equal(a.v_row(layer, t), a.v_row(layer, t) + g.kv_dim(), b.v_row(layer, t)))
          << "V differs at layer " << layer << " token " << t;
    }
  }
}

void expect_equals_one_shot(const std::vector<int32_t>& tokens, uint32_t first,
                            const std::vector<v1::KvStreamMessage>& messages, const KvCodecConfig& codec) {
  auto received = receive(tokens, first, messages);
  auto exact = receive(tokens, first, one_shot_stream(tokens, first, codec));
  ASSERT_NE(received, nullptr);
  ASSERT_NE(exact, nullptr);
  expect_same_kv(*received, *exact, first, static_cast<int64_t>(tokens.size()));
}

const v1::ProducerStats& producer_of(const std::vector<v1::KvStreamMessage>& messages) {
  static const v1::ProducerStats empty;
  if (messages.empty() || !messages.back().has_trailer()) return empty;
  return messages.back().trailer().producer();
}

KvCodecConfig codec_named(const std::string& name) {
  auto codec = parse_kv_codec_config(name);
  BATON_CHECK(codec.ok());
  return *codec;
}

// --- streaming and chunking ------------------------------------------------

TEST(PrefillStreamTest, ChunkedLayerByLayerStreamEqualsOneShotPrefillBitForBit) {
  PrefillServiceOptions options;
  options.chunk_tokens = 48;
  options.prefix_cache_bytes = 0;  // compute everything
  auto cloud = Cloud::Start(options);
  const std::vector<int32_t> tokens = prompt(300, 1);
  for (uint32_t first : {0u, 37u}) {
    std::vector<v1::KvStreamMessage> messages;
    v1::PrefillRequest request = request_for(tokens);
    request.set_first_position(first);
    grpc::Status status = call_prefill(*cloud->stub, request, &messages);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(producer_of(messages).computed_tokens(), 300u);
    expect_equals_one_shot(tokens, first, messages, codec_named("f16"));
  }
}

TEST(PrefillStreamTest, PerChannelInt4StreamEqualsOneShotEncoding) {
  PrefillServiceOptions options;
  options.chunk_tokens = 64;  // rounded up to the 128-token key groups for the stream slices
  options.prefix_cache_bytes = 0;
  auto cloud = Cloud::Start(options);
  const std::vector<int32_t> tokens = prompt(333, 2);
  const KvCodecConfig codec = codec_named("int4-pc-kg128-g16-z3");
  v1::PrefillRequest request = request_for(tokens);
  auto params = kv_codec_params(codec);
  ASSERT_TRUE(params.ok());
  *request.mutable_codec() = *params;
  request.set_first_position(5);
  std::vector<v1::KvStreamMessage> messages;
  grpc::Status status = call_prefill(*cloud->stub, request, &messages);
  ASSERT_TRUE(status.ok()) << status.error_message();
  expect_equals_one_shot(tokens, 5, messages, codec);
}

TEST(PrefillStreamTest, EarlyLayersOfTheFirstChunkAreSentBeforeTheLastChunkIsComputed) {
  PrefillServiceOptions options;
  options.chunk_tokens = 32;
  options.prefix_cache_bytes = 0;
  auto cloud = Cloud::Start(options);
  const std::vector<int32_t> tokens = prompt(256, 3);
  std::vector<v1::KvStreamMessage> messages;
  ASSERT_TRUE(call_prefill(*cloud->stub, request_for(tokens), &messages).ok());
  // Stream order: (layer 0, chunk 0) first, and a block of the first layer
  // comes after a block of the last layer (chunks interleave), which only
  // happens when blocks are sent as each chunk's layers complete.
  ASSERT_GT(messages.size(), 2u);
  ASSERT_TRUE(messages[1].has_block());
  EXPECT_EQ(messages[1].block().layer(), 0u);
  EXPECT_EQ(messages[1].block().token_begin(), 0u);
  const uint32_t last_layer = static_cast<uint32_t>(reference().geometry.n_layer - 1);
  bool seen_last_layer = false, layer0_after_last = false;
  for (const auto& m : messages) {
    if (!m.has_block()) continue;
    if (m.block().layer() == last_layer) seen_last_layer = true;
    if (seen_last_layer && m.block().layer() == 0) layer0_after_last = true;
    EXPECT_LE(m.block().token_count(), 32u);
  }
  EXPECT_TRUE(layer0_after_last);
}

// --- prefix cache ------------------------------------------------------------

TEST(PrefillCacheTest, PrefixCacheHitComputesOnlyTheNewTokensAndGivesTheSameKv) {
  auto cloud = Cloud::Start(PrefillServiceOptions{});
  const std::vector<int32_t> first_prompt = prompt(256, 4);
  std::vector<v1::KvStreamMessage> warm;
  ASSERT_TRUE(call_prefill(*cloud->stub, request_for(first_prompt), &warm).ok());
  EXPECT_EQ(producer_of(warm).cached_tokens(), 0u);
  EXPECT_EQ(producer_of(warm).computed_tokens(), 256u);

  // Shares the first 192 tokens (3 digest blocks), then differs.
  std::vector<int32_t> second_prompt(first_prompt.begin(), first_prompt.begin() + 200);
  for (int i = 0; i < 100; ++i) second_prompt.push_back((i * 13 + 5) % reference().model->spec().n_vocab);
  std::vector<v1::KvStreamMessage> messages;
  ASSERT_TRUE(call_prefill(*cloud->stub, request_for(second_prompt), &messages).ok());
  EXPECT_EQ(producer_of(messages).cached_tokens(), 192u);
  EXPECT_EQ(producer_of(messages).computed_tokens(), 300u - 192u);
  expect_equals_one_shot(second_prompt, 0, messages, codec_named("f16"));
  EXPECT_GE(cloud->service->prefix_cache_stats().hit_tokens, 192u);
}

// --- session cache -------------------------------------------------------------

TEST(PrefillCacheTest, SessionDeltaEqualsAFullPrefillOfTheHistory) {
  // Session ids are secrets of >= 32 characters (what baton-edge derives).
  constexpr char kSessionId[] = "0123456789abcdef0123456789abcdef-chat-1";
  PrefillServiceOptions options;
  options.prefix_cache_bytes = 0;  // only the session cache can help
  auto cloud = Cloud::Start(options);
  const std::vector<int32_t> turn1 = prompt(90, 5);
  v1::PrefillRequest request1 = request_for(turn1);
  request1.set_session_id(kSessionId);
  std::vector<v1::KvStreamMessage> messages1;
  ASSERT_TRUE(call_prefill(*cloud->stub, request1, &messages1).ok());

  // The edge generated some tokens and the user wrote a new turn.
  std::vector<int32_t> history = turn1;
  for (int i = 0; i < 70; ++i) history.push_back((i * 11 + 9) % reference().model->spec().n_vocab);
  v1::PrefillRequest request2 = request_for(history);
  request2.set_session_id(kSessionId);
  request2.set_first_position(90);
  std::vector<v1::KvStreamMessage> messages2;
  ASSERT_TRUE(call_prefill(*cloud->stub, request2, &messages2).ok());
  EXPECT_EQ(producer_of(messages2).cached_tokens(), 90u);
  EXPECT_EQ(producer_of(messages2).computed_tokens(), 70u);
  ASSERT_TRUE(messages2.front().has_header());
  EXPECT_EQ(messages2.front().header().first_position(), 90u);
  EXPECT_EQ(messages2.front().header().token_count(), 70u);
  expect_equals_one_shot(history, 90, messages2, codec_named("f16"));

  // An evicted session (a server without a session cache) gives the same answer.
  PrefillServiceOptions cold;
  cold.prefix_cache_bytes = 0;
  cold.session_cache_bytes = 0;
  auto cold_cloud = Cloud::Start(cold);
  std::vector<v1::KvStreamMessage> recomputed;
  ASSERT_TRUE(call_prefill(*cold_cloud->stub, request2, &recomputed).ok());
  EXPECT_EQ(producer_of(recomputed).cached_tokens(), 0u);
  expect_equals_one_shot(history, 90, recomputed, codec_named("f16"));
}

// --- prefix packs ---------------------------------------------------------------

// A pack stream of `tokens` made by the engine (what `baton pack build` does).
std::vector<v1::KvStreamMessage> make_pack(const std::vector<int32_t>& tokens, const std::string& pack_id) {
  std::vector<v1::KvStreamMessage> messages = one_shot_stream(tokens, 0, codec_named("int8-g16-z3"));
  // Re-make the header with the pack id (it is covered by the header only).
  const testing::TinyModel& ref = reference();
  KvStreamHeaderInfo info;
  info.model = ref.fingerprint;
  info.codec = codec_named("int8-g16-z3");
  info.token_ids = tokens;
  info.prefix_digest = prefix_digest(tokens);
  info.pack_id = pack_id;
  info.description = "system prompt";
  auto header = make_kv_header(info);
  BATON_CHECK(header.ok());
  header->set_format_version(messages.front().header().format_version());
  *messages.front().mutable_header() = *header;
  return messages;
}

grpc::Status put_prefix(v1::Prefill::Stub& stub, const std::vector<v1::KvStreamMessage>& messages,
                        v1::PutPrefixResponse* response, const std::string& token = "") {
  grpc::ClientContext context;
  set_deadline(context, token);
  auto writer = stub.PutPrefix(&context, response);
  for (const auto& m : messages) {
    if (!writer->Write(m)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

grpc::Status get_prefix(v1::Prefill::Stub& stub, const v1::GetPrefixRequest& request,
                        std::vector<v1::KvStreamMessage>* messages, const std::string& token = "") {
  grpc::ClientContext context;
  set_deadline(context, token);
  auto reader = stub.GetPrefix(&context, request);
  v1::KvStreamMessage message;
  while (reader->Read(&message)) messages->push_back(message);
  return reader->Finish();
}

TEST(PrefillPackTest, PutGetAndPrefillWithAPackReusesItsTokens) {
  PrefillServiceOptions options;
  options.prefix_cache_bytes = 0;
  auto cloud = Cloud::Start(options);
  const std::vector<int32_t> system = prompt(100, 6);
  const std::vector<v1::KvStreamMessage> pack = make_pack(system, "sys-1");

  v1::PutPrefixResponse put;
  grpc::Status status = put_prefix(*cloud->stub, pack, &put);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(put.pack_id(), "sys-1");
  EXPECT_EQ(put.token_count(), 100u);
  EXPECT_FALSE(put.already_present());
  v1::PutPrefixResponse again;
  ASSERT_TRUE(put_prefix(*cloud->stub, pack, &again).ok());
  EXPECT_TRUE(again.already_present());

  // By id and by digest: exactly the stream that went up.
  v1::GetPrefixRequest by_id;
  by_id.set_pack_id("sys-1");
  std::vector<v1::KvStreamMessage> got;
  ASSERT_TRUE(get_prefix(*cloud->stub, by_id, &got).ok());
  ASSERT_EQ(got.size(), pack.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].SerializeAsString(), pack[i].SerializeAsString()) << "message " << i;
  }
  v1::GetPrefixRequest by_digest;
  by_digest.set_prefix_digest(put.prefix_digest());
  std::vector<v1::KvStreamMessage> got_by_digest;
  ASSERT_TRUE(get_prefix(*cloud->stub, by_digest, &got_by_digest).ok());
  EXPECT_EQ(got_by_digest.size(), pack.size());

  // A prompt that starts with the pack computes only the rest.
  std::vector<int32_t> full = system;
  for (int i = 0; i < 40; ++i) full.push_back((i * 17 + 1) % reference().model->spec().n_vocab);
  v1::PrefillRequest request = request_for(full);
  request.set_prefix_pack_id("sys-1");
  request.set_first_position(100);
  std::vector<v1::KvStreamMessage> messages;
  status = call_prefill(*cloud->stub, request, &messages);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(producer_of(messages).cached_tokens(), 100u);
  EXPECT_EQ(producer_of(messages).computed_tokens(), 40u);

  // Errors: unknown pack, a pack that is not a prefix, the same id for another prefix.
  v1::PrefillRequest unknown = request_for(full);
  unknown.set_prefix_pack_id("nope");
  std::vector<v1::KvStreamMessage> none;
  status = call_prefill(*cloud->stub, unknown, &none);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND) << status.error_message();
  v1::PrefillRequest mismatch = request_for(prompt(140, 7));
  mismatch.set_prefix_pack_id("sys-1");
  status = call_prefill(*cloud->stub, mismatch, &none);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_NE(status.error_message().find("not a prefix"), std::string::npos) << status.error_message();
  v1::PutPrefixResponse clash;
  status = put_prefix(*cloud->stub, make_pack(prompt(80, 8), "sys-1"), &clash);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS) << status.error_message();
  v1::GetPrefixRequest missing;
  missing.set_pack_id("missing");
  std::vector<v1::KvStreamMessage> nothing;
  EXPECT_EQ(get_prefix(*cloud->stub, missing, &nothing).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST(PrefillPackTest, CorruptOrTruncatedUploadStoresNothing) {
  auto cloud = Cloud::Start(PrefillServiceOptions{});
  std::vector<v1::KvStreamMessage> pack = make_pack(prompt(64, 9), "broken");
  std::vector<v1::KvStreamMessage> corrupt = pack;
  ASSERT_TRUE(corrupt[1].has_block());
  (*corrupt[1].mutable_block()->mutable_payload())[0] ^= 0x40;
  v1::PutPrefixResponse response;
  grpc::Status status = put_prefix(*cloud->stub, corrupt, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  std::vector<v1::KvStreamMessage> truncated(pack.begin(), pack.end() - 1);  // no trailer
  status = put_prefix(*cloud->stub, truncated, &response);
  // Found by prefill_request_fuzz: a cut upload was DATA_LOSS, a code PutPrefix does not document.
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("ended before its trailer"), std::string::npos) << status.error_message();
  status = put_prefix(*cloud->stub, {}, &response);  // no header either
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("ended before its header"), std::string::npos) << status.error_message();
  v1::GetPrefixRequest get;
  get.set_pack_id("broken");
  std::vector<v1::KvStreamMessage> got;
  EXPECT_EQ(get_prefix(*cloud->stub, get, &got).error_code(), grpc::StatusCode::NOT_FOUND);
}

// --- auth and tenants -------------------------------------------------------------

TEST(PrefillAuthTest, TokensAreRequiredAndTenantsCannotReadEachOthersKv) {
  PrefillServiceOptions options;
  auto auth = TenantAuth::FromText(std::string(kTokenA) + " alpha\n# comment\n" + kTokenB + " beta\n", "test");
  ASSERT_TRUE(auth.ok()) << auth.status();
  options.auth = *auth;
  auto cloud = Cloud::Start(options);
  const std::vector<int32_t> tokens = prompt(128, 10);
  std::vector<v1::KvStreamMessage> messages;
  grpc::Status status = call_prefill(*cloud->stub, request_for(tokens), &messages);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << status.error_message();
  status = call_prefill(*cloud->stub, request_for(tokens), &messages, "wrong-token-000000000000");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << status.error_message();
  EXPECT_TRUE(messages.empty());
  {  // Health stays open for probes and load balancers.
    grpc::ClientContext context;
    set_deadline(context);
    v1::HealthResponse health;
    EXPECT_TRUE(cloud->stub->Health(&context, v1::HealthRequest(), &health).ok());
  }

  // Tenant A fills its prefix cache and stores a pack.
  ASSERT_TRUE(call_prefill(*cloud->stub, request_for(tokens), &messages, kTokenA).ok());
  v1::PutPrefixResponse put;
  ASSERT_TRUE(put_prefix(*cloud->stub, make_pack(prompt(64, 11), "alpha-pack"), &put, kTokenA).ok());

  // Tenant B sees neither.
  std::vector<v1::KvStreamMessage> b_messages;
  ASSERT_TRUE(call_prefill(*cloud->stub, request_for(tokens), &b_messages, kTokenB).ok());
  EXPECT_EQ(producer_of(b_messages).cached_tokens(), 0u);
  v1::GetPrefixRequest get;
  get.set_pack_id("alpha-pack");
  std::vector<v1::KvStreamMessage> got;
  EXPECT_EQ(get_prefix(*cloud->stub, get, &got, kTokenB).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::GetPrefixRequest by_digest;
  by_digest.set_prefix_digest(put.prefix_digest());
  EXPECT_EQ(get_prefix(*cloud->stub, by_digest, &got, kTokenB).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::PrefillRequest with_pack = request_for(prompt(64, 11));
  with_pack.set_prefix_pack_id("alpha-pack");
  EXPECT_EQ(call_prefill(*cloud->stub, with_pack, &got, kTokenB).error_code(), grpc::StatusCode::NOT_FOUND);
  // Tenant A does.
  std::vector<v1::KvStreamMessage> a_again;
  ASSERT_TRUE(call_prefill(*cloud->stub, request_for(tokens), &a_again, kTokenA).ok());
  EXPECT_EQ(producer_of(a_again).cached_tokens(), 128u);
  got.clear();
  EXPECT_TRUE(get_prefix(*cloud->stub, get, &got, kTokenA).ok());
}

TEST(PrefillAuthTest, BadTokenFilesAreRefusedWithTheLine) {
  auto short_token = TenantAuth::FromText("short alpha\n", "tokens.txt");
  ASSERT_FALSE(short_token.ok());
  EXPECT_NE(short_token.status().message().find("tokens.txt:1"), std::string::npos);
  auto bad_tenant = TenantAuth::FromText(std::string(kTokenA) + " al/pha\n", "tokens.txt");
  ASSERT_FALSE(bad_tenant.ok());
  auto missing = TenantAuth::FromFile("/nonexistent/tokens.txt");
  EXPECT_FALSE(missing.ok());
}

// --- concurrency, admission, draining -------------------------------------------------

TEST(PrefillLoadTest, EightConcurrentStreamsAreExactAndNothingDeadlocks) {
  PrefillServiceOptions options;
  options.max_running = 3;
  options.max_queued = 8;
  options.chunk_tokens = 40;
  auto cloud = Cloud::Start(options);
  constexpr int kStreams = 8;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kStreams; ++i) prompts.push_back(prompt(100 + 20 * i, 20 + i));
  std::vector<std::vector<v1::KvStreamMessage>> results(kStreams);
  std::vector<grpc::Status> statuses(kStreams);
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] {
      auto stub = v1::Prefill::NewStub(cloud->channel);
      statuses[i] = call_prefill(*stub, request_for(prompts[i]), &results[i]);
    });
  }
  for (auto& client : clients) client.join();
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(statuses[i].ok()) << "stream " << i << ": " << statuses[i].error_message();
    expect_equals_one_shot(prompts[i], 0, results[i], codec_named("f16"));
  }
  EXPECT_EQ(cloud->service->running(), 0u);
  EXPECT_EQ(cloud->service->queued(), 0u);
}

// A CPU backend that waits at a gate before computing: holds worker slots
// for as long as a test wants.
class GatedBackend final : public PrefillBackend {
 public:
  struct Gate {
    std::mutex mu;
    std::condition_variable cv;
    bool open = false;
    std::atomic<int> waiting{0};
    void release() {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
      cv.notify_all();
    }
  };
  GatedBackend(const Model& model, Gate* gate) : inner_(model, 1), gate_(gate) {}
  std::string name() const override { return "gated-" + inner_.name(); }
  void begin_sequence() override {}
  absl::Status prefill(std::span<const int32_t> tokens, F32KvCache& kv, const LayerDoneFn& layer_done) override {
    if (kv.capacity() > 1) {  // not the warm-up pass
      ++gate_->waiting;
      std::unique_lock<std::mutex> lock(gate_->mu);
      gate_->cv.wait(lock, [this] { return gate_->open; });
      --gate_->waiting;
    }
    return inner_.prefill(tokens, kv, layer_done);
  }
  absl::Status decode(std::span<const int32_t> tokens, F32KvCache& kv, std::vector<float>* last_logits) override {
    return inner_.decode(tokens, kv, last_logits);
  }

 private:
  CpuPrefillBackend inner_;
  Gate* gate_;
};

TEST(PrefillLoadTest, FullQueueIsResourceExhaustedWithARetryHintAndCancelledCallsFreeTheirSlots) {
  GatedBackend::Gate gate;
  PrefillServiceOptions options;
  options.max_running = 1;
  options.max_queued = 1;
  options.retry_after_ms = 250;
  options.prefix_cache_bytes = 0;
  options.backend_factory = [&gate](const Model& model, int) -> absl::StatusOr<std::unique_ptr<PrefillBackend>> {
    return std::make_unique<GatedBackend>(model, &gate);
  };
  auto cloud = Cloud::Start(options);
  // Call 1 runs (held at the gate); call 2 waits in the queue.
  std::vector<v1::KvStreamMessage> first_messages, second_messages;
  grpc::Status first_status, second_status;
  std::thread first([&] { first_status = call_prefill(*cloud->stub, request_for(prompt(50, 30)), &first_messages); });
  for (int i = 0; i < 500 && gate.waiting.load() < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(gate.waiting.load(), 1);
  std::thread second([&] { second_status = call_prefill(*cloud->stub, request_for(prompt(50, 31)), &second_messages); });
  for (int i = 0; i < 500 && cloud->service->queued() < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(cloud->service->queued(), 1u);

  // Call 3 finds the queue full.
  grpc::ClientContext context;
  set_deadline(context);
  auto reader = cloud->stub->Prefill(&context, request_for(prompt(10, 32)));
  v1::KvStreamMessage message;
  EXPECT_FALSE(reader->Read(&message));
  grpc::Status full = reader->Finish();
  EXPECT_EQ(full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << full.error_message();
  EXPECT_NE(full.error_message().find("queue is full"), std::string::npos) << full.error_message();
  const auto& trailers = context.GetServerTrailingMetadata();
  auto hint = trailers.find(kRetryAfterMetadataKey);
  ASSERT_NE(hint, trailers.end());
  EXPECT_EQ(std::string(hint->second.data(), hint->second.size()), "250");

  gate.release();
  first.join();
  second.join();
  ASSERT_TRUE(first_status.ok()) << first_status.error_message();
  ASSERT_TRUE(second_status.ok()) << second_status.error_message();
  expect_equals_one_shot(prompt(50, 31), 0, second_messages, codec_named("f16"));
  EXPECT_EQ(cloud->service->running(), 0u);
  EXPECT_EQ(cloud->service->queued(), 0u);
}

TEST(PrefillLoadTest, DrainingRefusesNewCallsAndFinishesRunningOnes) {
  GatedBackend::Gate gate;
  PrefillServiceOptions options;
  options.max_running = 1;
  options.backend_factory = [&gate](const Model& model, int) -> absl::StatusOr<std::unique_ptr<PrefillBackend>> {
    return std::make_unique<GatedBackend>(model, &gate);
  };
  auto cloud = Cloud::Start(options);
  std::vector<v1::KvStreamMessage> running_messages;
  grpc::Status running_status;
  std::thread running([&] {
    running_status = call_prefill(*cloud->stub, request_for(prompt(60, 40)), &running_messages);
  });
  for (int i = 0; i < 500 && gate.waiting.load() < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(gate.waiting.load(), 1);

  cloud->service->begin_drain();
  {
    grpc::ClientContext context;
    set_deadline(context);
    v1::HealthResponse health;
    ASSERT_TRUE(cloud->stub->Health(&context, v1::HealthRequest(), &health).ok());
    EXPECT_EQ(health.state(), v1::SERVING_STATE_DRAINING);
    EXPECT_EQ(health.running(), 1u);
  }
  grpc::ClientContext context;
  set_deadline(context);
  auto reader = cloud->stub->Prefill(&context, request_for(prompt(10, 41)));
  v1::KvStreamMessage message;
  EXPECT_FALSE(reader->Read(&message));
  grpc::Status refused = reader->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  EXPECT_NE(refused.error_message().find("draining"), std::string::npos) << refused.error_message();
  EXPECT_NE(context.GetServerTrailingMetadata().find(kRetryAfterMetadataKey),
            context.GetServerTrailingMetadata().end());

  EXPECT_FALSE(cloud->service->wait_idle(std::chrono::milliseconds(50)));
  gate.release();
  running.join();
  ASSERT_TRUE(running_status.ok()) << running_status.error_message();
  EXPECT_TRUE(running_messages.back().has_trailer());
  EXPECT_TRUE(cloud->service->wait_idle(std::chrono::milliseconds(5000)));
}

// --- TLS --------------------------------------------------------------------------

TEST(PrefillTlsTest, TlsServerAnswersTlsClientsAndRefusesPlaintext) {
  if (!testing::have_openssl()) GTEST_SKIP() << "openssl is not installed";
  const testing::TestCertificate& server = testing::test_pki().server;
  PrefillServerOptions server_options;
  server_options.tls.cert_path = server.cert;
  server_options.tls.key_path = server.key;
  auto cloud = Cloud::Start(PrefillServiceOptions{}, server_options);
  ASSERT_NE(cloud, nullptr);
  const std::string address = "127.0.0.1:" + std::to_string(cloud->server->port());

  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = testing::read_text_file(server.cert);
  auto tls_stub = v1::Prefill::NewStub(grpc::CreateChannel(address, grpc::SslCredentials(ssl)));
  std::vector<v1::KvStreamMessage> messages;
  grpc::Status status = call_prefill(*tls_stub, request_for(prompt(20, 50)), &messages);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(messages.back().has_trailer());

  auto plain_stub = v1::Prefill::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::HealthResponse health;
  EXPECT_FALSE(plain_stub->Health(&context, v1::HealthRequest(), &health).ok());
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

TEST(PrefillTlsTest, MutualTlsAdmitsOnlyClientsWithACertificateTheServerTrusts) {
  if (!testing::have_openssl()) GTEST_SKIP() << "openssl is not installed";
  const testing::TestPki& pki = testing::test_pki();
  PrefillServerOptions server_options;
  server_options.tls.cert_path = pki.server.cert;
  server_options.tls.key_path = pki.server.key;
  server_options.tls.client_ca_path = pki.client.cert;  // self-signed: its own CA
  auto cloud = Cloud::Start(PrefillServiceOptions{}, server_options);
  ASSERT_NE(cloud, nullptr);
  const std::string address = "127.0.0.1:" + std::to_string(cloud->server->port());
  auto stub_with = [&](const std::string& client) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = testing::read_text_file(pki.server.cert);
    if (!client.empty()) {
      const testing::TestCertificate& mine = client == "client" ? pki.client : pki.stranger;
      ssl.pem_private_key = testing::read_text_file(mine.key);
      ssl.pem_cert_chain = testing::read_text_file(mine.cert);
    }
    return v1::Prefill::NewStub(grpc::CreateChannel(address, grpc::SslCredentials(ssl)));
  };
  std::vector<v1::KvStreamMessage> messages;
  auto trusted = stub_with("client");
  grpc::Status status = call_prefill(*trusted, request_for(prompt(20, 60)), &messages);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(messages.back().has_trailer());
  for (const std::string& client : {std::string(), std::string("stranger")}) {
    auto stub = stub_with(client);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::HealthResponse health;
    EXPECT_FALSE(stub->Health(&context, v1::HealthRequest(), &health).ok())
        << (client.empty() ? "a client without a certificate" : "a client with an untrusted certificate")
        << " was admitted";
  }
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

TEST(PrefillLimitsTest, OversizedMessageIsRefusedAndTheServerGoesOn) {
  auto cloud = Cloud::Start(PrefillServiceOptions{});
  // A 9 MiB block: over the server's 8 MiB receive cap.
  std::vector<v1::KvStreamMessage> pack = make_pack(prompt(64, 70), "big");
  ASSERT_TRUE(pack[1].has_block());
  pack[1].mutable_block()->mutable_payload()->assign(9u << 20, 'x');
  v1::PutPrefixResponse response;
  grpc::Status status = put_prefix(*cloud->stub, pack, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  v1::GetPrefixRequest get;
  get.set_pack_id("big");
  std::vector<v1::KvStreamMessage> got;
  EXPECT_EQ(get_prefix(*cloud->stub, get, &got).error_code(), grpc::StatusCode::NOT_FOUND);
  std::vector<v1::KvStreamMessage> messages;
  EXPECT_TRUE(call_prefill(*cloud->stub, request_for(prompt(16, 71)), &messages).ok());
}

// Decompression bombs in an upload: a block claiming 256 MiB of raw bytes,
// and a block with the right raw_size whose zstd frame (small enough to pass
// the compressed-size bound) declares 32 MiB. Both are refused before
// anything is expanded; nothing is stored and the server's memory high-water
// does not move by the bomb's size.
TEST(PrefillLimitsTest, DecompressionBombsAreRefusedUnexpanded) {
  auto cloud = Cloud::Start(PrefillServiceOptions{});
  const std::string big_bomb = zstd_bomb(size_t{256} << 20);
  const std::string small_bomb = zstd_bomb(size_t{32} << 20);
  ASSERT_LT(big_bomb.size(), 64u << 10);
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  const long max_rss_before_kib = usage.ru_maxrss;
  for (const bool claim_raw_size : {true, false}) {
    SCOPED_TRACE(claim_raw_size ? "raw_size 256 MiB" : "frame declares 256 MiB");
    std::vector<v1::KvStreamMessage> pack = make_pack(prompt(64, 72), "bomb");
    ASSERT_TRUE(pack[1].has_block());
    v1::KvBlock* block = pack[1].mutable_block();
    ASSERT_NE(block->raw_size(), block->encoded_size()) << "the pack's codec must compress";
    const std::string& bomb = claim_raw_size ? big_bomb : small_bomb;
    if (!claim_raw_size) {
      ASSERT_LT(bomb.size(), block->raw_size()) << "the frame must pass the size bound";
    }
    block->set_payload(bomb);
    block->set_encoded_size(bomb.size());
    if (claim_raw_size) block->set_raw_size(size_t{256} << 20);
    block->set_checksum(kv_payload_checksum(bomb));
    v1::PutPrefixResponse response;
    grpc::Status status = put_prefix(*cloud->stub, pack, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_NE(status.error_message().find(claim_raw_size ? "max_block_raw_bytes" : "declares"), std::string::npos)
        << status.error_message();
  }
  getrusage(RUSAGE_SELF, &usage);
  EXPECT_LT(usage.ru_maxrss - max_rss_before_kib, 128 * 1024);
  v1::GetPrefixRequest get;
  get.set_pack_id("bomb");
  std::vector<v1::KvStreamMessage> got;
  EXPECT_EQ(get_prefix(*cloud->stub, get, &got).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST(PrefillLimitsTest, ExpiredDeadlineEndsTheCallAndFreesItsSlot) {
  PrefillServiceOptions options;
  options.max_running = 1;
  options.chunk_tokens = 8;
  options.prefix_cache_bytes = 0;
  auto cloud = Cloud::Start(options);
  for (int round = 0; round < 3; ++round) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(1));
    auto reader = cloud->stub->Prefill(&context, request_for(prompt(500, 72 + round)));
    v1::KvStreamMessage message;
    while (reader->Read(&message)) {
    }
    grpc::Status status = reader->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
  }
  // The one worker is free again: a call with time to spare completes.
  std::vector<v1::KvStreamMessage> messages;
  grpc::Status status = call_prefill(*cloud->stub, request_for(prompt(40, 80)), &messages);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(messages.back().has_trailer());
  for (int i = 0; i < 500 && (cloud->service->running() > 0 || cloud->service->queued() > 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(cloud->service->running(), 0u);
  EXPECT_EQ(cloud->service->queued(), 0u);
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

TEST(PrefillPackTest, KvBuiltOnAPackNeverReachesRequestsWithoutIt) {
  auto cloud = Cloud::Start(PrefillServiceOptions{});  // prefix cache on
  const std::vector<int32_t> system = prompt(128, 90);
  v1::PutPrefixResponse put;
  ASSERT_TRUE(put_prefix(*cloud->stub, make_pack(system, "sys-q"), &put).ok());
  std::vector<int32_t> full = system;
  for (int i = 0; i < 64; ++i) full.push_back((i * 19 + 7) % reference().model->spec().n_vocab);
  v1::PrefillRequest with_pack = request_for(full);
  with_pack.set_prefix_pack_id("sys-q");
  std::vector<v1::KvStreamMessage> first;
  ASSERT_TRUE(call_prefill(*cloud->stub, with_pack, &first).ok());
  EXPECT_EQ(producer_of(first).cached_tokens(), 128u);
  // The same tokens without the pack: nothing may come from the pack's
  // quantized KV, so the prefix cache has no hit and the KV is exact.
  std::vector<v1::KvStreamMessage> second;
  ASSERT_TRUE(call_prefill(*cloud->stub, request_for(full), &second).ok());
  EXPECT_EQ(producer_of(second).cached_tokens(), 0u);
  expect_equals_one_shot(full, 0, second, codec_named("f16"));
}

}  // namespace
}  // namespace baton
