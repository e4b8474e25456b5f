// How a `baton` command ends (tools/cli/command_status.h) and the shared
// prompt flags (tools/cli/prompt_flags.h). What must hold: the exit code
// comes from one mapping: OK 0, a usage error 2 with its text as is, a
// library status 1 with "baton: MESSAGE" whatever its code (an
// InvalidArgument from the library is not a usage error), exit_status(130)
// prints nothing; the prompt flags give one source, token ids or text, with
// usage errors for a wrong combination or id and failures for a file.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "command_status.h"
#include "common/util/flags.h"
#include "kv_codec_list.h"
#include "prompt_flags.h"

namespace baton::cli {
namespace {

struct Finished {
  int code;
  std::string err;
};

Finished finish(const absl::Status& status) {
  testing::internal::CaptureStderr();
  const int code = finish_command(status);
  return {code, testing::internal::GetCapturedStderr()};
}

TEST(CommandStatusTest, OneMappingFromStatusToExitCode) {
  Finished ok = finish(absl::OkStatus());
  EXPECT_EQ(ok.code, 0);
  EXPECT_EQ(ok.err, "");

  Finished library = finish(absl::InvalidArgumentError("cannot open GGUF file 'x'"));
  EXPECT_EQ(library.code, 1) << "a library's InvalidArgument is a failure, not a usage error";
  EXPECT_EQ(library.err, "baton: cannot open GGUF file 'x'\n");

  Finished usage = finish(usage_error("pack build", "give exactly one pack FILE"));
  EXPECT_EQ(usage.code, 2);
  EXPECT_EQ(usage.err, "baton pack build: give exactly one pack FILE\n(see --help)\n");

  Finished interrupted = finish(exit_status(130));
  EXPECT_EQ(interrupted.code, 130);
  EXPECT_EQ(interrupted.err, "") << "the command printed its own report";

  Finished reported = finish(exit_status(1, "baton bench load: 2 sessions lost turns\n"));
  EXPECT_EQ(reported.code, 1);
  EXPECT_EQ(reported.err, "baton bench load: 2 sessions lost turns\n");
}

TEST(CommandStatusTest, TargetErrorsAndPrefixes) {
  Finished missing = finish(target_error("health", absl::NotFoundError("cannot read --api-key-file k")));
  EXPECT_EQ(missing.code, 1);
  EXPECT_EQ(missing.err, "baton health: cannot read --api-key-file k\n");
  EXPECT_EQ(finish(target_error("health", absl::InvalidArgumentError("bad address"))).code, 2);

  const absl::Status prefixed = with_prefix("the model's tokenizer", absl::DataLossError("no vocabulary"));
  EXPECT_EQ(prefixed.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(finish(prefixed).err, "baton: the model's tokenizer: no vocabulary\n");
}

TEST(CommandStatusTest, ParseFlagsAndSubcommandHelp) {
  std::string value;
  FlagSet flags("baton x", "[--name N]", "test");
  flags.add_string("name", &value, "a name", "N");
  EXPECT_FALSE(parse_flags(flags, {"--name", "a"}).has_value());
  EXPECT_EQ(value, "a");

  FlagSet bad("baton x", "", "test");
  std::optional<absl::Status> unknown = parse_flags(bad, {"--bogus"});
  ASSERT_TRUE(unknown.has_value());
  Finished f = finish(*unknown);
  EXPECT_EQ(f.code, 2);
  EXPECT_EQ(f.err, "unknown flag --bogus\n(see --help)\n");

  FlagSet help("baton x", "", "test");
  testing::internal::CaptureStdout();
  std::optional<absl::Status> shown = parse_flags(help, {"--help"});
  EXPECT_NE(testing::internal::GetCapturedStdout().find("baton x"), std::string::npos);
  ASSERT_TRUE(shown.has_value());
  EXPECT_TRUE(shown->ok());

  Finished none = finish(*subcommand_help({}, "usage: baton y a|b\n", /*help_word=*/true));
  EXPECT_EQ(none.code, 2);
  EXPECT_EQ(none.err, "usage: baton y a|b\n");
  EXPECT_FALSE(subcommand_help({"help"}, "usage\n", /*help_word=*/false).has_value());
  EXPECT_FALSE(subcommand_help({"a"}, "usage\n", /*help_word=*/true).has_value());
}

TEST(PromptFlagsTest, OneSourceTokensOrText) {
  PromptFlags tokens{"", "", "1,22,333"};
  absl::StatusOr<PromptInput> read = read_prompt(tokens, "generate", /*required=*/true);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->tokens, (std::vector<int32_t>{1, 22, 333}));
  EXPECT_EQ(read->text, "");

  Finished negative = finish(read_prompt({"", "", "1,-2"}, "generate", true).status());
  EXPECT_EQ(negative.code, 2);
  EXPECT_EQ(negative.err, "baton generate: --prompt-tokens: '-2' is not a token id\n(see --help)\n");

  Finished two = finish(read_prompt({"hi", "", "1"}, "pack build", true).status());
  EXPECT_EQ(two.code, 2);
  EXPECT_EQ(two.err,
            "baton pack build: give exactly one of -p TEXT, --prompt-file F, --prompt-tokens IDS\n(see --help)\n");
  EXPECT_EQ(finish(read_prompt({}, "generate", /*required=*/true).status()).code, 2);
  absl::StatusOr<PromptInput> nothing = read_prompt({}, "generate", /*required=*/false);
  ASSERT_TRUE(nothing.ok());
  EXPECT_TRUE(nothing->text.empty() && nothing->tokens.empty());
  EXPECT_EQ(finish(read_prompt({"a", "b", ""}, "generate", false).status()).err,
            "baton generate: give at most one of -p TEXT, --prompt-file F, --prompt-tokens IDS\n(see --help)\n");
}

TEST(PromptFlagsTest, FilesAreFailuresNotUsageErrors) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("baton-prompt-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "p.txt").string();
  std::ofstream(path) << "In the beginning";
  absl::StatusOr<PromptInput> read = read_prompt({"", path, ""}, "generate", true);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->text, "In the beginning");

  Finished missing = finish(read_prompt({"", (dir / "none.txt").string(), ""}, "generate", true).status());
  EXPECT_EQ(missing.code, 1);
  EXPECT_EQ(missing.err, "baton: cannot read --prompt-file " + (dir / "none.txt").string() + "\n");
  const std::string empty = (dir / "empty.txt").string();
  std::ofstream(empty).flush();
  Finished empty_file = finish(read_prompt({"", empty, ""}, "pack build", true).status());
  EXPECT_EQ(empty_file.code, 1);
  EXPECT_EQ(empty_file.err, "baton: --prompt-file " + empty + " is empty\n");
  std::filesystem::remove_all(dir);
}

TEST(PromptFlagsTest, ShortPromptFlagAndRequestedCodec) {
  EXPECT_EQ(with_prompt_short_flag({"-p", "hi", "--max-tokens", "2"}),
            (Args{"--prompt", "hi", "--max-tokens", "2"}));

  v1::CodecParams bare;
  ASSERT_TRUE(set_requested_codec("int4", &bare).ok());
  EXPECT_EQ(bare.codec(), v1::KV_CODEC_INT4);
  v1::CodecParams full;
  ASSERT_TRUE(set_requested_codec("int8-g32-z3", &full).ok());
  EXPECT_EQ(full.codec(), v1::KV_CODEC_INT8);
  v1::CodecParams bad;
  EXPECT_FALSE(set_requested_codec("int5", &bad).ok());
}

}  // namespace
}  // namespace baton::cli
