#include "common/util/flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

namespace baton {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

// A program's configuration with defaults, bound to a FlagSet, as mains do it.
struct TestConfig {
  std::string model;
  std::string listen = "0.0.0.0:50051";
  int64_t threads = 4;
  double temperature = 0.8;
  bool verbose = false;
  bool prefix_cache = true;
  uint64_t memory_budget_bytes = 8ull << 30;
  milliseconds timeout{30'000};
};

class FlagsTest : public ::testing::Test {
 protected:
  FlagsTest() : flags_("prog", "--model FILE [flags] [ARGS...]", "Test program.") {
    flags_.add_string("model", &config_.model, "model file", "FILE");
    flags_.add_string("listen", &config_.listen, "address", "ADDR");
    flags_.add_int64("threads", &config_.threads, "threads");
    flags_.add_double("temperature", &config_.temperature, "sampling temperature");
    flags_.add_bool("verbose", &config_.verbose, "more logs");
    flags_.add_bool("prefix-cache", &config_.prefix_cache, "keep prefixes");
    flags_.add_size("memory-budget", &config_.memory_budget_bytes, "device memory");
    flags_.add_duration("timeout", &config_.timeout, "deadline");
    flags_.enable_config_file();
  }

  absl::Status parse(std::vector<std::string> args) { return flags_.parse(args); }

