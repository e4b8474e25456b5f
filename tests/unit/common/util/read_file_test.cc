// read_file: the one read-a-whole-file helper; its errors name the file;
// read_private_file refuses a secret that others, or a group not ours, can read.
#include "common/util/read_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_format.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

TEST(ReadFileTest, ReturnsTheBytes) {
  const std::string path = ::testing::TempDir() + "/read_file_" + std::to_string(getpid());
  {
    std::ofstream out(path, std::ios::binary);
    out << std::string("a\0b\nc", 5);
  }
  absl::StatusOr<std::string> text = read_file(path, "the test file");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, std::string("a\0b\nc", 5));
  std::remove(path.c_str());
}

TEST(ReadFileTest, AMissingFileIsNotFoundNamingWhatAndThePath) {
  absl::StatusOr<std::string> text = read_file("/nonexistent/baton/key.pem", "the TLS key");
  EXPECT_EQ(text.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(text.status().message(), "cannot read the TLS key /nonexistent/baton/key.pem");
}

TEST(ReadFileTest, APrivateFileThatOthersOrAnotherGroupCanReadIsRefusedWithItsMode) {
  const std::string path = ::testing::TempDir() + "/read_private_file_" + std::to_string(getpid());
  {
    std::ofstream out(path, std::ios::binary);
    out << "secret";
  }
  // Others: refused whatever the group.
  for (mode_t mode : {0604, 0644, 0601}) {
    ASSERT_EQ(chmod(path.c_str(), mode), 0);
    absl::StatusOr<std::string> refused = read_private_file(path, "--state-password-file");
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << std::oct << mode;
    EXPECT_THAT(refused.status().message(), HasSubstr(absl::StrFormat("mode %04o", mode)));
    EXPECT_THAT(refused.status().message(), HasSubstr("chmod 600"));
  }
  // Our own group may read it (a Kubernetes Secret under the pod's fsGroup),
  // never write it.
  ASSERT_EQ(chown(path.c_str(), static_cast<uid_t>(-1), getegid()), 0);
  ASSERT_EQ(chmod(path.c_str(), 0660), 0);
  EXPECT_EQ(read_private_file(path, "--state-password-file").status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(chmod(path.c_str(), 0640), 0);
  EXPECT_TRUE(read_private_file(path, "--state-password-file").ok());
  // Another group may not read it (only root can give a file away: elsewhere
  // the refusal of others above is what this test checks).
  if (chown(path.c_str(), static_cast<uid_t>(-1), getegid() + 4242) == 0) {
    absl::StatusOr<std::string> refused = read_private_file(path, "--state-password-file");
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(refused.status().message(), HasSubstr("a group other than this process's"));
  }
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  absl::StatusOr<std::string> text = read_private_file(path, "--state-password-file");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "secret");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace baton
