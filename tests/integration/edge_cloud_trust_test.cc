// What the edge sends the cloud and what it accepts from it (issue 15, items
// 3, 5 and 6): a scripted Prefill service in front of a real cloud records
// every call (session key, cache salt, affinity header) and can lie in an
// otherwise valid stream (re-emitted with the real KvStreamWriter). The edge
// must pin the codec, prefix digest, first position and token ids it asked
// for, never send a session id in clear, send the affinity header, pass the
// cache salt through, and believe a cloud that just served it.
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_stream/kv_fingerprint.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/kv_stream/kv_stream_writer.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/util/check.h"
#include "edge_decode/link/cloud_session_key.h"
#include "tests/support/edge_test_env.h"

namespace baton::edge_test {
namespace {

// A Prefill service that relays to a real cloud, records what it was sent,
// and tells the lie it is set to.
class ScriptedPrefill final : public v1::Prefill::Service {
 public:
  enum class Lie { kNone, kCodec, kPrefixDigest, kFirstPosition, kTokenIds };
  struct Call {
    std::string rpc;          // "Prefill" | "GetPrefix"
    std::string session_id;   // PrefillRequest.session_id
    std::string cache_salt;   // PrefillRequest.cache_salt
    std::string affinity;     // the baton-prefix-digest header; "<absent>" when missing
    std::vector<int32_t> tokens;
  };

  // The first `warming_health_answers` Health calls answer WARMING.
  ScriptedPrefill(const std::string& upstream, Lie lie, int warming_health_answers = 0)
      : stub_(v1::Prefill::NewStub(grpc::CreateChannel(upstream, grpc::InsecureChannelCredentials()))),
        lie_(lie),
        warming_health_answers_(warming_health_answers) {}

  grpc::Status Health(grpc::ServerContext*, const v1::HealthRequest*, v1::HealthResponse* response) override {
    const bool warming = health_calls_.fetch_add(1) < warming_health_answers_;
    response->set_state(warming ? v1::SERVING_STATE_WARMING : v1::SERVING_STATE_READY);
    response->set_prefill_tokens_per_s(1e6);
    return grpc::Status::OK;
  }

  grpc::Status Prefill(grpc::ServerContext* context, const v1::PrefillRequest* request,
                       grpc::ServerWriter<v1::KvStreamMessage>* writer) override {
    record("Prefill", *context, request);
    v1::PrefillRequest upstream_request = *request;
    if (lie_ == Lie::kCodec) {  // INT4, whatever was asked
      upstream_request.clear_codec();
      upstream_request.mutable_codec()->set_codec(v1::KV_CODEC_INT4);
    }
    if (lie_ == Lie::kFirstPosition) {  // one position earlier: a valid stream for another question
      upstream_request.set_first_position(request->first_position() > 0 ? request->first_position() - 1 : 1);
    }
    std::vector<v1::KvStreamMessage> messages;
    grpc::ClientContext upstream;
    live_call(upstream, 30);
    auto reader = stub_->Prefill(&upstream, upstream_request);
    v1::KvStreamMessage message;
    while (reader->Read(&message)) messages.push_back(message);
    if (grpc::Status status = reader->Finish(); !status.ok()) return status;
    if (lie_ == Lie::kPrefixDigest || lie_ == Lie::kTokenIds) {
      absl::Status sent = resend_with_lying_header(messages, writer);
      if (!sent.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, std::string(sent.message()));
      return grpc::Status::OK;
    }
    for (const v1::KvStreamMessage& m : messages) writer->Write(m);
    return grpc::Status::OK;
  }

  grpc::Status GetPrefix(grpc::ServerContext* context, const v1::GetPrefixRequest*,
                         grpc::ServerWriter<v1::KvStreamMessage>*) override {
    record("GetPrefix", *context, nullptr);
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such pack here");
  }

