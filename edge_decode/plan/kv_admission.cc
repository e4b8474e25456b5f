#include "edge_decode/plan/kv_admission.h"

#include <chrono>

namespace baton {

KvAdmission::Ticket& KvAdmission::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    release();
    owner_ = other.owner_;
    bytes_ = other.bytes_;
    other.owner_ = nullptr;
  }
  return *this;
}

void KvAdmission::Ticket::release() {
  if (owner_ == nullptr) return;
  owner_->give_back(bytes_);
  owner_ = nullptr;
}

absl::StatusOr<KvAdmission::Ticket> KvAdmission::admit(uint64_t bytes, const std::function<absl::Status()>& alive) {
  std::unique_lock<std::mutex> lock(mu_);
  bool counted = false;
  while (tickets_ > 0 && held_bytes_ + bytes > budget_bytes_) {
    if (!counted) {
      ++waited_;
      counted = true;
    }
    if (alive) {
      absl::Status status = alive();
      if (!status.ok()) return status;
    }
    cv_.wait_for(lock, std::chrono::milliseconds(50));
  }
  held_bytes_ += bytes;
  ++tickets_;
  return Ticket(this, bytes);
}

void KvAdmission::give_back(uint64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    held_bytes_ -= bytes;
    --tickets_;
  }
  cv_.notify_all();
}

uint64_t KvAdmission::held_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_bytes_;
}

int KvAdmission::tickets() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tickets_;
}

uint64_t KvAdmission::waited() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waited_;
}

}  // namespace baton
