// FakePackRedis: an in-memory RedisClient for unit tests of what stores
// state in Redis: GET, SET [PX ms] [NX], DEL, EXISTS and INCRBY over a map
// (TTLs are accepted and ignored). fail(true) makes every call UNAVAILABLE
// and healthy() false, as a tier in backoff; values() lets a test read or
// corrupt what was stored.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cloud_prefill/state/redis_client.h"

namespace baton::testing {

class FakePackRedis final : public RedisClient {
 public:
  absl::StatusOr<RedisReply> command(std::string_view /*key*/, std::span<const std::string_view> argv) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++commands_;
    if (failing_) return absl::UnavailableError("fake redis is down");
    if (argv.empty()) return absl::InvalidArgumentError("empty command");
    const std::string name(argv[0]);
    RedisReply reply;
    if (name == "GET" && argv.size() == 2) {
      auto it = values_.find(std::string(argv[1]));
      if (it != values_.end()) reply = string_reply(it->second);
    } else if (name == "SET" && argv.size() >= 3) {
      bool only_if_absent = false;
      for (size_t i = 3; i < argv.size(); ++i) only_if_absent |= argv[i] == "NX";
      const std::string key(argv[1]);
      if (only_if_absent && values_.count(key) > 0) return reply;  // nil
      values_[key] = std::string(argv[2]);
      reply.type = RedisReply::Type::kStatus;
      reply.str = "OK";
    } else if ((name == "DEL" || name == "EXISTS") && argv.size() == 2) {
      reply.type = RedisReply::Type::kInteger;
      reply.integer = static_cast<int64_t>(values_.count(std::string(argv[1])));
      if (name == "DEL") values_.erase(std::string(argv[1]));
    } else if (name == "INCRBY" && argv.size() == 3) {
      int64_t value = 0;
      int64_t delta = 0;
      std::string& stored = values_[std::string(argv[1])];
      if ((!stored.empty() && !absl::SimpleAtoi(stored, &value)) || !absl::SimpleAtoi(std::string(argv[2]), &delta)) {
        return absl::InternalError("ERR value is not an integer or out of range");
      }
      stored = absl::StrCat(value + delta);
      reply.type = RedisReply::Type::kInteger;
      reply.integer = value + delta;
    } else {
      return absl::InternalError(absl::StrCat("ERR unknown command '", name, "' (fake redis)"));
    }
    return reply;
  }
  bool healthy() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return !failing_;
  }
  RedisClientStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    RedisClientStats stats;
    stats.nodes = 1;
    stats.nodes_down = failing_ ? 1 : 0;
    stats.commands = commands_;
    return stats;
  }

  void fail(bool failing) {
    std::lock_guard<std::mutex> lock(mu_);
    failing_ = failing;
  }
  // Under the lock of the caller's choosing: tests are single-threaded here.
  std::map<std::string, std::string>& values() { return values_; }
  uint64_t commands() const {
    std::lock_guard<std::mutex> lock(mu_);
    return commands_;
  }

 private:
  static RedisReply string_reply(const std::string& value) {
    RedisReply reply;
    reply.type = RedisReply::Type::kString;
    reply.str = value;
    return reply;
  }

  mutable std::mutex mu_;
  bool failing_ = false;
  uint64_t commands_ = 0;
  std::map<std::string, std::string> values_;
};

}  // namespace baton::testing
