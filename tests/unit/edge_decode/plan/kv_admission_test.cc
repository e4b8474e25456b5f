// KvAdmission (edge_decode/plan/kv_admission.h): the running turns' KV
// reservations never pass the KV budget together; a turn that does not fit
// waits for one to end, or for its own call to end; a turn alone always runs.
#include "edge_decode/plan/kv_admission.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace baton {
namespace {

TEST(KvAdmissionTest, TurnsThatFitTogetherRunTogetherAndTheirBytesAreHeld) {
  KvAdmission admission(1000);
  absl::StatusOr<KvAdmission::Ticket> a = admission.admit(400, {});
  absl::StatusOr<KvAdmission::Ticket> b = admission.admit(600, {});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(admission.held_bytes(), 1000u);
  EXPECT_EQ(admission.tickets(), 2);
  a->release();
  EXPECT_EQ(admission.held_bytes(), 600u);
  { KvAdmission::Ticket moved = std::move(*b); }
  EXPECT_EQ(admission.held_bytes(), 0u);
  EXPECT_EQ(admission.tickets(), 0);
  EXPECT_EQ(admission.waited(), 0u);
}

TEST(KvAdmissionTest, ATurnAloneIsAdmittedEvenPastTheBudget) {
  KvAdmission admission(100);
  absl::StatusOr<KvAdmission::Ticket> alone = admission.admit(5000, {});
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(alone->bytes(), 5000u);
}

TEST(KvAdmissionTest, ATurnThatDoesNotFitWaitsUntilARunningOneEnds) {
  KvAdmission admission(1000);
  absl::StatusOr<KvAdmission::Ticket> first = admission.admit(700, {});
  ASSERT_TRUE(first.ok());
  std::atomic<bool> admitted{false};
  auto second = std::async(std::launch::async, [&] {
    absl::StatusOr<KvAdmission::Ticket> t = admission.admit(500, {});
    admitted = t.ok();
    return t.ok() ? t->bytes() : 0;
  });
  EXPECT_EQ(second.wait_for(std::chrono::milliseconds(150)), std::future_status::timeout);
  EXPECT_FALSE(admitted.load());
  EXPECT_EQ(admission.held_bytes(), 700u) << "a waiting turn reserved bytes";
  first->release();
  ASSERT_EQ(second.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(second.get(), 500u);
  EXPECT_EQ(admission.waited(), 1u);
}

TEST(KvAdmissionTest, AWaitEndsWithTheCallersErrorWhenItsCallEnds) {
  KvAdmission admission(1000);
  absl::StatusOr<KvAdmission::Ticket> first = admission.admit(900, {});
  ASSERT_TRUE(first.ok());
  std::atomic<bool> gone{false};
  auto second = std::async(std::launch::async, [&] {
    return admission
        .admit(500, [&]() -> absl::Status {
          return gone.load() ? absl::DeadlineExceededError("the Generate call's deadline passed") : absl::OkStatus();
        })
        .status();
  });
  EXPECT_EQ(second.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  gone = true;
  ASSERT_EQ(second.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(absl::IsDeadlineExceeded(second.get()));
  EXPECT_EQ(admission.held_bytes(), 900u);
  EXPECT_EQ(admission.tickets(), 1);
}

}  // namespace
}  // namespace baton
