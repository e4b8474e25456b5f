// Subcommands of the `baton` CLI. Each takes the arguments after its own name
// and returns a status that baton_main turns into output and the exit code
// (command_status.h: 0 ok, 1 failure, 2 usage error, 130 interrupted).
#pragma once

#include "absl/status/status.h"
#include "command_status.h"

namespace baton::cli {

absl::Status model_command(const Args& args);     // baton model synth|quantize|info|verify|calibrate
absl::Status model_verify(const Args& args);      // baton model verify (cmd_model_verify.cc)
absl::Status model_calibrate(const Args& args);   // baton model calibrate (cmd_model_calibrate.cc)
absl::Status generate_command(const Args& args);  // baton generate
absl::Status generate_on_edge(const Args& args);  // baton generate --edge ADDR (cmd_generate_edge.cc)
absl::Status chat_command(const Args& args);      // baton chat (cmd_chat.cc)
absl::Status health_command(const Args& args);    // baton health --edge ADDR | --cloud ADDR
absl::Status sessions_command(const Args& args);  // baton sessions ls|rm
absl::Status pack_command(const Args& args);      // baton pack build|push|pull|ls|info
absl::Status plan_command(const Args& args);      // baton plan --model FILE --memory SIZE

}  // namespace baton::cli
