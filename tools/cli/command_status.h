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

#include <string>

#include "absl/status/status.h"

namespace baton::cli {

// Ends the command with `exit_code` (not 0), writing `text` to stderr as is.
absl::Status exit_status(int exit_code, std::string text = "");

// A usage error (exit 2): "baton COMMAND: MESSAGE\n(see --help)\n".
absl::Status usage_error(const std::string& command, const std::string& message);

// Prints what `status` says (see above) and returns the exit code.
int finish_command(const absl::Status& status);

}  // namespace baton::cli
