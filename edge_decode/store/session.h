// Session: one multi-turn conversation held by the edge agent: its token ids,
// the quantized KV of those tokens, and the sampler state, so the next turn
// (or a restart, via SessionStore) goes on exactly where the last one ended.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/engine/sampler.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_cache/quantized_kv_cache.h"

namespace baton {

struct Session {
  std::string id;                          // [A-Za-z0-9._-], 1..128 characters
  // Every token of the conversation so far, prompts and generated, in
  // position order. kv holds positions [0, kv->size()); kv->size() <=
  // tokens.size(): the tokens past it (at most the last sampled token) are
  // run through the engine at the start of the next turn.
  std::vector<int32_t> tokens;
  std::unique_ptr<QuantizedKvCache> kv;    // capacity may exceed size; grown with QuantizedKvCache::reserve
  KvCodecConfig codec;                     // the session's KV codec (store config of kv)
  std::string pack_id;                     // pack the session started from; empty if none
  SamplerState sampler;                    // sampler state after the last turn (seeded sessions continue their stream)
  int64_t created_unix_ms = 0;
  int64_t last_used_unix_ms = 0;

  // Bytes the KV takes in memory (capacity included; a committed session's
  // capacity is its size: SessionStore::commit gives the rest back).
  uint64_t kv_bytes() const { return kv ? static_cast<uint64_t>(kv->memory_bytes()) : 0; }
};

// Session ids: [A-Za-z0-9._-], 1..max_chars characters, not "." or "..".
// Clients name ids of up to kMaxClientSessionIdChars; the agent stores them
// with an owner prefix of up to kSessionOwnerPrefixChars (session_owner.h).
inline constexpr size_t kMaxClientSessionIdChars = 128;
inline constexpr size_t kSessionOwnerPrefixChars = 18;  // "o" + 16 hex digits + "."
bool is_valid_session_id(const std::string& id,
                         size_t max_chars = kMaxClientSessionIdChars + kSessionOwnerPrefixChars);

}  // namespace baton
