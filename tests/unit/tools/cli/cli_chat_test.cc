// `baton chat` pieces without a connection (tools/cli/chat_session.h) and the
// CLI's default server addresses (tools/cli/cli_defaults.h). What must hold:
// typed lines mean what /help says; /save names round-trip through the names
// file; --edge/--cloud resolve flag > environment > built-in default, and
// --help shows the effective default and the variable.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <unistd.h>

#include "chat_session.h"
#include "cli_defaults.h"
#include "common/util/flags.h"

namespace baton::cli {
namespace {

using ::testing::HasSubstr;

TEST(ChatInputTest, MessagesCommandsAndEscapes) {
  EXPECT_EQ(parse_chat_input("hello there\n").kind, ChatInputKind::kMessage);
  EXPECT_EQ(parse_chat_input("hello there\r\n").text, "hello there");
  EXPECT_EQ(parse_chat_input("   \n").kind, ChatInputKind::kEmpty);
  EXPECT_EQ(parse_chat_input("/reset").kind, ChatInputKind::kReset);
  EXPECT_EQ(parse_chat_input("/stats\n").kind, ChatInputKind::kStats);
  EXPECT_EQ(parse_chat_input("/help").kind, ChatInputKind::kHelp);
  EXPECT_EQ(parse_chat_input("/quit").kind, ChatInputKind::kQuit);
  EXPECT_EQ(parse_chat_input("/exit").kind, ChatInputKind::kQuit);
  const ChatInput save = parse_chat_input("/save  my-chat.1 ");
  EXPECT_EQ(save.kind, ChatInputKind::kSave);
  EXPECT_EQ(save.text, "my-chat.1");
  // "//" sends a line that starts with "/".
  const ChatInput escaped = parse_chat_input("//usr/bin is a path");
  EXPECT_EQ(escaped.kind, ChatInputKind::kMessage);
  EXPECT_EQ(escaped.text, "/usr/bin is a path");
}

TEST(ChatInputTest, BadCommandsSayWhatIsWrong) {
  EXPECT_EQ(parse_chat_input("/save").kind, ChatInputKind::kError);
  EXPECT_THAT(parse_chat_input("/save").text, HasSubstr("/save needs a NAME"));
  EXPECT_THAT(parse_chat_input("/save a/b").text, HasSubstr("is not 1..128 characters of [A-Za-z0-9._-]"));
  EXPECT_THAT(parse_chat_input("/reset now").text, HasSubstr("/reset takes no argument"));
  const ChatInput typo = parse_chat_input("/stast");
  EXPECT_EQ(typo.kind, ChatInputKind::kError);
  EXPECT_THAT(typo.text, HasSubstr("unknown command /stast; did you mean /stats?"));
}

TEST(ChatSessionIdTest, FreshValidIds) {
  std::set<std::string> ids;
  for (int i = 0; i < 50; ++i) {
    const std::string id = new_chat_session_id();
    EXPECT_THAT(id, ::testing::MatchesRegex("chat-[0-9a-f]{12}"));
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 50u);
}

TEST(ChatNamesTest, SaveLoadResolve) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("baton_chat_names_" + std::to_string(::getpid())))
                              .string();
  const std::string path = dir + "/sub/chat-names";
  EXPECT_TRUE(load_chat_names(path)->empty());  // no file yet: no names
  ASSERT_TRUE(save_chat_name(path, "work", "chat-000000000001").ok());
  ASSERT_TRUE(save_chat_name(path, "home", "chat-000000000002").ok());
  ASSERT_TRUE(save_chat_name(path, "work", "chat-000000000003").ok());  // replaces
  absl::StatusOr<std::map<std::string, std::string>> names = load_chat_names(path);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(names->size(), 2u);
  EXPECT_EQ(resolve_chat_session(*names, "work"), "chat-000000000003");
  EXPECT_EQ(resolve_chat_session(*names, "home"), "chat-000000000002");
  EXPECT_EQ(resolve_chat_session(*names, "chat-abc"), "chat-abc");  // not a name: an id
  EXPECT_FALSE(save_chat_name(path, "bad name", "x").ok());
  std::ofstream(path, std::ios::app) << "broken\n";
  EXPECT_THAT(std::string(load_chat_names(path).status().message()), HasSubstr(":3: expected 'NAME SESSION_ID'"));
  std::filesystem::remove_all(dir);
}

