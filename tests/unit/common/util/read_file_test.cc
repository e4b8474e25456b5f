// read_file: the one read-a-whole-file helper; its errors name the file.
#include "common/util/read_file.h"

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

}  // namespace
}  // namespace baton