  TestConfig config_;
  FlagSet flags_;
};

TEST_F(FlagsTest, DefaultsStayWhenNothingIsGiven) {
  ASSERT_TRUE(parse({}).ok());
  EXPECT_EQ(config_.listen, "0.0.0.0:50051");
  EXPECT_EQ(config_.threads, 4);
  EXPECT_EQ(config_.memory_budget_bytes, 8ull << 30);
  EXPECT_EQ(config_.timeout, milliseconds(30'000));
  EXPECT_FALSE(flags_.is_set("threads"));
  EXPECT_FALSE(flags_.help_requested());
}

TEST_F(FlagsTest, EveryTypeParsesWithEqualsAndWithSeparateValue) {
  ASSERT_TRUE(parse({"--model=m.gguf", "--listen", "[::1]:9", "--threads=8", "--temperature",
                     "0.25", "--verbose", "--no-prefix-cache", "--memory-budget", "512MiB",
                     "--timeout=1.5s"})
                  .ok());
  EXPECT_EQ(config_.model, "m.gguf");
  EXPECT_EQ(config_.listen, "[::1]:9");
  EXPECT_EQ(config_.threads, 8);
  EXPECT_DOUBLE_EQ(config_.temperature, 0.25);
  EXPECT_TRUE(config_.verbose);
  EXPECT_FALSE(config_.prefix_cache);
  EXPECT_EQ(config_.memory_budget_bytes, 512ull << 20);
  EXPECT_EQ(config_.timeout, milliseconds(1500));
  EXPECT_TRUE(flags_.is_set("threads"));
  EXPECT_TRUE(flags_.is_set("prefix-cache"));
}

TEST_F(FlagsTest, BoolTakesExplicitValuesOnlyAfterEquals) {
  ASSERT_TRUE(parse({"--verbose=false", "--prefix-cache=yes", "file.txt"}).ok());
  EXPECT_FALSE(config_.verbose);
  EXPECT_TRUE(config_.prefix_cache);
  // A bare bool flag never swallows the next argument.
  EXPECT_THAT(flags_.positional(), ::testing::ElementsAre("file.txt"));
}

TEST_F(FlagsTest, NegativeNumbersAreValuesNotFlags) {
  ASSERT_TRUE(parse({"--threads", "-3", "-7"}).ok());
  EXPECT_EQ(config_.threads, -3);
  EXPECT_THAT(flags_.positional(), ::testing::ElementsAre("-7"));
}

TEST_F(FlagsTest, PositionalsAndDoubleDashAreCollected) {
  ASSERT_TRUE(parse({"a", "--threads=2", "b", "--", "--not-a-flag", "-"}).ok());
  EXPECT_THAT(flags_.positional(), ::testing::ElementsAre("a", "b", "--not-a-flag", "-"));
}

TEST_F(FlagsTest, LastValueWins) {
  ASSERT_TRUE(parse({"--threads=2", "--threads=3"}).ok());
  EXPECT_EQ(config_.threads, 3);
}

TEST_F(FlagsTest, HelpWinsEvenOverBadFlags) {
  ASSERT_TRUE(parse({"--threads=many", "--help"}).ok());
  EXPECT_TRUE(flags_.help_requested());
  EXPECT_EQ(config_.threads, 4);  // nothing assigned
}

TEST_F(FlagsTest, UsageListsFlagsWithDefaults) {
  flags_.require("model");
  std::string usage = flags_.usage();
  EXPECT_THAT(usage, HasSubstr("usage: prog --model FILE [flags] [ARGS...]"));
  EXPECT_THAT(usage, HasSubstr("Test program."));
  EXPECT_THAT(usage, HasSubstr("--model FILE"));
  EXPECT_THAT(usage, HasSubstr("model file (required)"));
  EXPECT_THAT(usage, HasSubstr("(default: 0.0.0.0:50051)"));
  EXPECT_THAT(usage, HasSubstr("--memory-budget SIZE"));
  EXPECT_THAT(usage, HasSubstr("(default: 8GiB)"));
  EXPECT_THAT(usage, HasSubstr("(default: 30s)"));
  EXPECT_THAT(usage, HasSubstr("(default: 0.8)"));
  EXPECT_THAT(usage, HasSubstr("--[no-]prefix-cache"));
  EXPECT_THAT(usage, HasSubstr("--config FILE"));
  EXPECT_THAT(usage, HasSubstr("--help"));
}

TEST_F(FlagsTest, BadValuesNameTheFlagAndTheValue) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--memory-budget=lots"},
       "--memory-budget: cannot parse 'lots' as a size (examples: 512MiB, 8GiB)"},
      {{"--threads", "8x"}, "--threads: cannot parse '8x' as an integer"},
      {{"--threads=99999999999999999999"}, "--threads: cannot parse '99999999999999999999'"},
      {{"--temperature=warm"}, "--temperature: cannot parse 'warm' as a number"},
      {{"--temperature=nan"}, "--temperature: cannot parse 'nan' as a number"},
      {{"--verbose=maybe"}, "--verbose: cannot parse 'maybe' as a bool"},
      {{"--timeout=10"}, "--timeout: cannot parse '10' as a duration (examples: 500ms"},
      {{"--timeout=soon"}, "--timeout: cannot parse 'soon' as a duration"},
      {{"--listen"}, "--listen: missing value (expected ADDR)"},
      {{"--moddel=x"}, "unknown flag --moddel"},
      {{"--no-threads"}, "unknown flag --no-threads"},
      {{"-m", "x"}, "unknown flag '-m'"},
  };
  for (const Case& c : cases) {
    FlagSet flags("prog", "", "");
    TestConfig config;
    flags.add_string("model", &config.model, "model file", "FILE");
    flags.add_string("listen", &config.listen, "address", "ADDR");
    flags.add_int64("threads", &config.threads, "threads");
    flags.add_double("temperature", &config.temperature, "temperature");
    flags.add_bool("verbose", &config.verbose, "more logs");
    flags.add_size("memory-budget", &config.memory_budget_bytes, "device memory");
    flags.add_duration("timeout", &config.timeout, "deadline");
    absl::Status status = flags.parse(c.args);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.args[0];
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message)) << c.args[0];
  }
}

