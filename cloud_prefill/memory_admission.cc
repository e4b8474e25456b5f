#include "cloud_prefill/memory_admission.h"

#include <utility>

#include "absl/strings/str_format.h"

namespace baton {

MemoryAdmission::Ticket& MemoryAdmission::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    release();
    owner_ = std::exchange(other.owner_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void MemoryAdmission::Ticket::release() {
  if (owner_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(owner_->mu_);
    owner_->in_use_ -= bytes_;
  }
  owner_ = nullptr;
  bytes_ = 0;
}

absl::StatusOr<MemoryAdmission::Ticket> MemoryAdmission::reserve(uint64_t bytes, std::string_view what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (limit_bytes_ > 0 && (bytes > limit_bytes_ || in_use_ > limit_bytes_ - bytes)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s needs %d bytes of memory; %d of %d are reserved by running and queued requests (--memory-limit)", what,
        bytes, in_use_, limit_bytes_));
  }
  in_use_ += bytes;
  if (in_use_ > high_water_) high_water_ = in_use_;
  Ticket ticket;
  ticket.owner_ = this;
  ticket.bytes_ = bytes;
  return ticket;
}

uint64_t MemoryAdmission::in_use_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

uint64_t MemoryAdmission::high_water_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return high_water_;
}

}  // namespace baton
