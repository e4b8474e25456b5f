// HMAC-SHA256 against RFC 4231's test vectors, and the loopback predicate
// that decides where plaintext and unauthenticated listeners are allowed.
#include <string>

#include <gtest/gtest.h>

#include "common/rpc/loopback.h"
#include "common/util/hmac.h"

namespace baton {
namespace {

std::string hmac_hex(const std::string& key, const std::string& message) { return to_hex(hmac_sha256(key, message)); }

TEST(HmacSha256Test, MatchesRfc4231TestVectors) {
  // Test case 1: a 20-byte key.
  EXPECT_EQ(hmac_hex(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2: a key shorter than the output.
  EXPECT_EQ(hmac_hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 3: combined key and data of repeated bytes.
  EXPECT_EQ(hmac_hex(std::string(20, '\xaa'), std::string(50, '\xdd')),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // Test case 4: a 25-byte counting key.
  std::string counting;
  for (int i = 1; i <= 25; ++i) counting.push_back(static_cast<char>(i));
  EXPECT_EQ(hmac_hex(counting, std::string(50, '\xcd')),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Test cases 6 and 7: a key longer than SHA-256's block is hashed first.
  EXPECT_EQ(hmac_hex(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(hmac_hex(std::string(131, '\xaa'),
                     "This is a test using a larger than block-size key and a larger than block-size data. The key "
                     "needs to be hashed before being used by the HMAC algorithm."),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(LoopbackHostTest, AcceptsOnlyLoopbackLiteralsAndLocalhost) {
  EXPECT_TRUE(is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(is_loopback_host("127.1.2.3"));
  EXPECT_TRUE(is_loopback_host("::1"));
  EXPECT_TRUE(is_loopback_host("[::1]"));
  EXPECT_TRUE(is_loopback_host("localhost"));
  EXPECT_TRUE(is_loopback_host("LOCALHOST"));
  EXPECT_TRUE(is_loopback_host("::ffff:127.0.0.1"));
}

TEST(LoopbackHostTest, RefusesNamesThatMerelyStartLikeLoopbackAndOtherAddresses) {
  EXPECT_FALSE(is_loopback_host("127.attacker.example"));
  EXPECT_FALSE(is_loopback_host("127.0.0.1.attacker.example"));
  EXPECT_FALSE(is_loopback_host("localhost.attacker.example"));
  EXPECT_FALSE(is_loopback_host("0.0.0.0"));
  EXPECT_FALSE(is_loopback_host("::"));
  EXPECT_FALSE(is_loopback_host("[::]"));
  EXPECT_FALSE(is_loopback_host("10.0.0.1"));
  EXPECT_FALSE(is_loopback_host("192.168.1.2"));
  EXPECT_FALSE(is_loopback_host("example.com"));
  EXPECT_FALSE(is_loopback_host("::2"));
  EXPECT_FALSE(is_loopback_host("128.0.0.1"));
  EXPECT_FALSE(is_loopback_host("::ffff:10.0.0.1"));
  EXPECT_FALSE(is_loopback_host("127.1"));  // not a dotted quad: resolvers differ on it
  EXPECT_FALSE(is_loopback_host(""));
  EXPECT_FALSE(is_loopback_host("[]"));
}

}  // namespace
}  // namespace baton
