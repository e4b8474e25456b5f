// Early tokens (GenerateRequest.early_tokens): the cloud samples the reply's
// first tokens with the edge's sampler and sends them ahead of the KV; the
// edge shows them at once, runs them into its own KV once the stream
// verified, and continues. Real cloud and edge on loopback, serving the same
// Q4_0 file, so a reply with early tokens must equal the reply the edge
// makes alone: no duplicate and no gap at the early/local boundary, for
// greedy and seeded sampling. The session then holds exactly the prompt and
// every token shown (its prefix digest says so). Faults: a stream cut after
// the early tokens completes the same reply locally under policy auto and
// leaves the session unchanged under policy cloud; a cloud of another model
// gets no early token shown at all.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "common/engine/sampling_proto.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_codec/kv_geometry.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "edge_decode/link/cloud_client.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/util/metrics.h"
#include "tests/integration/faulty_prefill.h"
#include "tests/support/edge_test_env.h"

namespace baton::edge_test {
namespace {

constexpr uint32_t kEarly = 4;
constexpr uint32_t kReply = 16;

v1::GenerateRequest request_for(const std::vector<uint32_t>& prompt_ids, const std::string& session,
                                v1::SplitPolicy policy, uint32_t early, uint32_t max_tokens = kReply) {
  v1::GenerateRequest request = greedy_request(prompt_ids, session, policy, max_tokens);
  request.set_early_tokens(early);
  return request;
}

// Seeded sampling among the two most likely tokens: a wrong PRNG position
// (a draw skipped or repeated at the early/local boundary) changes about
// every other token. Not the whole vocabulary: the cloud attends over f32 KV
// and the edge over its f16 store, and the synthetic model's flat
// distribution has near-tied logits whose order those last bits swap.
v1::GenerateRequest seeded(v1::GenerateRequest request) {
  request.mutable_sampling()->set_temperature(0.9f);
  request.mutable_sampling()->set_top_k(2);
  request.mutable_sampling()->set_seed(20261202);
  return request;
}

// The session holds exactly `conversation`'s first token_count tokens.
void expect_session_holds(v1::Edge::Stub& stub, const std::string& id, const std::vector<uint32_t>& conversation) {
  const v1::SessionInfo info = session_info(stub, id);
  ASSERT_FALSE(info.session_id().empty()) << id;
  ASSERT_LE(info.token_count(), conversation.size());
  // The last token shown may wait for the next turn to enter the KV.
  EXPECT_GE(info.token_count() + 1, conversation.size());
  const std::vector<int32_t> held(conversation.begin(), conversation.begin() + info.token_count());
  const Digest256 digest = prefix_digest(held);
  EXPECT_EQ(info.prefix_digest(), std::string(digest.begin(), digest.end())) << id;
}

std::vector<uint32_t> joined(std::vector<uint32_t> a, const std::vector<uint32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class EarlyTokensTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cloud_ = start_cloud(model_path_);
    ASSERT_NE(cloud_->server, nullptr);
  }
  // An edge whose plan prefers the cloud (a slow assumed local prefill).
  std::unique_ptr<Edge> edge_for(const std::string& cloud_address) {
    EdgeServiceOptions options = edge_options(cloud_address);
    options.assumed_local_prefill_tokens_per_s = 0.01;
    options.max_tokens = kReply;
    std::unique_ptr<Edge> edge = start_edge(model_path_, options);
    EXPECT_NE(edge->stub, nullptr);
    if (edge->stub) wait_for_cloud(*edge->stub);
    return edge;
  }
  // The reply the edge makes alone.
  GenerateResult local_reference(Edge& edge, v1::GenerateRequest request, const std::string& session) {
    request.set_session_id(session);
    request.set_policy(v1::SPLIT_POLICY_LOCAL);
    request.set_early_tokens(0);
    request.clear_split_position();
    GenerateResult result = generate(*edge.stub, request);
    EXPECT_TRUE(result.status.ok()) << result.status.error_message();
    return result;
  }