TEST(ChatNamesTest, PathFollowsBatonHomeThenHome) {
  const char* saved_home = std::getenv("HOME");
  ::setenv("BATON_HOME", "/tmp/bh", 1);
  EXPECT_EQ(chat_names_path(), "/tmp/bh/chat-names");
  ::unsetenv("BATON_HOME");
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(chat_names_path(), "/home/u/.baton/chat-names");
  if (saved_home != nullptr) ::setenv("HOME", saved_home, 1);
}

// --- default addresses ------------------------------------------------------

class DefaultAddressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {kEdgeAddressEnv, kCloudAddressEnv}) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value != nullptr ? std::optional<std::string>(value) : std::nullopt);
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      value ? ::setenv(name, value->c_str(), 1) : ::unsetenv(name);
    }
  }
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

TEST_F(DefaultAddressTest, EnvironmentElseBuiltIn) {
  EXPECT_EQ(default_address(nullptr, "127.0.0.1:7071"), "127.0.0.1:7071");
  EXPECT_EQ(default_address("", "127.0.0.1:7071"), "127.0.0.1:7071");  // empty = unset
  EXPECT_EQ(default_address("10.0.0.2:9000", "127.0.0.1:7071"), "10.0.0.2:9000");
  EXPECT_EQ(default_address_from_env(kEdgeAddressEnv, kDefaultEdgeAddress), "127.0.0.1:7071");
  EXPECT_EQ(std::string(kDefaultCloudAddress), "127.0.0.1:7070");
}

TEST_F(DefaultAddressTest, FlagBeatsEnvironmentBeatsDefault) {
  {
    FlagSet flags("baton x", "", "");
    std::string edge;
    add_edge_address_flag(flags, &edge);
    ASSERT_TRUE(flags.parse(std::vector<std::string>{}).ok());
    EXPECT_EQ(edge, "127.0.0.1:7071");
    EXPECT_THAT(flags.usage(), HasSubstr("default $BATON_EDGE, else 127.0.0.1:7071 (default: 127.0.0.1:7071)"));
  }
  ::setenv(kEdgeAddressEnv, "127.0.0.1:9999", 1);
  ::setenv(kCloudAddressEnv, "127.0.0.1:8888", 1);
  {
    FlagSet flags("baton x", "", "");
    std::string edge, cloud;
    add_edge_address_flag(flags, &edge);
    add_cloud_address_flag(flags, &cloud, "the cloud");
    ASSERT_TRUE(flags.parse(std::vector<std::string>{}).ok());
    EXPECT_EQ(edge, "127.0.0.1:9999");
    EXPECT_EQ(cloud, "127.0.0.1:8888");
    EXPECT_FALSE(flags.is_set("edge"));
    // --help shows the effective default.
    EXPECT_THAT(flags.usage(), HasSubstr("(default: 127.0.0.1:9999)"));
    EXPECT_THAT(flags.usage(), HasSubstr("default $BATON_CLOUD, else 127.0.0.1:7070 (default: 127.0.0.1:8888)"));
  }
  {
    FlagSet flags("baton x", "", "");
    std::string edge;
    add_edge_address_flag(flags, &edge);
    ASSERT_TRUE(flags.parse(std::vector<std::string>{"--edge", "127.0.0.1:1234"}).ok());
    EXPECT_EQ(edge, "127.0.0.1:1234");
    EXPECT_TRUE(flags.is_set("edge"));
  }
}

}  // namespace
}  // namespace baton::cli
