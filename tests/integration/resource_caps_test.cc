// Memory caps for every untrusted length, on real servers (issue 15, item 4):
// the cloud admits a Prefill only when the memory it will allocate fits
// --memory-limit, refuses a PutPrefix at its header when the declared KV
// passes the store cap or the tenant's quota, deletes packs per tenant
// (DeletePrefix), and serves at most --max-pack-calls GetPrefix downloads at
// once; the edge refuses a cloud KV stream at its header when the staging
// does not fit the free KV budget, with the session unchanged.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "cloud_prefill/prefill_service.h"
#include "common/engine/engine.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/kv_stream/kv_stream_writer.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "edge_decode/plan/memory_plan.h"
#include "tests/support/edge_test_env.h"

namespace baton {
namespace {

using edge_test::edge_model_path;
using edge_test::live_call;

constexpr char kTokenA[] = "tenant-a-token-0123456789";
constexpr char kTokenB[] = "tenant-b-token-0123456789";

// The model both services serve, for making pack streams here.
struct Served {
  std::unique_ptr<Model> model;
  ModelFingerprint fingerprint;
  KvGeometry geometry;
};

const Served& served() {
  static Served* s = [] {
    auto* out = new Served;
    auto model = Model::Load(edge_model_path("tiny"));
    EXPECT_TRUE(model.ok()) << model.status();
    out->model = std::move(*model);
    auto fingerprint = model_fingerprint(*out->model);
    EXPECT_TRUE(fingerprint.ok());
    out->fingerprint = *fingerprint;
    const ModelSpec& spec = out->model->spec();
    out->geometry = KvGeometry{spec.n_layer, spec.n_head, spec.n_head_kv, spec.head_dim, {}};
    return out;
  }();
  return *s;
}

std::vector<int32_t> tokens(int n, int salt) {
  std::vector<int32_t> out;
  for (uint32_t id : edge_test::prompt(n, salt)) out.push_back(static_cast<int32_t>(id));
  return out;
}

// A pack stream of `t` (f16) with `pack_id`, as `baton pack build` makes it.
std::vector<v1::KvStreamMessage> pack_stream(const std::vector<int32_t>& t, const std::string& pack_id) {
  const Served& s = served();
  Engine engine(*s.model, EngineOptions{.n_threads = 1});
  F32KvCache cache(s.geometry, static_cast<int64_t>(t.size()));
  EXPECT_TRUE(engine.prefill(t, cache, nullptr).ok());
  KvStreamHeaderInfo info;
  info.model = s.fingerprint;
  info.codec = default_kv_codec_config(KvCodecConfig::Bits::kF16, s.geometry);
  info.token_ids = t;
  info.prefix_digest = prefix_digest(t);
  info.pack_id = pack_id;
  std::vector<v1::KvStreamMessage> messages;
  KvStreamWriter writer([&](const v1::KvStreamMessage& m) {
    messages.push_back(m);
    return absl::OkStatus();
  });
  const KvRope rope = kv_rope_of(*s.model);
  EXPECT_TRUE(write_kv_segment(cache, info, &rope, writer).ok());
  return messages;
}

std::unique_ptr<v1::Prefill::Stub> stub_for(const edge_test::Cloud& cloud, const grpc::ChannelArguments& args = {}) {
  return v1::Prefill::NewStub(
      grpc::CreateCustomChannel(cloud.address(), grpc::InsecureChannelCredentials(), args));
}

void prepare(grpc::ClientContext& context, const std::string& token = "") {
  live_call(context, 60);
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
}

grpc::Status put_prefix(v1::Prefill::Stub& stub, const std::vector<v1::KvStreamMessage>& messages,
                        v1::PutPrefixResponse* response, const std::string& token = "") {
  grpc::ClientContext context;
  prepare(context, token);
  auto writer = stub.PutPrefix(&context, response);
  for (const auto& m : messages) {
    if (!writer->Write(m)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

grpc::Status get_prefix(v1::Prefill::Stub& stub, const std::string& pack_id, const std::string& token = "") {
  grpc::ClientContext context;
  prepare(context, token);
  v1::GetPrefixRequest request;
  request.set_pack_id(pack_id);
  auto reader = stub.GetPrefix(&context, request);
  v1::KvStreamMessage message;
  while (reader->Read(&message)) {
  }
  return reader->Finish();
}

grpc::Status delete_prefix(v1::Prefill::Stub& stub, const v1::DeletePrefixRequest& request,
                           v1::DeletePrefixResponse* response, const std::string& token = "") {
  grpc::ClientContext context;
  prepare(context, token);
  return stub.DeletePrefix(&context, request, response);
}

std::string retry_hint(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(kRetryAfterMetadataKey);
  return it == trailers.end() ? "" : std::string(it->second.data(), it->second.size());
}

// A client whose stream windows are tiny: it stops the server's writes after
// about a kilobyte until it reads (a slow reader, made with gRPC itself).
grpc::ChannelArguments tiny_window() {
  grpc::ChannelArguments args;
  args.SetInt("grpc.http2.lookahead_bytes", 1024);
  args.SetInt("grpc.http2.bdp_probe", 0);
  return args;
}

// --- PutPrefix: reservation at the header -------------------------------------

TEST(PackCapsTest, UploadOverTheStoreIsRefusedAtItsHeaderBeforeAnyBlock) {
  const std::vector<v1::KvStreamMessage> pack = pack_stream(tokens(400, 1), "big");
  PrefillServiceOptions options;
  options.pack_store_bytes = 64 << 10;  // far below the 400 tokens' decoded KV
  auto cloud = edge_test::start_cloud(edge_model_path("tiny"), options);
  auto stub = stub_for(*cloud);
  // Only the header goes up: the refusal must come from it, not from a
  // missing trailer (which would be INVALID_ARGUMENT).
  v1::PutPrefixResponse response;
  grpc::Status status = put_prefix(*stub, {pack.front()}, &response);
  ASSERT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_NE(status.error_message().find("prefix pack store is full"), std::string::npos) << status.error_message();
  EXPECT_NE(status.error_message().find("of 65536"), std::string::npos) << status.error_message();
  // The whole stream is refused the same way; nothing stays reserved.
  status = put_prefix(*stub, pack, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_EQ(cloud->service->pack_bytes(), 0u);
  // A small pack still fits.
  EXPECT_TRUE(put_prefix(*stub, pack_stream(tokens(8, 2), "small"), &response).ok());
}

// --- quotas and DeletePrefix ---------------------------------------------------

TEST(PackCapsTest, QuotaIsPerTenantAndDeletePrefixFreesItOnlyForTheCallersPack) {
  const auto pack_a = pack_stream(tokens(40, 3), "shared");
  const auto pack_b = pack_stream(tokens(40, 4), "second");
  auto auth = TenantAuth::FromText(std::string(kTokenA) + " alpha\n" + kTokenB + " beta\n", "test tokens");
  ASSERT_TRUE(auth.ok()) << auth.status();
  // Learn one pack's stored size, then allow each tenant room for one.
  uint64_t one = 0;
  {
    auto probe = edge_test::start_cloud(edge_model_path("tiny"));
    v1::PutPrefixResponse response;
    ASSERT_TRUE(put_prefix(*stub_for(*probe), pack_a, &response).ok());
    one = response.stored_bytes();
  }
  PrefillServiceOptions options;
  options.auth = *auth;
  options.pack_quota_bytes = one + one / 2;
  auto cloud = edge_test::start_cloud(edge_model_path("tiny"), options);
  auto stub = stub_for(*cloud);
  v1::PutPrefixResponse put;
  ASSERT_TRUE(put_prefix(*stub, pack_a, &put, kTokenA).ok());
  grpc::Status over = put_prefix(*stub, pack_b, &put, kTokenA);
  ASSERT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << over.error_message();
  EXPECT_NE(over.error_message().find("tenant alpha's pack quota is full"), std::string::npos)
      << over.error_message();
  ASSERT_TRUE(put_prefix(*stub, pack_a, &put, kTokenB).ok());  // beta's own quota, same id

  v1::DeletePrefixRequest by_id;
  by_id.set_pack_id("shared");
  v1::DeletePrefixResponse deleted;
  ASSERT_TRUE(delete_prefix(*stub, by_id, &deleted, kTokenB).ok());
  EXPECT_EQ(deleted.pack_id(), "shared");
  EXPECT_EQ(deleted.freed_bytes(), one);
  EXPECT_EQ(get_prefix(*stub, "shared", kTokenB).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(get_prefix(*stub, "shared", kTokenA).ok()) << "beta's delete touched alpha's pack";
  EXPECT_EQ(delete_prefix(*stub, by_id, &deleted, kTokenB).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(delete_prefix(*stub, by_id, &deleted, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(delete_prefix(*stub, v1::DeletePrefixRequest(), &deleted, kTokenA).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  v1::DeletePrefixRequest by_digest;
  const Digest256 digest = prefix_digest(tokens(40, 3));
  by_digest.set_prefix_digest(std::string(reinterpret_cast<const char*>(digest.data()), digest.size()));
  ASSERT_TRUE(delete_prefix(*stub, by_digest, &deleted, kTokenA).ok());
  EXPECT_EQ(deleted.pack_id(), "shared");
  EXPECT_EQ(cloud->service->pack_bytes(), 0u);
  EXPECT_TRUE(put_prefix(*stub, pack_b, &put, kTokenA).ok()) << "the quota was not freed";
}

// --- GetPrefix: a bounded number of downloads, no copies ------------------------

TEST(PackCapsTest, DownloadsBeyondMaxPackCallsAreRefusedWithARetryHintUntilASlotFrees) {
  PrefillServiceOptions options;
  options.max_pack_calls = 1;
  options.retry_after_ms = 300;
  auto cloud = edge_test::start_cloud(edge_model_path("tiny"), options);
  auto stub = stub_for(*cloud);
  v1::PutPrefixResponse put;
  ASSERT_TRUE(put_prefix(*stub, pack_stream(tokens(600, 5), "big"), &put).ok());  // ~150 KiB of f16 KV

  // A slow reader holds the only slot: it reads the header and stops.
  auto slow_stub = stub_for(*cloud, tiny_window());
  grpc::ClientContext slow;
  prepare(slow);
  v1::GetPrefixRequest request;
  request.set_pack_id("big");
  auto slow_reader = slow_stub->GetPrefix(&slow, request);
  v1::KvStreamMessage header;
  ASSERT_TRUE(slow_reader->Read(&header));
  ASSERT_TRUE(header.has_header());

  grpc::ClientContext second;
  prepare(second);
  auto reader = stub->GetPrefix(&second, request);
  v1::KvStreamMessage message;
  EXPECT_FALSE(reader->Read(&message));
  grpc::Status refused = reader->Finish();
  ASSERT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_NE(refused.error_message().find("max-pack-calls"), std::string::npos) << refused.error_message();
  EXPECT_EQ(retry_hint(second), "300");

  // The slow reader leaves: its slot frees and downloads work again.
  slow.TryCancel();
  while (slow_reader->Read(&message)) {
  }
  slow_reader->Finish();
  grpc::Status again;
  for (int i = 0; i < 200; ++i) {
    again = get_prefix(*stub, "big");
    if (again.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(again.ok()) << again.error_message();
}

// --- Prefill: admission by memory ----------------------------------------------

v1::PrefillRequest prefill_request(const std::vector<int32_t>& t) {
  v1::PrefillRequest request;
  for (int32_t id : t) request.mutable_tokens()->add_ids(static_cast<uint32_t>(id));
  request.mutable_codec()->set_codec(v1::KV_CODEC_F16);
  return request;
}

TEST(PrefillAdmissionTest, SecondLargePromptIsRefusedWithTheNumbersWhileTheFirstHoldsItsReservation) {
  PrefillServiceOptions options;
  options.max_queued = 4;
  options.retry_after_ms = 200;
  options.memory_limit_bytes = 3'000'000;  // one 1500-token prompt (~1.6 MB with a cache candidate), not two
  auto cloud = edge_test::start_cloud(edge_model_path("tiny"), options);
  auto stub = stub_for(*cloud);

  // The first prompt runs and then waits on a client that does not read.
  auto slow_stub = stub_for(*cloud, tiny_window());
  grpc::ClientContext slow;
  prepare(slow);
  auto slow_reader = slow_stub->Prefill(&slow, prefill_request(tokens(1500, 6)));
  v1::KvStreamMessage message;
  ASSERT_TRUE(slow_reader->Read(&message));
  const uint64_t held = cloud->service->memory_in_use_bytes();
  ASSERT_GT(held, 1'000'000u);
  ASSERT_LE(held, options.memory_limit_bytes);

  grpc::ClientContext second;
  prepare(second);
  auto reader = stub->Prefill(&second, prefill_request(tokens(1500, 7)));
  EXPECT_FALSE(reader->Read(&message));
  grpc::Status refused = reader->Finish();
  ASSERT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  const std::string& why = refused.error_message();
  EXPECT_NE(why.find("a prompt of 1500 tokens needs"), std::string::npos) << why;
  EXPECT_NE(why.find(std::to_string(held) + " of 3000000 are reserved"), std::string::npos) << why;
  EXPECT_EQ(retry_hint(second), "200");
  EXPECT_EQ(cloud->service->memory_in_use_bytes(), held) << "a refused request reserved memory";

  // The first call goes away: its reservation is released and a large prompt runs.
  slow.TryCancel();
  while (slow_reader->Read(&message)) {
  }
  slow_reader->Finish();
  for (int i = 0; i < 500 && cloud->service->memory_in_use_bytes() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(cloud->service->memory_in_use_bytes(), 0u);
  grpc::ClientContext third;
  prepare(third);
  auto ok_reader = stub->Prefill(&third, prefill_request(tokens(1500, 8)));
  int messages = 0;
  while (ok_reader->Read(&message)) ++messages;
  grpc::Status status = ok_reader->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_GT(messages, 2);
  EXPECT_EQ(cloud->service->memory_in_use_bytes(), 0u);
}

// --- edge: the handoff's staging counted in the KV budget ----------------------

TEST(EdgeStagingTest, CloudStreamWhoseStagingPassesTheFreeKvBudgetIsRefusedAtItsHeader) {
  const std::string model_path = edge_model_path("tiny");
  auto cloud = edge_test::start_cloud(model_path);
  // A device whose KV budget is 60 f16 tokens: a 40-token prompt with 8 new
  // tokens fits (48), but receiving 39 tokens of cloud KV (staged encoded
  // and decoded) does not fit next to it.
  const KvCodecConfig f16 = default_kv_codec_config(KvCodecConfig::Bits::kF16, served().geometry);
  const uint64_t per_token = static_cast<uint64_t>(
      QuantizedKvCache::bytes_per_token(QuantizedKvCache::store_config_for(f16), served().geometry));
  const EdgeMemoryPlan probe = make_memory_plan(*served().model, uint64_t{1} << 30, {f16});
  EdgeServiceOptions options = edge_test::edge_options(cloud->address());
  options.memory_budget_bytes = probe.weights_bytes + probe.scratch_bytes + kMinHeadroomBytes + 60 * per_token;
  ASSERT_EQ(make_memory_plan(*served().model, options.memory_budget_bytes, {f16}).kv_budget_bytes, 60 * per_token);
  auto edge = edge_test::start_edge(model_path, options);
  edge_test::wait_for_cloud(*edge->stub);

  v1::GenerateRequest request = edge_test::greedy_request(edge_test::prompt(40, 9), "s1", v1::SPLIT_POLICY_CLOUD, 8);
  request.set_progress(true);
  edge_test::GenerateResult cloud_only = edge_test::generate(*edge->stub, request);
  ASSERT_EQ(cloud_only.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << cloud_only.status.error_message();
  EXPECT_NE(cloud_only.status.error_message().find("declares 39 tokens"), std::string::npos)
      << cloud_only.status.error_message();
  for (const v1::Progress& p : cloud_only.progress) {
    EXPECT_NE(p.phase(), v1::PHASE_RECEIVING_KV) << "a block was read";
  }
  EXPECT_EQ(edge_test::session_tokens(*edge->stub, "s1"), -1) << "the failed first turn left a session";

  // Under auto the same turn prefills locally and says why.
  request.set_policy(v1::SPLIT_POLICY_AUTO);
  request.set_session_id("s2");
  edge_test::GenerateResult fell_back = edge_test::generate(*edge->stub, request);
  ASSERT_TRUE(fell_back.status.ok()) << fell_back.status.error_message();
  if (fell_back.has_plan && fell_back.plan.place() == v1::PREFILL_PLACE_CLOUD) {
    EXPECT_NE(fell_back.stats.fallback_reason().find("KV memory budget"), std::string::npos)
        << fell_back.stats.fallback_reason();
  }
  EXPECT_GT(edge_test::session_tokens(*edge->stub, "s2"), 40);
}

}  // namespace
}  // namespace baton