  const std::string& model_path_ = edge_model_path("tiny");
  std::unique_ptr<Cloud> cloud_;
};

TEST_F(EarlyTokensTest, GreedyAndSeededRepliesAreContinuousAndTheSessionHoldsWhatWasShown) {
  std::unique_ptr<Edge> edge = edge_for(cloud_->address());
  ASSERT_NE(edge->stub, nullptr);
  const std::vector<uint32_t> prompt_ids = prompt(150, 1);
  for (const bool greedy : {true, false}) {
    SCOPED_TRACE(greedy ? "greedy" : "seeded");
    const std::string id = greedy ? "greedy" : "seeded";
    v1::GenerateRequest request = request_for(prompt_ids, id, v1::SPLIT_POLICY_CLOUD, kEarly);
    if (!greedy) request = seeded(request);
    const GenerateResult early = generate(*edge->stub, request);
    const GenerateResult alone = local_reference(*edge, request, id + "-ref");
    ASSERT_TRUE(early.status.ok()) << early.status.error_message();
    ASSERT_TRUE(early.has_stats);
    const v1::Stats& stats = early.stats;
    EXPECT_EQ(stats.plan().place(), v1::PREFILL_PLACE_CLOUD);
    EXPECT_EQ(stats.early_tokens(), kEarly);
    EXPECT_TRUE(stats.early_tokens_note().empty()) << stats.early_tokens_note();
    EXPECT_GT(stats.cloud_first_token_ms(), 0.0);
    EXPECT_DOUBLE_EQ(stats.ttft_ms(), stats.cloud_first_token_ms()) << "the first token the client got";
    EXPECT_GE(stats.local_first_token_ms(), stats.cloud_first_token_ms());
    EXPECT_NEAR(stats.cloud_prefill_ms() + stats.transfer_ms() + stats.ingest_ms() + stats.local_ms(),
                stats.local_first_token_ms(), 0.5);
    // Same weights on both sides: the same reply, token for token.
    EXPECT_GT(early.tokens.size(), kEarly) << "tokens decoded here follow the early ones";
    EXPECT_EQ(early.tokens, alone.tokens);
    EXPECT_EQ(early.text, alone.text);
    EXPECT_EQ(stats.generated_tokens(), early.tokens.size());
    expect_session_holds(*edge->stub, id, joined(prompt_ids, early.tokens));
    // The next turn continues both conversations the same way.
    const std::vector<uint32_t> next = prompt(30, 2);
    v1::GenerateRequest follow = request_for(next, id, v1::SPLIT_POLICY_LOCAL, 0);
    if (!greedy) follow = seeded(follow);
    follow.mutable_sampling()->clear_seed();  // the session's random stream goes on
    const GenerateResult a = generate(*edge->stub, follow);
    follow.set_session_id(id + "-ref");
    const GenerateResult b = generate(*edge->stub, follow);
    ASSERT_TRUE(a.status.ok() && b.status.ok());
    EXPECT_EQ(a.tokens, b.tokens);
  }
}

TEST_F(EarlyTokensTest, LogprobsOfEarlyTokensComeFromTheCloud) {
  std::unique_ptr<Edge> edge = edge_for(cloud_->address());
  ASSERT_NE(edge->stub, nullptr);
  v1::GenerateRequest request = request_for(prompt(90, 3), "lp", v1::SPLIT_POLICY_CLOUD, kEarly, 8);
  request.set_logprobs(2);
  const GenerateResult early = generate(*edge->stub, request);
  const GenerateResult alone = local_reference(*edge, request, "lp-ref");
  ASSERT_TRUE(early.status.ok()) << early.status.error_message();
  ASSERT_EQ(early.logprobs.size(), early.tokens.size());
  ASSERT_EQ(alone.logprobs.size(), early.logprobs.size());
  for (size_t i = 0; i < early.logprobs.size(); ++i) {
    EXPECT_LE(early.logprobs[i], 0.0f);
    EXPECT_NEAR(early.logprobs[i], alone.logprobs[i], 0.05) << "token " << i;
  }
}

TEST_F(EarlyTokensTest, AReplyEndingAmongTheEarlyTokensNeverDecodesHere) {
  std::unique_ptr<Edge> edge = edge_for(cloud_->address());
  ASSERT_NE(edge->stub, nullptr);
  const std::vector<uint32_t> prompt_ids = prompt(80, 4);
  const GenerateResult early =
      generate(*edge->stub, request_for(prompt_ids, "short", v1::SPLIT_POLICY_CLOUD, kEarly, 3));
  ASSERT_TRUE(early.status.ok()) << early.status.error_message();
  EXPECT_EQ(early.stats.early_tokens(), 3u) << "asked for no more than max_tokens";
  EXPECT_EQ(early.stats.local_first_token_ms(), 0.0);
  EXPECT_EQ(early.stats.finish_reason(), v1::FINISH_REASON_LENGTH);
  const GenerateResult alone =
      local_reference(*edge, request_for(prompt_ids, "", v1::SPLIT_POLICY_LOCAL, 0, 3), "short-ref");
  EXPECT_EQ(early.tokens, alone.tokens);
  expect_session_holds(*edge->stub, "short", joined(prompt_ids, early.tokens));
}

TEST_F(EarlyTokensTest, AStreamCutAfterTheEarlyTokensCompletesTheSameReplyLocallyUnderAuto) {
  std::unique_ptr<FaultyCloud> relay = start_faulty_cloud(cloud_->address(), FaultyPrefill::Fault::kEarlyThenCut);
  std::unique_ptr<Edge> edge = edge_for(relay->address());
  ASSERT_NE(edge->stub, nullptr);
  const std::vector<uint32_t> prompt_ids = prompt(150, 5);
  const v1::GenerateRequest request = request_for(prompt_ids, "cut", v1::SPLIT_POLICY_AUTO, kEarly);
  const GenerateResult early = generate(*edge->stub, request);
  const GenerateResult alone = local_reference(*edge, request, "cut-ref");
  ASSERT_TRUE(early.status.ok()) << early.status.error_message();
  const v1::Stats& stats = early.stats;
  EXPECT_EQ(stats.early_tokens(), kEarly);
  EXPECT_NE(stats.fallback_reason().find("DATA_LOSS"), std::string::npos) << stats.fallback_reason();
  EXPECT_NE(stats.early_tokens_note().find("failed after 4 early tokens"), std::string::npos)
      << stats.early_tokens_note();
  EXPECT_EQ(stats.plan().place(), v1::PREFILL_PLACE_LOCAL);
  EXPECT_EQ(early.tokens, alone.tokens) << "the early tokens and the local rest: one reply";
  expect_session_holds(*edge->stub, "cut", joined(prompt_ids, early.tokens));
}

TEST_F(EarlyTokensTest, AStreamCutAfterTheEarlyTokensUnderCloudLeavesTheSessionUnchanged) {
  std::unique_ptr<FaultyCloud> relay = start_faulty_cloud(cloud_->address(), FaultyPrefill::Fault::kEarlyThenCut);
  std::unique_ptr<Edge> edge = edge_for(relay->address());
  ASSERT_NE(edge->stub, nullptr);
  const std::vector<uint32_t> first = prompt(40, 6);
  const GenerateResult turn1 = generate(*edge->stub, request_for(first, "kept", v1::SPLIT_POLICY_LOCAL, 0));
  ASSERT_TRUE(turn1.status.ok()) << turn1.status.error_message();
  const v1::SessionInfo before = session_info(*edge->stub, "kept");
  const GenerateResult failed =
      generate(*edge->stub, request_for(prompt(150, 7), "kept", v1::SPLIT_POLICY_CLOUD, kEarly));
  EXPECT_EQ(failed.status.error_code(), grpc::StatusCode::DATA_LOSS) << failed.status.error_message();
  EXPECT_NE(failed.status.error_message().find("after 4 early tokens"), std::string::npos)
      << failed.status.error_message();
  EXPECT_EQ(failed.tokens.size(), kEarly) << "they were shown before the stream failed";
  const v1::SessionInfo after = session_info(*edge->stub, "kept");
  EXPECT_EQ(after.token_count(), before.token_count());
  EXPECT_EQ(after.prefix_digest(), before.prefix_digest());
  EXPECT_EQ(after.turn_count(), before.turn_count());
}

TEST_F(EarlyTokensTest, EarlyTokensAfterTheMessageMarkedLastAreDataLoss) {
  // A cloud that marks a message last and sends more breaks its own
  // protocol: the stream fails (DATA_LOSS) under policy cloud, and the
  // session is unchanged.
  std::unique_ptr<FaultyCloud> relay = start_faulty_cloud(cloud_->address(), FaultyPrefill::Fault::kEarlyAfterLast);
  std::unique_ptr<Edge> edge = edge_for(relay->address());
  ASSERT_NE(edge->stub, nullptr);
  const GenerateResult failed =
      generate(*edge->stub, request_for(prompt(150, 9), "", v1::SPLIT_POLICY_CLOUD, kEarly));
  ASSERT_GE(relay->service->early_messages(), 2) << "the cloud sends early tokens one message at a time";
  EXPECT_EQ(failed.status.error_code(), grpc::StatusCode::DATA_LOSS) << failed.status.error_message();
  EXPECT_NE(failed.status.error_message().find("after the message it marked last"), std::string::npos)
      << failed.status.error_message();
}

TEST_F(EarlyTokensTest, ACloudOfAnotherModelGetsNoEarlyTokenShown) {
  std::unique_ptr<Cloud> other = start_cloud(edge_model_path("tiny", /*seed=*/2));
  std::unique_ptr<Edge> edge = edge_for(other->address());
  ASSERT_NE(edge->stub, nullptr);
  const std::vector<uint32_t> prompt_ids = prompt(60, 8);
  const GenerateResult refused = generate(*edge->stub, request_for(prompt_ids, "fp", v1::SPLIT_POLICY_CLOUD, kEarly));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << refused.status.error_message();
  EXPECT_TRUE(refused.tokens.empty()) << "tokens of another model are never shown";
  EXPECT_EQ(session_tokens(*edge->stub, "fp"), -1);
  const GenerateResult auto_turn = generate(*edge->stub, request_for(prompt_ids, "fp", v1::SPLIT_POLICY_AUTO, kEarly));
  ASSERT_TRUE(auto_turn.status.ok()) << auto_turn.status.error_message();
  EXPECT_EQ(auto_turn.stats.early_tokens(), 0u);
  EXPECT_NE(auto_turn.stats.fallback_reason().find("weights_digest"), std::string::npos)
      << auto_turn.stats.fallback_reason();
  const GenerateResult alone =
      local_reference(*edge, request_for(prompt_ids, "", v1::SPLIT_POLICY_LOCAL, 0), "fp-ref");
  EXPECT_EQ(auto_turn.tokens, alone.tokens);
}

// A stream whose header fails the edge's pins (a relay that asked the cloud
// about another last token: its honest answer, early tokens included, is
// for another context; the relay sends those early tokens even before the
// header) gets none of its early tokens shown.
TEST_F(EarlyTokensTest, EarlyTokensBehindAHeaderThatFailsItsPinsAreNeverShown) {
  std::unique_ptr<FaultyCloud> relay = start_faulty_cloud(cloud_->address(), FaultyPrefill::Fault::kChangeToken);
  std::unique_ptr<Edge> edge = edge_for(relay->address());
  ASSERT_NE(edge->stub, nullptr);
  const std::vector<uint32_t> prompt_ids = prompt(90, 11);
  const GenerateResult refused = generate(*edge->stub, request_for(prompt_ids, "pin", v1::SPLIT_POLICY_CLOUD, kEarly));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << refused.status.error_message();
  EXPECT_NE(refused.status.error_message().find("context mismatch"), std::string::npos) << refused.status.error_message();
  EXPECT_TRUE(refused.tokens.empty());
  EXPECT_GT(relay->service->early_messages(), 0) << "the stream did carry early tokens";
  const GenerateResult auto_turn = generate(*edge->stub, request_for(prompt_ids, "pin", v1::SPLIT_POLICY_AUTO, kEarly));
  ASSERT_TRUE(auto_turn.status.ok()) << auto_turn.status.error_message();
  EXPECT_EQ(auto_turn.stats.early_tokens(), 0u);
  EXPECT_NE(auto_turn.stats.fallback_reason().find("context mismatch"), std::string::npos)
      << auto_turn.stats.fallback_reason();
  const GenerateResult alone =
      local_reference(*edge, request_for(prompt_ids, "", v1::SPLIT_POLICY_LOCAL, 0), "pin-ref");
  EXPECT_EQ(auto_turn.tokens, alone.tokens);
}

TEST_F(EarlyTokensTest, AnOverlappedTurnShowsEarlyTokensToo) {
  std::unique_ptr<Edge> edge = edge_for(cloud_->address());
  ASSERT_NE(edge->stub, nullptr);
  const std::vector<uint32_t> prompt_ids = prompt(150, 10);
  v1::GenerateRequest request = request_for(prompt_ids, "overlap", v1::SPLIT_POLICY_CLOUD, kEarly);
  request.set_split_position(70);  // the edge prefills [0, 70) while the cloud streams [70, 149)
  const GenerateResult early = generate(*edge->stub, request);
  ASSERT_TRUE(early.status.ok()) << early.status.error_message();
  EXPECT_EQ(early.stats.plan().place(), v1::PREFILL_PLACE_OVERLAP);
  EXPECT_EQ(early.stats.early_tokens(), kEarly);
  const GenerateResult alone = local_reference(*edge, request, "overlap-ref");
  EXPECT_EQ(early.tokens, alone.tokens);
  expect_session_holds(*edge->stub, "overlap", joined(prompt_ids, early.tokens));
}

// Over HTTP: "baton": {"early_tokens": N}; the stream's last chunk and
// /metrics carry both first-token times.
TEST_F(EarlyTokensTest, TheOpenAiStreamAndTheMetricsShowBothFirstTokens) {
  MetricsRegistry registry;
  HttpFrontEndOptions http;
  http.metrics = &registry;
  EdgeServiceOptions options = edge_options(cloud_->address());
  options.assumed_local_prefill_tokens_per_s = 0.01;
  Edge edge;
  start_edge_in(edge, model_path_, options, http);
  ASSERT_NE(edge.stub, nullptr);
  ASSERT_NE(edge.http, nullptr);
  wait_for_cloud(*edge.stub);
  std::string prompt_text;
  for (int i = 0; i < 40; ++i) prompt_text += "In the beginning God created the heaven and the earth. ";
  httplib::Client client("127.0.0.1", edge.http->port());
  client.set_read_timeout(std::chrono::seconds(60));
  const std::string body = R"({"model": "m", "prompt": ")" + prompt_text +
                           R"(", "max_tokens": 8, "temperature": 0, "stream": true,
                              "baton": {"policy": "cloud", "early_tokens": 3}})";
  httplib::Result result = client.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  const std::string& stream = result->body;
  const size_t baton_at = stream.rfind("\"baton\"");
  ASSERT_NE(baton_at, std::string::npos) << stream;
  const std::string last_chunk = stream.substr(stream.rfind("data: {", baton_at));
  const std::string json_text = last_chunk.substr(6, last_chunk.find("\n\n") - 6);
  const nlohmann::json chunk = nlohmann::json::parse(json_text, nullptr, false);
  ASSERT_FALSE(chunk.is_discarded()) << json_text;
  const nlohmann::json& figures = chunk["baton"];
  EXPECT_EQ(figures["early_tokens"], 3) << figures.dump();
  EXPECT_GT(figures["cloud_first_token_ms"].get<double>(), 0.0) << figures.dump();
  EXPECT_GE(figures["local_first_token_ms"].get<double>(), figures["cloud_first_token_ms"].get<double>());
  EXPECT_DOUBLE_EQ(figures["ttft_ms"].get<double>(), figures["cloud_first_token_ms"].get<double>());
  const std::string metrics = registry.render();
  for (const char* line : {"baton_edge_cloud_first_token_seconds_count 1", "baton_edge_local_first_token_seconds_count 1",
                           "baton_edge_early_tokens_total 3"}) {
    EXPECT_NE(metrics.find(std::string(line) + "\n"), std::string::npos) << line << "\n" << metrics;
  }
}

