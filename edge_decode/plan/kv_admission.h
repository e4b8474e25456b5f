// KvAdmission: the KV budget (EdgeMemoryPlan::kv_budget_bytes) shared by the
// Generate turns that run at once (baton-edge --max-batch). Each turn holds a
// ticket for the bytes of its session's KV store at the capacity it needs
// (its KV reservation) from the moment it sizes the store until the turn
// ends; a turn whose reservation does not fit next to the running turns'
// waits until one ends (or its own call ends). A turn alone is always
// admitted: the context limit already keeps one session within the budget.
//
// Idle sessions are not counted here: the session store evicts them (LRU)
// when memory is short; only running turns' stores cannot be evicted.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace baton {

class KvAdmission {
 public:
  explicit KvAdmission(uint64_t budget_bytes) : budget_bytes_(budget_bytes) {}
  KvAdmission(const KvAdmission&) = delete;
  KvAdmission& operator=(const KvAdmission&) = delete;

  // A turn's reservation; released when destroyed. Movable.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept : owner_(other.owner_), bytes_(other.bytes_) { other.owner_ = nullptr; }
    Ticket& operator=(Ticket&& other) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() { release(); }
    void release();
    uint64_t bytes() const { return owner_ != nullptr ? bytes_ : 0; }

   private:
    friend class KvAdmission;
    Ticket(KvAdmission* owner, uint64_t bytes) : owner_(owner), bytes_(bytes) {}
    KvAdmission* owner_ = nullptr;
    uint64_t bytes_ = 0;
  };

  // Waits until `bytes` fit next to the tickets held (or none is held), then
  // holds them. `alive` is polled while waiting (every 50 ms and at each
  // release); its error ends the wait and is returned.
  absl::StatusOr<Ticket> admit(uint64_t bytes, const std::function<absl::Status()>& alive);

  uint64_t budget_bytes() const { return budget_bytes_; }
  uint64_t held_bytes() const;  // by every ticket
  int tickets() const;
  // Turns that had to wait for room so far.
  uint64_t waited() const;

 private:
  void give_back(uint64_t bytes);

  const uint64_t budget_bytes_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t held_bytes_ = 0;  // guarded by mu_
  int tickets_ = 0;          // guarded by mu_
  uint64_t waited_ = 0;      // guarded by mu_
};

}  // namespace baton
