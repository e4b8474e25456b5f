// Early tokens overtake the KV blocks still queued on the cloud
// (QueuedWriteReactor::push_urgent) but keep their own order: a real
// PrefillServer on 127.0.0.1:0 streams a long F16 KV to a client that waits
// before it reads and whose HTTP/2 window stays at its 64 KiB default (no
// BDP probing), so the blocks queue up on the server while the early tokens
// are sampled. The early messages must then come in the order they were
// sent (cloud_ms never decreasing, the one marked last at the end) and ahead
// of blocks still queued (else the test did not exercise the queue).
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "common/engine/sampler.h"
#include "common/engine/sampling_proto.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_stream/kv_fingerprint.h"
#include "tests/support/edge_test_env.h"
#include "tests/support/tiny_model.h"

namespace baton {
namespace {

constexpr int kPromptTokens = 1024;  // F16 KV of the tiny model: 256 B/token, 256 KiB in all
constexpr uint32_t kEarly = 8;

TEST(EarlyTokensOrderTest, EarlyTokensOvertakeQueuedBlocksInTheOrderTheyWereSampled) {
  const testing::TinyModel& tiny = testing::shared_tiny_model(GgmlType::kF32);
  PrefillServiceOptions options;
  options.threads = 1;
  options.max_running = 1;
  options.chunk_tokens = 16;  // many blocks per layer
  options.max_context_tokens = kPromptTokens + kEarly;
  std::unique_ptr<edge_test::Cloud> cloud = edge_test::start_cloud_with(tiny.path, options);
  ASSERT_NE(cloud->server, nullptr);
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);  // the window stays at 64 KiB: the blocks queue on the server
  auto stub = v1::Prefill::NewStub(
      grpc::CreateCustomChannel(cloud->address(), grpc::InsecureChannelCredentials(), args));

  const std::vector<int32_t> prompt = testing::seeded_prompt(tiny, kPromptTokens, /*seed=*/5);
  v1::PrefillRequest request;
  for (size_t i = 0; i + 1 < prompt.size(); ++i) request.mutable_tokens()->add_ids(static_cast<uint32_t>(prompt[i]));
  *request.mutable_expected_model() = model_fingerprint_to_proto(tiny.fingerprint);
  absl::StatusOr<KvCodecConfig> f16 = parse_kv_codec_config("f16");
  ASSERT_TRUE(f16.ok()) << f16.status();
  absl::StatusOr<v1::CodecParams> codec = kv_codec_params(*f16);
  ASSERT_TRUE(codec.ok()) << codec.status();
  *request.mutable_codec() = *codec;
  const Sampler sampler(SamplingParams{});  // greedy
  *request.mutable_early_tokens() = early_tokens_request(sampler, kEarly, prompt.back(), std::nullopt);

  grpc::ClientContext context;
  edge_test::live_call(context, 60);
  std::unique_ptr<grpc::ClientReader<v1::KvStreamMessage>> reader = stub->Prefill(&context, request);
  // The cloud prefills and samples meanwhile; what the window does not hold waits in its queue.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  std::vector<v1::EarlyTokens> early;
  int blocks_after_first_early = 0;
  v1::KvStreamMessage message;
  while (reader->Read(&message)) {
    if (message.has_early_tokens()) early.push_back(message.early_tokens());
    if (message.has_block() && !early.empty()) ++blocks_after_first_early;
  }
  const grpc::Status status = reader->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();

  ASSERT_FALSE(early.empty());
  uint32_t tokens = 0;
  for (size_t i = 0; i < early.size(); ++i) {
    tokens += static_cast<uint32_t>(early[i].token_ids_size());
    EXPECT_EQ(early[i].last(), i + 1 == early.size()) << "early message " << i << " of " << early.size();
    if (i > 0) {
      EXPECT_GE(early[i].cloud_ms(), early[i - 1].cloud_ms()) << "early message " << i << " came out of order";
    }
  }
  EXPECT_LE(tokens, kEarly);
  // The early tokens were sent while blocks still waited (else nothing was overtaken).
  EXPECT_GT(blocks_after_first_early, 0);
}

}  // namespace
}  // namespace baton
