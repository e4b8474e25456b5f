// PendingWrites (common/rpc/pending_writes.h): the order a server stream's
// queued messages go out in. Urgent messages (a Prefill stream's early
// tokens) overtake the regular ones waiting, keep their own order, and never
// pass the stream's first message (its header) while it waits.
#include "common/rpc/pending_writes.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace baton {
namespace {

std::vector<std::string> drain(PendingWrites<std::string>& queue) {
  std::vector<std::string> out;
  while (!queue.empty()) out.push_back(queue.pop());
  return out;
}

TEST(PendingWritesTest, UrgentMessagesOvertakeQueuedOnesInTheirOwnOrder) {
  PendingWrites<std::string> queue;
  queue.push("header");
  EXPECT_EQ(queue.pop(), "header");
  for (const char* block : {"b1", "b2", "b3"}) queue.push(block);
  queue.push_urgent("e1");
  queue.push_urgent("e2");
  queue.push("b4");
  queue.push_urgent("e3");
  EXPECT_EQ(drain(queue), (std::vector<std::string>{"e1", "e2", "e3", "b1", "b2", "b3", "b4"}));
}

TEST(PendingWritesTest, TheStreamsFirstMessageKeepsItsPlace) {
  PendingWrites<std::string> queue;
  queue.push("header");
  queue.push("b1");
  queue.push_urgent("e1");
  queue.push_urgent("e2");
  EXPECT_EQ(drain(queue), (std::vector<std::string>{"header", "e1", "e2", "b1"}));
  // Once one message went out, nothing is pinned.
  queue.push("b2");
  queue.push_urgent("e3");
  EXPECT_EQ(drain(queue), (std::vector<std::string>{"e3", "b2"}));
}

TEST(PendingWritesTest, AnUrgentMessageOnAnEmptyQueueGoesOutNext) {
  PendingWrites<std::string> queue;
  queue.push_urgent("e1");
  queue.push("b1");
  EXPECT_EQ(drain(queue), (std::vector<std::string>{"e1", "b1"}));
}

TEST(PendingWritesTest, ASnapshotIsReplacedOnlyWhileItIsTheLastOfItsKind) {
  PendingWrites<std::string> queue;
  queue.push_snapshot("p1", 1);
  std::string newer = "p1'";
  EXPECT_TRUE(queue.replace_snapshot(newer, 1));
  std::string other = "p2";
  EXPECT_FALSE(queue.replace_snapshot(other, 2)) << "another kind";
  queue.push_snapshot(other, 2);
  queue.push("text");
  std::string late = "p2'";
  EXPECT_FALSE(queue.replace_snapshot(late, 2)) << "no longer the last message";
  EXPECT_EQ(late, "p2'") << "a message that was not taken is left as it was";
  EXPECT_EQ(drain(queue), (std::vector<std::string>{"p1'", "p2", "text"}));
}

}  // namespace
}  // namespace baton
