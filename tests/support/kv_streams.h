// KV streams for tests that check a server's stream against the engine: the
// stream a perfect server sends (the engine's one-shot KV through
// write_kv_segment) and what an edge holds after reading one.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_codec/kv_codec_config.h"
#include "proto/baton.pb.h"
#include "tests/support/tiny_model.h"

namespace baton::testing {

// The engine's one-shot KV of `tokens` (a cache of `capacity` tokens),
// streamed from `first` with `codec`, as a prefill server sends it.
std::vector<v1::KvStreamMessage> one_shot_stream(const TinyModel& model, const std::vector<int32_t>& tokens,
                                                 uint32_t first, const KvCodecConfig& codec, int64_t capacity);

// What the edge would hold after reading `messages` on top of the engine's
// own KV of tokens [0, first): f32 rows of [0, end) in a cache of `capacity`
// tokens; nullptr (with a test failure) when the stream does not verify.
std::unique_ptr<F32KvCache> receive_stream(const TinyModel& model, const std::vector<int32_t>& tokens,
                                           uint32_t first, const std::vector<v1::KvStreamMessage>& messages,
                                           int64_t capacity);

}  // namespace baton::testing
