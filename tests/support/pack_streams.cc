#include "tests/support/pack_streams.h"

#include <algorithm>

#include "common/engine/engine.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_stream/kv_pack_file.h"
#include "common/kv_stream/kv_stream_reader.h"
#include "common/kv_stream/kv_stream_writer.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/util/check.h"

namespace baton::testing {

std::vector<v1::KvStreamMessage> make_pack_stream(const TinyModel& model, const std::vector<int32_t>& tokens,
                                                  const std::string& pack_id) {
  Engine engine(*model.model, EngineOptions{.n_threads = 1});
  F32KvCache cache(model.geometry, static_cast<int64_t>(tokens.size()));
  BATON_CHECK(engine.prefill(tokens, cache, nullptr).ok());
  absl::StatusOr<KvCodecConfig> codec = parse_kv_codec_config("int8-g16-z3");
  BATON_CHECK(codec.ok());
  KvStreamHeaderInfo info;
  info.model = model.fingerprint;
  info.codec = *codec;
  info.token_ids = tokens;
  info.prefix_digest = prefix_digest(tokens);
  info.pack_id = pack_id;
  info.description = "test pack";
  std::vector<v1::KvStreamMessage> messages;
  KvStreamWriter writer([&](const v1::KvStreamMessage& message) {
    messages.push_back(message);
    return absl::OkStatus();
  });
  BATON_CHECK(write_kv_segment(cache, info, &model.rope, writer).ok());
  return messages;
}

absl::StatusOr<std::shared_ptr<StoredPack>> verify_pack_value(const TinyModel& model, std::string_view value) {
  KvStreamExpectation expected;
  expected.model = model.fingerprint;
  expected.first_position = 0;
  KvStreamReader reader(std::move(expected), kv_reader_options_with_codec(model.geometry, KvStreamReaderOptions{}));
  BATON_ASSIGN_OR_RETURN(KvSegment segment, read_kv_pack(value, &reader));
  auto pack = std::make_shared<StoredPack>();
  const v1::KvHeader& header = segment.header;
  pack->tokens.assign(header.token_ids().begin(), header.token_ids().end());
  BATON_CHECK(header.prefix_digest().size() == pack->prefix_digest.size());
  std::copy(header.prefix_digest().begin(), header.prefix_digest().end(), pack->prefix_digest.begin());
  pack->pack_id = header.pack_id();
  pack->encoded_bytes = segment.encoded_bytes;
  pack->stored_bytes = value.size();
  pack->messages = kv_stream_messages(std::move(segment));
  return pack;
}

}  // namespace baton::testing
