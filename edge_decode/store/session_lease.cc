#include "edge_decode/store/session_lease.h"

#include <string>

#include "common/util/check.h"
#include "common/util/log.h"

namespace baton {

SessionLease::SessionLease(SessionStore* store, std::unique_ptr<Session> session, bool is_new, bool one_shot)
    : store_(store), session_(std::move(session)), is_new_(is_new), one_shot_(one_shot) {
  tokens_before_ = session_->tokens.size();
  kv_before_ = session_->kv ? session_->kv->size() : 0;
  capacity_before_ = session_->kv ? session_->kv->capacity() : 0;
  turns_before_ = session_->turns;
  turn_count_before_ = session_->turn_count;
  pack_tokens_before_ = session_->pack_tokens;
  // Sliding-window layers keep aside what a rollback to here needs.
  if (session_->kv) session_->kv->pin_rollback_point();
}

SessionLease::~SessionLease() {
  if (session_ == nullptr || one_shot_) return;
  if (is_new_) {
    store_->abandon(session_->id);
    return;
  }
  session_->turns = std::move(turns_before_);
  session_->turn_count = turn_count_before_;
  session_->pack_tokens = pack_tokens_before_;
  if (set_aside_ != nullptr) {
    // A truncating turn failed: its conversation goes, the old one comes back.
    session_->tokens = std::move(set_aside_->tokens);
    session_->kv = std::move(set_aside_->kv);
    session_->dropped_turns = set_aside_->dropped_turns;
    session_->dropped_tokens = set_aside_->dropped_tokens;
    session_->truncations = set_aside_->truncations;
  }
  session_->tokens.resize(tokens_before_);
  if (session_->kv) {
    session_->kv->set_size(kv_before_);
    // Never expected (the pin keeps the window); if it happens, the next turn recomputes.
    if (!session_->kv->holds_window_for(kv_before_)) session_->kv->set_size(0);
    // The room the turn reserved goes back too: the session's memory is as before.
    if (absl::Status shrunk = session_->kv->shrink_to(capacity_before_); !shrunk.ok()) {
      BATON_WARN("session %s: %s", session_->id.c_str(), shrunk.ToString().c_str());
    }
  }
  store_->release(std::move(session_));
}

const QuantizedKvCache* SessionLease::set_aside_conversation() {
  BATON_CHECK(set_aside_ == nullptr, "a conversation set aside twice in one turn");
  set_aside_ = std::make_unique<SetAside>();
  set_aside_->tokens = std::move(session_->tokens);
  set_aside_->kv = std::move(session_->kv);
  set_aside_->dropped_turns = session_->dropped_turns;
  set_aside_->dropped_tokens = session_->dropped_tokens;
  set_aside_->truncations = session_->truncations;
  session_->tokens.clear();
  session_->kv.reset();
  return set_aside_->kv.get();
}

absl::Status SessionLease::commit() {
  set_aside_.reset();  // the turn holds: the old conversation goes
  if (one_shot_) {
    session_.reset();
    return absl::OkStatus();
  }
  const std::string id = session_->id;
  // The turn holds: sliding-window layers give back their rollback rows.
  if (session_->kv) session_->kv->pin_rollback_point();
  absl::Status saved = store_->commit(std::move(session_));
  if (!saved.ok()) {
    BATON_WARN("session %s: turn kept in memory but not saved: %s", id.c_str(), saved.ToString().c_str());
  }
  return saved;
}

}  // namespace baton
