#include "tests/support/kv_streams.h"

#include <span>

#include <gtest/gtest.h>

#include "common/engine/engine.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/kv_stream/kv_stream_writer.h"
#include "common/kv_stream/prefix_digest.h"

namespace baton::testing {

std::vector<v1::KvStreamMessage> one_shot_stream(const TinyModel& model, const std::vector<int32_t>& tokens,
                                                 uint32_t first, const KvCodecConfig& codec, int64_t capacity) {
  Engine engine(*model.model, EngineOptions{.n_threads = 1});
  F32KvCache cache(model.geometry, capacity);
  EXPECT_TRUE(engine.prefill(tokens, cache, nullptr).ok());
  KvStreamHeaderInfo info;
  info.model = model.fingerprint;
  info.codec = codec;
  info.first_position = first;
  info.token_ids.assign(tokens.begin() + first, tokens.end());
  info.prefix_digest = prefix_digest(tokens);
  std::vector<v1::KvStreamMessage> messages;
  KvStreamWriter writer([&](const v1::KvStreamMessage& m) {
    messages.push_back(m);
    return absl::OkStatus();
  });
  const KvRope rope = kv_rope_of(*model.model);
  EXPECT_TRUE(write_kv_segment(cache, info, &rope, writer).ok());
  return messages;
}

std::unique_ptr<F32KvCache> receive_stream(const TinyModel& model, const std::vector<int32_t>& tokens,
                                           uint32_t first, const std::vector<v1::KvStreamMessage>& messages,
                                           int64_t capacity) {
  Engine engine(*model.model, EngineOptions{.n_threads = 1});
  auto cache = std::make_unique<F32KvCache>(model.geometry, capacity);
  if (first > 0) {
    EXPECT_TRUE(engine.prefill(std::span<const int32_t>(tokens).first(first), *cache, nullptr).ok());
  }
  KvStreamExpectation expected;
  expected.model = model.fingerprint;
  expected.first_position = first;
  expected.token_ids = std::vector<int32_t>(tokens.begin() + first, tokens.end());
  const KvRope rope = kv_rope_of(*model.model);
  auto load = read_kv_segment(messages, expected, &rope, *cache);
  EXPECT_TRUE(load.ok()) << load.status();
  if (!load.ok()) return nullptr;
  return cache;
}

}  // namespace baton::testing
