// The edge's cloud session keys (edge_decode/link/cloud_session_key.h): keyed,
// stable across restarts through the secret file, refused when the file is
// readable by others.
#include <sys/stat.h>

#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "common/util/hmac.h"
#include "edge_decode/link/cloud_session_key.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

TEST(CloudSessionKeyTest, KeyIsTheHexHmacOfTheIdAndCreatedTimeUnderTheSecret) {
  const CloudSessionKeys keys = CloudSessionKeys::FromSecret(std::string(32, 'k'));
  const std::string key = keys.key_for("alice", 1700000000000);
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(key, to_hex(hmac_sha256(std::string(32, 'k'), "baton-cloud-session/1\n5:alice\n1700000000000")));
  EXPECT_NE(key, keys.key_for("alice", 1700000000001));  // recreated session: a new key
  EXPECT_NE(key, keys.key_for("bob", 1700000000000));
  EXPECT_NE(key, CloudSessionKeys::FromSecret(std::string(32, 'j')).key_for("alice", 1700000000000));
}

TEST(CloudSessionKeyTest, PersistentSecretIsCreatedOwnerOnlyAndReusedAfterARestart) {
  const std::string path = testing::make_temp_dir("cloud-session-key") + "/cloud-session.secret";
  absl::StatusOr<CloudSessionKeys> first = CloudSessionKeys::Persistent(path);
  ASSERT_TRUE(first.ok()) << first.status();
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 32);
  absl::StatusOr<CloudSessionKeys> second = CloudSessionKeys::Persistent(path);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(first->key_for("s", 1), second->key_for("s", 1));
  // Two ephemeral secrets differ (32 random bytes each).
  EXPECT_NE(CloudSessionKeys::Ephemeral()->key_for("s", 1), CloudSessionKeys::Ephemeral()->key_for("s", 1));

  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  absl::StatusOr<CloudSessionKeys> exposed = CloudSessionKeys::Persistent(path);
  ASSERT_FALSE(exposed.ok());
  EXPECT_EQ(exposed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(exposed.status().message().find("0644"), std::string::npos) << exposed.status();
}

}  // namespace
}  // namespace baton
