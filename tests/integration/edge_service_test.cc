// Real-server tests of the Edge service: a PrefillServer and an EdgeServer on
// 127.0.0.1:0 serving synthetic tiny models (the edge's Q4_0 file, which the
// cloud serves too), called through real gRPC channels with deadlines.
//
// What must hold: generation through the cloud handoff (lossless F16 KV) is
// token-for-token identical to local-only generation, first turn and
// follow-up, from a prefix pack too; the memory plan's limit is enforced
// with the numbers in the error; a session survives a restart and a
// cancelled turn leaves it as it was; Health reports the agent's state and
// figures. Handoff failures: edge_handoff_test.cc.
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "common/kv_cache/quantized_kv_cache.h"
#include "common/model/model.h"
#include "edge_decode/plan/memory_plan.h"
#include "tests/support/edge_test_env.h"

namespace baton::edge_test {
namespace {

// ---------------------------------------------------------------------------
// Split equals local
// ---------------------------------------------------------------------------

class EdgeServiceSplitTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EdgeServiceSplitTest, CloudHandoffEqualsLocalTokenForTokenOverTwoTurns) {
  const std::string& model_path = edge_model_path(GetParam());
  std::unique_ptr<Cloud> cloud = start_cloud(model_path);
  std::unique_ptr<Edge> edge = start_edge(model_path, edge_options(cloud->address()));
  ASSERT_NE(edge->stub, nullptr);

  const std::vector<uint32_t> turn1 = prompt(45, 1);
  const std::vector<uint32_t> turn2 = prompt(30, 2);
  GenerateResult local1 = generate(*edge->stub, greedy_request(turn1, "local", v1::SPLIT_POLICY_LOCAL));
  GenerateResult cloud1 = generate(*edge->stub, greedy_request(turn1, "cloud", v1::SPLIT_POLICY_CLOUD));
  ASSERT_TRUE(local1.status.ok()) << local1.status.error_message();
  ASSERT_TRUE(cloud1.status.ok()) << cloud1.status.error_message();
  ASSERT_TRUE(local1.has_stats && cloud1.has_stats);
  EXPECT_EQ(local1.stats.plan().place(), v1::PREFILL_PLACE_LOCAL);
  EXPECT_EQ(cloud1.stats.plan().place(), v1::PREFILL_PLACE_CLOUD) << cloud1.stats.plan().reason();
  EXPECT_EQ(cloud1.stats.fallback_reason(), "");
  EXPECT_GT(cloud1.stats.kv_wire_bytes(), 0u);
  EXPECT_GT(cloud1.stats.kv_quantized_bytes(), 0u);
  // F16-equivalent size of [0, n-1): 44 tokens x (2 x layers x kv_dim) x 2 bytes.
  EXPECT_EQ(cloud1.stats.kv_raw_bytes() % 44, 0u);
  EXPECT_EQ(local1.stats.kv_wire_bytes(), 0u);
  ASSERT_FALSE(local1.tokens.empty());
  EXPECT_EQ(cloud1.tokens, local1.tokens);
  EXPECT_EQ(cloud1.text, local1.text);
  EXPECT_EQ(cloud1.stats.prompt_tokens(), 45u);
  // The session's KV: the prompt and every generated token but the last
  // sampled one, which runs with the next turn.
  EXPECT_EQ(cloud1.stats.context_tokens(), 45u + cloud1.stats.generated_tokens() - 1);
  EXPECT_EQ(cloud1.stats.generated_tokens(), cloud1.tokens.size());
  // The TTFT parts add up.
  EXPECT_NEAR(cloud1.stats.cloud_prefill_ms() + cloud1.stats.transfer_ms() + cloud1.stats.ingest_ms() +
                  cloud1.stats.local_ms(),
              cloud1.stats.ttft_ms(), 1e-6 + 1e-9 * cloud1.stats.ttft_ms());

