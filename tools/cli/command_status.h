// How a `baton` command ends. Every command returns an absl::Status and
// baton_main turns it into what is printed and the process exit code in one
// place (finish_command). Exit codes: 0 ok, 1 failure, 2 usage error, 130
// interrupted by Ctrl-C.
//   - OK: exit 0, nothing more printed.
//   - a status from exit_status(code, text) (usage errors, a failure the
//     command has already reported, an interrupted turn): `text` goes to
//     stderr as is, exit `code`.
//   - any other status (from the library, a server, a file): "baton: MESSAGE"
//     on stderr, exit 1. So a command hands a library error up unchanged.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace baton {
class FlagSet;
}

namespace baton::cli {

using Args = std::vector<std::string>;

// Ends the command with `exit_code` (not 0), writing `text` to stderr as is.
absl::Status exit_status(int exit_code, std::string text = "");

// A usage error (exit 2): "baton COMMAND: MESSAGE\n(see --help)\n".
absl::Status usage_error(const std::string& command, const std::string& message);

// A server address or channel flag that make_rpc_target refused:
// "baton COMMAND: MESSAGE"; exit 1 when a file it names is missing
// (kNotFound), else 2 (a usage error).
absl::Status target_error(const std::string& command, const absl::Status& status);

// A library `status` with "PREFIX: " before its message, its code kept (for
// library statuses only: an exit_status mark is not carried over).
absl::Status with_prefix(const std::string& prefix, const absl::Status& status);

// Parses a command's flags: nullopt when the command runs; else how it ends:
// OK after --help printed the usage on stdout, or a usage error (the flag's
// problem and "(see --help)").
std::optional<absl::Status> parse_flags(FlagSet& flags, const Args& args);

// The help of a command with subcommands (`usage` lists them): nullopt when
// args[0] names one; OK after printing `usage` on stdout for --help, -h (and
// the word "help" when `help_word`); a usage error printing `usage` when
// there are no arguments.
std::optional<absl::Status> subcommand_help(const Args& args, const std::string& usage, bool help_word);

// Prints what `status` says (see above) and returns the exit code.
int finish_command(const absl::Status& status);

}  // namespace baton::cli
