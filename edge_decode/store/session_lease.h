// SessionLease: the session of one Generate turn, taken from the
// SessionStore (checked out, or reserved for a first turn, or a one-shot
// session that lives for the call only). commit() saves a completed turn;
// otherwise the destructor puts the session back exactly as it was (KV size,
// capacity, tokens and turn records rolled back, released unsaved; a
// conversation set aside by a truncating turn put back whole) or abandons a
// new one — so a failed or cancelled turn never changes a session.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"

#include "edge_decode/store/session.h"
#include "edge_decode/store/session_store.h"

namespace baton {

class SessionLease {
 public:
  // `is_new`: reserved for a first turn (abandoned unless committed);
  // `one_shot`: not in the store at all (dropped either way).
  SessionLease(SessionStore* store, std::unique_ptr<Session> session, bool is_new, bool one_shot);
  ~SessionLease();
  SessionLease(const SessionLease&) = delete;
  SessionLease& operator=(const SessionLease&) = delete;

  Session& operator*() { return *session_; }
  Session* operator->() { return session_.get(); }
  bool is_new() const { return is_new_; }
  // Tokens the session held when the turn began.
  size_t tokens_before() const { return tokens_before_; }

  // A turn that replaces the conversation (context overflow: truncation
  // builds a shorter one in a new KV store) first sets the current one
  // aside: its KV, tokens, turn records and counters move here, the session
  // keeps its id, codec, pack and sampler with no KV and no tokens, and the
  // turn installs the new ones. A failed turn puts the old conversation back
  // whole; commit() drops it. Returns the set-aside KV (null when the
  // session had none), valid for the life of the lease. Once per lease.
  const QuantizedKvCache* set_aside_conversation();

  // Saves the turn (a one-shot session is just dropped). A failed save keeps
  // the session in memory (SessionStore::commit), is logged and returned:
  // the turn itself succeeded, the caller tells the client (Stats.save_error).
  absl::Status commit();

 private:
  SessionStore* store_;
  std::unique_ptr<Session> session_;
  bool is_new_;
  bool one_shot_;
  size_t tokens_before_ = 0;
  int64_t kv_before_ = 0;
  int64_t capacity_before_ = 0;  // tokens; a failed turn shrinks back to it
  std::vector<SessionTurn> turns_before_;
  uint32_t turn_count_before_ = 0;
  uint32_t pack_tokens_before_ = 0;
  // set_aside_conversation(): what a failed turn puts back.
  struct SetAside {
    std::vector<int32_t> tokens;
    std::unique_ptr<QuantizedKvCache> kv;
    uint32_t dropped_turns = 0;
    uint64_t dropped_tokens = 0;
    uint32_t truncations = 0;
  };
  std::unique_ptr<SetAside> set_aside_;
};

}  // namespace baton