  std::vector<Call> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  void record(const std::string& rpc, const grpc::ServerContext& context, const v1::PrefillRequest* request) {
    Call call;
    call.rpc = rpc;
    call.affinity = "<absent>";
    const auto& metadata = context.client_metadata();
    if (auto it = metadata.find(kPrefixDigestMetadataKey); it != metadata.end()) {
      call.affinity.assign(it->second.data(), it->second.size());
    }
    if (request != nullptr) {
      call.session_id = request->session_id();
      call.cache_salt = request->cache_salt();
      for (uint32_t id : request->tokens().ids()) call.tokens.push_back(static_cast<int32_t>(id));
    }
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(std::move(call));
  }

  // The real stream with a header that lies consistently (its fingerprint
  // matches its own fields), blocks and trailer written again by the real
  // writer, so every checksum and digest verifies.
  absl::Status resend_with_lying_header(const std::vector<v1::KvStreamMessage>& messages,
                                        grpc::ServerWriter<v1::KvStreamMessage>* writer) const {
    const v1::KvHeader& real = messages.front().header();
    KvStreamHeaderInfo info;
    BATON_ASSIGN_OR_RETURN(info.model, model_fingerprint_from_proto(real.fingerprint().model()));
    BATON_ASSIGN_OR_RETURN(info.codec, kv_codec_config_from_params(real.codec()));
    info.first_position = real.first_position();
    info.token_ids.assign(real.token_ids().begin(), real.token_ids().end());
    std::copy(real.prefix_digest().begin(), real.prefix_digest().end(), info.prefix_digest.begin());
    if (lie_ == Lie::kPrefixDigest) info.prefix_digest = prefix_digest(std::vector<int32_t>{7, 8, 9});
    if (lie_ == Lie::kTokenIds) info.token_ids.back() = (info.token_ids.back() + 1) % 400;
    BATON_ASSIGN_OR_RETURN(v1::KvHeader header, make_kv_header(info));
    KvStreamWriter out([writer](const v1::KvStreamMessage& m) {
      return writer->Write(m) ? absl::OkStatus() : absl::UnavailableError("the edge went away");
    });
    BATON_RETURN_IF_ERROR(out.write_header(std::move(header)));
    for (const v1::KvStreamMessage& m : messages) {
      if (!m.has_block()) continue;
      const v1::KvBlock& b = m.block();
      BATON_RETURN_IF_ERROR(out.write_block(b.layer(), b.kind(), b.token_begin(), b.token_count(), b.payload(),
                                            b.raw_size()));
    }
    const v1::ProducerStats producer = messages.back().trailer().producer();
    return out.write_trailer(&producer);
  }

