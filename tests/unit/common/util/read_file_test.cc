// read_file: the one read-a-whole-file helper; its errors name the file;
// read_private_file refuses a secret that group or others can read.
#include "common/util/read_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

TEST(ReadFileTest, APrivateFileThatGroupOrOthersCanReadIsRefusedWithItsMode) {
  const std::string path = ::testing::TempDir() + "/read_private_file_" + std::to_string(getpid());
  {
    std::ofstream out(path, std::ios::binary);
    out << "secret";
  }
  ASSERT_EQ(chmod(path.c_str(), 0640), 0);
  absl::StatusOr<std::string> refused = read_private_file(path, "--state-password-file");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("mode 0640"));
  EXPECT_THAT(refused.status().message(), HasSubstr("chmod 600"));
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  absl::StatusOr<std::string> text = read_private_file(path, "--state-password-file");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "secret");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace baton
