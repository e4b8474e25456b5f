#include "common/util/hmac.h"

#include <array>
#include <cstdint>
#include <cstring>

namespace baton {

Digest256 hmac_sha256(std::string_view key, std::string_view message) {
  constexpr size_t kBlockBytes = 64;  // SHA-256's block size
  std::array<uint8_t, kBlockBytes> block{};
  if (key.size() > kBlockBytes) {
    const Digest256 hashed = sha256(key);
    std::memcpy(block.data(), hashed.data(), hashed.size());
  } else {
    std::memcpy(block.data(), key.data(), key.size());
  }
  std::array<uint8_t, kBlockBytes> inner_pad{};
  std::array<uint8_t, kBlockBytes> outer_pad{};
  for (size_t i = 0; i < kBlockBytes; ++i) {
    inner_pad[i] = static_cast<uint8_t>(block[i] ^ 0x36);
    outer_pad[i] = static_cast<uint8_t>(block[i] ^ 0x5c);
  }
  Sha256 inner;
  inner.update(inner_pad.data(), inner_pad.size());
  inner.update(message);
  const Digest256 inner_digest = inner.finish();
  Sha256 outer;
  outer.update(outer_pad.data(), outer_pad.size());
  outer.update(inner_digest.data(), inner_digest.size());
  return outer.finish();
}

}  // namespace baton
