// `baton`: the command-line client and model tools.
#include <cstdio>
#include <cstring>
#include <string>

#include "bench_commands.h"
#include "commands.h"
#include "common/util/flags.h"
#include "common/util/version.h"

namespace baton::cli {

namespace {

constexpr char kUsage[] =
    "usage: baton COMMAND [ARGS]\n"
    "\n"
    "Baton splits LLM inference between a cloud prefill service and an edge agent.\n"
    "\n"
    "commands:\n"
    "  generate   generate text: through the edge agent (--edge ADDR, default $BATON_EDGE or 127.0.0.1:7071),\n"
    "             or --model FILE with the CPU engine here\n"
    "  chat       interactive multi-turn chat with the edge agent (or --model FILE here)\n"
    "  health     state of an edge agent (--edge ADDR) or the cloud service (--cloud ADDR)\n"
    "  sessions   sessions an edge agent holds: ls, rm\n"
    "  pack       prefix packs: build, push (cloud), pull and ls (edge), info\n"
    "  plan       edge memory plan: max context per KV codec on a memory budget\n"
    "  model      model tools: synth, quantize, info, verify, calibrate\n"
    "  bench      benchmarks ('baton bench --help' lists every one; --json for scripts)\n"
    "\n"
    "Run 'baton COMMAND --help' for the flags of a command; 'baton --version' for the build.\n";

absl::Status run_command(const std::string& command, const Args& args) {
  if (command == "model") return model_command(args);
  if (command == "bench") return bench_command(args);
  if (command == "generate") return generate_command(args);
  if (command == "chat") return chat_command(args);
  if (command == "health") return health_command(args);
  if (command == "sessions") return sessions_command(args);
  if (command == "pack") return pack_command(args);
  if (command == "plan") return plan_command(args);
  return exit_status(2, "baton: unknown command '" + command + "'\n\n" + kUsage);
}

}  // namespace
}  // namespace baton::cli

int main(int argc, char** argv) {
  using namespace baton::cli;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "--version") == 0) {
    std::fputs(baton::version_text("baton", describe_gpu_for_version()).c_str(), stdout);
    return 0;
  }
  return finish_command(run_command(argv[1], Args(argv + 2, argv + argc)));
}
