#include "in_memory_handoff.h"

#include <vector>

#include "common/kv_stream/prefix_digest.h"
#include "common/util/check.h"

namespace baton::cli {

absl::StatusOr<std::unique_ptr<QuantizedKvCache>> hand_off(const InMemoryHandoff& handoff, const F32KvCache& cloud,
                                                           std::span<const int32_t> tokens, int64_t capacity,
                                                           KvSegmentLoad* load) {
  KvStreamHeaderInfo info;
  info.model = *handoff.cloud.fingerprint;
  info.codec = handoff.wire;
  info.first_position = 0;
  info.token_ids.assign(tokens.begin(), tokens.end());
  info.prefix_digest = prefix_digest(tokens);
  info.transform = handoff.transform;
  std::vector<v1::KvStreamMessage> messages;
  KvStreamWriter writer([&](const v1::KvStreamMessage& m) {
    messages.push_back(m);
    return absl::OkStatus();
  });
  BATON_RETURN_IF_ERROR(write_kv_segment(cloud, info, handoff.cloud.rope, writer));

  BATON_ASSIGN_OR_RETURN(std::unique_ptr<QuantizedKvCache> edge,
                         QuantizedKvCache::Create(handoff.geometry, capacity, handoff.store));
  KvStreamExpectation expected;
  expected.model = *handoff.edge.fingerprint;
  expected.first_position = 0;
  expected.token_ids = info.token_ids;
  expected.prefix_digest = info.prefix_digest;
  expected.codec = messages.front().header().codec();
  KvReadOptions options;
  options.transform = handoff.transform;
  BATON_ASSIGN_OR_RETURN(*load, read_kv_segment(messages, expected, handoff.edge.rope, *edge, options));
  return edge;
}

}  // namespace baton::cli