  // Follow-up turn: the cloud gets the delta from the session's first uncached position.
  GenerateResult local2 = generate(*edge->stub, greedy_request(turn2, "local", v1::SPLIT_POLICY_LOCAL));
  GenerateResult cloud2 = generate(*edge->stub, greedy_request(turn2, "cloud", v1::SPLIT_POLICY_CLOUD));
  ASSERT_TRUE(local2.status.ok()) << local2.status.error_message();
  ASSERT_TRUE(cloud2.status.ok()) << cloud2.status.error_message();
  EXPECT_EQ(cloud2.stats.plan().place(), v1::PREFILL_PLACE_CLOUD) << cloud2.stats.plan().reason();
  EXPECT_EQ(cloud2.stats.plan().reused_tokens(), cloud1.stats.context_tokens())
      << "the last sampled token of turn 1 runs with turn 2";
  ASSERT_FALSE(local2.tokens.empty());
  EXPECT_EQ(cloud2.tokens, local2.tokens);
  EXPECT_EQ(session_tokens(*edge->stub, "cloud"), session_tokens(*edge->stub, "local"));
}

// tiny-gemma3: 45- and 30-token turns over a window of 8, so the edge's
// quantized store masks its local layers after a handoff too. tiny-qwen3
// (QK-norm) and tiny-phi3 (fused tensors, LongRoPE) check that the cloud and
// the edge compute and fingerprint those the same way.
INSTANTIATE_TEST_SUITE_P(Shapes, EdgeServiceSplitTest,
                         ::testing::Values("tiny", "tiny-qwen2", "tiny-gemma3", "tiny-qwen3", "tiny-phi3"));

TEST(EdgeServiceTest, DefaultInt4CodecGoesThroughTheCloudAndShrinksTheWire) {
  const std::string& model_path = edge_model_path("tiny");
  std::unique_ptr<Cloud> cloud = start_cloud(model_path);
  EdgeServiceOptions options = edge_options(cloud->address());
  options.codec = "int4";  // the agent's default: int4-pc-kg128-g32-z3 on the wire
  std::unique_ptr<Edge> edge = start_edge(model_path, options);
  v1::GenerateRequest request = greedy_request(prompt(100, 3), "q", v1::SPLIT_POLICY_CLOUD);
  request.clear_codec();
  request.set_progress(true);
  GenerateResult int4 = generate(*edge->stub, request);
  ASSERT_TRUE(int4.status.ok()) << int4.status.error_message();
  EXPECT_EQ(int4.stats.plan().place(), v1::PREFILL_PLACE_CLOUD);
  ASSERT_TRUE(int4.has_plan);
  EXPECT_EQ(int4.plan.place(), v1::PREFILL_PLACE_CLOUD);
  std::vector<v1::Phase> phases;
  for (const v1::Progress& p : int4.progress) {
    if (phases.empty() || phases.back() != p.phase()) phases.push_back(p.phase());
  }
  const std::vector<v1::Phase> expected_phases = {v1::PHASE_TOKENIZING,  v1::PHASE_PLANNING,
                                                  v1::PHASE_CLOUD_PREFILL, v1::PHASE_RECEIVING_KV,
                                                  v1::PHASE_INGESTING,   v1::PHASE_DECODING};
  EXPECT_EQ(phases, expected_phases);
  EXPECT_GT(int4.progress.back().elapsed_ms(), 0.0);
  EXPECT_FALSE(int4.tokens.empty());
  // INT4 codes are a quarter of F16, plus scales and minimums.
  EXPECT_LT(int4.stats.kv_quantized_bytes(), int4.stats.kv_raw_bytes() / 2);
  // A follow-up keeps the session's codec; asking for another one is refused.
  v1::GenerateRequest next = greedy_request(prompt(10, 4), "q", v1::SPLIT_POLICY_AUTO);
  next.clear_codec();
  EXPECT_TRUE(generate(*edge->stub, next).status.ok());
  v1::GenerateRequest other = greedy_request(prompt(10, 5), "q", v1::SPLIT_POLICY_AUTO);  // F16
  GenerateResult refused = generate(*edge->stub, other);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << refused.status.error_message();
}
// ---------------------------------------------------------------------------
// Memory budget
// ---------------------------------------------------------------------------

TEST(EdgeServiceTest, RequestBeyondMaxContextIsResourceExhaustedWithTheNumbers) {
  const std::string& model_path = edge_model_path("tiny");
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(model_path);
  ASSERT_TRUE(model.ok()) << model.status();
  // A limit that leaves KV room for exactly 48 F16 tokens (below 1.28 GiB the
  // headroom is its 64 MiB floor).
  const KvGeometry geometry{(*model)->spec().n_layer, (*model)->spec().n_head, (*model)->spec().n_head_kv,
                            (*model)->spec().head_dim, {}};
  const absl::StatusOr<KvCodecConfig> f16 = parse_kv_codec_config("f16");
  ASSERT_TRUE(f16.ok());
  const uint64_t per_token = static_cast<uint64_t>(QuantizedKvCache::bytes_per_token(*f16, geometry));
  EdgeServiceOptions options = edge_options("");
  options.memory_budget_bytes =
      (*model)->weight_bytes() + engine_scratch_bytes((*model)->spec()) + kMinHeadroomBytes + 48 * per_token;
  std::unique_ptr<Edge> edge = start_edge(model_path, options);
  ASSERT_NE(edge->stub, nullptr);
  const v1::EdgeHealthResponse h = health(*edge->stub);
  ASSERT_GE(h.memory().capacity_size(), 1);
  EXPECT_EQ(h.memory().capacity(0).codec().codec(), v1::KV_CODEC_F16);
  EXPECT_EQ(h.memory().capacity(0).max_context_tokens(), 48u);

  GenerateResult refused = generate(*edge->stub, greedy_request(prompt(60, 7), "big", v1::SPLIT_POLICY_LOCAL));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.status.error_message();
  EXPECT_NE(refused.status.error_message().find("session needs 60 tokens; this device fits 48 with codec f16"),
            std::string::npos)
      << refused.status.error_message();
  EXPECT_EQ(session_tokens(*edge->stub, "big"), -1);

  // A prompt that fits decodes until the context is full.
  GenerateResult full = generate(*edge->stub, greedy_request(prompt(40, 7), "fits", v1::SPLIT_POLICY_LOCAL, 100));
  ASSERT_TRUE(full.status.ok()) << full.status.error_message();
  if (full.stats.finish_reason() != v1::FINISH_REASON_EOS) {
    EXPECT_EQ(full.stats.finish_reason(), v1::FINISH_REASON_CONTEXT_FULL);
    EXPECT_LE(full.stats.context_tokens(), 49u);  // 48 with KV plus the last sampled token
  }
}

// ---------------------------------------------------------------------------
// Restart mid-conversation
// ---------------------------------------------------------------------------

TEST(EdgeServiceTest, SessionContinuesIdenticallyAfterARestart) {
  const std::string& model_path = edge_model_path("tiny");
  const std::string sessions_dir = testing::make_temp_dir("edge-sessions");
  EdgeServiceOptions options = edge_options("");
  options.sessions_dir = sessions_dir;
  auto seeded = [](const std::vector<uint32_t>& tokens, const std::string& id, bool with_seed) {
    v1::GenerateRequest request = greedy_request(tokens, id, v1::SPLIT_POLICY_LOCAL, 10);
    request.mutable_sampling()->set_temperature(1.5f);
    if (with_seed) request.mutable_sampling()->set_seed(1234);
    return request;
  };
  const std::vector<uint32_t> turn1 = prompt(20, 8);
  const std::vector<uint32_t> turn2 = prompt(10, 9);

  // Uninterrupted: two turns; the second continues the first's random stream (no seed).
  std::vector<uint32_t> expected;
  {
    EdgeServiceOptions memory_only = edge_options("");
    std::unique_ptr<Edge> edge = start_edge(model_path, memory_only);
    ASSERT_TRUE(generate(*edge->stub, seeded(turn1, "r", true)).status.ok());
    GenerateResult second = generate(*edge->stub, seeded(turn2, "r", false));
    ASSERT_TRUE(second.status.ok()) << second.status.error_message();
    expected = second.tokens;
  }
  ASSERT_FALSE(expected.empty());
  {
    std::unique_ptr<Edge> edge = start_edge(model_path, options);
    ASSERT_TRUE(generate(*edge->stub, seeded(turn1, "r", true)).status.ok());
  }  // the agent goes away
  std::unique_ptr<Edge> restarted = start_edge(model_path, options);
  EXPECT_GT(session_tokens(*restarted->stub, "r"), 20);
  GenerateResult second = generate(*restarted->stub, seeded(turn2, "r", false));
  ASSERT_TRUE(second.status.ok()) << second.status.error_message();
  EXPECT_EQ(second.tokens, expected);
  std::filesystem::remove_all(sessions_dir);
}

// ---------------------------------------------------------------------------
// States and Health
// ---------------------------------------------------------------------------

TEST(EdgeServiceTest, GenerateBeforeReadyIsUnavailableWithARetryHint) {
  const std::string& model_path = edge_model_path("tiny");
  std::unique_ptr<Edge> edge = start_edge(model_path, edge_options(""), /*load=*/false);
  ASSERT_NE(edge->stub, nullptr);
  const v1::EdgeHealthResponse loading = health(*edge->stub);
  EXPECT_EQ(loading.state(), v1::SERVING_STATE_LOADING);
  EXPECT_GT(loading.retry_after_ms(), 0u);

  GenerateResult refused = generate(*edge->stub, greedy_request(prompt(5, 1), "", v1::SPLIT_POLICY_LOCAL));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.status.error_message();
  EXPECT_EQ(refused.retry_after_ms, "1000");

  ASSERT_TRUE(edge->service->Load(model_path).ok());
  GenerateResult served = generate(*edge->stub, greedy_request(prompt(5, 1), "", v1::SPLIT_POLICY_LOCAL));
  EXPECT_TRUE(served.status.ok()) << served.status.error_message();
  EXPECT_TRUE(served.has_stats);
  EXPECT_EQ(session_tokens(*edge->stub, ""), -1) << "one-shot sessions are not kept";
}

TEST(EdgeServiceTest, HealthReportsStateModelMemoryAndCloud) {
  const std::string& model_path = edge_model_path("tiny");
  std::unique_ptr<Cloud> cloud = start_cloud(model_path);
  std::unique_ptr<Edge> edge = start_edge(model_path, edge_options(cloud->address()));
  ASSERT_NE(edge->stub, nullptr);
  wait_for_cloud(*edge->stub);
  ASSERT_TRUE(generate(*edge->stub, greedy_request(prompt(30, 2), "h", v1::SPLIT_POLICY_CLOUD)).status.ok());

  const v1::EdgeHealthResponse h = health(*edge->stub);
  EXPECT_EQ(h.state(), v1::SERVING_STATE_READY);
  EXPECT_EQ(h.model().digest().size(), 32u);
  EXPECT_EQ(h.model().architecture(), "llama");
  EXPECT_EQ(h.model().weights_type(), "Q4_0");
  EXPECT_EQ(h.backend().rfind("cpu:", 0), 0u) << h.backend();
  EXPECT_EQ(h.memory().device_limit_bytes(), uint64_t{1} << 30);
  EXPECT_GT(h.memory().weights_bytes(), 0u);
  EXPECT_GT(h.memory().scratch_bytes(), 0u);
  EXPECT_EQ(h.memory().headroom_bytes(), kMinHeadroomBytes);
  EXPECT_EQ(h.memory().kv_budget_bytes(), h.memory().device_limit_bytes() - h.memory().weights_bytes() -
                                              h.memory().scratch_bytes() - h.memory().headroom_bytes());
  EXPECT_GT(h.memory().kv_used_bytes(), 0u);  // session "h"
  ASSERT_EQ(h.memory().capacity_size(), 3);
  EXPECT_EQ(h.memory().capacity(0).codec().codec(), v1::KV_CODEC_F16);  // --codec f16 first
  for (const v1::CodecCapacity& capacity : h.memory().capacity()) {
    EXPECT_GT(capacity.kv_bytes_per_token(), 0u);
    EXPECT_EQ(capacity.max_context_tokens(), 2048u);  // capped at n_ctx_train
  }
  EXPECT_EQ(h.cloud().address(), cloud->address());
  EXPECT_TRUE(h.cloud().reachable());
  EXPECT_EQ(h.cloud().state(), v1::SERVING_STATE_READY);
  EXPECT_GT(h.cloud().rtt_ms(), 0.0);
  EXPECT_GT(h.cloud().checked_unix_ms(), 0);
  EXPECT_GT(h.local_prefill_tokens_per_s(), 0.0);
  EXPECT_EQ(h.sessions(), 1u);
  EXPECT_EQ(h.packs(), 0u);
  EXPECT_EQ(h.running(), 0u);
  EXPECT_FALSE(h.version().empty());
}

TEST(EdgeServiceTest, PolicyCloudWithoutACloudIsFailedPrecondition) {
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), edge_options(""));
  GenerateResult refused = generate(*edge->stub, greedy_request(prompt(5, 1), "x", v1::SPLIT_POLICY_CLOUD));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << refused.status.error_message();
  EXPECT_EQ(session_tokens(*edge->stub, "x"), -1);
}