// Once the link is measured, a call with early tokens runs on the channel
// with a window of about two bandwidth-delay products (a second connection):
// its KV and its tokens arrive as on the default channel. The cloud is
// relayed with its blocks paced: over bare loopback a fast host receives the
// tiny model's KV within 1 ms of the cloud's last compute, too short a
// sample for the link estimate, which then stays unknown.
TEST_F(EarlyTokensTest, AMeasuredLinkGetsTheEarlyTokensChannelWithItsOwnWindow) {
  std::unique_ptr<FaultyCloud> paced = start_faulty_cloud(cloud_->address(), FaultyPrefill::Fault::kPaced);
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(model_path_);
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<ModelFingerprint> fingerprint = model_fingerprint(**model);
  ASSERT_TRUE(fingerprint.ok()) << fingerprint.status();
  const KvRope rope = kv_rope_of(**model);
  const KvGeometry geometry = kv_geometry_for((*model)->spec());
  CloudClientOptions options;
  options.address = paced->address();
  absl::StatusOr<std::unique_ptr<CloudClient>> client = CloudClient::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->check_health().ok());
  absl::StatusOr<KvCodecConfig> codec = parse_kv_codec_config("f16");
  ASSERT_TRUE(codec.ok());
  auto ask = [&](const std::vector<uint32_t>& ids, uint32_t early, std::vector<uint32_t>* shown) {
    CloudPrefillRequest request;
    request.tokens.assign(ids.begin(), ids.end() - 1);
    request.codec = *codec;
    if (early > 0) {
      Sampler sampler(SamplingParams{});
      request.early = early_tokens_request(sampler, early, static_cast<int32_t>(ids.back()), std::nullopt);
      request.on_early = [shown](const v1::EarlyTokens& message) {
        shown->insert(shown->end(), message.token_ids().begin(), message.token_ids().end());
      };
    }
    F32KvCache target(geometry, static_cast<int64_t>(ids.size()));
    return (*client)->prefill(request, *fingerprint, rope, target);
  };
  // 1200 tokens of f16 KV (300 KiB) measure the link's bandwidth.
  absl::StatusOr<CloudPrefillResult> plain = ask(prompt(1200, 12), 0, nullptr);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->stream_window_bytes, 0);
  ASSERT_GT((*client)->link().bandwidth_bytes_per_s, 0.0);
  std::vector<uint32_t> shown;
  absl::StatusOr<CloudPrefillResult> early = ask(prompt(300, 13), 3, &shown);
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_GE(early->stream_window_bytes, 64 << 10) << "the early-tokens channel";
  EXPECT_LE(early->stream_window_bytes, 4 << 20);
  EXPECT_EQ(early->early_tokens, 3u);
  EXPECT_EQ(shown.size(), 3u);
  EXPECT_EQ(early->load.token_count, 299u);
}

