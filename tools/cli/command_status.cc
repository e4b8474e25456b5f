#include "command_status.h"

#include <cstdio>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/util/flags.h"

namespace baton::cli {
namespace {

// The payload that marks a status made by exit_status: its exit code. Library
// statuses never carry it, so their code (even kInvalidArgument) means exit 1.
constexpr char kExitCodePayload[] = "type.baton.dev/cli-exit-code";

absl::StatusCode code_for_exit(int exit_code) {
  if (exit_code == 2) return absl::StatusCode::kInvalidArgument;
  if (exit_code == 130) return absl::StatusCode::kCancelled;
  return absl::StatusCode::kAborted;
}

std::optional<int> marked_exit_code(const absl::Status& status) {
  const auto payload = status.GetPayload(kExitCodePayload);
  int code = 0;
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &code)) return std::nullopt;
  return code;
}

}  // namespace

absl::Status exit_status(int exit_code, std::string text) {
  absl::Status status(code_for_exit(exit_code), std::move(text));
  status.SetPayload(kExitCodePayload, absl::Cord(absl::StrCat(exit_code)));
  return status;
}

absl::Status usage_error(const std::string& command, const std::string& message) {
  return exit_status(2, absl::StrCat("baton ", command, ": ", message, "\n(see --help)\n"));
}

absl::Status target_error(const std::string& command, const absl::Status& status) {
  return exit_status(status.code() == absl::StatusCode::kNotFound ? 1 : 2,
                     absl::StrCat("baton ", command, ": ", status.message(), "\n"));
}

absl::Status with_prefix(const std::string& prefix, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(prefix, ": ", status.message()));
}

std::optional<absl::Status> parse_flags(FlagSet& flags, const Args& args) {
  absl::Status status = flags.parse(args);
  if (!status.ok()) return exit_status(2, absl::StrCat(status.message(), "\n(see --help)\n"));
  if (flags.help_requested()) {
    std::fputs(flags.usage().c_str(), stdout);
    return absl::OkStatus();
  }
  return std::nullopt;
}

std::optional<absl::Status> subcommand_help(const Args& args, const std::string& usage, bool help_word) {
  if (args.empty()) return exit_status(2, usage);
  if (args[0] == "--help" || args[0] == "-h" || (help_word && args[0] == "help")) {
    std::fputs(usage.c_str(), stdout);
    return absl::OkStatus();
  }
  return std::nullopt;
}

int finish_command(const absl::Status& status) {
  if (status.ok()) return 0;
  if (std::optional<int> code = marked_exit_code(status)) {
    std::fputs(std::string(status.message()).c_str(), stderr);
    return *code;
  }
  std::fprintf(stderr, "baton: %s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace baton::cli