  std::unique_ptr<v1::Prefill::Stub> stub_;
  const Lie lie_;
  const int warming_health_answers_;
  std::atomic<int> health_calls_{0};
  mutable std::mutex mu_;
  std::vector<Call> calls_;  // guarded by mu_
};

struct ScriptedCloud {
  std::unique_ptr<Cloud> real;
  std::unique_ptr<ScriptedPrefill> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  ~ScriptedCloud() {
    if (server) server->Shutdown(std::chrono::system_clock::now());
  }
};

std::unique_ptr<ScriptedCloud> start_scripted_cloud(ScriptedPrefill::Lie lie, int warming_health_answers = 0,
                                                    PrefillServiceOptions real_options = {}) {
  auto cloud = std::make_unique<ScriptedCloud>();
  cloud->real = start_cloud(edge_model_path("tiny"), real_options);
  cloud->service = std::make_unique<ScriptedPrefill>(cloud->real->address(), lie, warming_health_answers);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &cloud->port);
  builder.RegisterService(cloud->service.get());
  cloud->server = builder.BuildAndStart();
  EXPECT_NE(cloud->server, nullptr);
  return cloud;
}

std::optional<v1::SessionInfo> session_info(v1::Edge::Stub& stub, const std::string& id) {
  grpc::ClientContext context;
  live_call(context, 10);
  v1::ListSessionsResponse response;
  EXPECT_TRUE(stub.ListSessions(&context, v1::ListSessionsRequest(), &response).ok());
  for (const v1::SessionInfo& info : response.sessions()) {
    if (info.session_id() == id) return info;
  }
  return std::nullopt;
}

v1::GenerateRequest int8_request(const std::vector<uint32_t>& tokens, const std::string& session_id,
                                 v1::SplitPolicy policy) {
  v1::GenerateRequest request = greedy_request(tokens, session_id, policy);
  request.mutable_codec()->set_codec(v1::KV_CODEC_INT8);
  return request;
}

// ---------------------------------------------------------------------------
// Strict handoff pins
// ---------------------------------------------------------------------------

struct LieCase {
  const char* name;
  ScriptedPrefill::Lie lie;
  const char* field;  // the error must name it
};

class EdgeLyingCloudTest : public ::testing::TestWithParam<LieCase> {};

TEST_P(EdgeLyingCloudTest, ValidStreamForAnotherQuestionIsRefusedNamingTheFieldAndTheSessionIsUnchanged) {
  const LieCase& lie = GetParam();
  std::unique_ptr<ScriptedCloud> cloud = start_scripted_cloud(lie.lie);
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), edge_options(cloud->address()));
  ASSERT_NE(edge->stub, nullptr);
  wait_for_cloud(*edge->stub);

  // Turn 1 is local, so turn 2 asks the cloud for a delta (first_position > 0).
  ASSERT_TRUE(generate(*edge->stub, int8_request(prompt(20, 5), "s", v1::SPLIT_POLICY_LOCAL)).status.ok());
  const std::optional<v1::SessionInfo> before = session_info(*edge->stub, "s");
  ASSERT_TRUE(before.has_value());
  ASSERT_GT(before->kv_bytes(), 0u);

  GenerateResult refused = generate(*edge->stub, int8_request(prompt(40, 6), "s", v1::SPLIT_POLICY_CLOUD));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << refused.status.error_message();
  EXPECT_NE(refused.status.error_message().find(lie.field), std::string::npos) << refused.status.error_message();
  EXPECT_TRUE(refused.tokens.empty());
  const std::optional<v1::SessionInfo> after = session_info(*edge->stub, "s");
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->token_count(), before->token_count());
  EXPECT_EQ(after->kv_bytes(), before->kv_bytes());
  EXPECT_EQ(after->prefix_digest(), before->prefix_digest());

  // The session goes on.
  GenerateResult follow_up = generate(*edge->stub, int8_request(prompt(40, 6), "s", v1::SPLIT_POLICY_LOCAL));
  ASSERT_TRUE(follow_up.status.ok()) << follow_up.status.error_message();
  EXPECT_GT(session_info(*edge->stub, "s")->token_count(), before->token_count());
}

INSTANTIATE_TEST_SUITE_P(
    Lies, EdgeLyingCloudTest,
    ::testing::Values(LieCase{"Int4WhenInt8WasAsked", ScriptedPrefill::Lie::kCodec, "codec"},
                      LieCase{"WrongPrefixDigest", ScriptedPrefill::Lie::kPrefixDigest, "prefix_digest"},
                      LieCase{"WrongFirstPosition", ScriptedPrefill::Lie::kFirstPosition, "first_position"},
                      LieCase{"WrongTokenIds", ScriptedPrefill::Lie::kTokenIds, "token_ids"}),
    [](const ::testing::TestParamInfo<LieCase>& param_info) { return std::string(param_info.param.name); });