// A raw Prefill call with early tokens: the header first, the early tokens
// before the trailer. (That they overtake the blocks still queued is
// PendingWritesTest's: over loopback the transport usually takes the whole
// KV of the tiny model before the tokens are sampled.)
TEST_F(EarlyTokensTest, ARawPrefillStreamCarriesTheEarlyTokensBetweenHeaderAndTrailer) {
  v1::PrefillRequest request;
  const std::vector<uint32_t> ids = prompt(1024, 9);
  for (size_t i = 0; i + 1 < ids.size(); ++i) request.mutable_tokens()->add_ids(ids[i]);
  request.mutable_codec()->set_codec(v1::KV_CODEC_F16);
  request.set_chunk_tokens(16);
  Sampler sampler(SamplingParams{});
  *request.mutable_early_tokens() = early_tokens_request(sampler, 3, static_cast<int32_t>(ids.back()), std::nullopt);
  grpc::ClientContext context;
  live_call(context, 60);
  std::unique_ptr<grpc::ClientReader<v1::KvStreamMessage>> reader = cloud_->stub->Prefill(&context, request);
  std::vector<v1::KvStreamMessage::ItemCase> order;
  v1::KvStreamMessage message;
  uint32_t early_tokens = 0;
  while (reader->Read(&message)) {
    order.push_back(message.item_case());
    if (message.has_early_tokens()) early_tokens += static_cast<uint32_t>(message.early_tokens().token_ids_size());
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(early_tokens, 3u);
  ASSERT_FALSE(order.empty());
  EXPECT_EQ(order.front(), v1::KvStreamMessage::kHeader) << "the header keeps its place";
  EXPECT_EQ(order.back(), v1::KvStreamMessage::kTrailer);
  EXPECT_NE(std::find(order.begin(), order.end(), v1::KvStreamMessage::kEarlyTokens), order.end());
}

}  // namespace
}  // namespace baton::edge_test
