// API keys (common/rpc/api_keys.h),
// session ownership ids (edge_decode/store/session_owner.h) and the client channel
// builder (common/rpc/channel_options.h).
//
// What must hold: a key file is read one key per line with '#' comments; a
// group/world-readable file, a short key or a file without keys is refused
// with the file named (and, for the mode, `chmod 600`); a key matches only
// itself (no prefix, no neighbour), and its owner tag is stable and not the
// key; only IP literals of loopback and "localhost" count as loopback; a
// stored session id belongs to one owner only.
#include <sys/stat.h>

#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "common/rpc/api_keys.h"
#include "common/rpc/channel_options.h"
#include "edge_decode/store/session.h"
#include "edge_decode/store/session_owner.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

std::string write_file(const std::string& name, const std::string& text, mode_t mode) {
  static const std::string dir = testing::make_temp_dir("api-keys");
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  EXPECT_EQ(::chmod(path.c_str(), mode), 0);
  return path;
}

constexpr char kAlice[] = "alice-key-0123456789";
constexpr char kBob[] = "bob-key-0123456789ab";

TEST(ApiKeySetTest, ReadsOneKeyPerLineSkippingCommentsAndBlanks) {
  const std::string path =
      write_file("keys", std::string("# team keys\n\n  ") + kAlice + "  \n# " + "old-key-9999999999999\n" + kBob + "\n",
                 0600);
  absl::StatusOr<ApiKeySet> keys = ApiKeySet::LoadFile(path);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->size(), 2u);
  EXPECT_EQ(keys->match(kAlice), api_key_owner_tag(kAlice));
  EXPECT_EQ(keys->match(kBob), api_key_owner_tag(kBob));
  EXPECT_FALSE(keys->match("old-key-9999999999999").has_value()) << "a commented-out key must not match";
}

TEST(ApiKeySetTest, RefusesAGroupOrWorldReadableFileNamingItsModeAndTheFix) {
  for (const mode_t mode : {mode_t{0640}, mode_t{0604}, mode_t{0644}, mode_t{0660}}) {
    const std::string path = write_file("open-keys", std::string(kAlice) + "\n", mode);
    absl::StatusOr<ApiKeySet> keys = ApiKeySet::LoadFile(path);
    ASSERT_FALSE(keys.ok()) << std::oct << mode;
    EXPECT_EQ(keys.status().code(), absl::StatusCode::kFailedPrecondition);
    const std::string message(keys.status().message());
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find("chmod 600"), std::string::npos) << message;
    char octal[8];
    std::snprintf(octal, sizeof(octal), "%04o", static_cast<unsigned>(mode));
    EXPECT_NE(message.find(octal), std::string::npos) << message;
  }
  EXPECT_TRUE(ApiKeySet::LoadFile(write_file("owner-only", std::string(kAlice) + "\n", 0400)).ok());
}

TEST(ApiKeySetTest, RefusesShortKeysEmptyFilesAndMissingFilesByName) {
  absl::StatusOr<ApiKeySet> short_key = ApiKeySet::LoadFile(write_file("short", "# c\nshort-key\n", 0600));
  ASSERT_FALSE(short_key.ok());
  EXPECT_EQ(short_key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_key.status().message().find(":2: the key has 9 characters; at least 16"), std::string::npos)
      << short_key.status();
  EXPECT_EQ(short_key.status().message().find("short-key"), std::string::npos) << "the key itself must not be echoed";
  absl::StatusOr<ApiKeySet> empty = ApiKeySet::LoadFile(write_file("empty", "# nothing\n\n", 0600));
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<ApiKeySet> missing = ApiKeySet::LoadFile("/nonexistent/keys");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/keys"), std::string::npos);
  EXPECT_FALSE(ApiKeySet::FromKeys({"with space in the key 123"}).ok());
}

