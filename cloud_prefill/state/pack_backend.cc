#include "cloud_prefill/state/pack_backend.h"

#include "absl/strings/str_format.h"

namespace baton {
namespace {

bool kept_as_is(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string pack_key_component(std::string_view text) {
  if (text.empty()) return "%";
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (kept_as_is(byte)) {
      out.push_back(c);
    } else {
      out += absl::StrFormat("%%%02X", byte);
    }
  }
  // Long ids would pass NAME_MAX (255) as file names: keep a readable start
  // and make the rest a digest of the whole text.
  constexpr size_t kMaxChars = 160;
  constexpr size_t kKeptChars = 96;
  if (out.size() > kMaxChars) {
    out.resize(kKeptChars);
    out += "~" + to_hex(sha256(text));
  }
  return out;
}

std::string short_model_id(std::string_view fingerprint_digest_hex) {
  return std::string(fingerprint_digest_hex.substr(0, 16));
}

absl::StatusOr<Digest256> parse_digest_hex(std::string_view hex) {
  Digest256 digest{};
  if (hex.size() != 2 * digest.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a prefix digest has %d hex digits, not %d", 2 * digest.size(), hex.size()));
  }
  for (size_t i = 0; i < digest.size(); ++i) {
    const int high = hex_value(hex[2 * i]);
    const int low = hex_value(hex[2 * i + 1]);
    if (high < 0 || low < 0) {
      return absl::InvalidArgumentError(absl::StrFormat("'%s' is not a hex digest", std::string(hex)));
    }
    digest[i] = static_cast<uint8_t>(high * 16 + low);
  }
  return digest;
}

}  // namespace baton