TEST(EdgeServiceTest, StopStringEndsGenerationAndIsNotSent) {
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), edge_options(""));
  GenerateResult full = generate(*edge->stub, greedy_request(prompt(12, 4), "", v1::SPLIT_POLICY_LOCAL, 12));
  ASSERT_TRUE(full.status.ok()) << full.status.error_message();
  // A one-character ASCII stop string from the second half of the text.
  size_t cut = full.text.size() / 2;
  while (cut < full.text.size() && (static_cast<unsigned char>(full.text[cut]) >= 0x80 || full.text[cut] < 0x21)) ++cut;
  if (cut >= full.text.size()) GTEST_SKIP() << "no ASCII character to stop at in '" << full.text << "'";
  const std::string stop = full.text.substr(cut, 1);
  v1::GenerateRequest request = greedy_request(prompt(12, 4), "", v1::SPLIT_POLICY_LOCAL, 12);
  request.add_stop(stop);
  GenerateResult stopped = generate(*edge->stub, request);
  ASSERT_TRUE(stopped.status.ok()) << stopped.status.error_message();
  EXPECT_EQ(stopped.stats.finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(stopped.text, full.text.substr(0, full.text.find(stop)));
}

TEST(EdgeServiceTest, ProgressEventsAndPlanComeBeforeText) {
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), edge_options(""));
  v1::GenerateRequest request = greedy_request(prompt(300, 4), "", v1::SPLIT_POLICY_LOCAL, 3);
  request.set_progress(true);
  GenerateResult result = generate(*edge->stub, request);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_TRUE(result.has_plan);
  EXPECT_EQ(result.plan.place(), v1::PREFILL_PLACE_LOCAL);
  EXPECT_EQ(result.plan.prefill_tokens(), 299u);
  bool saw_local = false;
  for (const v1::Progress& p : result.progress) {
    if (p.phase() == v1::PHASE_LOCAL_PREFILL) {
      saw_local = true;
      EXPECT_EQ(p.tokens_total(), 299u);
    }
  }
  EXPECT_TRUE(saw_local);
}