TEST(ApiKeySetTest, AKeyMatchesOnlyItselfNotAPrefixOrANeighbour) {
  absl::StatusOr<ApiKeySet> keys = ApiKeySet::FromKeys({kAlice});
  ASSERT_TRUE(keys.ok());
  const std::string alice = kAlice;
  EXPECT_TRUE(keys->match(alice).has_value());
  EXPECT_FALSE(keys->match(alice.substr(0, alice.size() - 1)).has_value());
  EXPECT_FALSE(keys->match(alice + "x").has_value());
  std::string neighbour = alice;
  neighbour.back() ^= 1;
  EXPECT_FALSE(keys->match(neighbour).has_value());
  EXPECT_FALSE(keys->match("").has_value());
}

TEST(ApiKeySetTest, ConstantTimeEqualComparesWholeStrings) {
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("xbc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abcd"));
}

TEST(ApiKeySetTest, OwnerTagIsStableShortAndNotTheKey) {
  const std::string tag = api_key_owner_tag(kAlice);
  EXPECT_EQ(tag, api_key_owner_tag(kAlice));
  EXPECT_NE(tag, api_key_owner_tag(kBob));
  EXPECT_EQ(tag.size(), kSessionOwnerPrefixChars - 1);
  EXPECT_EQ(tag.find(kAlice), std::string::npos);
  EXPECT_EQ(tag[0], 'o');
}

TEST(ApiKeySetTest, BearerTokenParsesTheSchemeCaseInsensitively) {
  EXPECT_EQ(bearer_token("Bearer abc"), "abc");
  EXPECT_EQ(bearer_token("bearer  abc "), "abc");
  EXPECT_FALSE(bearer_token("Basic abc").has_value());
  EXPECT_FALSE(bearer_token("Bearer").has_value());
  EXPECT_FALSE(bearer_token("abc").has_value());
}


TEST(SessionOwnerTest, AStoredSessionIdBelongsToOneOwnerOnly) {
  const std::string alice = api_key_owner_tag(kAlice);
  const std::string bob = api_key_owner_tag(kBob);
  const std::string stored = owned_session_id(alice, "chat-1");
  EXPECT_NE(stored, "chat-1");
  EXPECT_TRUE(is_valid_session_id(stored));
  EXPECT_EQ(client_session_id(alice, stored), "chat-1");
  EXPECT_FALSE(client_session_id(bob, stored).has_value());
  EXPECT_FALSE(client_session_id(alice, "chat-1").has_value()) << "a session stored without owner is no key's";
  // Without keys: ids as given, every session visible.
  EXPECT_EQ(owned_session_id("", "chat-1"), "chat-1");
  EXPECT_EQ(client_session_id("", stored), stored);
  // The longest client id still makes a valid stored id.
  const std::string longest(kMaxClientSessionIdChars, 'x');
  EXPECT_TRUE(is_valid_session_id(owned_session_id(alice, longest)));
  EXPECT_FALSE(is_valid_session_id(longest + "x", kMaxClientSessionIdChars));
}

TEST(ChannelSecurityTest, ErrorsNameTheFlagAndPath) {
  ChannelSecurityOptions options;
  options.token_path = "/nonexistent/token";
  options.token_flag = "--api-key-file";
  absl::StatusOr<ChannelSecurity> security = make_channel_security(options);
  ASSERT_FALSE(security.ok());
  EXPECT_NE(security.status().message().find("--api-key-file: cannot read '/nonexistent/token'"), std::string::npos)
      << security.status();
  options = {};
  options.cert_path = "c.pem";
  EXPECT_EQ(make_channel_security(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.key_path = "k.pem";
  EXPECT_NE(make_channel_security(options).status().message().find("--cloud-cert needs --cloud-ca"),
            std::string::npos);
  options = {};
  options.token_path = write_file("token", "# a comment\n  the-token  \nsecond\n", 0600);
  security = make_channel_security(options);
  ASSERT_TRUE(security.ok()) << security.status();
  EXPECT_EQ(security->bearer_token, "the-token");
  EXPECT_FALSE(security->tls);
}

}  // namespace
}  // namespace baton