// ---------------------------------------------------------------------------
// Session keys, affinity header, cache salt
// ---------------------------------------------------------------------------

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(EdgeCloudSessionKeyTest, TheCloudSeesAKeyedDigestNeverTheSessionIdAndItSurvivesARestart) {
  PrefillServiceOptions real;
  real.prefix_cache_bytes = 0;  // a hit can only come from the session cache
  std::unique_ptr<ScriptedCloud> cloud = start_scripted_cloud(ScriptedPrefill::Lie::kNone, 0, real);
  const std::string dir = testing::make_temp_dir("edge-session-key");
  EdgeServiceOptions options = edge_options(cloud->address());
  options.sessions_dir = dir;
  const std::vector<uint32_t> turn1 = prompt(40, 7);
  std::string first_key;
  {
    std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), options);
    ASSERT_NE(edge->stub, nullptr);
    wait_for_cloud(*edge->stub);
    ASSERT_TRUE(generate(*edge->stub, greedy_request(turn1, "alice", v1::SPLIT_POLICY_CLOUD)).status.ok());
    const std::optional<v1::SessionInfo> info = session_info(*edge->stub, "alice");
    ASSERT_TRUE(info.has_value());

    const std::vector<ScriptedPrefill::Call> calls = cloud->service->calls();
    ASSERT_EQ(calls.size(), 1u);
    first_key = calls[0].session_id;
    EXPECT_EQ(first_key.size(), 64u);
    EXPECT_EQ(first_key.find("alice"), std::string::npos);
    EXPECT_EQ(first_key.find_first_not_of("0123456789abcdef"), std::string::npos) << first_key;
    // HMAC-SHA256 under the secret kept in the sessions directory (0600).
    const std::string secret_path = dir + "/" + kCloudSessionSecretFileName;
    struct stat st {};
    ASSERT_EQ(stat(secret_path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    const std::string secret = read_file_bytes(secret_path);
    ASSERT_EQ(secret.size(), kCloudSessionSecretBytes);
    EXPECT_EQ(first_key, CloudSessionKeys::FromSecret(secret).key_for("alice", info->created_unix_ms()));
    edge->stop();
  }
  // A restarted edge reloads the session and the secret: same key, and the
  // cloud's session cache serves the follow-up.
  const uint64_t hits_before = cloud->real->service->session_cache_stats().hit_tokens;
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), options);
  ASSERT_NE(edge->stub, nullptr);
  wait_for_cloud(*edge->stub);
  ASSERT_TRUE(generate(*edge->stub, greedy_request(prompt(30, 8), "alice", v1::SPLIT_POLICY_CLOUD)).status.ok());
  const std::vector<ScriptedPrefill::Call> calls = cloud->service->calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1].session_id, first_key);
  EXPECT_GE(cloud->real->service->session_cache_stats().hit_tokens, hits_before + turn1.size() - 1);
  // A one-shot request sends no session key at all.
  ASSERT_TRUE(generate(*edge->stub, greedy_request(prompt(30, 9), "", v1::SPLIT_POLICY_CLOUD)).status.ok());
  EXPECT_TRUE(cloud->service->calls().back().session_id.empty());
}

TEST(EdgeAffinityHeaderTest, EveryCloudCallCarriesTheFirstBlockDigestOrThePackId) {
  std::unique_ptr<ScriptedCloud> cloud = start_scripted_cloud(ScriptedPrefill::Lie::kNone);
  EdgeServiceOptions options = edge_options(cloud->address());
  options.packs_dir = testing::make_temp_dir("edge-affinity-packs");  // PullPack needs one
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), options);
  ASSERT_NE(edge->stub, nullptr);
  wait_for_cloud(*edge->stub);

  // Two prompts sharing their first 64 tokens, one that does not, one short.
  const std::vector<uint32_t> shared = prompt(100, 10);
  const std::vector<uint32_t> sibling = [&] {
    std::vector<uint32_t> tokens(shared.begin(), shared.begin() + 64);
    for (uint32_t id : prompt(30, 11)) tokens.push_back(id);
    return tokens;
  }();
  const std::vector<uint32_t> stranger = prompt(100, 12);
  const std::vector<uint32_t> short_prompt = prompt(20, 13);
  for (const auto* tokens : {&shared, &sibling, &stranger, &short_prompt}) {
    ASSERT_TRUE(generate(*edge->stub, greedy_request(*tokens, "", v1::SPLIT_POLICY_CLOUD)).status.ok());
  }
  const std::vector<ScriptedPrefill::Call> calls = cloud->service->calls();
  ASSERT_EQ(calls.size(), 4u);
  const std::vector<int32_t> first_block(shared.begin(), shared.begin() + 64);
  EXPECT_EQ(calls[0].affinity, to_hex(prefix_digest(first_block)));
  EXPECT_EQ(calls[1].affinity, calls[0].affinity);
  EXPECT_NE(calls[2].affinity, calls[0].affinity);
  EXPECT_EQ(calls[2].affinity.size(), 64u);
  // Shorter than a block: the digest of what was sent (the prompt minus its last token).
  EXPECT_EQ(calls[3].affinity, to_hex(prefix_digest(calls[3].tokens)));

  // PullPack's GetPrefix hashes on the pack id.
  grpc::ClientContext context;
  live_call(context, 30);
  v1::PullPackRequest pull;
  pull.set_pack_id("handbook-v2");
  auto reader = edge->stub->PullPack(&context, pull);
  v1::PullPackResponse ignored;
  while (reader->Read(&ignored)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  ASSERT_EQ(cloud->service->calls().back().rpc, "GetPrefix");
  EXPECT_EQ(cloud->service->calls().back().affinity, "handbook-v2");
}