TEST(EdgeServiceTest, DrainingRefusesNewGenerateCalls) {
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), edge_options(""));
  edge->service->Drain();
  EXPECT_EQ(health(*edge->stub).state(), v1::SERVING_STATE_DRAINING);
  GenerateResult refused = generate(*edge->stub, greedy_request(prompt(5, 1), "", v1::SPLIT_POLICY_LOCAL));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.status.error_message();
  EXPECT_NE(refused.status.error_message().find("DRAINING"), std::string::npos) << refused.status.error_message();
}

// ---------------------------------------------------------------------------
// Cancellation, packs, text prompts
// ---------------------------------------------------------------------------

// A cancelled turn: edge_context_cancel_test.cc (EdgeCancelTest.*): the answer
// so far is kept after the first token, the session is unchanged before it.

TEST(EdgeServiceTest, PulledPackStartsASessionWithoutComputingItsTokens) {
  const std::string& model_path = edge_model_path("tiny");
  std::unique_ptr<Cloud> cloud = start_cloud(model_path);
  // A pack on the cloud: the F16 KV of a "system prompt", uploaded with PutPrefix.
  const std::vector<uint32_t> system = prompt(40, 13);
  std::vector<v1::KvStreamMessage> pack;
  {
    auto stub = v1::Prefill::NewStub(grpc::CreateChannel(cloud->address(), grpc::InsecureChannelCredentials()));
    v1::PrefillRequest request;
    for (uint32_t id : system) request.mutable_tokens()->add_ids(id);
    request.mutable_codec()->set_codec(v1::KV_CODEC_F16);
    grpc::ClientContext context;
    live_call(context, 30);
    auto reader = stub->Prefill(&context, request);
    v1::KvStreamMessage message;
    while (reader->Read(&message)) pack.push_back(message);
    ASSERT_TRUE(reader->Finish().ok());
    ASSERT_TRUE(pack.front().has_header());
    pack.front().mutable_header()->set_pack_id("sys");
    pack.front().mutable_header()->set_description("test system prompt");
    grpc::ClientContext put_context;
    live_call(put_context, 30);
    v1::PutPrefixResponse put;
    auto writer = stub->PutPrefix(&put_context, &put);
    for (const v1::KvStreamMessage& m : pack) ASSERT_TRUE(writer->Write(m));
    writer->WritesDone();
    grpc::Status status = writer->Finish();
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  EdgeServiceOptions options = edge_options(cloud->address());
  options.packs_dir = testing::make_temp_dir("edge-packs");
  std::unique_ptr<Edge> edge = start_edge(model_path, options);

  // PullPack: progress, then the stored pack.
  {
    grpc::ClientContext context;
    live_call(context, 30);
    v1::PullPackRequest request;
    request.set_pack_id("sys");
    auto reader = edge->stub->PullPack(&context, request);
    v1::PullPackResponse response;
    int progress_events = 0;
    bool done = false;
    while (reader->Read(&response)) {
      if (response.has_progress()) ++progress_events;
      if (response.has_done()) {
        done = true;
        EXPECT_EQ(response.done().pack_id(), "sys");
        EXPECT_EQ(response.done().token_count(), 40u);
        EXPECT_EQ(response.done().description(), "test system prompt");
        EXPECT_GT(response.done().file_bytes(), 0u);
      }
    }
    grpc::Status status = reader->Finish();
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_TRUE(done);
    EXPECT_GT(progress_events, 0);
  }
  {
    grpc::ClientContext context;
    live_call(context, 10);
    v1::ListPacksResponse packs;
    ASSERT_TRUE(edge->stub->ListPacks(&context, v1::ListPacksRequest(), &packs).ok());
    ASSERT_EQ(packs.packs_size(), 1);
    EXPECT_EQ(packs.packs(0).pack_id(), "sys");
  }

  // A session from the pack computes none of its tokens and decodes as if it had.
  const std::vector<uint32_t> question = prompt(10, 14);
  v1::GenerateRequest with_pack = greedy_request(question, "p", v1::SPLIT_POLICY_LOCAL);
  with_pack.set_pack_id("sys");
  GenerateResult from_pack = generate(*edge->stub, with_pack);
  ASSERT_TRUE(from_pack.status.ok()) << from_pack.status.error_message();
  EXPECT_EQ(from_pack.stats.plan().reused_tokens(), 40u);
  EXPECT_EQ(from_pack.stats.plan().prefill_tokens(), 9u);
  // Through the cloud (which reuses the same pack): the same tokens.
  v1::GenerateRequest with_pack_cloud = greedy_request(question, "p-cloud", v1::SPLIT_POLICY_CLOUD);
  with_pack_cloud.set_pack_id("sys");
  GenerateResult from_pack_cloud = generate(*edge->stub, with_pack_cloud);
  ASSERT_TRUE(from_pack_cloud.status.ok()) << from_pack_cloud.status.error_message();
  EXPECT_EQ(from_pack_cloud.stats.plan().place(), v1::PREFILL_PLACE_CLOUD);
  EXPECT_EQ(from_pack_cloud.stats.plan().reused_tokens(), 40u);
  EXPECT_EQ(from_pack_cloud.tokens, from_pack.tokens);

  v1::GenerateRequest unknown = greedy_request(question, "q", v1::SPLIT_POLICY_LOCAL);
  unknown.set_pack_id("nope");
  EXPECT_EQ(generate(*edge->stub, unknown).status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(session_tokens(*edge->stub, "q"), -1);
  edge->stop();
  std::filesystem::remove_all(options.packs_dir);
}

TEST(EdgeServiceTest, TextPromptGetsBosOnTheFirstTurnOnly) {
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), edge_options(""));
  v1::GenerateRequest first;
  first.set_text("abc");
  first.set_session_id("t");
  first.mutable_sampling()->set_temperature(0);
  first.set_max_tokens(2);
  GenerateResult one = generate(*edge->stub, first);
  ASSERT_TRUE(one.status.ok()) << one.status.error_message();
  GenerateResult two = generate(*edge->stub, first);
  ASSERT_TRUE(two.status.ok()) << two.status.error_message();
  // The synthetic tokenizer adds BOS: the first turn has one token more.
  EXPECT_EQ(one.stats.prompt_tokens(), two.stats.prompt_tokens() + 1);
  EXPECT_EQ(two.stats.context_tokens(), one.stats.context_tokens() + two.stats.prompt_tokens() +
                                            two.stats.generated_tokens());
}

