#include "common/util/sha256.h"

#include <openssl/evp.h>

#include "common/util/check.h"

namespace baton {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  BATON_CHECK(ctx_ != nullptr);
  BATON_CHECK(EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) == 1);
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::update(const void* data, size_t n_bytes) {
  BATON_CHECK(EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n_bytes) == 1);
}

void Sha256::update_u64(uint64_t v) {
  uint8_t le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(v >> (8 * i));
  update(le, 8);
}

void Sha256::update_field(std::string_view s) {
  update_u64(s.size());
  update(s);
}

Digest256 Sha256::finish() {
  Digest256 out{};
  unsigned int len = 0;
  BATON_CHECK(EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), out.data(), &len) == 1);
  BATON_CHECK(len == out.size());
  return out;
}

Digest256 sha256(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.finish();
}

std::string to_hex(const uint8_t* data, size_t n) {
  static const char* kHex = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kHex[data[i] >> 4];
    s[2 * i + 1] = kHex[data[i] & 15];
  }
  return s;
}

}  // namespace baton
