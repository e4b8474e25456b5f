// SHA-256 (OpenSSL EVP underneath): digests for fingerprints and weights.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace baton {

using Digest256 = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, size_t n_bytes);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // Length-prefixed, so that ("ab","c") and ("a","bc") differ.
  void update_field(std::string_view s);
  void update_u64(uint64_t v);
  Digest256 finish();

 private:
  void* ctx_;  // EVP_MD_CTX*
};

Digest256 sha256(std::string_view data);
std::string to_hex(const uint8_t* data, size_t n);
inline std::string to_hex(const Digest256& d) { return to_hex(d.data(), d.size()); }

}  // namespace baton
