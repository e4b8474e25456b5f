// MemoryAdmission: a byte budget that requests reserve from before they run
// (the Prefill service's admission by memory). A Ticket holds its bytes until
// it is destroyed; reserve() refuses, with the numbers, what would pass the
// limit, so memory is claimed before it is allocated and never oversubscribed
// by the requests the service admits. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string_view>

#include "absl/status/statusor.h"

namespace baton {

class MemoryAdmission {
 public:
  // `limit_bytes` 0: no limit (reservations are still counted).
  explicit MemoryAdmission(uint64_t limit_bytes) : limit_bytes_(limit_bytes) {}
  MemoryAdmission(const MemoryAdmission&) = delete;
  MemoryAdmission& operator=(const MemoryAdmission&) = delete;

  // Bytes reserved for one request; released when destroyed. Move-only.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept { *this = std::move(other); }
    Ticket& operator=(Ticket&& other) noexcept;
    ~Ticket() { release(); }
    uint64_t bytes() const { return bytes_; }
    void release();

   private:
    friend class MemoryAdmission;
    MemoryAdmission* owner_ = nullptr;
    uint64_t bytes_ = 0;
  };

  // RESOURCE_EXHAUSTED "<what> needs N bytes; M of L are reserved by running
  // and queued requests (--memory-limit)" when `bytes` more would pass the limit.
  absl::StatusOr<Ticket> reserve(uint64_t bytes, std::string_view what);

  uint64_t in_use_bytes() const;
  uint64_t high_water_bytes() const;  // the most ever reserved at once
  uint64_t limit_bytes() const { return limit_bytes_; }

 private:
  const uint64_t limit_bytes_;
  mutable std::mutex mu_;
  uint64_t in_use_ = 0;      // guarded by mu_
  uint64_t high_water_ = 0;  // guarded by mu_
};

}  // namespace baton
