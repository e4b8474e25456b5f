#include "cloud_prefill/state/redis_client.h"

#include <array>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cloud_prefill/state/redis_connection.h"

namespace baton {
namespace {

constexpr int kSlots = 16384;

// CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), the one Redis Cluster
// hashes keys with.
constexpr std::array<uint16_t, 256> make_crc16_table() {
  std::array<uint16_t, 256> table{};
  for (int byte = 0; byte < 256; ++byte) {
    uint16_t crc = static_cast<uint16_t>(byte << 8);
    for (int bit = 0; bit < 8; ++bit) crc = static_cast<uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
    table[byte] = crc;
  }
  return table;
}
constexpr std::array<uint16_t, 256> kCrc16Table = make_crc16_table();

uint16_t crc16(std::string_view bytes) {
  uint16_t crc = 0;
  for (unsigned char byte : bytes) crc = static_cast<uint16_t>((crc << 8) ^ kCrc16Table[((crc >> 8) ^ byte) & 0xff]);
  return crc;
}

absl::StatusOr<RedisEndpoint> parse_endpoint(std::string_view text, std::string_view url) {
  RedisEndpoint endpoint;
  std::string_view port_text;
  if (text.starts_with("[")) {  // [IPv6]:PORT
    const size_t close = text.find(']');
    if (close == std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("redis URL '", av(url), "': unclosed '[' in host '", av(text), "'"));
    }
    endpoint.host = std::string(text.substr(1, close - 1));
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return absl::InvalidArgumentError(absl::StrCat("redis URL '", av(url), "': bad host '", av(text), "'"));
      port_text = rest.substr(1);
    }
  } else {
    const size_t colon = text.rfind(':');
    endpoint.host = std::string(text.substr(0, colon));
    if (colon != std::string_view::npos) port_text = text.substr(colon + 1);
  }
  if (endpoint.host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("redis URL '", av(url), "': empty host in '", av(text), "'"));
  }
  if (port_text.data() != nullptr &&
      (!absl::SimpleAtoi(av(port_text), &endpoint.port) || endpoint.port < 1 || endpoint.port > 65535)) {
    return absl::InvalidArgumentError(
        absl::StrCat("redis URL '", av(url), "': port '", av(port_text), "' of '", av(text), "' is not 1..65535"));
  }
  return endpoint;
}

}  // namespace

int redis_key_slot(std::string_view key) {
  // A {hash tag}: the part between the first '{' and the next '}', when
  // not empty, is hashed instead, so related keys share a slot.
  if (const size_t open = key.find('{'); open != std::string_view::npos) {
    if (const size_t close = key.find('}', open + 1); close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return crc16(key) % kSlots;
}

absl::StatusOr<RedisOptions> parse_redis_url(std::string_view url) {
  RedisOptions options;
  std::string_view rest = url;
  if (rest.starts_with("redis://")) {
    rest.remove_prefix(8);
  } else if (rest.starts_with("rediss://")) {
    rest.remove_prefix(9);
    options.tls = true;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("redis URL '", av(url), "' must start with redis:// (plain) or rediss:// (TLS)"));
  }
  if (const size_t at = rest.find('@'); at != std::string_view::npos) {
    const std::string_view user = rest.substr(0, at);
    if (user.find(':') != std::string_view::npos) {
      // Not echoed: the message would print the secret.
      return absl::InvalidArgumentError(
          "the redis URL carries a password; give it in a file instead (--state-password-file)");
    }
    options.username = std::string(user);
    rest.remove_prefix(at + 1);
  }
  if (rest.find('/') != std::string_view::npos || rest.find('?') != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "redis URL '", av(url), "': no database or query part is supported (a cluster has only database 0)"));
  }
  if (rest.empty()) return absl::InvalidArgumentError(absl::StrCat("redis URL '", av(url), "' names no host"));
  for (absl::string_view part : absl::StrSplit(av(rest), ',')) {
    absl::StatusOr<RedisEndpoint> endpoint = parse_endpoint(std::string_view(part.data(), part.size()), url);
    if (!endpoint.ok()) return endpoint.status();
    options.seeds.push_back(*std::move(endpoint));
  }
  return options;
}

absl::StatusOr<std::optional<std::string>> RedisClient::get(std::string_view key) {
  const std::string_view argv[] = {"GET", key};
  absl::StatusOr<RedisReply> reply = command(key, argv);
  if (!reply.ok()) return reply.status();
  if (reply->type == RedisReply::Type::kNil) return std::optional<std::string>();
  if (reply->type != RedisReply::Type::kString) return absl::InternalError("redis GET answered a non-string reply");
  return std::optional<std::string>(std::move(reply->str));
}

absl::StatusOr<bool> RedisClient::set(std::string_view key, std::string_view value, std::chrono::milliseconds ttl,
                                      bool only_if_absent) {
  const std::string ttl_text = std::to_string(ttl.count());
  std::vector<std::string_view> argv = {"SET", key, value};
  if (ttl.count() > 0) argv.insert(argv.end(), {"PX", ttl_text});
  if (only_if_absent) argv.push_back("NX");
  absl::StatusOr<RedisReply> reply = command(key, argv);
  if (!reply.ok()) return reply.status();
  return reply->type != RedisReply::Type::kNil;  // NX on an existing key answers nil
}

absl::StatusOr<bool> RedisClient::del(std::string_view key) {
  const std::string_view argv[] = {"DEL", key};
  absl::StatusOr<RedisReply> reply = command(key, argv);
  if (!reply.ok()) return reply.status();
  return reply->integer > 0;
}

absl::StatusOr<int64_t> RedisClient::incr_by(std::string_view key, int64_t delta) {
  const std::string delta_text = std::to_string(delta);
  const std::string_view argv[] = {"INCRBY", key, delta_text};
  absl::StatusOr<RedisReply> reply = command(key, argv);
  if (!reply.ok()) return reply.status();
  if (reply->type != RedisReply::Type::kInteger) return absl::InternalError("redis INCRBY answered a non-integer");
  return reply->integer;
}

}  // namespace baton
