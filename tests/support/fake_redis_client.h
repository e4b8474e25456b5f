// FakeRedisClient: an in-memory RedisClient for unit tests of the state tier:
// a map of strings (GET, SET [PX ms] [NX], DEL, EXISTS, INCRBY; TTLs ignored),
// with failure injection: down() makes every call UNAVAILABLE and
// healthy() false; corrupt() / values() reach the stored bytes.
// Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "cloud_prefill/state/redis_client.h"

namespace baton {

class FakeRedisClient final : public RedisClient {
 public:
  absl::StatusOr<RedisReply> command(std::string_view key, std::span<const std::string_view> argv) override;
  bool healthy() const override { return !down_.load(); }
  RedisClientStats stats() const override;

  // While down: every command fails UNAVAILABLE and healthy() is false.
  void set_down(bool down) { down_ = down; }
  // Flips one bit of the stored value at `offset` (from the end when
  // negative); false when the key is absent or too short.
  bool corrupt(const std::string& key, int64_t offset);
  // Replaces (or creates) a value, as a raw client's SET would.
  void put_raw(const std::string& key, std::string value);
  std::map<std::string, std::string> values() const;
  // While held, commands wait (a slow server) until release().
  void hold();
  void release();
  uint64_t commands() const { return commands_.load(); }

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::string> values_;  // guarded by mu_
  std::condition_variable released_cv_;
  bool held_ = false;  // guarded by mu_
  std::atomic<bool> down_{false};
  std::atomic<uint64_t> commands_{0};
  std::atomic<uint64_t> errors_{0};
};

}  // namespace baton
