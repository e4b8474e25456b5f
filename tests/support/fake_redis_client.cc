#include "tests/support/fake_redis_client.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace baton {

absl::StatusOr<RedisReply> FakeRedisClient::command(std::string_view /*key*/,
                                                    std::span<const std::string_view> argv) {
  ++commands_;
  if (down_.load()) {
    ++errors_;
    return absl::UnavailableError("fake redis is down");
  }
  if (argv.empty()) return absl::InvalidArgumentError("empty command");
  const std::string name = absl::AsciiStrToUpper(std::string(argv[0]));
  std::unique_lock<std::mutex> lock(mu_);
  released_cv_.wait(lock, [this] { return !held_; });
  RedisReply reply;
  if (name == "GET" && argv.size() == 2) {
    auto it = values_.find(std::string(argv[1]));
    if (it != values_.end()) {
      reply.type = RedisReply::Type::kString;
      reply.str = it->second;
    }
    return reply;
  }
  if (name == "SET" && argv.size() >= 3) {
    bool nx = false;
    for (size_t i = 3; i < argv.size(); ++i) {
      if (absl::AsciiStrToUpper(std::string(argv[i])) == "NX") nx = true;
    }
    const std::string key(argv[1]);
    if (nx && values_.count(key) > 0) return reply;  // nil
    values_[key] = std::string(argv[2]);
    reply.type = RedisReply::Type::kStatus;
    reply.str = "OK";
    return reply;
  }
  if ((name == "DEL" || name == "EXISTS") && argv.size() == 2) {
    reply.type = RedisReply::Type::kInteger;
    reply.integer = static_cast<int64_t>(values_.count(std::string(argv[1])));
    if (name == "DEL") values_.erase(std::string(argv[1]));
    return reply;
  }
  ++errors_;
  return absl::InternalError(absl::StrCat("ERR the fake does not know '", std::string(argv[0]), "' with ", argv.size(), " args"));
}

RedisClientStats FakeRedisClient::stats() const {
  RedisClientStats stats;
  stats.nodes = 1;
  stats.nodes_down = down_.load() ? 1 : 0;
  stats.commands = commands_.load();
  stats.errors = errors_.load();
  if (down_.load()) stats.last_error = "fake redis is down";
  return stats;
}

bool FakeRedisClient::corrupt(const std::string& key, int64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = values_.find(key);
  if (it == values_.end()) return false;
  const int64_t size = static_cast<int64_t>(it->second.size());
  const int64_t at = offset < 0 ? size + offset : offset;
  if (at < 0 || at >= size) return false;
  it->second[static_cast<size_t>(at)] ^= 0x01;
  return true;
}

void FakeRedisClient::hold() {
  std::lock_guard<std::mutex> lock(mu_);
  held_ = true;
}

void FakeRedisClient::release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = false;
  }
  released_cv_.notify_all();
}

void FakeRedisClient::put_raw(const std::string& key, std::string value) {
  std::lock_guard<std::mutex> lock(mu_);
  values_[key] = std::move(value);
}

std::map<std::string, std::string> FakeRedisClient::values() const {
  std::lock_guard<std::mutex> lock(mu_);
  return values_;
}

}  // namespace baton