TEST(EdgeServiceTest, DeleteSessionFreesItAndUnknownIsNotFound) {
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), edge_options(""));
  ASSERT_TRUE(generate(*edge->stub, greedy_request(prompt(10, 1), "d", v1::SPLIT_POLICY_LOCAL)).status.ok());
  EXPECT_GT(session_tokens(*edge->stub, "d"), 0);
  grpc::ClientContext context;
  live_call(context, 10);
  v1::DeleteSessionRequest request;
  request.set_session_id("d");
  v1::DeleteSessionResponse response;
  ASSERT_TRUE(edge->stub->DeleteSession(&context, request, &response).ok());
  EXPECT_GT(response.freed_bytes(), 0u);
  EXPECT_EQ(session_tokens(*edge->stub, "d"), -1);
  grpc::ClientContext again;
  live_call(again, 10);
  EXPECT_EQ(edge->stub->DeleteSession(&again, request, &response).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST(EdgeServiceTest, BadRequestsAreInvalidArgument) {
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), edge_options(""));
  v1::GenerateRequest empty;
  EXPECT_EQ(generate(*edge->stub, empty).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::GenerateRequest hot = greedy_request(prompt(5, 1), "", v1::SPLIT_POLICY_LOCAL);
  hot.mutable_sampling()->set_temperature(-1);
  GenerateResult refused = generate(*edge->stub, hot);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.status.error_message().find("temperature"), std::string::npos) << refused.status.error_message();
  v1::GenerateRequest bad_id = greedy_request(prompt(5, 1), "a/b", v1::SPLIT_POLICY_LOCAL);
  EXPECT_EQ(generate(*edge->stub, bad_id).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::GenerateRequest oov = greedy_request({1, 2, 1u << 20}, "", v1::SPLIT_POLICY_LOCAL);
  GenerateResult out = generate(*edge->stub, oov);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(out.status.error_message().find("tokens.ids[2]"), std::string::npos) << out.status.error_message();
}

}  // namespace
}  // namespace baton::edge_test
