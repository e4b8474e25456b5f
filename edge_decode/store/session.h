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

// One turn of a session: a prompt and its answer (what truncation drops or
// keeps whole).
struct SessionTurn {
  uint32_t number = 0;       // 1 for the session's first turn; never reused
  uint32_t first_token = 0;  // index in Session::tokens of the turn's first token

  bool operator==(const SessionTurn&) const = default;
};

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
  // The turns the session holds, oldest first (first_token ascending, below
  // tokens.size()). Tokens before the first one are the kept prefix (a pack,
  // or what --keep-tokens kept when earlier turns were dropped).
  std::vector<SessionTurn> turns;
  uint32_t turn_count = 0;                 // turns begun over the session's life (the next is turn_count + 1)
  uint32_t pack_tokens = 0;                // tokens of pack_id at the start of tokens (0: no pack)
  // Truncation (context overflow) over the session's life.
  uint32_t dropped_turns = 0;
  uint64_t dropped_tokens = 0;
  uint32_t truncations = 0;                // turns that dropped earlier turns
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