TEST(EdgeCacheSaltTest, GenerateCacheSaltReachesTheCloudAndIsCapped) {
  std::unique_ptr<ScriptedCloud> cloud = start_scripted_cloud(ScriptedPrefill::Lie::kNone);
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), edge_options(cloud->address()));
  ASSERT_NE(edge->stub, nullptr);
  wait_for_cloud(*edge->stub);
  v1::GenerateRequest salted = greedy_request(prompt(30, 14), "", v1::SPLIT_POLICY_CLOUD);
  salted.set_cache_salt("team-a");
  ASSERT_TRUE(generate(*edge->stub, salted).status.ok());
  EXPECT_EQ(cloud->service->calls().back().cache_salt, "team-a");

  salted.set_cache_salt(std::string(257, 's'));
  GenerateResult refused = generate(*edge->stub, salted);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.status.error_message().find("cache_salt has 257 bytes"), std::string::npos)
      << refused.status.error_message();
  EXPECT_EQ(cloud->service->calls().size(), 1u);
}

// ---------------------------------------------------------------------------
// Link state (the main job's follow-up turn)
// ---------------------------------------------------------------------------

// The edge's first Health poll saw the cloud WARMING (it reports its port
// before its model is loaded) and the next poll is far away; the cloud then
// serves a turn. The follow-up's plan must not claim the cloud is
// unreachable or not ready: the turn before proved otherwise.
TEST(EdgeCloudLinkTest, ACloudThatJustServedATurnIsNotReportedUnreachable) {
  std::unique_ptr<ScriptedCloud> cloud = start_scripted_cloud(ScriptedPrefill::Lie::kNone, /*warming=*/1);
  EdgeServiceOptions options = edge_options(cloud->address());
  options.cloud->health_interval = std::chrono::hours(1);  // only the first poll
  options.assumed_local_prefill_tokens_per_s = 1e9;        // a short turn is local, on the numbers
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), options);
  ASSERT_NE(edge->stub, nullptr);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (health(*edge->stub).cloud().checked_unix_ms() == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(health(*edge->stub).cloud().state(), v1::SERVING_STATE_WARMING);

  ASSERT_TRUE(generate(*edge->stub, greedy_request(prompt(60, 15), "demo", v1::SPLIT_POLICY_CLOUD)).status.ok());
  v1::GenerateRequest follow_up = greedy_request(prompt(10, 16), "demo", v1::SPLIT_POLICY_AUTO);
  follow_up.set_progress(true);
  GenerateResult result = generate(*edge->stub, follow_up);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.stats.plan().place(), v1::PREFILL_PLACE_LOCAL);
  EXPECT_EQ(result.stats.plan().reason().find("unreachable"), std::string::npos) << result.stats.plan().reason();
  EXPECT_EQ(result.stats.plan().reason().rfind("local: local ", 0), 0u) << result.stats.plan().reason();
  EXPECT_NE(result.stats.plan().reason().find(" vs cloud "), std::string::npos) << result.stats.plan().reason();
  const v1::CloudLink link = health(*edge->stub).cloud();
  EXPECT_TRUE(link.reachable());
  EXPECT_EQ(link.state(), v1::SERVING_STATE_READY);
}

}  // namespace
}  // namespace baton::edge_test
