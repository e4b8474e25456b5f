// AtomicFile: the one temp + fsync + rename + fsync-of-the-directory writer.
// The target holds its old content or the whole new one, never a part.
#include "common/util/atomic_file.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace baton {
namespace {

using ::testing::HasSubstr;

// Counts commit()'s fsync calls, and fails the fsync or rename when asked.
struct FakeSyscalls {
  static inline int fsyncs = 0;
  static inline bool fail_fsync = false;
  static inline bool fail_rename = false;
  static int fsync(int fd) {
    ++fsyncs;
    if (fail_fsync) {
      errno = EIO;
      return -1;
    }
    return ::fsync(fd);
  }
  static int rename(const char* from, const char* to) {
    if (fail_rename) {
      errno = EXDEV;
      return -1;
    }
    return std::rename(from, to);
  }
};

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/atomic_file_" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    FakeSyscalls::fsyncs = 0;
    FakeSyscalls::fail_fsync = false;
    FakeSyscalls::fail_rename = false;
    real_ = set_atomic_file_syscalls_for_testing({&FakeSyscalls::fsync, &FakeSyscalls::rename});
  }
  void TearDown() override {
    set_atomic_file_syscalls_for_testing(real_);
    std::filesystem::remove_all(dir_);
  }
  static std::string contents(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  // Names in dir_ (the target and any temp file left behind).
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) out.push_back(entry.path().filename());
    return out;
  }

  std::string dir_;
  AtomicFileSyscalls real_{};
};

TEST_F(AtomicFileTest, CommitFsyncsTheFileAndItsDirectoryAndRenamesOntoTheTarget) {
  const std::string path = dir_ + "/out.bin";
  absl::StatusOr<std::unique_ptr<AtomicFile>> file = AtomicFile::create(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT((*file)->temp_path(), HasSubstr(path + std::string(kAtomicFileTempInfix)));
  ASSERT_TRUE((*file)->write("hello ").ok());
  ASSERT_TRUE((*file)->write(std::string(3 << 20, 'x')).ok());  // past the buffer: straight to the file
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "the target appears only at commit";
  ASSERT_TRUE((*file)->commit().ok());
  EXPECT_EQ(FakeSyscalls::fsyncs, 2) << "one fsync of the file, one of its directory";
  EXPECT_EQ((*file)->bytes(), 6u + (3u << 20));
  EXPECT_EQ(contents(path), "hello " + std::string(3 << 20, 'x'));
  struct stat info {};
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  file->reset();
  EXPECT_EQ(names(), std::vector<std::string>{"out.bin"}) << "no temp file left";
}

// A failure at commit (`fail`: which call fails) keeps the old content and
// removes the temp file; the error says what failed on which path.
TEST_F(AtomicFileTest, FailedFsyncOrRenameLeavesTheOldFileAndNoTemp) {
  const std::string path = dir_ + "/keep.bin";
  for (bool* fail : {&FakeSyscalls::fail_fsync, &FakeSyscalls::fail_rename}) {
    ASSERT_TRUE(write_file_atomically(path, "old").ok());
    *fail = true;
    const absl::Status status = write_file_atomically(path, "new content");
    *fail = false;
    EXPECT_FALSE(status.ok());
    const std::string what = fail == &FakeSyscalls::fail_fsync ? "fsync " : "renaming ";
    EXPECT_THAT(std::string(status.message()), HasSubstr(what + path + ".tmp."));
    EXPECT_EQ(contents(path), "old");
    EXPECT_EQ(names(), std::vector<std::string>{"keep.bin"});
  }
}

TEST_F(AtomicFileTest, DestroyedWithoutCommitRemovesTheTemp) {
  const std::string path = dir_ + "/never.bin";
  {
    absl::StatusOr<std::unique_ptr<AtomicFile>> file = AtomicFile::create(path);
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE((*file)->write("partial").ok());
  }
  EXPECT_TRUE(names().empty());
}

TEST_F(AtomicFileTest, SharedModeFollowsTheUmask) {
  const mode_t old_umask = ::umask(022);
  const std::string path = dir_ + "/model.gguf";
  absl::Status status = write_file_atomically(path, "GGUF", AtomicFileMode::kShared);
  ::umask(old_umask);
  ASSERT_TRUE(status.ok()) << status;
  struct stat info {};
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0644u);
}

TEST_F(AtomicFileTest, UncreatableTempNamesThePath) {
  absl::Status status = write_file_atomically(dir_ + "/missing/out.bin", "x");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr("creating " + dir_ + "/missing/out.bin.tmp."));
}

}  // namespace
}  // namespace baton
