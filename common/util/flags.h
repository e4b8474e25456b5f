// FlagSet: the command-line (and config file) parser shared by baton-prefill,
// baton-edge and baton. Each program keeps its configuration in one struct
// with serving defaults and binds its fields here:
//
//   struct EdgeConfig { std::string model; uint64_t memory_budget_bytes = 0; };
//   EdgeConfig config;
//   FlagSet flags("baton-edge", "--model FILE --listen ADDR [flags]", "Runs ...");
//   flags.add_string("model", &config.model, "GGUF model file", "FILE");
//   flags.add_size("memory-budget", &config.memory_budget_bytes, "device memory for Baton");
//   flags.require("model");
//   flags.enable_config_file();
//   if (auto exit_code = parse_command_line(flags, argc, argv)) return *exit_code;
//
// Syntax: `--name=value` or `--name value`; bools also `--name` / `--no-name`
// (a bool named no-X is shown and given as `--no-X`; `--X` turns it off);
// `--` ends the flags; everything else is a positional argument. A flag given
// twice keeps the last value. An unknown flag names the closest known one
// ("unknown flag --temprature; did you mean --temperature?"). `--config FILE` (when enabled) reads `name = value`
// lines ('#' starts a comment); the command line wins over the file.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace baton {

class FlagSet {
 public:
  // `synopsis` follows the program name on the usage line; `description` is a
  // paragraph printed under it.
  FlagSet(std::string program, std::string synopsis, std::string description);

  // Each flag writes into `*target`, whose current value is the default shown
  // in --help. Names are lowercase with dashes, given without "--". `metavar`
  // names the value in --help ("FILE", "ADDR").
  void add_string(std::string_view name, std::string* target, std::string_view help,
                  std::string_view metavar = "STR");
  void add_int64(std::string_view name, int64_t* target, std::string_view help);
  void add_double(std::string_view name, double* target, std::string_view help);
  void add_bool(std::string_view name, bool* target, std::string_view help);
  // Bytes; accepts 1000, 64KiB, 512MiB, 8GiB, 1.5GiB, 2TB (see parse_size_bytes).
  void add_size(std::string_view name, uint64_t* target_bytes, std::string_view help);
  // Accepts 250ms, 30s, 1.5s, 5m, 2h, 0 (see parse_duration).
  void add_duration(std::string_view name, std::chrono::milliseconds* target,
                    std::string_view help);

  // Shows `text` as the flag's default in --help instead of its value (a
  // default that is decided later, e.g. "random" for a seed).
  void set_default_text(std::string_view name, std::string_view text);
  // Starts a titled group in --help: the flags added after it are listed
  // under "TITLE:" (e.g. flags that apply to one mode of a command).
  void add_section(std::string_view title);

  // parse() fails with "--NAME is required" when the flag was given neither on
  // the command line nor in the config file.
  void require(std::string_view name);
  // Registers `--config FILE`.
  void enable_config_file();

  // Parses the arguments after the program name. On --help / -h, returns OK
  // without assigning anything and help_requested() becomes true. Errors are
  // InvalidArgument and name the flag and the value.
  absl::Status parse(const std::vector<std::string>& args);
  absl::Status parse(int argc, const char* const* argv);  // skips argv[0]

  const std::string& program() const { return program_; }
  bool help_requested() const { return help_requested_; }
  const std::vector<std::string>& positional() const { return positional_; }
  // True when the flag was given on the command line or in the config file.
  bool is_set(std::string_view name) const;
  // The --help text: usage line, description, flags table with defaults.
  std::string usage() const;

 private:
  using Target = std::variant<std::string*, int64_t*, double*, bool*, uint64_t*,
                              std::chrono::milliseconds*>;
  enum class Kind { kString, kInt64, kDouble, kBool, kSize, kDuration };
  struct Flag {
    std::string name;
    Kind kind;
    Target target;
    std::string help;
    std::string metavar;
    std::string default_text;  // rendered at registration; empty = not shown
    bool required = false;
    bool set = false;
  };

  void add(std::string_view name, Kind kind, Target target, std::string_view help,
           std::string_view metavar);
  Flag* find(std::string_view name);
  // Every spelling a flag accepts (NAME, no-NAME of bools, help), for
  // "did you mean" suggestions.
  std::vector<std::string> spellings() const;
  // InvalidArgument `message`, plus "; did you mean --NAME?" when `typed` is
  // close to a flag's name.
  absl::Status unknown_flag_error(std::string message, std::string_view typed) const;
  const Flag* find(std::string_view name) const;
  absl::Status assign(Flag& flag, std::string_view value);
  absl::Status apply_config_file(const std::string& path);

  std::string program_;
  std::string synopsis_;
  std::string description_;
  std::vector<Flag> flags_;  // registration order = --help order
  std::vector<std::pair<size_t, std::string>> sections_;  // (index of the first flag, title)
  std::string config_path_;
  bool config_enabled_ = false;
  bool help_requested_ = false;
  std::vector<std::string> positional_;
};

// For main(): parses; on --help prints usage() to `out` and returns 0; on an
// error prints "PROG: MESSAGE" plus a --help hint to `err` and returns 2;
// otherwise returns nullopt and the program goes on.
std::optional<int> parse_command_line(FlagSet& flags, int argc, const char* const* argv,
                                      std::FILE* out = stdout, std::FILE* err = stderr);

// The name in `names` closest to `typed` (edit distance, or `typed` is the
// start of it), when close enough to be a typo of it; else nullopt. Used for
// flags, subcommands and bench names.
std::optional<std::string> closest_name(std::string_view typed, const std::vector<std::string>& names);

// "512MiB" -> 536870912. Suffixes (case-insensitive): none or B = bytes;
// KiB/MiB/GiB/TiB and K/M/G/T = powers of 1024; KB/MB/GB/TB = powers of 1000.
// Fractions allowed ("1.5GiB", rounded down to whole bytes).
absl::StatusOr<uint64_t> parse_size_bytes(std::string_view text);
// 536870912 -> "512MiB"; exact binary multiples use the largest unit, other
// values are printed as plain bytes.
std::string format_size_bytes(uint64_t bytes);
// "1.5s" -> 1500ms. Units: ms, s, m, h; "0" alone is zero. Rounded to whole ms.
absl::StatusOr<std::chrono::milliseconds> parse_duration(std::string_view text);
std::string format_duration(std::chrono::milliseconds duration);

// Validates "host:port" or "[ipv6]:port" (port 0..65535; 0 = any free port when
// listening). Returns the host without brackets and the port.
absl::StatusOr<std::pair<std::string, int>> parse_host_port(std::string_view address);

}  // namespace baton
