// SessionLease: the session of one Generate turn, taken from the
// SessionStore (checked out, or reserved for a first turn, or a one-shot
// session that lives for the call only). commit() saves a completed turn;
// otherwise the destructor puts the session back exactly as it was (KV size,
// capacity and tokens rolled back, released unsaved) or abandons a new one — so a
// failed or cancelled turn never changes a session.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

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
};

}  // namespace baton
