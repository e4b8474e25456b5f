// PendingWrites: the order in which a server stream's queued messages go
// out (QueuedWriteReactor holds one under its lock). Three kinds:
//   push          at the back (the stream's regular messages, in order);
//   push_urgent   ahead of every waiting regular message but behind the
//                 urgent ones queued before it (they keep their order), and
//                 never ahead of the stream's first message while it still
//                 waits (a KV stream's header stays first): the early
//                 tokens of a Prefill stream overtake its queued KV blocks;
//   push_snapshot a report that a newer one of the same kind replaces while
//                 it is still the last message waiting (progress events).
// Not thread-safe: the owner locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>

namespace baton {

template <typename Message>
class PendingWrites {
 public:
  size_t size() const { return pending_.size(); }
  bool empty() const { return pending_.empty(); }
  void clear() { pending_.clear(); }

  void push(Message message) { pending_.push_back({std::move(message), Kind::kRegular, 0}); }

  void push_urgent(Message message) {
    auto at = pending_.begin();
    if (!started_ && at != pending_.end()) ++at;  // the first message keeps its place
    while (at != pending_.end() && at->kind == Kind::kUrgent) ++at;
    pending_.insert(at, Entry{std::move(message), Kind::kUrgent, 0});
  }

  // True when it replaced a waiting snapshot of `kind` (the queue did not grow).
  bool replace_snapshot(Message& message, int64_t kind) {
    if (pending_.empty() || pending_.back().kind != Kind::kSnapshot || pending_.back().snapshot_kind != kind) {
      return false;
    }
    pending_.back().message = std::move(message);
    return true;
  }
  void push_snapshot(Message message, int64_t kind) {
    pending_.push_back({std::move(message), Kind::kSnapshot, kind});
  }

  // The next message to write; the queue must not be empty.
  Message pop() {
    Message message = std::move(pending_.front().message);
    pending_.pop_front();
    started_ = true;
    return message;
  }

 private:
  enum class Kind { kRegular, kUrgent, kSnapshot };
  struct Entry {
    Message message;
    Kind kind = Kind::kRegular;
    int64_t snapshot_kind = 0;  // kSnapshot only
  };
  std::deque<Entry> pending_;
  bool started_ = false;  // pop() has handed out a message
};

}  // namespace baton