TEST_F(FlagsTest, RequiredFlagMissingOrEmptyIsAnError) {
  flags_.require("model");
  absl::Status status = parse({"--threads=2"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("--model is required: model file"));

  FlagSet flags("prog", "", "");
  std::string model;
  flags.add_string("model", &model, "model file", "FILE");
  flags.require("model");
  status = flags.parse(std::vector<std::string>{"--model="});
  EXPECT_THAT(std::string(status.message()), HasSubstr("--model: value is empty"));
}

// ---------------------------------------------------------------------------
// Sizes and durations
// ---------------------------------------------------------------------------

TEST(ParseSizeTest, UnitsAreBinaryOrDecimalAsWritten) {
  const std::vector<std::pair<std::string, uint64_t>> cases = {
      {"0", 0},
      {"1000", 1000},
      {"17B", 17},
      {"64KiB", 64ull << 10},
      {"512MiB", 512ull << 20},
      {"8GiB", 8ull << 30},
      {"2TiB", 2ull << 40},
      {"8gib", 8ull << 30},
      {"8G", 8ull << 30},
      {"4k", 4096},
      {"1KB", 1000},
      {"3MB", 3'000'000},
      {"2GB", 2'000'000'000},
      {"1TB", 1'000'000'000'000},
      {"1.5GiB", 3ull << 29},
      {"0.5KiB", 512},
      {" 8 GiB ", 8ull << 30},
  };
  for (const auto& [text, bytes] : cases) {
    absl::StatusOr<uint64_t> parsed = parse_size_bytes(text);
    ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status();
    EXPECT_EQ(*parsed, bytes) << text;
  }
}

TEST(ParseSizeTest, RejectsJunkNegativesAndOverflow) {
  for (const char* text : {"", "lots", "-1", "1.2.3", "GiB", "8 GiBs", "1e9", "8Gi", "1EiB"}) {
    absl::StatusOr<uint64_t> parsed = parse_size_bytes(text);
    EXPECT_FALSE(parsed.ok()) << text;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("as a size")) << text;
  }
  absl::StatusOr<uint64_t> huge = parse_size_bytes("20000000TiB");
  ASSERT_FALSE(huge.ok());
  EXPECT_THAT(std::string(huge.status().message()), HasSubstr("too large"));
  EXPECT_FALSE(parse_size_bytes("99999999999999999999999").ok());
}

TEST(ParseSizeTest, FormatRoundTrips) {
  EXPECT_EQ(format_size_bytes(0), "0");
  EXPECT_EQ(format_size_bytes(8ull << 30), "8GiB");
  EXPECT_EQ(format_size_bytes(1536ull << 20), "1536MiB");
  EXPECT_EQ(format_size_bytes(1000), "1000");
  EXPECT_EQ(format_size_bytes(3ull << 40), "3TiB");
  for (uint64_t bytes : {0ull, 1ull, 1000ull, 4096ull, 512ull << 20, 3ull << 40}) {
    EXPECT_EQ(*parse_size_bytes(format_size_bytes(bytes)), bytes);
  }
}

TEST(ParseDurationTest, Units) {
  EXPECT_EQ(*parse_duration("500ms"), milliseconds(500));
  EXPECT_EQ(*parse_duration("30s"), milliseconds(30'000));
  EXPECT_EQ(*parse_duration("1.5s"), milliseconds(1'500));
  EXPECT_EQ(*parse_duration("5m"), milliseconds(300'000));
  EXPECT_EQ(*parse_duration("2min"), milliseconds(120'000));
  EXPECT_EQ(*parse_duration("2h"), milliseconds(7'200'000));
  EXPECT_EQ(*parse_duration("0"), milliseconds(0));
  EXPECT_EQ(*parse_duration("0.4ms"), milliseconds(0));  // rounded to whole ms
}

TEST(ParseDurationTest, RejectsMissingUnitsJunkAndOverflow) {
  for (const char* text : {"", "10", "soon", "-5s", "5 days", "1us", "s"}) {
    absl::StatusOr<milliseconds> parsed = parse_duration(text);
    EXPECT_FALSE(parsed.ok()) << text;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("as a duration")) << text;
  }
  EXPECT_THAT(std::string(parse_duration("999999999999999h").status().message()),
              HasSubstr("too long"));
}

TEST(ParseDurationTest, FormatRoundTrips) {
  EXPECT_EQ(format_duration(milliseconds(0)), "0");
  EXPECT_EQ(format_duration(milliseconds(250)), "250ms");
  EXPECT_EQ(format_duration(milliseconds(30'000)), "30s");
  EXPECT_EQ(format_duration(milliseconds(90'000)), "90s");
  EXPECT_EQ(format_duration(milliseconds(120'000)), "2m");
  EXPECT_EQ(format_duration(milliseconds(3'600'000)), "1h");
  for (int64_t ms : {0, 1, 999, 1500, 60'000, 7'200'000}) {
    EXPECT_EQ(*parse_duration(format_duration(milliseconds(ms))), milliseconds(ms));
  }
}

// ---------------------------------------------------------------------------
// Config file
// ---------------------------------------------------------------------------

class ConfigFileTest : public FlagsTest {
 protected:
  std::string write_config(const std::string& text) {
    std::string path = (std::filesystem::temp_directory_path() /
                        ("baton_flags_test_" + std::to_string(::getpid()) + "_" +
                         ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                         ".conf"))
                           .string();
    std::ofstream(path) << text;
    paths_.push_back(path);
    return path;
  }
  ~ConfigFileTest() override {
    for (const std::string& path : paths_) std::filesystem::remove(path);
  }
  std::vector<std::string> paths_;
};

TEST_F(ConfigFileTest, FileSetsFlagsAndCommandLineWins) {
  std::string path = write_config(
      "# edge settings\n"
      "\n"
      "model = /models/a.gguf   # trailing comment\n"
      "threads=6\n"
      "memory-budget = 2GiB\n"
      "verbose = true\n"
      "listen = \"127.0.0.1:7000\"\n"
      "timeout = 5s\n");
  // The command line wins whether it comes before or after --config.
  ASSERT_TRUE(parse({"--threads=12", "--config", path, "--timeout=1s"}).ok());
  EXPECT_EQ(config_.model, "/models/a.gguf");
  EXPECT_EQ(config_.threads, 12);
  EXPECT_EQ(config_.memory_budget_bytes, 2ull << 30);
  EXPECT_TRUE(config_.verbose);
  EXPECT_EQ(config_.listen, "127.0.0.1:7000");
  EXPECT_EQ(config_.timeout, milliseconds(1000));
  EXPECT_TRUE(flags_.is_set("model"));
}

TEST_F(ConfigFileTest, FileSatisfiesRequiredFlags) {
  flags_.require("model");
  std::string path = write_config("model = m.gguf\n");
  ASSERT_TRUE(parse({"--config=" + path}).ok());
  EXPECT_EQ(config_.model, "m.gguf");
}

TEST_F(ConfigFileTest, ErrorsNameFileLineFlagAndValue) {
  std::string path = write_config("threads = 2\nmemory-budget = lots\n");
  absl::Status status = parse({"--config", path});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(path + ":2: --memory-budget: cannot parse 'lots' as a size"));
}

TEST_F(ConfigFileTest, UnknownKeysAndMalformedLinesAreErrors) {
  std::string unknown = write_config("colour = blue\n");
  EXPECT_THAT(std::string(parse({"--config", unknown}).message()),
              HasSubstr(":1: unknown flag 'colour'"));

  std::string malformed = write_config("\n\nthreads 4\n");
  FlagSet flags("prog", "", "");
  int64_t threads = 0;
  flags.add_int64("threads", &threads, "threads");
  flags.enable_config_file();
  EXPECT_THAT(std::string(flags.parse(std::vector<std::string>{"--config", malformed}).message()),
              HasSubstr(":3: expected 'name = value'"));
}

TEST_F(ConfigFileTest, MissingFileIsAnError) {
  absl::Status status = parse({"--config", "/nonexistent/baton.conf"});
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("--config: cannot open '/nonexistent/baton.conf'"));
}

// ---------------------------------------------------------------------------
// parse_command_line (what mains call)
// ---------------------------------------------------------------------------

std::string read_stream(std::FILE* stream) {
  std::rewind(stream);
  std::string text;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), stream)) > 0) text.append(buffer, n);
  return text;
}

TEST(ParseCommandLineTest, HelpPrintsUsageAndExitsZero) {
  FlagSet flags("baton-test", "--model FILE", "Does tests.");
  std::string model;
  flags.add_string("model", &model, "model file", "FILE");
  flags.require("model");
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  const char* argv[] = {"/usr/bin/baton-test", "--help"};
  EXPECT_EQ(parse_command_line(flags, 2, argv, out, err), 0);
  EXPECT_THAT(read_stream(out), HasSubstr("usage: baton-test --model FILE"));
  EXPECT_EQ(read_stream(err), "");
  std::fclose(out);
  std::fclose(err);
}

TEST(ParseCommandLineTest, ErrorsPrintOneLineAndExitTwo) {
  FlagSet flags("baton-test", "--model FILE", "Does tests.");
  std::string model;
  flags.add_string("model", &model, "model file", "FILE");
  flags.require("model");
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  const char* argv[] = {"baton-test"};
  EXPECT_EQ(parse_command_line(flags, 1, argv, out, err), 2);
  std::string error = read_stream(err);
  EXPECT_EQ(error,
            "baton-test: --model is required: model file (see baton-test --help)\n");
  EXPECT_EQ(read_stream(out), "");
  std::fclose(out);
  std::fclose(err);
}

TEST(ParseCommandLineTest, SuccessReturnsNullopt) {
  FlagSet flags("baton-test", "", "");
  std::string model;
  flags.add_string("model", &model, "model file", "FILE");
  const char* argv[] = {"baton-test", "--model", "x"};
  EXPECT_EQ(parse_command_line(flags, 3, argv), std::nullopt);
  EXPECT_EQ(model, "x");
}

// ---------------------------------------------------------------------------
// host:port
// ---------------------------------------------------------------------------

TEST(ParseHostPortTest, AcceptsNamesIpv4AndBracketedIpv6) {
  const std::vector<std::tuple<std::string, std::string, int>> cases = {
      {"localhost:50051", "localhost", 50051},
      {"0.0.0.0:0", "0.0.0.0", 0},
      {"prefill.baton.svc.cluster.local:443", "prefill.baton.svc.cluster.local", 443},
      {"my_host-1:65535", "my_host-1", 65535},
      {"[::1]:50051", "::1", 50051},
      {"[::]:8080", "::", 8080},
      {"[fe80::1%eth0]:9", "fe80::1%eth0", 9},
      {"[::ffff:10.0.0.1]:1", "::ffff:10.0.0.1", 1},
  };
  for (const auto& [address, host, port] : cases) {
    absl::StatusOr<std::pair<std::string, int>> parsed = parse_host_port(address);
    ASSERT_TRUE(parsed.ok()) << address << ": " << parsed.status();
    EXPECT_EQ(parsed->first, host) << address;
    EXPECT_EQ(parsed->second, port) << address;
  }
}

TEST(ParseHostPortTest, RejectsWithAReason) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "address is empty"},
      {"localhost", "no port"},
      {":50051", "no host"},
      {"localhost:", "no port after ':'"},
      {"localhost:http", "port 'http' is not a number"},
      {"localhost:-1", "port '-1' is not a number"},
      {"localhost:65536", "port 65536 is out of range"},
      {"localhost:1234567", "is not a number in 0-65535"},
      {"::1:50051", "IPv6 addresses go in brackets"},
      {"[::1]50051", "expected ':PORT' after ']'"},
      {"[::1:50051", "missing ']'"},
      {"[localhost]:1", "brackets are for IPv6 addresses only"},
      {"[::g]:1", "is not an IPv6 address"},
      {"bad host:1", "'bad host' is not a valid host name"},
      {"http://x:1", "drop the scheme"},
      {"x/y:1", "'x/y' is not a valid host name"},
  };
  for (const auto& [address, reason] : cases) {
    absl::StatusOr<std::pair<std::string, int>> parsed = parse_host_port(address);
    ASSERT_FALSE(parsed.ok()) << address;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(reason)) << address;
    if (!address.empty()) {
      EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("'" + address + "'"));
    }
  }
}

}  // namespace
// ---------------------------------------------------------------------------
// Mistyped flags and negative bool names (issue 16)
// ---------------------------------------------------------------------------

TEST_F(FlagsTest, UnknownFlagSuggestsTheClosestName) {
  EXPECT_EQ(std::string(parse({"--temprature=0.5"}).message()),
            "unknown flag --temprature; did you mean --temperature?");
  EXPECT_THAT(std::string(parse({"--thread", "3"}).message()), HasSubstr("did you mean --threads?"));
  EXPECT_THAT(std::string(parse({"--no-verbse"}).message()), HasSubstr("did you mean --no-verbose?"));
  // A name cut short is a typo too.
  EXPECT_THAT(std::string(parse({"--memory=1GiB"}).message()), HasSubstr("did you mean --memory-budget?"));
  // Single dash: the error says how flags are written and still suggests.
  EXPECT_THAT(std::string(parse({"-model", "m"}).message()),
              HasSubstr("(flags are written --name or --name=value); did you mean --model?"));
  // Nothing close: no guess.
  EXPECT_EQ(std::string(parse({"--colour"}).message()), "unknown flag --colour");
}

TEST_F(FlagsTest, ConfigFileUnknownKeySuggestsTheClosestName) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("baton_flags_test_suggest_" + std::to_string(::getpid()) + ".conf"))
                               .string();
  std::ofstream(path) << "treads = 2\n";
  EXPECT_THAT(std::string(parse({"--config", path}).message()),
              HasSubstr(":1: unknown flag 'treads'; did you mean --threads?"));
  std::filesystem::remove(path);
}

TEST(ClosestNameTest, PicksTheNearestWithinATypoDistance) {
  const std::vector<std::string> names = {"decode", "prefill", "prefill-service", "split", "load"};
  EXPECT_EQ(closest_name("prefil", names), "prefill");
  EXPECT_EQ(closest_name("splt", names), "split");
  EXPECT_EQ(closest_name("laod", names), "load");  // a swap of neighbours is one edit
  EXPECT_EQ(closest_name("prefill-serv", names), "prefill-service");
  EXPECT_EQ(closest_name("xyz", names), std::nullopt);
  EXPECT_EQ(closest_name("", names), std::nullopt);
}

TEST(FlagSectionsTest, SectionsGroupFlagsAndDefaultTextReplacesTheValue) {
  FlagSet flags("prog", "", "");
  std::string edge = "127.0.0.1:7071";
  int64_t seed = 0;
  int64_t threads = 2;
  flags.add_string("edge", &edge, "agent", "ADDR");
  flags.add_section("sampling");
  flags.add_int64("seed", &seed, "sampling seed");
  flags.set_default_text("seed", "random");
  flags.add_section("local only");
  flags.add_int64("threads", &threads, "threads");
  const std::string usage = flags.usage();
  EXPECT_THAT(usage, HasSubstr("sampling seed (default: random)"));
  const size_t help = usage.find("--help");
  const size_t sampling = usage.find("\nsampling:\n");
  const size_t local = usage.find("\nlocal only:\n");
  ASSERT_NE(sampling, std::string::npos);
  ASSERT_NE(local, std::string::npos);
  EXPECT_LT(help, sampling);  // --help stays with the flags of every mode
  EXPECT_LT(sampling, usage.find("--seed"));
  EXPECT_LT(usage.find("--seed"), local);
  EXPECT_LT(local, usage.find("--threads"));
}

TEST(NegativeBoolFlagTest, NoNameRendersAndParsesAsWritten) {
  FlagSet flags("prog", "", "");
  bool no_progress = false;
  bool cache = true;
  flags.add_bool("no-progress", &no_progress, "no progress line");
  flags.add_bool("cache", &cache, "use the cache");
  const std::string usage = flags.usage();
  EXPECT_THAT(usage, HasSubstr("  --no-progress "));
  EXPECT_THAT(usage, ::testing::Not(HasSubstr("no-no-progress")));
  EXPECT_THAT(usage, ::testing::Not(HasSubstr("[no-]no-progress")));
  // A default of on is stated; --no-cache turns it off.
  EXPECT_THAT(usage, HasSubstr("--[no-]cache"));
  EXPECT_THAT(usage, HasSubstr("use the cache (default: on)"));

  ASSERT_TRUE(flags.parse(std::vector<std::string>{"--no-progress", "--no-cache"}).ok());
  EXPECT_TRUE(no_progress);
  EXPECT_FALSE(cache);
  // --progress undoes --no-progress (the later one wins).
  FlagSet again("prog", "", "");
  bool again_no_progress = false;
  again.add_bool("no-progress", &again_no_progress, "no progress line");
  ASSERT_TRUE(again.parse(std::vector<std::string>{"--no-progress", "--progress"}).ok());
  EXPECT_FALSE(again_no_progress);
  // The double negative the old help suggested is refused, with the real spelling.
  FlagSet third("prog", "", "");
  bool third_no_progress = false;
  third.add_bool("no-progress", &third_no_progress, "no progress line");
  EXPECT_THAT(std::string(third.parse(std::vector<std::string>{"--no-no-progress"}).message()),
              HasSubstr("unknown flag --no-no-progress; did you mean --no-progress?"));
}

}  // namespace baton
